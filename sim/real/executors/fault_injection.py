"""Failures on real ranks: the planned kill, telling a dead rank, and checkpoint timing.

A rank with a failure planned in ``[faults] failures`` (and not already done in an earlier
attempt of the run: the spec's ``done``) checks at its loop's steps whether it is due: after
update ``at_update`` (for a parameter-server worker: once a pull shows the server applied
it) or once ``at_s`` of the run's time have passed. It then leaves, for the lab's record
only, a marker (``rankR.killed``: when, at which update, the work lost) and its log so far
(``rankR.log.npz``, in the record layout of :mod:`sim.real.executors.checkpoint`: npz and
JSON, never a pickle) in the work directory, and SIGKILLs itself: a fail-stop failure that
nothing in MPI sees coming. Recovery never reads these files; the launcher and the final
summary do.

:func:`alive` tells a dead process from a live one by ``/proc`` (a killed child that its
parent has not reaped yet is a zombie: dead, though ``kill(pid, 0)`` still succeeds).
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.real.executors import checkpoint as ckpt
from sim.real.executors.assemble import RankLog

if TYPE_CHECKING:
    from sim.config import Config

CHECK_EVERY_S = 0.01  # a server looks at silent workers' pids this often


@dataclass
class Kill:
    """A failure planned for this rank: after update ``at_update`` or at ``at_s``."""

    index: int  # its place in faults.failures (the runner's record of done ones)
    at_update: int | None
    at_s: float | None


@dataclass
class FaultPlan:
    """This rank's planned failures (the first due one kills it)."""

    rank: int
    workdir: Path
    kills: list[Kill] = field(default_factory=list)

    @classmethod
    def of(cls, config: Config, rank: int, workdir: Path, done: list[int]) -> FaultPlan:
        kills = [Kill(i, f.at_update, f.at_s) for i, f in enumerate(config.faults.failures)
                 if f.rank == rank and i not in done]
        return cls(rank, workdir, kills)

    def due(self, update: int, now_s: float) -> Kill | None:
        """The kill due after ``update`` (the run's updates the rank knows of) at run time
        ``now_s``, if any."""
        for kill in self.kills:
            if (kill.at_update is not None and update >= kill.at_update) or \
                    (kill.at_s is not None and now_s >= kill.at_s):
                return kill
        return None

    def check(self, update: int, now_s: float, log: Any, lost_s: float = 0.0) -> None:
        """Die now if a kill is due (``lost_s``: work of this rank that dies with it)."""
        kill = self.due(update, now_s)
        if kill is not None:
            self.die(kill, update, now_s, log, lost_s)

    def die(self, kill: Kill, update: int, now_s: float, log: Any, lost_s: float) -> None:
        """Leave the record, then SIGKILL this process (never returns)."""
        write_log(self.workdir, self.rank, log)
        marker = {"rank": self.rank, "failure": kill.index, "update": update,
                  "at_s": now_s, "lost_s": lost_s}
        (self.workdir / f"rank{self.rank}.killed").write_text(json.dumps(marker))
        os.kill(os.getpid(), signal.SIGKILL)


def killed(workdir: Path) -> list[dict[str, Any]]:
    """The markers of the ranks that died as planned, in rank order."""
    found = []
    for path in sorted(Path(workdir).glob("rank*.killed")):
        try:
            found.append(json.loads(path.read_text()))
        except ValueError:  # cannot happen short of a crash while writing: not planned
            continue
    return sorted(found, key=lambda m: m["rank"])


def log_path(workdir: Path, rank: int) -> Path:
    return Path(workdir) / f"rank{rank}.log.npz"


def write_log(workdir: Path, rank: int, log: RankLog | None) -> None:
    """Leave ``log`` (a RankLog, or None: nothing to keep) as rank ``rank``'s last words."""
    ckpt.write_record(log_path(workdir, rank), log)


def dead_log(workdir: Path, rank: int) -> RankLog | None:
    """The log a killed rank left (None if it left none). Raises
    :class:`~sim.real.executors.checkpoint.BadRecord` naming a file that is not one."""
    path = log_path(workdir, rank)
    if not path.exists():
        return None
    log = ckpt.read_record(path)
    if log is not None and not isinstance(log, RankLog):
        raise ckpt.BadRecord(f"{path.name}: holds a {type(log).__name__}, not a rank's log")
    return log


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def rank_pid(workdir: Path, rank: int) -> int | None:
    try:
        return int((Path(workdir) / f"rank{rank}.pid").read_text())
    except (OSError, ValueError):
        return None
