"""Real runs on 2 MPI ranks: every strategy, the result contract, semantics shared with the
simulator, and bad input. Tiny configs: each run takes well under a second."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import pytest

from sim.cli import main
from sim.recorder import KINDS
from sim.result_schema import SUMMARY_KEYS

pytest.importorskip("mpi4py")


@pytest.fixture
def tiny(tmp_path: Path, tiny_real_config_data, write_toml):
    """``tiny(kind="bsp")``: the shared tiny real config for ``kind`` (backup 1, s = 1),
    written to tmp_path/<kind>.toml; the path."""
    def write(kind: str = "bsp") -> Path:
        return write_toml(tmp_path / f"{kind}.toml", tiny_real_config_data(strategy__kind=kind))

    return write


def updates(run: Path) -> list[dict[str, str]]:
    with (run / "metrics.csv").open() as f:
        return [row for row in csv.DictReader(f) if row["kind"] == "update"]


def evals(run: Path) -> list[float]:
    with (run / "metrics.csv").open() as f:
        return [float(row["loss"]) for row in csv.DictReader(f) if row["kind"] == "eval"]


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps", "asp", "ssp", "backup"])
def test_each_strategy_runs_for_real_and_writes_the_contract(tmp_path, capsys, kind, tiny):
    out = tmp_path / "real"
    assert main(["real", str(tiny(kind)), "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "metrics.csv",
                                                     "summary.json", "trace.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["kind"] == "real" and summary["iterations"] == 20
    assert summary["sim_time_s"] > 0 and summary["final_loss"] < 0.69
    assert len(summary["workers"]) == 2
    assert len(updates(out)) == 20
    trace = json.loads((out / "trace.json").read_text())
    assert {e["ph"] for e in trace["traceEvents"]} >= {"M", "X"}
    assert tomllib.loads((out / "config.toml").read_text())["strategy"]["kind"] == kind
    check_activities(summary, kind)


def check_activities(summary: dict, kind: str, overlapped: bool = False) -> None:
    """All six activities, each worker's adding up to the run's time (the spans are laid end
    to end from the start; the last update may land a little after a worker's last span)."""
    assert {f"{k}_s" for k in KINDS} <= set(summary)
    assert summary["comm_s"] == pytest.approx(summary["overhead_s"] + summary["wire_s"])
    for worker in summary["workers"]:
        assert set(worker) == set(KINDS)
        assert sum(worker.values()) == pytest.approx(summary["sim_time_s"], rel=0.05)
        assert worker["compute"] > 0 and worker["data"] > 0 and worker["overhead"] > 0
        # pipelined: messages may complete while backward runs (tested: overhead)
        assert worker["wire"] > 0 or overlapped
        if kind == "bsp":
            assert worker["update"] > 0  # each rank steps its replica
        elif kind == "ssp":  # the tiny config's s = 1: each worker steps its cache (read-my-writes)
            assert worker["update"] > 0
        else:
            assert worker["update"] == 0  # the server applies: not a worker's time
    if kind != "bsp":
        assert summary["server_breakdown"]["update"] > 0


@pytest.mark.parametrize("impl", ["schedule", "mpi"])
def test_real_bsp_follows_the_simulated_loss_curve(tmp_path, impl, tiny):
    config = tiny()
    assert main(["run", str(config), "--out", str(tmp_path / "sim")]) == 0
    assert main(["real", str(config), "--out", str(tmp_path / "real"), "--allreduce",
                 impl]) == 0
    # same data, shards, batches, initial parameters and kernels; only the summation
    # order of the allreduce differs (rounding)
    assert evals(tmp_path / "real") == pytest.approx(evals(tmp_path / "sim"), rel=1e-9)


def test_real_bsp_ps_is_the_simulated_run_bit_for_bit(tmp_path, tiny):
    config = tiny("bsp-ps")
    assert main(["run", str(config), "--out", str(tmp_path / "sim")]) == 0
    assert main(["real", str(config), "--out", str(tmp_path / "real")]) == 0
    assert evals(tmp_path / "real") == evals(tmp_path / "sim")  # gradients summed in order


def test_a_straggler_sleeps_and_backup_steps_go_without_it(tmp_path, tiny):
    config = tiny("backup")
    slow = ["--set", "compute.time_s=2e-3", "--set", "compute.straggler_fraction=0.5",
            "--set", "compute.straggler_slowdown=20.0"]
    assert main(["real", str(config), "--out", str(tmp_path / "real"), *slow]) == 0
    rows = updates(tmp_path / "real")
    assert all(int(row["worker"]) == -1 and row["staleness"] == "0" for row in rows)
    summary = json.loads((tmp_path / "real" / "summary.json").read_text())
    straggler = summary["stragglers"][0]
    # each step takes the fast worker's gradient (N - b = 1); the straggler's are dropped
    assert summary["workers"][straggler]["compute"] > 0
    assert summary["sim_time_s"] >= 20 * 2e-3  # sleeps are never shorter than asked


@pytest.mark.parametrize("late", ["drop", "cancel"])
def test_late_backup_gradients_are_dropped_on_arrival_or_cancelled(tmp_path, late, tiny):
    config = tiny("backup")
    out = tmp_path / "real"
    slow = ["--set", "cluster.workers=3", "--set", "compute.time_s=5e-3",
            "--set", "compute.straggler_fraction=0.34", "--set", "compute.straggler_slowdown=4.0",
            "--set", f'strategy.late_gradients="{late}"']
    assert main(["real", str(config), "--out", str(out), *slow]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert len(updates(out)) == 20 and summary["final_loss"] < 0.69
    # each ~5 ms step takes the two fast workers' gradients; drop: the straggler finishes
    # each of its 20 ms gradients and pushes it, to be dropped as stale; cancel: it is
    # cancelled while it sleeps out its compute time and never pushes
    if late == "drop":
        assert summary["dropped_pushes"] >= 2
    else:
        assert summary["dropped_pushes"] == 0


def test_ssp_reads_its_cache_and_pulls_less_than_once_per_update(tmp_path, tiny):
    runs = {}
    for kind in ("asp", "ssp"):
        out = tmp_path / kind
        assert main(["real", str(tiny(kind)), "--out", str(out), "--set",
                     "strategy.staleness=2"]) == 0
        runs[kind] = json.loads((out / "summary.json").read_text())
    assert runs["asp"]["pulls_per_update"] == 1.0
    # s = 2: a pull is fresh for up to s + 1 gradients
    assert 1 / 3 <= runs["ssp"]["pulls_per_update"] < 1.0
    assert runs["ssp"]["final_loss"] < 0.69


def test_bsp_waits_for_the_real_straggler(tmp_path, tiny):
    config = tiny()
    slow = ["--set", "compute.time_s=1e-3", "--set", "compute.straggler_fraction=0.5",
            "--set", "compute.straggler_slowdown=4.0"]
    assert main(["real", str(config), "--out", str(tmp_path / "real"), *slow]) == 0
    summary = json.loads((tmp_path / "real" / "summary.json").read_text())
    assert summary["sim_time_s"] >= 20 * 4e-3  # every step waits for the 4 ms gradient
    fast = 1 - summary["stragglers"][0]
    assert summary["workers"][fast]["wait"] >= 20 * 2e-3  # and the fast worker waits


def test_ssp_keeps_clocks_within_the_bound(tmp_path, tiny):
    config = tiny("ssp")
    slow = ["--set", "compute.time_s=1e-3", "--set", "compute.straggler_fraction=0.5",
            "--set", "compute.straggler_slowdown=5.0"]
    assert main(["real", str(config), "--out", str(tmp_path / "real"), *slow]) == 0
    gaps = [int(row["clock_gap"]) for row in updates(tmp_path / "real")]
    assert max(gaps) <= 1 and len(gaps) == 20


def test_repeats_write_one_run_directory_each(tmp_path, tiny):
    out = tmp_path / "real"
    assert main(["real", str(tiny("asp")), "--out", str(out), "--repeat", "2"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "r0", "r1",
                                                     "repeats.json"]
    assert json.loads((out / "repeats.json").read_text())["repeats"] == 2
    assert (out / "r1" / "summary.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--set", 'strategy.kind="local-sgd"'], "no real runner"),
    (["--set", 'strategy.compression="topk"'], "dense gradients only"),
    (["--set", "cluster.servers=2", "--set", 'strategy.kind="asp"'], "one parameter-server"),
    (["--net", "emulate:fast"], "expected a positive number and a unit"),
    (["--net", "infiniband"], "expected shm or emulate:RATE"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, args, message, tiny):
    out = tmp_path / "real"
    assert main(["real", str(tiny()), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


PIPELINED = """
[cluster]
workers = 2
[workload]
model = "mlp"
dataset = "digits"
hidden = [64, 32]
batch = 16
[run]
iterations = 12
eval_every = 4
[strategy]
kind = "bsp"
pipelining = "{mode}"
bucket_bytes = 20000
"""


@pytest.mark.parametrize("mode", ["wfbp", "bucket"])
def test_pipelined_bsp_runs_for_real_with_the_simulators_numbers(tmp_path, mode):
    config = tmp_path / f"{mode}.toml"
    config.write_text(PIPELINED.format(mode=mode))
    real, sim = tmp_path / "real", tmp_path / "sim"
    for allreduce in ("schedule", "mpi"):
        out = real / allreduce
        assert main(["real", str(config), "--out", str(out), "--allreduce", allreduce]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["kind"] == "real"
        check_activities(summary, "bsp", overlapped=True)
    assert main(["run", str(config), "--out", str(sim)]) == 0
    for allreduce in ("schedule", "mpi"):  # the same batches, layers and messages
        assert evals(real / allreduce) == pytest.approx(evals(sim), rel=1e-9)


def test_priority_ordering_is_refused_for_real(tmp_path, capsys):
    config = tmp_path / "prio.toml"
    config.write_text(PIPELINED.format(mode="wfbp") + "priority = true\n")
    assert main(["real", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "strategy.priority" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps", "asp", "ssp", "backup"])
def test_a_diverging_real_run_stops_and_says_so_as_the_simulator_does(tmp_path, kind,
                                                                         tiny_real_config_data,
                                                                         write_toml):
    """(asp and ssp crashed rank 0 before: the worker's copy of a NaN gradient into its
    message raised.)"""
    config = write_toml(tmp_path / "diverge.toml",
                        tiny_real_config_data(strategy__kind=kind, workload__lr=1e200))
    for command, out in (("run", tmp_path / "sim"), ("real", tmp_path / "real")):
        assert main([command, str(config), "--out", str(out)]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["diverged"] is True and summary["final_loss"] is None
