"""Starting ranks with ``mpiexec``: environment, time limits, hang detection, cleanup, errors.

:func:`launch` runs one MPI job and returns only when every process of it is gone. It fails
with :class:`RunFailed` (one clear line) when a rank raised (its ``rankR.err``), died (the
signal or status mpiexec reports, and which rank had that pid), made no progress for
``hang_s`` seconds (its heartbeat file went stale), or the job outlived ``timeout_s``.
Every process of the job carries a random token in its environment; after mpiexec has gone,
any process still carrying it is killed, so nothing is left running whatever happened.

Nor is anything left in ``/dev/shm``: MPICH's shared-memory transport has one rank of the
node create ``/dev/shm/mpich_shm_<world>_<node>`` (``mpich_vci_...`` too, with several VCIs)
in MPI_Init and unlinks it only in MPI_Finalize, so a job whose ranks were killed, aborted or
left by ``os._exit`` leaves it behind (2-3 MB each). While the job runs, the launcher reads
which such files its ranks map (``/proc/PID/maps``) and removes exactly those when the job
ends, whatever way; other jobs' files, running or not, are never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sim.real.executors.fault_injection import alive

ROOT = Path(__file__).resolve().parents[3]  # the repository: `import sim` works from here
TOKEN_VAR = "SGD_REAL_RUN"
POLL_S = 0.05
SHM_DIR = Path("/dev/shm")
SHM_PREFIXES = ("mpich_shm_", "mpich_vci_")  # MPICH's names for a job's shared memory
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                     "MKL_NUM_THREADS", "BLIS_NUM_THREADS")}


class RunFailed(RuntimeError):
    """A real run did not complete; the message says why, in one line."""


@dataclass
class Job:
    argv: list[str]  # what every rank runs
    ranks: int
    workdir: Path  # shared with the ranks: pid, heartbeat, done and error files
    env: dict[str, str] = field(default_factory=dict)
    prefix: Callable[[int], list[str]] | None = None  # per-rank prefix, e.g. ip netns exec
    timeout_s: float = 1800.0
    hang_s: float = 60.0
    # "hydra" stops every rank when one dies; "gforker" lets the others run on (hydra's
    # -disable-auto-cleanup still killed them in about half of the runs here, MPICH 5.0.2):
    # a run whose workers may die as planned (elastic recovery, sim.real.executors.elastic_rank)
    manager: str = "hydra"


def mpiexec(manager: str = "hydra") -> str:
    """The mpiexec beside this Python (the ``mpich`` wheel's), else on PATH; ``gforker``:
    MPICH's ``mpiexec.gforker``."""
    name = "mpiexec" if manager == "hydra" else f"mpiexec.{manager}"
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise RunFailed("mpiexec not found: install MPICH and mpi4py "
                        "(pip install mpich mpi4py, both in requirements.txt)")
    return found


def command(job: Job) -> list[str]:
    """The mpiexec command line: one block of ranks, or one per rank with its prefix."""
    if job.prefix is None:
        return [mpiexec(job.manager), "-n", str(job.ranks), *job.argv]
    cmd = [mpiexec(job.manager)]
    for rank in range(job.ranks):
        cmd += ([":"] if rank else []) + ["-n", "1", *job.prefix(rank), *job.argv]
    return cmd


def find_processes(token: str) -> list[int]:
    """Pids of the processes (other than this one) whose environment carries ``token``."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(proc: subprocess.Popen, token: str, grace_s: float = 2.0) -> None:
    """End mpiexec (TERM, then KILL) and every process carrying ``token``; wait until gone."""
    if proc.poll() is None:
        _kill_group(proc, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            proc.wait()
    _kill_group(proc, signal.SIGKILL)  # the session may hold ranks mpiexec did not reap
    deadline = time.monotonic() + 10
    while (left := find_processes(token)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(POLL_S)


def shm_segments(pid: int) -> set[Path]:
    """MPICH's shared-memory files under /dev/shm that process ``pid`` maps (and that still
    exist: a file already unlinked reads ``(deleted)``)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    found = set()
    for line in maps.splitlines():
        _, sep, name = line.partition(f" {SHM_DIR}/")
        if sep and name.startswith(SHM_PREFIXES) and "/" not in name and " " not in name:
            found.add(SHM_DIR / name)
    return found


def descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (children, theirs, ...), from /proc's children lists."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        try:
            tasks = list(Path(f"/proc/{todo.pop()}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except (OSError, ValueError):
                continue
            todo += children - found
            found |= children
    return found


@dataclass
class _Segments:
    """The job's MPICH shared-memory files, learned from its processes' maps while they run."""
    proc: subprocess.Popen  # mpiexec
    job: Job
    found: set[Path] = field(default_factory=set)
    seen: set[int] = field(default_factory=set)  # pids whose maps named a file

    def scan(self) -> None:
        """Read the maps of each process under mpiexec (and each rank that wrote its
        ``rankR.pid``) not yet seen mapping a file; nothing once every rank has been."""
        if len(self.seen) >= self.job.ranks:
            return
        for pid in descendants(self.proc.pid) | set(_pid_ranks(self.job.workdir)):
            if pid not in self.seen and (files := shm_segments(pid)):
                self.found |= files
                self.seen.add(pid)

    def remove(self) -> None:
        """Unlink the files the job's ranks mapped (MPI_Finalize has, after a clean end)."""
        for path in self.found:
            with contextlib.suppress(OSError):
                path.unlink()


def _stalled(job: Job, now: float) -> str | None:
    """A message naming the rank whose heartbeat is oldest, if older than ``hang_s``."""
    ages = {}
    for beat in job.workdir.glob("rank*.beat"):
        rank = int(beat.name[4:-5])
        if (job.workdir / f"rank{rank}.done").exists() or \
                (job.workdir / f"rank{rank}.killed").exists():  # finished, or died as planned
            continue
        try:
            ages[rank] = now - beat.stat().st_mtime
        except FileNotFoundError:
            continue
    if not ages:
        return None
    rank = max(ages, key=ages.get)
    if ages[rank] <= job.hang_s:
        return None
    return (f"rank {rank} made no progress for {ages[rank]:.0f} s (hung, or a step longer "
            f"than --hang-timeout {job.hang_s:g} s); stopped every rank")


def _ranks_gone(job: Job) -> bool:
    """Every rank has finished (``.done``) or died as planned (``.killed``), and no rank
    process is left: gforker lingers ~3 s after ranks that skipped MPI_Finalize (measured
    here), so the job is over without waiting for it."""
    for rank in range(job.ranks):
        marks = [job.workdir / f"rank{rank}.{end}" for end in ("done", "killed")]
        if not any(mark.exists() for mark in marks):
            return False
    return not any(alive(pid) for pid in _pid_ranks(job.workdir))


def _watch(proc: subprocess.Popen, job: Job, segments: _Segments) -> str | None:
    """Wait for mpiexec (or, under gforker, for every rank to have gone), noting the job's
    shared-memory files; a failure message if the job must be stopped first."""
    started = time.monotonic()
    while proc.poll() is None:
        segments.scan()
        if job.manager == "gforker" and _ranks_gone(job):
            return None
        if time.monotonic() - started > job.timeout_s:
            return f"timed out after {job.timeout_s:g} s (--timeout); stopped every rank"
        stalled = _stalled(job, time.time())
        if stalled:
            return stalled
        time.sleep(POLL_S)
    return None


def _pid_ranks(workdir: Path) -> dict[int, int]:
    ranks = {}
    for path in workdir.glob("rank*.pid"):
        try:
            ranks[int(path.read_text())] = int(path.name[4:-4])
        except ValueError:
            continue
    return ranks


def diagnose(workdir: Path, returncode: int, output: str) -> str:
    """One line saying why the job failed, from the ranks' error files or mpiexec's output."""
    errors = sorted(workdir.glob("rank*.err"), key=lambda p: int(p.name[4:-4]))
    if errors:
        first = errors[0].read_text().splitlines()[0] if errors[0].stat().st_size else "?"
        return f"rank {errors[0].name[4:-4]} failed: {first}"
    pid = re.search(r"PID (\d+) RUNNING AT", output)
    how = re.search(r"EXIT STRING: (.+)", output) or re.search(r"EXIT CODE: (\d+)", output)
    if pid or how:
        rank = _pid_ranks(workdir).get(int(pid.group(1))) if pid else None
        who = f"rank {rank}" if rank is not None else "a rank"
        if pid:
            who += f" (pid {pid.group(1)})"
        what = how.group(1).strip() if how else "ended badly"
        return f"{who} died: {what}; mpiexec stopped the other ranks"
    lines = [line for line in output.splitlines() if line.strip()]
    return f"mpiexec exited with status {returncode}: {lines[-1] if lines else 'no output'}"


def launch(job: Job) -> str:
    """Run ``job`` to the end and return mpiexec's output; raises RunFailed."""
    cmd = command(job)
    token = secrets.token_hex(8)
    env = {**os.environ, **ONE_THREAD, **job.env, TOKEN_VAR: token,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    log_path = job.workdir / "mpiexec.log"
    with log_path.open("w") as log:
        try:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            raise RunFailed(f"cannot start {cmd[0]}: {exc}") from None
        failure, gone = "stopped", False
        segments = _Segments(proc, job)
        try:
            failure = _watch(proc, job, segments)
            gone = job.manager == "gforker" and _ranks_gone(job)
        finally:
            try:
                segments.scan()  # a rank that outlived mpiexec
                stop(proc, token, 0.0 if gone else 2.0)  # no rank left: nothing to wait for
            finally:
                segments.remove()
    output = log_path.read_text(errors="replace")
    if failure:
        raise RunFailed(failure)
    if (proc.returncode != 0 and not gone) or list(job.workdir.glob("rank*.err")):
        raise RunFailed(diagnose(job.workdir, proc.returncode, output))
    return output
