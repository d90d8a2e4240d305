"""The checkpoint interval study: a sweep of ``checkpoint.every_steps`` under exponential
failures against Young (1974) and Daly (2006).

Each run's summary carries what the closed forms need: the fault-free work (``fault_free_s``,
T_s), the job's mean time between failures (``job_mtbf_s``, M), the checkpoint's write
(``checkpoint_write_s``, delta) and read times and the restart delay (R = delay + read).
The work between checkpoints is tau = every_steps x T_s / iterations.

The simulated optimum is the vertex of a parabola in ln(tau) fitted to the mean wall time
over the seeds at the grid points around the best one: the curve is flat at its minimum
(within 10% of the optimum it moves by ~0.1%), so a single grid point cannot place it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.errors import UserError
from sim.faults import theory
from sim.stats import MeanCI, mean_ci

INTERVAL_KEY = "checkpoint.every_steps"
NEEDS = ("sim_time_s", "fault_free_s", "iterations", "job_mtbf_s", "checkpoint_write_s",
         "checkpoint_read_s", "restart_delay_s")


@dataclass(frozen=True)
class IntervalStudy:
    """Per checkpoint interval tau (s of work): the simulated wall time (mean and 95%
    interval over seeds) against Daly's expectation; the optima; Young's overhead."""

    tau_s: np.ndarray
    wall_s: list[MeanCI]
    daly_wall_s: np.ndarray
    sim_overhead: np.ndarray  # wall / work - 1, the mean over seeds
    young_overhead: np.ndarray  # its first-order estimate
    optimum_s: float  # the simulated optimum (fitted)
    daly_optimum_s: float
    young_optimum_s: float
    work_s: float
    mtbf_s: float
    delta_s: float
    restart_s: float

    @property
    def optimum_error(self) -> float:
        """The simulated optimum's relative distance from Daly's."""
        return self.optimum_s / self.daly_optimum_s - 1.0


def _common(rows: list[Mapping[str, Any]], key: str) -> float:
    values = {round(float(r[key]), 9) for r in rows}
    if len(values) != 1:
        raise UserError(f"interval study: {key} differs between runs ({sorted(values)[:3]}); "
                        f"sweep only {INTERVAL_KEY} and run.seed")
    return float(rows[0][key])


def interval_study(rows: Iterable[Mapping[str, Any]]) -> IntervalStudy:
    """The study of a sweep's result rows (``results.csv``'s, or dicts with the same keys).
    Raises UserError naming what is missing or not comparable."""
    rows = [r for r in rows if r.get(INTERVAL_KEY) is not None]
    if not rows:
        raise UserError(f"interval study: no run swept {INTERVAL_KEY}")
    missing = [k for k in NEEDS if any(r.get(k) is None for r in rows)]
    if missing:
        raise UserError(f"interval study: the runs have no {missing[0]} (a synchronous "
                        "strategy with faults.mtbf_s and [checkpoint] writes it)")
    work, iterations = _common(rows, "fault_free_s"), _common(rows, "iterations")
    mtbf, delta = _common(rows, "job_mtbf_s"), _common(rows, "checkpoint_write_s")
    restart = _common(rows, "restart_delay_s") + _common(rows, "checkpoint_read_s")
    steps = sorted({int(r[INTERVAL_KEY]) for r in rows})
    tau = np.array([k * work / iterations for k in steps])
    walls = [mean_ci(float(r["sim_time_s"]) for r in rows if int(r[INTERVAL_KEY]) == k)
             for k in steps]
    means = np.array([w.mean for w in walls])
    return IntervalStudy(
        tau, walls, np.array([theory.daly_wall_s(work, t, delta, restart, mtbf) for t in tau]),
        means / work - 1.0,
        np.array([theory.young_overhead(t, delta, restart, mtbf) for t in tau]),
        fitted_optimum(tau, means), theory.daly_interval(delta, mtbf),
        theory.young_interval(delta, mtbf), work, mtbf, delta, restart)


def fitted_optimum(tau_s: np.ndarray, wall_s: np.ndarray, span: float = 2.0) -> float:
    """The vertex of a least-squares parabola in ln(tau) through the best point, its two
    neighbours and any other point within a factor ``span`` of its tau. Raises UserError
    if the best point is at the grid's edge (the optimum is outside it)."""
    best = int(np.argmin(wall_s))
    if best in (0, len(tau_s) - 1):
        raise UserError(f"interval study: the shortest wall time is at the grid's edge "
                        f"(tau = {tau_s[best]:.4g} s): widen the sweep")
    near = np.abs(np.log(tau_s / tau_s[best])) <= math.log(span)
    near[best - 1:best + 2] = True
    a, b, _ = np.polyfit(np.log(tau_s[near]), wall_s[near], 2)
    return float(math.exp(-b / (2 * a))) if a > 0 else float(tau_s[best])
