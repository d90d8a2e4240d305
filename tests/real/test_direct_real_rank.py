"""A real rank's frame, driven directly: its context (sim/real/executors/context.py: one
clock for every rank), its gradients in real time on a fake clock (rank_compute.py), the
rank program itself (rank.py) on ranks that are threads of this process (tests/fake_mpi.py),
and the launcher's parts that need no mpiexec (sim/real/launch/real_run.py)."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sys
import time
import types

import numpy as np
import pytest
from fake_mpi import Aborted, run_ranks
from real_rank_cases import kernel_gradient, rank_context, rank_spec, real_config, write_spec

from sim.errors import UserError
from sim.real.executors import rank, rank_compute
from sim.real.executors.rank_compute import RealCompute, median_kernel_s
from sim.real.launch import real_run
from sim.real.launch.launcher import Job, launch
from sim.real.launch.real_run import RealOptions
from sim.result_schema import SUMMARY_KEYS
from sim.simulated.engine import simulate
from sim.training.workload import build_workload

LOGREG = {"cluster": {"workers": 2},
          "workload": {"model": "logreg", "features": 32, "samples": 600, "batch": 16,
                       "lr": 0.5},
          "strategy": {"kind": "bsp"},
          "run": {"iterations": 6, "eval_every": 2, "seed": 3}}


def with_keys(base: dict, **sections: dict) -> dict:
    return {name: {**base.get(name, {}), **sections.get(name, {})}
            for name in {*base, *sections}}


# ---- the context --------------------------------------------------------------------------

@pytest.mark.parametrize("faults", [None, {"origin": 123.5}])
def test_every_rank_starts_rank_0s_clock(tmp_path, faults):
    config = real_config(LOGREG)

    def program(comm):
        ctx = rank_context(comm, config, tmp_path, faults=faults)
        assert ctx.rank == comm.Get_rank() and ctx.config is ctx.workload.config
        assert ctx.transport == "mpi"
        ctx.start_clock()
        return ctx.t0, ctx.now()

    (t0, now0), (t1, now1) = run_ranks(2, program).results
    assert t0 == t1 and now0 >= 0 and now1 >= 0
    if faults is None:  # no failures: nothing for the runner
        assert not (tmp_path / "clock.json").exists()
    else:  # a job started again keeps the first job's clock, and tells the runner
        assert t0 == 123.5
        assert json.loads((tmp_path / "clock.json").read_text())["t0"] == 123.5


def test_the_common_start_takes_what_the_rank_holds_out_of_the_collector(tmp_path):
    """Everything allocated before the clock starts is frozen (gc.freeze): a full
    collection in the timed loop then walks only what the loop allocated, where it had
    walked the whole imported program (42-59 ms at a gRPC run's 118th call)."""
    import gc

    config = real_config(LOGREG)
    held = ["made before the start"]

    def program(comm):
        ctx = rank_context(comm, config, tmp_path)
        ctx.start_clock()
        return gc.get_freeze_count()

    try:
        frozen = run_ranks(2, program).results
        assert min(frozen) > 0
        # in the permanent generation: no collection walks it
        assert all(o is not held for g in range(3) for o in gc.get_objects(g))
    finally:
        gc.unfreeze()  # the ranks are threads of this process: leave it as it was


def test_warming_the_kernels_touches_neither_the_parameters_nor_the_batch_stream(tmp_path):
    config = real_config(LOGREG)

    def program(comm):
        ctx = rank_context(comm, config, tmp_path)
        params = ctx.workload.params.copy()
        ctx.warm_kernels(params)
        assert np.array_equal(params, ctx.workload.params)
        return ctx.workload.workers[ctx.rank].next_batch()

    twin = build_workload(config)
    for r, (X, y) in enumerate(run_ranks(2, program).results):
        X2, y2 = twin.workers[r].next_batch()
        assert np.array_equal(X, X2) and np.array_equal(y, y2)


# ---- gradients in real time ---------------------------------------------------------------

class FakeClock:
    """``perf_counter`` one second later at each reading; sleeps are recorded, not slept."""

    def __init__(self, cut: bool = False) -> None:
        self.t, self.cut, self.deadlines = 0.0, cut, []

    def perf_counter(self) -> float:
        self.t += 1.0
        return self.t

    def sleep_until(self, deadline: float, check=None) -> bool:
        self.deadlines.append(deadline)
        return self.cut


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(rank_compute, "time", types.SimpleNamespace(
        perf_counter=fake.perf_counter))
    monkeypatch.setattr(rank_compute, "sleep_until", fake.sleep_until)
    return fake


def test_a_gradient_is_timed_in_two_parts_and_padded_to_the_modelled_time(clock):
    config = real_config(with_keys(LOGREG, compute={"time_s": 0.25}))
    workload, twin = build_workload(config), build_workload(config)
    compute = RealCompute(workload, 1, t0=0.5)
    params = workload.params.copy()
    loss, dropped = compute.gradient(params)
    # readings: 1 (begin), 2 (rows gathered: the kernel starts), 3 (kernel done), 4 (end)
    assert compute.times == (0.5, 1.5, 3.5) and compute.kernel_s == [1.0]
    assert compute.parts() == [("data", 0.5, 1.5), ("compute", 1.5, 3.5)]
    assert clock.deadlines == [2.0 + 0.25]  # the kernel's start + compute.time_s
    assert not dropped
    expected = kernel_gradient(twin.model, params, *twin.workers[1].next_batch())
    assert workload.workers[1].grad.tobytes() == expected.tobytes()
    assert loss == twin.model.loss_grad(params, *workload.workers[1].last_batch,
                                        out=np.zeros_like(params))[0]


def test_a_relative_straggler_sleeps_its_factor_times_the_kernel(clock):
    config = real_config(with_keys(LOGREG, compute={"straggler_fraction": 0.5,
                                                    "straggler_slowdown": 3.0}))
    workload = build_workload(config)
    factors = workload.compute.factor
    assert sorted(factors) == [1.0, 3.0]
    for index in range(2):
        compute = RealCompute(workload, index, t0=0.0)
        clock.deadlines.clear()
        compute.pad(start=clock.perf_counter())  # the kernel took one tick
        start = clock.t - 1.0
        assert clock.deadlines == [start + 1.0 * factors[index]]


def test_a_cancelled_pad_drops_the_gradient_and_a_nan_fills_it(clock):
    config = real_config(LOGREG)
    workload = build_workload(config)
    clock.cut = True
    compute = RealCompute(workload, 0, t0=0.0)
    _, dropped = compute.gradient(workload.params.copy(), cancelled=lambda: True)
    assert dropped
    loss, _ = compute.gradient(np.full(workload.params.size, np.nan))
    assert np.isnan(loss) and np.isnan(workload.workers[0].grad).all()
    assert median_kernel_s([]) is None and median_kernel_s([3.0, 1.0, 2.0]) == 2.0


# ---- the rank program ---------------------------------------------------------------------

def test_the_rank_program_trains_and_rank_0_writes_the_runs_files(tmp_path):
    config = real_config(LOGREG)
    spec = write_spec(tmp_path / "spec.json", rank_spec(config, tmp_path))
    ran = run_ranks(2, lambda comm: rank.main(["--spec", str(spec)]))
    assert ran.results == [0, 0]
    for r in range(2):
        assert (tmp_path / f"rank{r}.pid").read_text() == f"{os.getpid()}\n"
        assert (tmp_path / f"rank{r}.done").exists()
        assert (tmp_path / f"rank{r}.beat").exists()
    files = json.loads((tmp_path / "result.json").read_text())
    summary = json.loads(files["summary.json"])
    assert set(SUMMARY_KEYS) <= set(summary) and summary["iterations"] == 6
    assert (summary["net"], summary["transport"], summary["allreduce_impl"],
            summary["wait_mode"], summary["ranks"], summary["repeat"]) == (
        "shm", "mpi", "schedule", "spin", 2, 0)
    assert summary["mpi"].startswith("fake MPI")
    evals = [float(row["loss"]) for row in csv.DictReader(io.StringIO(files["metrics.csv"]))
             if row["kind"] == "eval"]
    simulated = [float(row["loss"]) for row in csv.DictReader(
        io.StringIO(simulate(config).metrics_csv)) if row["kind"] == "eval"]
    assert len(evals) == 4 and evals == pytest.approx(simulated, rel=1e-12)


def test_the_in_process_world_writes_what_mpiexec_ranks_write(tmp_path):
    """The fake world stands for MPI: the rank program run on it and under mpiexec (the
    launcher's own Job) writes the same numbers (the update and evaluation rows)."""
    pytest.importorskip("mpi4py")
    config = real_config(LOGREG)
    files = {}
    for where in ("threads", "mpiexec"):
        work = tmp_path / where
        spec = write_spec(work / "spec.json", rank_spec(config, work))
        if where == "threads":
            run_ranks(2, lambda comm, spec=spec: rank.main(["--spec", str(spec)]))
        else:
            launch(Job([sys.executable, "-m", "sim.real.executors.rank", "--spec", str(spec)],
                       2, work, timeout_s=60, hang_s=30))
        files[where] = json.loads((work / "result.json").read_text())

    def numbers(run: dict) -> list[tuple[str, ...]]:
        rows = csv.DictReader(io.StringIO(run["metrics.csv"]))
        return [(row["kind"], row["iteration"], row["loss"]) for row in rows]

    assert numbers(files["threads"]) == numbers(files["mpiexec"])
    assert len(numbers(files["threads"])) == 6 + 4  # 6 updates, 4 evaluations


def test_a_rank_that_fails_leaves_its_error_and_aborts_the_job(tmp_path):
    config = real_config(LOGREG)  # 2 ranks
    spec = write_spec(tmp_path / "spec.json", rank_spec(config, tmp_path))
    with pytest.raises(Aborted, match="Abort"):
        run_ranks(1, lambda comm: rank.main(["--spec", str(spec)]))
    assert (tmp_path / "rank0.err").read_text().startswith(
        "RuntimeError: bsp needs 2 ranks, got 1")
    assert not (tmp_path / "result.json").exists()


# ---- the launcher's own parts -------------------------------------------------------------

def test_the_net_option_is_shared_memory_or_an_emulated_rate():
    assert real_run.parse_net("shm") is None
    assert real_run.parse_net("emulate:1gbit") == 1e9
    for bad in ("ethernet", "emulate:", "emulate:fast"):
        with pytest.raises(UserError, match="--net"):
            real_run.parse_net(bad)
    with real_run.network("shm", 2) as emulation:
        assert emulation is None


@pytest.mark.parametrize("options,flag", [
    (RealOptions(impl="nccl"), "--allreduce"), (RealOptions(wait="yield"), "--wait"),
    (RealOptions(repeat=0), "--repeat"), (RealOptions(hang_s=0), "--hang-timeout"),
    (RealOptions(net="tcp"), "--net")])
def test_bad_options_are_refused_naming_the_flag(options, flag):
    with pytest.raises(UserError, match=flag):
        real_run.check_options(options)


def test_auto_waits_spin_unless_ranks_outnumber_cores_on_real_kernels():
    cores = os.cpu_count() or 1
    assert real_run.wait_mode("sleep", 1) == "sleep" and real_run.wait_mode("spin", 99) == "spin"
    assert real_run.wait_mode("auto", cores) == "spin"
    assert real_run.wait_mode("auto", cores + 1) == "sleep"
    assert real_run.wait_mode("auto", cores + 1, kernels=False) == "spin"


def test_repeats_are_run_directories_beside_their_iteration_times(tmp_path):
    config = real_config(LOGREG)
    runs = [{"summary.json": json.dumps({"iterations": 4, "sim_time_s": t,
                                         "time_to_target_s": None}),
             "metrics.csv": f"run {i}\n"} for i, t in enumerate((2.0, 3.0))]
    checkpoints = tmp_path / "ckpt"
    (checkpoints / "r1").mkdir(parents=True)
    (checkpoints / "r1" / "ckpt-1.sgd").write_text("x")
    out = tmp_path / "out"
    real_run.write_repeats(out, config, runs, checkpoints)
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "r0", "r1", "repeats.json"]
    assert json.loads((out / "repeats.json").read_text()) == {
        "repeats": 2, "iteration_s": [0.5, 0.75], "time_to_target_s": [None, None]}
    assert (out / "r1" / "metrics.csv").read_text() == "run 1\n"
    assert (out / "r1" / "checkpoints" / "ckpt-1.sgd").exists()
    assert not (out / "r0" / "checkpoints").exists()


def test_a_single_run_is_its_files_with_its_checkpoints_moved_in(tmp_path):
    out = tmp_path / "out"
    root = real_run.checkpoint_root(out)
    assert root.parent == tmp_path and root.name == f".out.checkpoints-{os.getpid()}"
    (root / "r0").mkdir(parents=True)
    (root / "r0" / "ckpt-2.sgd").write_text("x")
    real_run.write_single(out, {"summary.json": "{}\n"}, root)
    assert (out / "summary.json").read_text() == "{}\n"
    assert (out / "checkpoints" / "ckpt-2.sgd").exists() and not (root / "r0").exists()


def test_sigterm_becomes_system_exit_so_cleanup_runs():
    cleaned = []
    with pytest.raises(SystemExit) as exc, real_run.terminated_cleanly():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler's SystemExit ends the sleep
        finally:
            cleaned.append(True)
    assert exc.value.code == 128 + signal.SIGTERM and cleaned == [True]
