"""Closed forms of checkpoint-restart under exponential failures, to check the simulator
against.

Notation (Daly 2006): M the mean time between failures of the job (s), delta the time to
write a checkpoint, R the time to restart (here: the restart delay plus reading the
checkpoint), tau the work between checkpoints, T_s the work of the whole run.

* Young (1974), "A first order approximation to the optimum checkpoint interval", CACM
  17(9): tau_opt = sqrt(2 delta M), and to first order the wall time is
  T_s (1 + delta / tau + (tau + delta) / (2 M) + R / (tau + delta) * (tau + delta) / M ...);
  :func:`young_overhead` gives the first-order share of time lost.
* Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
  dumps", FGCS 22(3): the expected wall time with failures during work, checkpoints and
  restarts alike (:func:`daly_wall_s`), and its optimum (:func:`daly_interval`).
"""

from __future__ import annotations

import math


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young's optimum work between checkpoints, sqrt(2 delta M) (s)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (his eq. 37): for delta < 2M,
    sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta; else M."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - delta_s


def daly_wall_s(work_s: float, tau_s: float, delta_s: float, restart_s: float,
                mtbf_s: float) -> float:
    """Expected wall time of ``work_s`` of work in segments of ``tau_s`` work plus a
    ``delta_s`` checkpoint, failures exponential with mean ``mtbf_s`` at any time (also
    during checkpoints and restarts of ``restart_s``): Daly's eq. 19,
    M e^{R/M} (e^{(tau + delta)/M} - 1) T_s / tau."""
    m = mtbf_s
    return m * math.exp(restart_s / m) * math.expm1((tau_s + delta_s) / m) * work_s / tau_s


def young_overhead(tau_s: float, delta_s: float, restart_s: float, mtbf_s: float) -> float:
    """First-order share of wall time spent on anything but work (Young 1974): per segment
    of tau work, delta writing, and with probability (tau + delta) / M a failure that costs
    R plus, on average, half the segment: delta / tau + (tau + delta) (R + (tau + delta) / 2)
    / (tau M). Holds when delta, R << tau << M."""
    segment = tau_s + delta_s
    return delta_s / tau_s + segment * (restart_s + segment / 2) / (tau_s * mtbf_s)


def expected_lost_s(segment_s: float, mtbf_s: float) -> float:
    """Expected work lost to a failure that strikes a segment of ``segment_s`` (checkpoint
    to checkpoint), failures exponential with mean ``mtbf_s``: the mean of an exponential
    conditioned on falling in [0, L), M - L / (e^{L/M} - 1)."""
    if segment_s <= 0:
        return 0.0
    x = segment_s / mtbf_s
    return mtbf_s if x > 700 else mtbf_s - segment_s / math.expm1(x)  # (e^700: overflow)
