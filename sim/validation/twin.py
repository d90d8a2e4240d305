"""``sim real CONFIG --twin``: a user's own config run for real, then simulated as its twin
on this machine's calibrated profiles, and the two compared, with no key set by hand.

The twin is what the validation matrix simulates for each of its cases
(:func:`~sim.validation.matrix.twin_config`): the calibrated device and fabric of the run's
network, this machine's host costs and cores with every rank on it, and, under failures or
checkpoints, the calibrated storage and restart delay. The profiles are measured after the
real run (``OUT/profiles``; the device on the config's own workload), or read from an
earlier calibration (``--profiles DIR``: a ``sim validate --out``'s ``profiles/``, or an
earlier twin's), whose device must have timed the config's workload
(:func:`check_device_fitted`: refused otherwise, never applied silently). Files:
``OUT/twin/`` is the simulated run (config.toml, summary.json, metrics.csv, trace.json) and
``OUT/twin/comparison.json`` the report ``sim compare`` prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.config import Config, resolved
from sim.errors import UserError
from sim.rundir import write_atomic
from sim.training.strategies import row_of

TWIN = "twin"


def profiles_for(config: Config, net: str, place: Path | None, out: Path, quick: bool,
                 say: Callable[[str], None]) -> dict[str, Path]:
    """The profiles the twin runs on: those in ``place`` (:func:`stored`), or measured now
    into ``out``."""
    from sim.calibration.report import Progress
    from sim.calibration.sequence import calibrate
    from sim.validation.matrix import calibration_plan

    if place is not None:
        return stored(config, net, place)
    ranks = row_of(config).ranks(config)
    plan = calibration_plan([config], [net], sorted({2, max(2, ranks)}), quick,
                            faulty=[config] if _restarts(config, net) else [])
    return calibrate(plan, out, Progress(say))


def stored(config: Config, net: str, place: Path) -> dict[str, Path]:
    """The profiles of an earlier calibration in ``place`` for a twin of ``config`` on
    ``net``. Raises UserError naming the first file it lacks."""
    from sim.validation.matrix import stored_profiles

    profiles = stored_profiles(place, [net])
    needed = [profiles["device"] / "device.json", profiles[net] / "fabric.json"]
    needed += [place / "recovery" / "recovery.json"] if _restarts(config, net) else []
    missing = [p for p in needed if not p.exists()]
    if missing:
        raise UserError(f"--profiles {place}: no {missing[0].relative_to(place)} (expected "
                        f"the profiles/ of `sim validate --out` or of an earlier --twin, "
                        f"calibrated for --net {net})")
    check_device_fitted(config, needed[0], place)
    return profiles


def check_device_fitted(config: Config, device_json: Path, place: Path) -> None:
    """Refuse a device profile fitted on other workloads than ``config``'s (its points, by
    :func:`~sim.calibration.measure_device.describe_workload`'s names): its rate would be
    applied to a workload it never timed (logistic regression's fit, applied to an MLP, put
    the twin's compute 181% off). A modelled compute time (``compute.time_s``) uses no
    device. Raises UserError in one line: the profile, what it timed, the config's workload
    and what to do."""
    from sim.calibration.measure_device import describe_workload, timed_workloads

    if config.compute.time_s is not None:
        return
    mine = describe_workload(config)
    try:
        fitted = timed_workloads(json.loads(device_json.read_text()))
    except (OSError, ValueError) as exc:
        raise UserError(f"--profiles {place}: cannot read {device_json}: {exc}") from None
    if mine not in fitted:
        raise UserError(
            f"--profiles {place}: its device ({device_json.relative_to(place)}) was fitted on "
            f"{'; '.join(fitted) if fitted else 'no recorded workload'}, not on this config's "
            f"workload ({mine}); drop --profiles to time it after the run, or use profiles "
            f"calibrated with it")


def _restarts(config: Config, net: str) -> bool:
    """Whether the real run restarts from checkpoints (its twin needs the restart delay)."""
    from sim.training.validator import validate_real

    return validate_real(config, net).recovery == "restart"


def run_twin(config: Config, source: str, real_dir: Path, net: str, place: Path | None,
             quick: bool, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Simulate the twin of the real run in ``real_dir`` (config ``config``, from
    ``source``, on ``net``) and compare; returns :func:`~sim.validation.sim_vs_real.compare`'s
    report, also written to ``real_dir/twin/comparison.json`` with its figure
    (``report.png``, ``.svg``, ``.pdf``) beside it, as ``sim compare`` draws it."""
    from sim.validation.compare_plot import plot_report
    from sim.validation.matrix import recorded_sched, simulate_into, twin_config
    from sim.validation.sim_vs_real import compare

    twin_dir = real_dir / TWIN
    profiles = profiles_for(config, net, place, real_dir / "profiles", quick, say)
    twin = twin_config(resolved(config), config, profiles, net, f"{source} (twin)",
                       recorded_sched(real_dir))
    simulate_into(twin, twin_dir)
    report = compare(twin_dir, real_dir)
    write_atomic(twin_dir / "comparison.json", json.dumps(report, indent=2) + "\n")
    plot_report(report, twin_dir)
    return report
