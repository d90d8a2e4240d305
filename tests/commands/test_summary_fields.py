"""summary.json says which workers straggled (fixed stragglers and compute.slowdowns) and
which clock its times are on: "simulated" for `sim run`, "wall" for `sim real`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main


@pytest.fixture
def run(tmp_path: Path, tiny_config_data, write_toml):
    """``run(command, **compute)``: the shared tiny config on 4 workers (ib-hdr, 1 ms a
    gradient, asp, 8 updates, seed 1) with those compute keys, run by ``sim <command>``
    (``real``: on 2 ranks); its summary."""
    tiny = tiny_config_data({"cluster.workers": 4, "cluster.fabric": "ib-hdr",
                             "compute.time_s": 1e-3, "strategy.kind": "asp",
                             "run.iterations": 8, "run.eval_every": 4, "run.seed": 1})

    def run_it(command: str, **compute: object) -> dict:
        config = {**tiny, "compute": {**tiny["compute"], **compute}}
        if command == "real":
            config = {**config, "cluster": {"workers": 2}}
        path = write_toml(tmp_path / "exp.toml", config)
        out = tmp_path / command
        assert main([command, str(path), "--out", str(out)]) == 0
        return json.loads((out / "summary.json").read_text())

    return run_it


def test_named_slowdowns_make_their_workers_stragglers_with_their_windows(run):
    summary = run("run", slowdowns=[
        {"worker": 2, "factor": 5.0, "start_s": 0.0, "end_s": 0.01},
        {"worker": 3, "factor": 1.0}])  # a factor of 1 slows nothing
    assert summary["stragglers"] == [2]
    assert summary["slowdowns"] == [{"worker": 2, "factor": 5.0, "start_s": 0.0,
                                     "end_s": 0.01}]
    assert summary["clock"] == "simulated"


def test_fixed_stragglers_come_first_and_every_slowed_worker_is_listed_once(run):
    summary = run("run", straggler_fraction=0.25, straggler_slowdown=3.0,
                  slowdowns=[{"worker": 0, "factor": 2.0, "start_s": 0.002}])
    fixed, named = summary["slowdowns"]
    assert fixed["factor"] == 3.0 and (fixed["start_s"], fixed["end_s"]) == (0.0, None)
    assert named == {"worker": 0, "factor": 2.0, "start_s": 0.002, "end_s": None}
    assert summary["stragglers"] == sorted({fixed["worker"], 0})


def test_no_slowdowns_no_stragglers(run):
    summary = run("run")
    assert summary["stragglers"] == [] and summary["slowdowns"] == []


@pytest.mark.ranks
def test_a_real_run_says_its_times_are_wall_clock(run):
    pytest.importorskip("mpi4py")
    summary = run("real", slowdowns=[{"worker": 1, "factor": 2.0}])
    assert (summary["clock"], summary["kind"]) == ("wall", "real")
    assert summary["stragglers"] == [1]
    assert summary["slowdowns"] == [{"worker": 1, "factor": 2.0, "start_s": 0.0,
                                     "end_s": None}]
    assert summary["sim_time_s"] > 0  # the result contract's key, kept for existing readers
