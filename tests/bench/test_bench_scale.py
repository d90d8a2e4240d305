"""``python -m sim bench scale``: what it measures and how, in its quick form (timings not
checked); and the memory a worker costs: shards index one copy of the data set."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np

from sim.bench.scale_bench import GRADIENTS_PER_WORKER, KINDS, NETWORKS, QUICK_WORKERS, exponent
from sim.cli import main
from sim.training.validator import validate
from sim.training.workload import build_workload
from sim.workloads.datasets import DatasetSpec, make_dataset


def test_quick_scale_bench_runs_every_case_with_work_growing_as_p(capsys) -> None:
    assert main(["bench", "scale", "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = result["rows"]
    assert {(r["strategy"], r["network"], r["workers"]) for r in rows} == \
        {(k, n, p) for k in KINDS for n in NETWORKS for p in QUICK_WORKERS}
    for r in rows:
        assert r["gradients"] == GRADIENTS_PER_WORKER * r["workers"]
        assert r["updates"] == (GRADIENTS_PER_WORKER if r["strategy"] == "bsp"
                                else r["gradients"])
        assert r["events"] > 0 and r["wall_s"] > 0 and r["sim_time_s"] > 0
        assert r["data_bytes"] > 0 and r["peak_bytes"] >= 0 and r["per_worker_bytes"] >= 0
    assert len(result["series"]) == len(KINDS) * len(NETWORKS)
    assert all(np.isfinite(s["exponent"]) for s in result["series"])
    assert result["bare_simpy"]["events_per_s"] > 0
    # plans on both engines: the same step, fewer events on the steady one
    for plan in result["plans"]:
        assert set(plan["runs"]) == {"events", "steady"}
        assert plan["step_rel_diff"] <= 1e-6
        assert plan["runs"]["steady"]["events"] < plan["runs"]["events"]["events"]


def test_fitted_exponent_recovers_a_power_law() -> None:
    p = [64, 256, 1024, 4096]
    assert abs(exponent(p, [3e-5 * x ** 1.2 for x in p]) - 1.2) < 1e-12


def test_shards_are_index_lists_into_one_copy_of_the_data_set() -> None:
    workload = build_workload(validate({"cluster": {"workers": 16},
                                        "workload": {"features": 8, "samples": 2048}}))
    data = workload.data
    rows = np.concatenate([w.shard for w in workload.workers])
    assert all(w.data is data for w in workload.workers)
    assert rows.dtype.kind == "i" and sorted(rows.tolist()) == list(range(data.n_train))
    worker = workload.workers[3]
    X, _ = worker.next_batch()  # gathered from the shared rows of its shard
    mine = {row.tobytes() for row in data.X_train[worker.shard]}
    assert len(X) == worker.batch and all(row.tobytes() in mine for row in X)


def test_a_gaussian_data_set_is_built_without_a_second_copy() -> None:
    # the rows are drawn into the array that becomes the training set: the peak is that
    # array, the held-out copy and one block of rows, not two or three data sets at once
    spec = DatasetSpec(samples=40_000, features=64)
    tracemalloc.start()
    try:
        data = make_dataset(spec, np.random.default_rng(0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = data.X_train.nbytes + data.X_test.nbytes
    assert data.X_train.flags.c_contiguous and data.X_train.shape == (32_000, 64)
    assert peak < 1.5 * size
