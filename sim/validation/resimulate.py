"""``sim validate --resimulate DIR``: an earlier validation's real runs against the model as
it is now, in seconds instead of a matrix of real runs.

The real runs of ``DIR/cases/NAME/real`` (what ``sim validate --out DIR`` left) are kept as
they were; every case is simulated again on ``DIR/profiles`` (or ``--profiles``) into
``OUT/cases/NAME/sim`` and compared with them. So a model change is judged on the same real
runs as the model before it (the real runs' own reproducibility, ~6% a case, no longer
mixes in), and profiles fitted some other way (``sim calibrate --from-runs``) can be tried on
the same cases. The report goes to ``OUT/README.md``; the committed report and its
``real.json`` are left alone (they hold real runs of their own).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibrated import CALIBRATED
from sim.config import Config
from sim.errors import UserError
from sim.rundir import write_atomic
from sim.validation.matrix import (
    Case,
    Matrix,
    case_config,
    expand,
    load_matrix,
    recorded_sched,
    simulate_into,
    stored_profiles,
)
from sim.validation.run_speed import draw, slower_profiles

# an earlier row's facts of its real runs
KEPT = ("ranks", "other_load", "discarded", "real_s", "real_at")


def earlier_rows(earlier: Path) -> dict[str, dict[str, Any]]:
    """The earlier validation's rows by case (its ``rows.json``). Raises UserError."""
    try:
        rows = json.loads((earlier / "rows.json").read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"--resimulate {earlier}: no readable rows.json ({exc}); expected "
                        "the --out of an earlier `sim validate`") from None
    return {r["case"]: r for r in rows if isinstance(r, dict) and "case" in r}


def resimulate_case(matrix: Matrix, case: Case, profiles: dict[str, Path], out: Path,
                    real_dir: Path, before: dict[str, Any],
                    spread: tuple[int, float, float] | None = None) -> dict[str, Any]:
    """One case simulated again and compared with its earlier real runs: its row. With
    ``spread`` (seeds, sigma, speed_sigma) and real kernels, also its :func:`predicted_interval`."""
    from sim.calibration.from_runs import kernel_workload
    from sim.validation.replay import replay_case
    from sim.validation.sim_vs_real import compare

    row: dict[str, Any] = {"case": case.name, "levels": case.levels}
    row |= {k: before[k] for k in KEPT if k in before}
    row.setdefault("other_load", [0.0])
    row.setdefault("discarded", [])
    try:
        sim_dir = out / case.name / "sim"
        config = case_config(matrix, case, profiles, recorded_sched(real_dir))
        simulate_into(config, sim_dir)
        row["report"] = compare(sim_dir, real_dir)
        row["replay"] = replay_case(config, real_dir, out / case.name / "replay")
        if spread and kernel_workload(config):
            interval = predicted_interval(config, *spread)
            real = row["report"]["iteration_s"]["real"]["mean"]
            row["spread"] = interval | {"inside": interval["low"] <= real <= interval["high"]}
    except UserError as exc:
        row["error"] = str(exc)
    return row


def predicted_interval(config: Config, seeds: int, sigma: float,
                       speed_sigma: float = 0.0) -> dict[str, Any]:
    """``config`` simulated with ``seeds`` run seeds (1, 2, ...), each gradient's time drawn
    from a lognormal of shape ``sigma`` (mean 1; the spread measured inside real runs) and,
    with ``speed_sigma``, each run's calibrated host and device slower or faster by a
    factor drawn once per run (:mod:`sim.validation.run_speed`): the time per update's 5th
    and 95th percentiles (s), a predicted 90% interval."""
    from sim.config import apply_overrides, resolved
    from sim.results import iteration_s
    from sim.simulated.engine import simulate
    from sim.training.validator import validate

    times = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in range(1, seeds + 1):
            sets = ['compute.distribution="lognormal"', f"compute.sigma={sigma!r}",
                    f"run.seed={seed}"]
            if speed_sigma:
                sets += _slower(config, draw(seed, speed_sigma), Path(scratch) / str(seed))
            drawn = validate(apply_overrides(resolved(config), sets), "the predicted interval")
            times.append(iteration_s(simulate(drawn).summary))
    low, high = np.quantile(times, [0.05, 0.95])
    return {"seeds": seeds, "sigma": sigma, "speed_sigma": speed_sigma,
            "low": float(low), "high": float(high)}


def _slower(config: Config, factor: float, place: Path) -> list[str]:
    """The overrides that run ``config`` on its calibrated host and device ``factor`` times
    slower (a preset stays as it is)."""
    host, device = config.cluster.host, config.compute.device
    if not (host.startswith(CALIBRATED) and device.startswith(CALIBRATED)):
        return []
    host_json, device_json = slower_profiles(Path(host.removeprefix(CALIBRATED)),
                                             Path(device.removeprefix(CALIBRATED)), factor,
                                             place)
    return [f'cluster.host="{CALIBRATED}{host_json}"',
            f'compute.device="{CALIBRATED}{device_json}"']


def _device_of(row: dict[str, Any], profiles: dict[str, Path],
               given: Path | None) -> dict[str, Path]:
    """The profiles a case is simulated on again: the device calibration nearest its real
    runs (the row's ``device``, where ``sim validate`` measured the device again during the
    matrix and ``--profiles`` does not replace them), else ``profiles``."""
    device = row.get("device")
    if given is None and isinstance(device, str) and (Path(device) / "device.json").is_file():
        return {**profiles, "device": Path(device)}
    return profiles


def resimulate_matrix(matrix_path: Path, earlier: Path, out: Path, readme: Path | None,
                      only: list[str] | None, profiles_dir: Path | None,
                      say: Callable[[str], None] = print,
                      spread: tuple[int, float, float] | None = None
                      ) -> list[dict[str, Any]]:
    """Every case of the matrix (``only``) whose real runs ``earlier`` holds, simulated again
    and compared; the rows, also in ``OUT/rows.json``, and the report (``OUT/README.md``
    unless ``readme``). Raises UserError."""
    from sim.validation.validate_report import write_readme

    matrix = load_matrix(matrix_path)
    before = earlier_rows(earlier)
    cases = [c for c in expand(matrix, only)
             if (earlier / "cases" / c.name / "real").is_dir() and c.name in before]
    if not cases:
        raise UserError(f"--resimulate {earlier}: no case of {matrix_path.name} has real runs "
                        "there (cases/NAME/real)")
    if (out / "cases").exists() and any((out / "cases").iterdir()):
        raise UserError(f"{out}/cases: already holds results; choose another --out")
    profiles = stored_profiles(profiles_dir or earlier / "profiles",
                               sorted({c.net for c in cases}))
    started = time.monotonic()
    rows = []
    for case in cases:
        rows.append(resimulate_case(matrix, case, _device_of(before[case.name], profiles,
                                                             profiles_dir),
                                    out / "cases", earlier / "cases" / case.name / "real",
                                    before[case.name], spread))
    failed = [r for r in rows if "error" in r]
    for row in failed:
        say(f"{row['case']}: FAILED: {row['error']}")
    out.mkdir(parents=True, exist_ok=True)  # also when every case failed
    write_atomic(out / "rows.json", json.dumps(rows, indent=2) + "\n")
    repeat = max((r["report"]["repeats"] for r in rows if "report" in r), default=0)
    write_readme(readme or out / "README.md", rows, [], {
        "drift": [], "matrix": matrix, "out": out, "profiles": profiles, "only": only,
        "repeat": repeat, "elapsed_s": time.monotonic() - started, "quiet": (1.0, 0.0),
        "retries": 0, "before": None, "resimulated": earlier})
    return rows
