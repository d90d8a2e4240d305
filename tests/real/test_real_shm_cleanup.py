"""A real run leaves nothing in /dev/shm: MPICH's shared-memory files of the job are removed
when it ends, whether it finished, a rank died or aborted, or the launcher was interrupted."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.real.launch.launcher import Job, RunFailed, launch

pytest.importorskip("mpi4py")
ROOT = Path(__file__).resolve().parents[2]
SHM_DIR = Path("/dev/shm")

# Each rank notes the MPICH files it maps (the job's own: other jobs may run beside it), then
# ends as ``mode`` says; rank 1 is the one that dies.
RANK = """
import os, sys, time
from pathlib import Path
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
workdir, mode = Path(sys.argv[1]), sys.argv[2]
maps = Path("/proc/self/maps").read_text().splitlines()
files = sorted({line.split()[-1] for line in maps if "/dev/shm/mpich_" in line})
(workdir / f"rank{rank}.shm").write_text("\\n".join(files))
(workdir / f"rank{rank}.pid").write_text(f"{os.getpid()}\\n")
comm.Barrier()
time.sleep(0.5)
if mode == "killed" and rank == 1:
    os.kill(os.getpid(), 9)
if mode == "abort" and rank == 1:
    comm.Abort(3)
if mode == "exit":  # as elastic ranks do: no MPI_Finalize
    os._exit(0)
if mode == "sleep":
    time.sleep(60)
"""


def job_files(workdir: Path) -> set[Path]:
    files = set()
    for note in workdir.glob("rank*.shm"):
        files |= {Path(line) for line in note.read_text().split()}
    return files


def job(workdir: Path, mode: str) -> Job:
    return Job([sys.executable, "-c", RANK, str(workdir), mode], 2, workdir, timeout_s=60)


@pytest.mark.parametrize("mode", ["finished", "exit", "killed", "abort"])
def test_a_job_leaves_no_shared_memory_whatever_way_it_ends(tmp_path, mode):
    before = set(SHM_DIR.glob("mpich_*"))
    if mode in ("killed", "abort"):
        with pytest.raises(RunFailed):
            launch(job(tmp_path, mode))
    else:
        launch(job(tmp_path, mode))
    ours = job_files(tmp_path)
    assert ours and all(path.name.startswith("mpich_shm_") for path in ours)
    assert not ours & before  # the job's files are its own
    assert [path for path in ours if path.exists()] == []


def test_an_interrupted_launch_leaves_no_shared_memory(tmp_path):
    script = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[3])\n"
              "from sim.real.launch.launcher import Job, launch\n"
              f"launch(Job([sys.executable, '-c', {RANK!r}, sys.argv[1], sys.argv[2]], 2,"
              " Path(sys.argv[1]), timeout_s=60))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path), "sleep", str(ROOT)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("rank*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)  # the launcher polls every 50 ms
        ours = job_files(tmp_path)
        assert ours, proc.poll()
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert [path for path in ours if path.exists()] == []
