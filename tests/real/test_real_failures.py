"""A rank that dies or hangs ends the whole run with a clear error, and nothing is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.real.launch.launcher import TOKEN_VAR, descendants, diagnose, find_processes

pytest.importorskip("mpi4py")
ROOT = Path(__file__).resolve().parents[2]


def job_below(parent: int) -> tuple[int | None, list[int]]:
    """The mpiexec job below ``parent``: its ``-n`` (None until mpiexec runs) and the pids
    of its ``sim.real.executors.rank`` processes (Python running that module; not mpiexec,
    whose command line holds the ranks' own)."""
    size, ranks = None, []
    for pid in descendants(parent):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mpiexec" in argv[0] and b"-n" in argv:
            size = int(argv[argv.index(b"-n") + 1])
        elif b"sim.real.executors.rank" in argv[1:3]:
            ranks.append(pid)
    return size, sorted(ranks)


def token_of(pid: int) -> str:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e.split(b"=", 1)[1].decode() for e in env
                if e.startswith(TOKEN_VAR.encode() + b"="))


@pytest.fixture
def start(tmp_path: Path, two_rank_config_data, write_toml):
    """``start(kind, *extra)``: ``sim real`` started on the shared two-rank workload (logreg,
    2 ms a gradient) for ``kind``, long enough (100,000 updates) to outlive the test; the
    process and its ranks' pids once every rank of the job runs."""
    def start_run(kind: str, *extra: str) -> tuple[subprocess.Popen, list[int]]:
        config = write_toml(tmp_path / "long.toml", two_rank_config_data(
            {"workload.model": "logreg", "strategy.kind": kind, "compute.time_s": 2e-3,
             "run.iterations": 100000}))
        return launch(tmp_path, config, *extra)

    return start_run


def launch(tmp_path: Path, config: Path, *extra: str) -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen([sys.executable, "-m", "sim", "real", str(config), "--out",
                             str(tmp_path / "out"), "--timeout", "60", *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    ranks: list[int] = []
    size = None
    while (size is None or len(ranks) < size) and time.monotonic() < deadline:
        time.sleep(0.2)
        size, ranks = job_below(proc.pid)
    if size is None or len(ranks) < size:  # every rank of the job: none is still starting
        proc.kill()
        pytest.fail(f"ranks did not start: {proc.communicate()}")
    time.sleep(1.0)  # let them train a little
    return proc, ranks


@pytest.mark.parametrize("kind", ["bsp", "asp"])
def test_a_killed_rank_ends_the_run_with_a_clear_error(tmp_path, kind, start):
    proc, ranks = start(kind)
    token = token_of(ranks[0])
    try:
        os.kill(ranks[-1], signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert "real run failed" in err and "died" in err and "Killed" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert find_processes(token) == []
    assert not (tmp_path / "out").exists()


def test_a_hung_rank_is_stopped_after_the_hang_timeout(tmp_path, start):
    proc, ranks = start("bsp", "--hang-timeout", "2")
    token = token_of(ranks[0])
    try:
        os.kill(ranks[-1], signal.SIGSTOP)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        for pid in ranks:  # in case the test failed before the launcher cleaned up
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 1
    assert "made no progress" in err and "stopped every rank" in err, err
    assert find_processes(token) == []


def test_interrupting_the_command_leaves_nothing_running(tmp_path, start):
    proc, ranks = start("ssp")
    token = token_of(ranks[0])
    try:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert find_processes(token) == []


def test_diagnose_names_the_rank_from_mpiexec_output(tmp_path):
    (tmp_path / "rank1.pid").write_text("4242\n")
    output = ("=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
              "=   PID 4242 RUNNING AT vm\n=   EXIT CODE: 9\n"
              "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n")
    message = diagnose(tmp_path, 9, output)
    assert message.startswith("rank 1 (pid 4242) died: Killed (signal 9)")
    (tmp_path / "rank0.err").write_text("ValueError: boom\n\ntraceback...")
    assert diagnose(tmp_path, 1, output) == "rank 0 failed: ValueError: boom"
