"""Failures and checkpoints of real runs, from the parent's side (``[faults]``,
``[checkpoint]``).

* What real runs do: the failures listed in ``faults.failures`` (random ones,
  ``faults.mtbf_s``, are refused: simulated only, as the validator says:
  :func:`sim.training.real_checks.check_recovery`); bsp restarts from checkpoints; asp, ssp
  and backup carry on without a worker that died (the server's rank is not killed).
* bsp (:func:`run_restarting`): the job runs until the planned kill takes it down (the
  dead rank's marker tells a planned death from any other failure, which still fails the
  run), then starts again from the newest valid checkpoint, without that kill, as often as
  there are failures. The spans the failure cost (the checkpoint resumed from, the lost
  work done again, the restart from the kill to the new job's start) travel in the spec to
  the new job, which puts them on its record: one wall clock from the first job's start.
* The summary gets the simulator's fault keys (:func:`fault_summary`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.config import Config
from sim.real.executors import checkpoint as ckpt
from sim.real.executors.fault_injection import killed
from sim.real.launch.launcher import RunFailed

Gap = tuple[str, float, float]  # kind, start_s, end_s on the run's clock


def read_records(work: Path) -> dict[str, Any]:
    """What a job left for the runner: the planned deaths, its clock, its checkpoints'
    times (update -> [taken_s, resumed_s])."""
    clock = work / "clock.json"
    checkpoints = {}
    for path in work.glob("ckpt-*.json"):
        entry = json.loads(path.read_text())
        checkpoints[int(entry["update"])] = (float(entry["taken_s"]), float(entry["resumed_s"]))
    return {"killed": killed(work), "checkpoints": checkpoints,
            "clock": json.loads(clock.read_text()) if clock.exists() else None}


Launch = Callable[[dict[str, Any], dict[str, Any]], dict[str, str]]  # (faults, records)


def run_restarting(config: Config, directory: Path, launch: Launch) -> dict[str, str]:
    """Run a bsp job with checkpoints in ``directory``, started again after each planned
    failure; the run's files with the fault keys in its summary. Raises RunFailed."""
    done: list[int] = []
    origin: float | None = None
    taken: dict[int, tuple[float, float]] = {}  # checkpoint update -> (taken_s, resumed_s)
    gaps: list[Gap] = []  # failure spans since the start, the last restart's end open
    resume: dict[str, Any] | None = None
    lost_updates = 0
    for _ in range(len(config.faults.failures) + 1):
        spec = {"checkpoints": str(directory), "done": done, "origin": origin,
                "resume": resume}
        records: dict[str, Any] = {}
        try:
            files = launch(spec, records)
        except RunFailed:
            if not records.get("killed"):
                raise
        else:
            extra = {"lost_updates": lost_updates}
            return with_summary(files, fault_summary(files, "restart", len(done),
                                                     count_checkpoints(directory), extra))
        marker = records["killed"][0]
        done.append(int(marker["failure"]))
        clock = records["clock"] or {}
        origin = float(clock.get("t0", 0.0)) if origin is None else origin
        started = float(clock.get("start_s", 0.0))
        if gaps and gaps[-1][0] == "restart":  # the last restart ended as this job began
            gaps[-1] = ("restart", gaps[-1][1], started)
        taken.update(records["checkpoints"])
        saved, notes = ckpt.load_latest(directory)
        for line in notes:
            print(f"warning: {line}", file=sys.stderr, flush=True)
        update = saved.update if saved else 0
        span = taken.get(update) if saved else None
        resumed = span[1] if span else float(saved.meta.get("taken_s", 0.0)) if saved else 0.0
        kill_s = float(marker["at_s"])
        lost_updates += int(marker["update"]) - update
        kept = [g for g in gaps if g[1] >= resumed]  # gaps before it are in its record
        lost: Gap = ("recompute", max(resumed, started), kill_s)
        carried = kept + [lost]  # (the checkpoint's own span is in its record)
        gaps = kept + [lost, ("restart", kill_s, kill_s)]
        resume = {"path": str(ckpt.path_for(directory, update)) if saved else None,
                  "kill_s": kill_s, "gaps": carried}
    raise RunFailed("more failures than faults.failures lists (a kill was repeated)")


def count_checkpoints(directory: Path) -> int:
    return len(list(Path(directory).glob(ckpt.PATTERN)))


def fault_summary(files: dict[str, str], recovery: str, failures: int, checkpoints: int,
                  extra: dict[str, Any] | None = None,
                  markers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The simulator's fault keys for a real run, from its summary's breakdown (restart:
    every worker's checkpoint, recompute and restart spans are the job's; elastic: each
    dead worker's restart span is its time down, its marker says the work lost)."""
    summary = json.loads(files["summary.json"])
    workers = summary.get("workers") or [{}]

    def mean(kind: str) -> float:
        return float(sum(w.get(kind, 0.0) for w in workers) / len(workers))

    if recovery == "restart":
        lost, restart, spent = mean("recompute"), mean("restart"), mean("checkpoint")
    else:
        lost = float(sum(m.get("lost_s", 0.0) for m in markers or []))
        restart = float(sum(w.get("restart", 0.0) for w in workers))
        spent = 0.0
    end = summary.get("sim_time_s") or 0.0
    return {"recovery": recovery, "failures": failures, "checkpoints": checkpoints,
            "lost_work_s": lost, "checkpoint_time_s": spent, "restart_time_s": restart,
            "goodput_updates_per_s": summary["iterations"] / end if end > 0 else None,
            **(extra or {})}


def with_summary(files: dict[str, str], keys: dict[str, Any]) -> dict[str, str]:
    """``files`` with ``keys`` added to summary.json."""
    summary = json.loads(files["summary.json"])
    summary.update(keys)
    return {**files, "summary.json": json.dumps(summary, indent=2) + "\n"}


def run_elastic(config: Config, launch: Launch) -> dict[str, str]:
    """Run a parameter-server job whose planned failures it carries on through."""
    records: dict[str, Any] = {}
    files = launch({"elastic": True}, records)
    markers = records.get("killed", [])
    found = json.loads(files["summary.json"]).get("found_dead_s", {})
    # how long the server took to notice each death (its pid checks, every 10 ms)
    detection = [found[str(m["rank"])] - m["at_s"] for m in markers if str(m["rank"]) in found]
    return with_summary(files, fault_summary(
        files, "elastic", len(markers), 0, {"detection_s": max(detection, default=None)},
        markers))
