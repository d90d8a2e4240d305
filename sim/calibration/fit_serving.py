"""The parameter server's own code fitted to real runs through the simulator: the host
profile's ``serve_apply_s``, ``serve_push_s``, ``serve_step_s`` and ``serve_pull_s``.

``sim calibrate`` times the server's protocol in a warm loop
(:mod:`sim.calibration.serve_bench`). Inside a run the same code takes longer: the
server waits 0.2-1 ms between messages, and a one-worker asp server spent 58 us of CPU an
update in its runs where the simulation, on the warm loop's constants, gave it 32 us
(docs/measurements/validation.md). As for the device (:mod:`sim.calibration.from_runs`),
the trace-driven way (Daydream, Zhu et al. 2020; dPRO, Hu et al. 2022) is to fit the
constants to what the runs recorded, activity by activity: each real server's time per
update in taking pushes (its summary's ``server_breakdown["update"]``: applying or keeping
them, closing steps) and in its other work (``["overhead"]``: unpacking messages, answering
pulls), summed over shards.

Only runs whose ranks have a core each count: there the server's spans are CPU time, and the
simulated server's time per update in each activity is affine in the four constants,
``y = y0 + S x`` (its ``pull`` spans against ``overhead``, the rest against ``update``; the
simulation counts a push's unpacking, 2-3 us, in the push). ``y0`` is the simulation of the
run's own config (its twin) with the constants at 0, and each column of ``S`` the change when
one is set to :data:`PROBE_S`. ``x`` is the non-negative least-squares fit of ``S x`` to
``real - y0``, relative to each run's real total (every run weighs alike), pulled weakly
towards the profile's values: a constant that no run exercises keeps its value, and
constants that every run exercises in the same numbers (a one-worker bsp-ps server closes a
step for every push it keeps) share the runs' excess evenly.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibrated import read_profile, write_profile_data
from sim.calibration.least_squares import least_squares

SERVE = ("serve_apply_s", "serve_push_s", "serve_step_s", "serve_pull_s")
ACTIVITIES = ("update", "overhead")  # of the real servers' breakdown, fitted each
PROBE_S = 20e-6  # the probe value of each constant (s): large against the spans' rounding
PRIOR_WEIGHT = 1e-4  # the squared relative error a run's whole time off the prior weighs


def serving_points(run_dirs: Iterable[Path]) -> list[dict[str, Any]]:
    """One point per directory of real runs whose parameter servers had a core each (MPI
    transport, no fault): the run to simulate and, per activity (:data:`ACTIVITIES`), the
    median over its repeats of the real servers' time per update (s)."""
    groups: dict[Path, list[Path]] = {}
    for path in run_dirs:
        groups.setdefault(path.parent if path.name[1:].isdigit() else path, []).append(path)
    points = []
    for where, runs in groups.items():
        per_update = [s for s in map(_server_per_update, runs) if s is not None]
        if per_update:
            points.append({"runs": where, "config": runs[0] / "config.toml",
                           "repeats": len(per_update),
                           "real_s": {a: statistics.median(s[a] for s in per_update)
                                      for a in ACTIVITIES}})
    return points


def _server_per_update(run: Path) -> dict[str, float] | None:
    """A real run's servers' time per update by activity (s); None where it does not
    qualify."""
    summary = json.loads((run / "summary.json").read_text())
    server = summary.get("server_breakdown")
    if (summary.get("kind") != "real" or not server or summary.get("transport") != "mpi"
            or summary.get("restart_s") or not summary.get("iterations")
            or int(summary.get("ranks", 0)) > int(summary.get("cpus", 0))):
        return None
    return {a: server.get(a, 0.0) / summary["iterations"] for a in ACTIVITIES}


def simulated_server_s(config_path: Path, host_json: Path) -> dict[str, float]:
    """The simulated servers' CPU per update by activity (s) of the run configured in
    ``config_path`` on the host profile ``host_json``: their ``pull`` spans on the trace
    (``overhead``) and the rest (``update``)."""
    from sim.config import parse, read_toml
    from sim.simulated.engine import simulate
    from sim.trace import SERVERS

    config = parse(read_toml(config_path), str(config_path))
    cluster = config.cluster.model_copy(update={"host": f"calibrated:{host_json}"})
    result = simulate(config.model_copy(update={"cluster": cluster}))
    spans_us = dict.fromkeys(ACTIVITIES, 0.0)
    for e in result.trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("pid") == SERVERS:
            spans_us["overhead" if e["name"] == "pull" else "update"] += e["dur"]
    return {a: t * 1e-6 / result.summary["iterations"] for a, t in spans_us.items()}


def _with(host: dict[str, Any], values: dict[str, float], path: Path) -> Path:
    """A trial host profile: ``host``'s JSON with ``values`` set, at ``path``."""
    return write_profile_data(path, {**host, **values})


def _rows(points: list[dict[str, Any]], host_json: Path) -> np.ndarray:
    """Every point's simulated time per update, activity by activity, in one row (s)."""
    return np.array([simulated_server_s(p["config"], host_json)[a]
                     for p in points for a in ACTIVITIES])


