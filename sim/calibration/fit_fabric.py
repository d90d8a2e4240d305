"""The fabric profile's parameters fitted to the network's measurements
(:mod:`sim.calibration.measure_fabric`).

One (alpha, beta) is fitted to all of them, ping-pong as ``alpha + n beta`` and the
allreduce as the algorithm's closed form (the simulator's own), minimising squared log
ratios (a 2x error counts the same for small and large messages); with o measured, the
per-hop latency is ``(alpha - 2 o) / 2`` on the two hops of one switch. Allreduces on more
ranks than cores are measured and reported but left out of the fit: their time is CPU
scheduling (ranks waiting for a core), which no fabric parameter describes. The result is
written as a fabric profile by :func:`sim.calibration.profiles.write_fabric` for
``cluster.fabric = "calibrated:PATH"``, every raw sample and the fit errors kept in it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from sim.calibration.least_squares import least_squares
from sim.network.collectives import get_collective


def fit_log(A: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Non-negative (alpha, beta) minimising the squared log ratios of ``A @ x`` to ``t``.

    Log ratios weigh a 2x over- and under-estimate alike, so small messages (alpha) and
    large ones (beta) both count, whatever their absolute times.
    """
    start = least_squares(A / t[:, None], np.ones_like(t))
    floor = np.log([1e-12, 1e-16])  # x = exp(u) > 0: a step may not drive a term to 0
    u = np.maximum(np.log(np.maximum(start, [1e-9, 1e-13])), floor)
    damping = 1e-3

    def cost(u: np.ndarray) -> float:
        return float(np.sum(np.log(A @ np.exp(u) / t) ** 2))

    for _ in range(200):  # Levenberg-Marquardt on two parameters
        x = np.exp(u)
        predicted = A @ x
        r = np.log(predicted / t)
        J = A * x / predicted[:, None]
        step = np.maximum(u + np.linalg.solve(J.T @ J + damping * np.eye(2), -J.T @ r),
                          floor) - u
        if cost(u + step) < cost(u):
            u, damping = u + step, damping / 3
            if np.abs(step).max() < 1e-10:
                break
        else:
            damping *= 5
    x = np.exp(u)
    return float(x[0]), float(x[1])


def fit_network(measured: dict[str, Any]) -> dict[str, Any]:
    """alpha, beta, o and per-hop latency from the measurements, with each point's error."""
    algo = get_collective(measured["algorithm"])
    rows, times, labels = [], [], []
    pp = measured["pingpong"]
    for n, t in zip(pp["sizes"], pp["seconds"], strict=True):
        rows.append((1.0, float(n)))
        times.append(t)
        labels.append(f"pingpong {n} B")
    cores = os.cpu_count() or 1
    for ar in (ar for ar in measured["allreduce"] if ar["ranks"] > 1):  # one rank sends nothing
        p = ar["ranks"]
        a1, b1 = algo.closed_form_s(p, 0, 1.0, 0.0), algo.closed_form_s(p, 1.0, 0.0, 1.0)
        for n, t in zip(ar["sizes"], ar["seconds"], strict=True):
            rows.append((a1, b1 * n))
            times.append(t)
            labels.append(f"allreduce p={p} {n} B" + (" (not fitted)" if p > cores else ""))
    A, t = np.array(rows), np.array(times)
    fitted = np.array(["not fitted" not in label for label in labels])
    alpha, beta = fit_log(A[fitted], t[fitted])
    overhead = min(float(measured["stream"]["seconds"][0]), alpha / 2)
    errors = (A @ np.array([alpha, beta]) / t - 1).tolist()
    return {"alpha_s": float(alpha), "beta_s_per_byte": float(beta),
            "bandwidth_Bps": 1.0 / float(beta), "overhead_s": overhead,
            "latency_s": max(0.0, (float(alpha) - 2 * overhead) / 2),
            "points": [{"what": w, "measured_s": m, "error": e}
                       for w, m, e in zip(labels, times, errors, strict=True)]}

