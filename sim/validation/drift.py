"""Drift cancelled by design: calibration and real repeats interleaved (issue 48, item 4).

This machine's speed moves by -17% to +15% within an hour (the same kernels timed before
and after a validation). A validation calibrated once, at its start, charges that drift to
the model. So the device is calibrated again after every group of cases, and each case is
simulated on the calibration nearest in time to its real repeats: a slow hour then moves
both sides. The drift measured between consecutive calibrations is reported.

Only the device (the gradients' kernels) is measured again: the host's CPU costs take
minutes to calibrate; their drift shows in the replayed errors, which take each run's own
data and update times (:mod:`sim.validation.replay`).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.calibration.sequence import Plan


def recalibrate(plan: Plan, out: Path, say: Callable[[str], None]) -> tuple[float, Path]:
    """The device measured again under ``out`` (``plan``'s workloads, compute only): the
    time it was taken (monotonic s, mid-measurement) and its profile's directory."""
    from sim.calibration.report import Progress
    from sim.calibration.sequence import calibrate

    started = time.monotonic()
    profiles = calibrate(replace(plan, phases=("compute",)), out, Progress(say))
    return (started + time.monotonic()) / 2, profiles["device"]


def nearest(calibrations: list[tuple[float, Path]], at: float) -> Path:
    """The device directory of the calibration taken nearest to monotonic time ``at``."""
    return min(calibrations, key=lambda c: abs(c[0] - at))[1]


def _points(device_dir: Path) -> dict[str, float]:
    data = json.loads((device_dir / "device.json").read_text())
    return {p["workload"]: p["seconds"] for p in data.get("points", [])}


def drift(calibrations: list[tuple[float, Path]]) -> list[dict[str, Any]]:
    """Between each two consecutive calibrations: minutes apart and the kernels' time
    change (each workload's new / old - 1), median and range."""
    out = []
    for (t0, a), (t1, b) in zip(calibrations, calibrations[1:], strict=False):
        before, after = _points(a), _points(b)
        changes = [after[w] / before[w] - 1 for w in before if before[w] > 0 and w in after]
        if changes:
            out.append({"minutes": (t1 - t0) / 60, "median": statistics.median(changes),
                        "low": min(changes), "high": max(changes)})
    return out


def lines(found: list[dict[str, Any]]) -> list[str]:
    """The README's line on it (none with a single calibration)."""
    if not found:
        return []
    steps = "; ".join(f"after {d['minutes']:.1f} min {d['median']:+.0%} ({d['low']:+.0%} .. "
                      f"{d['high']:+.0%})" for d in found)
    return [f"- the device calibrated again after every group of cases, each case simulated "
            f"on the calibration nearest its real repeats; kernel times between consecutive "
            f"calibrations (median over the workloads, range): {steps}"]
