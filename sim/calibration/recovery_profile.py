"""The recovery profile (``recovery.json``): what a restart costs on this machine, for
``faults.restart_s``, and what a config reads of it.

It holds ``restart_s`` (the median over the configs measured,
:mod:`sim.calibration.measure_recovery`) and each config's own point, keyed by
:func:`config_key`; :func:`restart_for` gives a config its own restart where it was
measured. Read and written through :mod:`sim.calibrated`, as every profile.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from sim.calibrated import read_profile
from sim.calibration.measure_device import describe_workload
from sim.config import Config

RECOVERY_FORMAT = "sgd-lab.recovery-profile/1"


@dataclass(frozen=True)
class RecoveryProfile:
    """A calibrated restart: ``restart_s`` (s, from a rank's death to the resumed job's
    start, less the checkpoint's read) and how it was measured. Its points (one per config)
    are written beside it."""

    restart_s: float
    source: str


def config_key(config: Config) -> str:
    """What a restart depends on (the workload built, the ranks started), as a short key.
    Only the workload's keys that differ from their defaults count, so a key that a later
    version of the lab adds (with its default) leaves the profiles measured before valid."""
    text = json.dumps({"workload": config.workload.model_dump(mode="json",
                                                              exclude_defaults=True),
                       "workers": config.cluster.workers}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def restart_for(path: Path, config: Config) -> float:
    """``config``'s calibrated restart delay (s): its own if measured, else the profile's.
    Raises ValueError for an unreadable profile."""
    data = read_profile(path, RECOVERY_FORMAT, "recovery profile")
    points = data.get("points", [])
    own = [p["restart_s"] for p in points if p.get("key") == config_key(config)]
    if not own:  # keyed otherwise (an older lab): the same workload and ranks by name
        own = [p["restart_s"] for p in points if p.get("workload") == describe_workload(config)
               and p.get("ranks") == config.cluster.workers]
    return float(own[0] if len(own) == 1 else data["restart_s"])


def simulation_sets(config: Config, place: Path | None) -> list[str]:
    """``--set``s that simulate ``config`` on the profiles in ``place`` (``storage.json``,
    ``recovery.json``) when it has failures or checkpoints; none otherwise, or without
    them. Raises ValueError for an unreadable recovery profile."""
    if not (config.faults.enabled or config.checkpoint.enabled) or place is None or \
            not (place / "storage.json").exists():
        return []
    return [f'checkpoint.storage="calibrated:{place / "storage.json"}"',
            f"faults.restart_s={restart_for(place / 'recovery.json', config)!r}"]

