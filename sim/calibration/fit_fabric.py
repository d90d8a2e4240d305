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

An emulated network's links are token buckets (``tc tbf``, :mod:`sim.real.launch.emulate`),
whose depth the measurements carry (``shaper``: the lab's own setting, not fitted). There
one rate fits nothing: a ping-pong repeated back to back drains the bucket, so 32 KB
messages move at the bucket's refill rate and 4 KB ones at the veth's. Its fit,
:func:`fit_shaped`, follows the buckets through the benchmark's repetitions
(:func:`pingpong_on_buckets_s`) for alpha and the sustained rate, with the peak measured
apart, by ping-pongs after a pause that fills the buckets (:func:`peak_after_pause`); the
allreduces are then simulated, repeated as the benchmark repeats them, on the fitted links
and reported, not fitted.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.calibration.least_squares import least_squares, on_log_ratios
from sim.calibration.netbench import REPS, WARMUP, repetitions
from sim.network.collectives import Collective, get_collective
from sim.network.fabrics import Fabric
from sim.network.network_builder import build_network


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
    """alpha, beta, o and per-hop latency from the measurements, with each point's error
    (on token-bucket links, :func:`fit_shaped`'s)."""
    if measured.get("shaper"):
        return fit_shaped(measured)
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


def pingpong_on_buckets_s(sizes: Any, reps: int, alpha_s: float, peak_Bps: float,
                          rate_Bps: float, depth_bytes: float, gap_s: float) -> np.ndarray:
    """The median half round trip (s) of each size's ping-pongs as
    :func:`sim.calibration.netbench.pingpong` runs them (sizes in order, ``WARMUP`` + its
    repetitions each, ``gap_s`` between round trips: the barrier) over token-bucket links
    (:mod:`sim.network.token_bucket`) that start full.

    Each direction's bucket has the same history. A message leaves a bucket holding tau
    tokens at the peak P for up to k tau bytes (k = P / (P - r): it drains at P - r while
    refilling) and the rest at the rate r, so it takes n / P or (n - tau) / r, and
    T = alpha + that. By the next message the bucket has lost n and refilled r over the
    cycle, gap + 2 T, up to its depth D. Iterated rep by rep: back to back, a small message
    drains the bucket slowly (4 KB messages may never dry it within a size's repetitions),
    and one of 32 KB settles where the cycle is n / r.
    """
    k = peak_Bps / (peak_Bps - rate_Bps)
    tokens, medians = depth_bytes, []
    for n in np.asarray(sizes, np.float64):
        halves = []
        for i in range(WARMUP + repetitions(int(n), reps)):
            half = alpha_s + (n / peak_Bps if n <= k * tokens else (n - tokens) / rate_Bps)
            tokens = min(depth_bytes, max(0.0, tokens - n + rate_Bps * (gap_s + 2 * half)))
            if i >= WARMUP:
                halves.append(half)
        medians.append(float(np.median(halves)))
    return np.array(medians)


#: Ping-pongs up to this size are reported but not fitted on an emulated network: MPICH
#: (5.0.2, ch4 over TCP) sends them inline, 6.8 us a message quicker than one of 192 B, and
#: flat on either side of that step (measured here, 2026-11-29, emulate:1gbit: 7.0 us from
#: 8 to 128 B, 13.8 us at 192 B, 13.1 at 256 B); a rank's gradients and tables are larger.
INLINE_BYTES = 128


def peak_after_pause(paused: dict[str, Any]) -> tuple[float, float]:
    """The links' peak (bytes/s) and the intercept (s) of ping-pongs after a pause that fills
    the buckets (``measured["pingpong_paused"]``, every size within a bucket): each message
    then leaves at the peak, so its half round trip is a + n / P, a straight line. The
    intercept is reported, not used: it is several us above the back-to-back alpha here,
    also with both ranks spinning, the cost of a message after idle time that runs charge
    as the host's message reload (:mod:`sim.calibration.reload_bench`). Raises
    ValueError unless the line rises with n."""
    n = np.asarray(paused["sizes"], np.float64)
    t = np.asarray(paused["seconds"], np.float64)
    slope, intercept = np.polyfit(n, t, 1) if len(n) >= 2 else (0.0, 0.0)
    if not slope > 0:
        raise ValueError(f"ping-pongs after a pause do not rise with size (sizes {n.tolist()},"
                         f" seconds {t.tolist()}): no peak can be fitted; rerun the network "
                         "calibration on a quiet machine")
    return float(1.0 / slope), float(intercept)


def _shaped_links(x: np.ndarray, peak: float | None,
                  ceiling: float) -> tuple[float, float, float, float]:
    """(alpha, peak, rate, gap) from :func:`fit_shaped`'s positive parameters: with the peak
    measured, (alpha, c / rate - 1, gap), c the lower of the peak and the shaper's rate
    ``ceiling`` (bytes/s: the bucket's rate counts whole frames, so no payload passes it);
    without, (alpha, peak - rate, rate, gap)."""
    if peak is None:
        alpha, excess, rate, gap = x
        return alpha, rate + excess, rate, gap
    alpha, ratio, gap = x
    return alpha, peak, min(peak, ceiling) / (1 + ratio), gap


def fit_shaped(measured: dict[str, Any]) -> dict[str, Any]:
    """:func:`fit_network`'s result on token-bucket links of ``measured["shaper"]["burst_s"]``:
    the peak from the ping-pongs after a pause (:func:`peak_after_pause`), then alpha and the
    sustained rate (``bandwidth_Bps``) fitted to the back-to-back ping-pongs by
    :func:`pingpong_on_buckets_s` (with the gap between repetitions, the barrier), the
    allreduces simulated on the fitted fabric and reported beside them. Measurements without
    paused ping-pongs (before 2026-11-29) fit the peak to the back-to-back ones too, which
    barely see it. Sizes up to ``INLINE_BYTES`` are reported, not fitted. Raises ValueError
    for fewer than 4 ping-pong sizes above it."""
    burst_s = float(measured["shaper"]["burst_s"])
    pp = measured["pingpong"]
    n, t = np.asarray(pp["sizes"], np.float64), np.asarray(pp["seconds"], np.float64)
    fitted_sizes = n > INLINE_BYTES  # the recurrence still runs through every size
    if fitted_sizes.sum() < 4:
        raise ValueError(f"a shaped fabric's fit needs ping-pongs of at least 4 sizes above "
                         f"{INLINE_BYTES} B, got {int(fitted_sizes.sum())}")
    big = np.argsort(n)[-2:]  # the two largest: far beyond the bucket, at the rate
    rate0 = float(np.diff(n[big])[0] / max(np.diff(t[big])[0], 1e-12))
    paused = measured.get("pingpong_paused")
    measured_peak, woken = peak_after_pause(paused) if paused else (None, None)
    ceiling = float(measured["shaper"].get("rate_bps", np.inf)) / 8
    t0 = float(t[fitted_sizes].min())
    x0 = (np.array([t0, 8 * rate0, rate0, t0]) if measured_peak is None
          else np.array([t0, max(min(measured_peak, ceiling) / rate0 - 1, 0.1), t0]))
    reps = int(measured.get("reps", REPS))

    def model(x: np.ndarray) -> np.ndarray:
        alpha, peak_Bps, rate, gap = _shaped_links(x, measured_peak, ceiling)
        return pingpong_on_buckets_s(n, reps, alpha, peak_Bps, rate, rate * burst_s, gap)

    fitted = on_log_ratios(lambda x: model(x)[fitted_sizes], x0, t[fitted_sizes])
    alpha, peak, rate, gap = (float(v) for v in _shaped_links(fitted, measured_peak, ceiling))
    overhead = min(float(measured["stream"]["seconds"][0]), alpha / 2)
    latency = max(0.0, (alpha - 2 * overhead) / 2)
    points = [{"what": f"pingpong {int(size)} B" + ("" if fit else " (inline: not fitted)"),
               "measured_s": float(m), "error": float(e)}
              for size, m, e, fit in zip(n, t, model(fitted) / t - 1, fitted_sizes,
                                         strict=True)]
    if paused:
        points += [{"what": f"pingpong {int(size)} B after {paused['pause_s'] * 1e3:g} ms idle "
                            "(the peak's line)", "measured_s": float(m),
                    "error": float((woken + size / peak) / m - 1)}
                   for size, m in zip(paused["sizes"], paused["seconds"], strict=True)]
    fabric = Fabric("fit", 8 * rate, latency, overhead, burst_s=burst_s, peak_Bps=peak)
    algorithm = get_collective(measured["algorithm"])
    for ar in (ar for ar in measured["allreduce"] if ar["ranks"] > 1):
        for size, m in zip(ar["sizes"], ar["seconds"], strict=True):
            simulated = repeated_allreduce_s(algorithm, fabric, ar["ranks"], int(size), gap,
                                             reps)
            points.append({"what": f"allreduce p={ar['ranks']} {size} B (simulated, not "
                                   "fitted)", "measured_s": m, "error": float(simulated / m - 1)})
    return {"alpha_s": alpha, "beta_s_per_byte": 1.0 / rate, "bandwidth_Bps": rate,
            "overhead_s": overhead, "latency_s": latency, "burst_s": burst_s,
            "peak_Bps": peak, "gap_s": gap, "points": points,
            **({"alpha_after_idle_s": woken} if paused else {})}


def repeated_allreduce_s(algorithm: Collective, fabric: Fabric, p: int, nbytes: int,
                         gap_s: float, reps: int) -> float:
    """The median time (s) of an allreduce of ``nbytes`` on ``p`` ranks repeated as
    :mod:`sim.calibration.netbench` repeats it (``gap_s`` between repetitions, warm-up
    left out), simulated in one run on ``fabric``: on token-bucket links a repetition finds
    the buckets the last ones left."""
    env = simpy.Environment()
    network = build_network(env, fabric, p)
    hosts = np.arange(p)
    times: list[float] = []

    def repeat() -> Generator[simpy.Event, Any, None]:
        for i in range(WARMUP + repetitions(nbytes, reps)):
            yield env.timeout(gap_s)
            started = env.now
            yield env.process(algorithm.run(network, None, p=p, nbytes=nbytes, hosts=hosts))
            if i >= WARMUP:
                times.append(env.now - started)

    env.run(env.process(repeat()))
    return float(np.median(times))
