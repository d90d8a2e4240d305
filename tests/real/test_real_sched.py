"""Real ranks under ``--sched fifo``: pinned SCHED_FIFO ranks whose waits never starve the
ranks or processes beside them, the run's record of it, the fallback and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.cli import main
from sim.real.executors import rank_sched
from sim.real.executors.rank_sched import core_of, fifo_refused
from sim.real.launch.launcher import Job, launch

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.ranks
PROGRAM = Path(__file__).with_name("fifo_wait_rank.py")
needs_fifo = pytest.mark.skipif(fifo_refused() is not None,
                                reason=f"SCHED_FIFO refused here: {fifo_refused()}")


@pytest.fixture
def tiny(tmp_path: Path, tiny_real_config_data, write_toml):
    """The shared tiny real config as asp with 2 workers: 3 ranks, more than 2 cores."""
    return write_toml(tmp_path / "asp.toml", tiny_real_config_data(strategy__kind="asp"))


def test_ranks_spread_over_the_allowed_cores_in_order():
    assert [core_of(r, [5, 3]) for r in range(5)] == [3, 5, 3, 5, 3]


@needs_fifo
def test_a_waiting_fifo_rank_leaves_its_core_to_the_rank_and_process_beside_it(tmp_path):
    """Both ranks SCHED_FIFO on one core: rank 1 waits while rank 0 computes 0.2 s, then
    sleeps 0.4 s. Rank 0 computes at full speed (a spinning rank of its priority would hold
    the core for good: MPI's own waits hand it only to real-time peers), the waiter takes
    little CPU, and a default-policy process on that core runs while rank 0 sleeps."""
    core = str(sorted(os.sched_getaffinity(0))[0])
    neighbour = subprocess.Popen(["taskset", "-c", core, sys.executable, "-c",
                                  "while True: pass"])
    try:
        out = tmp_path / "found.json"
        began = time.monotonic()
        launch(Job(["taskset", "-c", core, sys.executable, str(PROGRAM), str(out),
                    str(neighbour.pid)], 2, tmp_path, timeout_s=30.0))
        took = time.monotonic() - began
    finally:
        neighbour.kill()
        neighbour.wait()
    found = json.loads(out.read_text())
    assert took < 20.0
    assert found["compute_wall_s"] < 2 * 0.2  # starved, it would end at 30 x 0.2 s
    # a spinning real-time waiter would take all of its wait and leave the neighbour RT
    # throttling's 5% (0.02 s); its naps (every 20 us, waking to poll) take about a third
    assert found["wait_cpu_s"] < 0.75 * found["wait_s"]
    # starved, the neighbour would get RT throttling's 0.02 s of the 0.4 s; it gets about
    # half of it with the other test worker on that core too (0.09 s seen), all of it alone
    assert found["neighbour_cpu_s"] > 0.05


@needs_fifo
def test_a_fifo_run_records_its_discipline_and_napping_waits(tmp_path, tiny):
    out = tmp_path / "real"
    assert main(["real", str(tiny), "--out", str(out), "--sched", "fifo"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["sched"], summary["wait_mode"], summary["iterations"]) == \
        ("fifo", "sleep", 20)


def test_a_refused_policy_falls_back_to_the_default_with_one_warning(tmp_path, tiny,
                                                                      capsys, monkeypatch):
    import sim.real.launch.real_run as real_run

    monkeypatch.setattr(real_run, "fifo_refused", lambda: "SCHED_FIFO refused (test)")
    out = tmp_path / "real"
    assert main(["real", str(tiny), "--out", str(out), "--sched", "fifo"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "--sched" in line]
    assert len(warnings) == 1 and "default scheduler" in warnings[0]
    assert json.loads((out / "summary.json").read_text())["sched"] == "default"


@pytest.mark.parametrize("args, message", [
    (["--sched", "rr"], "--sched"),
    (["--sched", "fifo", "--wait", "spin"], "--wait spin"),
    (["--sched", "fifo", "--transport", "grpc", "--set", 'strategy.kind="asp"'], "--sched"),
])
def test_bad_sched_input_exits_2_with_one_line(tmp_path, capsys, tiny, args, message):
    out = tmp_path / "real"
    code = 2
    try:
        code = main(["real", str(tiny), "--out", str(out), *args])
    except SystemExit as exc:  # argparse's choices
        code = exc.code
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert message in err[-1] and not out.exists()


def test_an_unknown_discipline_is_the_callers_bug():
    with pytest.raises(ValueError, match="discipline"):
        rank_sched.enter("rr", 0)