def sensitivities(points: list[dict[str, Any]], host: dict[str, Any],
                  scratch: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(y0, S)``: each point's simulated server time per update in each activity (point
    by point, activity by activity) with the :data:`SERVE` constants at 0, and its change
    per second of each constant (one column each)."""
    zero = dict.fromkeys(SERVE, 0.0)
    y0 = _rows(points, _with(host, zero, scratch / "zero.json"))
    columns = [_rows(points, _with(host, zero | {name: PROBE_S}, scratch / f"{name}.json"))
               for name in SERVE]
    return y0, (np.array(columns).T - y0[:, None]) / PROBE_S


def fit_constants(y0: np.ndarray, S: np.ndarray, real: np.ndarray, totals: np.ndarray,
                  prior: dict[str, float]) -> dict[str, float]:
    """The non-negative :data:`SERVE` values that best fit ``y0 + S x`` to ``real``, each
    row relative to its run's real total (``totals``, one per row), with a weak pull
    (:data:`PRIOR_WEIGHT`) towards ``prior``'s values: what the runs determine comes from
    them, and what they cannot tell apart keeps the prior's values plus an even share of
    the runs' excess (Tikhonov regularisation towards a prior, solved as one non-negative
    least-squares problem)."""
    guess = np.array([prior[name] for name in SERVE])
    weight = np.sqrt(PRIOR_WEIGHT) / float(np.median(totals))
    A = np.vstack([S / totals[:, None], weight * np.eye(len(SERVE))])
    b = np.concatenate([(real - y0) / totals, weight * guess])
    x = least_squares(A, b, nonnegative=True)
    return {name: float(v) for name, v in zip(SERVE, x, strict=True)}


def fit_serving(paths: Iterable[Path], host_json: Path) -> dict[str, Any]:
    """:func:`fit_points` on the :func:`serving_points` of the real runs in ``paths`` (as
    :func:`~sim.calibration.from_runs.real_run_dirs` finds them)."""
    from sim.calibration.from_runs import real_run_dirs

    return fit_points(serving_points(real_run_dirs(paths)), host_json)


def fit_points(points: list[dict[str, Any]], host_json: Path) -> dict[str, Any]:
    """The :data:`SERVE` constants of the host profile ``host_json`` fitted to ``points``
    (:func:`serving_points`): ``{"values", "points"}``, each point with its run directory
    and, per activity, its real and simulated (fitted) time per update; its ``error`` is the
    total's. ``values`` is None without a point."""
    if not points:
        return {"values": None, "points": []}
    host = _read_host(Path(host_json))
    prior = {name: float(host.get(name, 0.0)) for name in SERVE}
    real = np.array([p["real_s"][a] for p in points for a in ACTIVITIES])
    totals = np.repeat([sum(p["real_s"].values()) for p in points], len(ACTIVITIES))
    with tempfile.TemporaryDirectory() as scratch:
        y0, S = sensitivities(points, host, Path(scratch))
    values = fit_constants(y0, S, real, totals, prior)
    simulated = (y0 + S @ np.array([values[name] for name in SERVE])).reshape(
        len(points), len(ACTIVITIES))
    for point, sim_s in zip(points, simulated, strict=True):
        point.update(runs=str(point["runs"]), config=str(point["config"]),
                     simulated_s=dict(zip(ACTIVITIES, map(float, sim_s), strict=True)),
                     error=float(sim_s.sum() / sum(point["real_s"].values()) - 1))
    return {"values": values, "points": points}


def runs_host(points: list[dict[str, Any]]) -> Path:
    """The calibrated host profile that the runs of ``points`` name (``cluster.host =
    "calibrated:PATH"``): the fit's prior. Raises UserError unless they name one, and only
    one, that exists."""
    from sim.calibration.from_runs import named_profile
    from sim.errors import UserError

    host = named_profile((Path(p["config"]) for p in points), "cluster", "host")
    if host is None:
        raise UserError("--from-runs: the runs with a parameter server must all name one "
                        "calibrated host profile that exists (cluster.host = "
                        '"calibrated:PATH"), the prior of the fit')
    return host


def with_serving(host_json: Path, fit: dict[str, Any], out: Path) -> Path:
    """A copy of the host profile ``host_json`` with the fitted :data:`SERVE` constants and
    their points (under ``serving_from_runs``), at ``out``."""
    data = _read_host(Path(host_json))
    data.update(fit["values"])
    data["source"] = (f"{data.get('source', '')}; the server's own code fitted to the "
                      f"servers' time in {len(fit['points'])} real run(s)")
    data["serving_from_runs"] = fit["points"]
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_profile_data(out, data)


def _read_host(path: Path) -> dict[str, Any]:
    """The host profile's JSON object at ``path``. Raises ValueError."""
    from sim.training.host_costs import PROFILE_FORMAT

    return read_profile(path, PROFILE_FORMAT, "host profile")
