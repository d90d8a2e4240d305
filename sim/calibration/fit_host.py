"""The host profile's costs fitted to the host's measurements
(:mod:`sim.calibration.measure_host`), and the profile they make.

Kernels: ``time = constant_s + bytes / rate_Bps`` (:func:`fit`), or with a cost per row
(:func:`fit_gather`), by least squares on relative errors. Ranks beyond the cores: the
eager limit from the ping-pong, the notice and rendezvous per rank beyond the cores
(:func:`fit_notice`), the waiting ranks' share of a core (:func:`fit_share`). Several
repeats are fitted as one, to each timed point's median (:func:`median_measurement`).
:func:`host_profile` turns a measurement into the
:class:`~sim.training.host_costs.HostProfile` that :func:`sim.calibration.profiles.write_host`
writes.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from typing import Any

import numpy as np

from sim.calibration.least_squares import on_relative_errors
from sim.calibration.message_reload_bench import fit_message_reload
from sim.calibration.reload_bench import fit_both
from sim.calibration.serve_bench import fit_serving
from sim.training.host_costs import HostProfile

SLICE_S = 3e-3  # not measured (see sim.training.host_costs's epyc-core preset)

def fit(nbytes: list[float], seconds: list[float]) -> dict[str, Any]:
    """``time = constant_s + bytes / rate_Bps`` by least squares on relative errors."""
    n, t = np.array(nbytes, float), np.array(seconds, float)
    constant, inverse = on_relative_errors([np.ones_like(n), n], t)
    if inverse <= 0:  # no growth with size: a rate through the largest point
        constant, inverse = 0.0, float(t[-1] / n[-1])
    if constant < 0:  # a rate through the origin, fitted on relative errors
        constant, inverse = 0.0, float(np.sum(n / t) / np.sum((n / t) ** 2))
    errors = (constant + n * inverse) / t - 1
    return {"constant_s": float(constant), "rate_Bps": 1.0 / float(inverse),
            "max_error": float(np.abs(errors).max()),
            "rms_error": float(np.sqrt(np.mean(errors ** 2))),
            "samples": [{"bytes": int(b), "seconds": float(s), "error": float(e)}
                        for b, s, e in zip(n, t, errors, strict=True)]}


def fit_gather(rows: list[float], nbytes: list[float],
               seconds: list[float]) -> dict[str, Any]:
    """``time = constant_s + rows x row_s + bytes / rate_Bps`` by least squares on relative
    errors; a term that comes out negative is dropped and the rest fitted again."""
    r, n, t = (np.array(x, float) for x in (rows, nbytes, seconds))
    columns = {"constant_s": np.ones_like(t), "row_s": r, "inverse": n}
    kept = list(columns)
    while True:
        values = dict(zip(kept, on_relative_errors([columns[k] for k in kept], t),
                          strict=True))
        negative = [k for k in kept if values[k] < 0]
        if not negative or len(kept) == 1:
            break
        kept.remove(min(negative, key=lambda k: values[k]))
    coef = {k: max(float(values.get(k, 0.0)), 0.0) for k in columns}
    predicted = coef["constant_s"] + r * coef["row_s"] + n * coef["inverse"]
    errors = predicted / t - 1
    return {"constant_s": coef["constant_s"], "row_s": coef["row_s"],
            "rate_Bps": 1.0 / coef["inverse"] if coef["inverse"] > 0 else float("inf"),
            "max_error": float(np.abs(errors).max()),
            "rms_error": float(np.sqrt(np.mean(errors ** 2))),
            "samples": [{"rows": int(k), "bytes": int(b), "seconds": float(s),
                         "error": float(e)} for k, b, s, e in zip(r, n, t, errors, strict=True)]}

ROW_FITS = ("copy", "table", "table_step")  # fitted with a cost per row

def beyond_wire_Bps(message_Bps: float, fabric_Bps: float) -> float:
    """The per-byte rate a message costs the CPU beyond the wire's ``fabric_Bps`` (a
    back-to-back stream of messages runs at ``message_Bps`` overall); inf when the wire
    explains it all."""
    extra = 1.0 / message_Bps - 1.0 / fabric_Bps
    return 1.0 / extra if extra > 0 else float("inf")


def eager_limit(sizes: list[int], half_rtt: list[float]) -> float:
    """The size after which the ping-pong steps up (the MPI library switching from eager to
    rendezvous): the largest rise from the two sizes up to it to the two after it (each
    side's worst, so one slow sample makes no step), if over 1 us and 3 times the median
    rise between neighbours; else inf."""
    t = np.asarray(half_rtt)
    rises = {k: t[k + 1:k + 3].min() - t[max(k - 1, 0):k + 1].max()
             for k in range(len(t) - 2)}
    k = max(rises, key=rises.get)
    if rises[k] > max(1e-6, 3 * float(np.median(np.diff(t)))):
        return float(sizes[k])
    return float("inf")


def per_excess_rank(excess: list[int], seconds: list[float]) -> dict[str, Any]:
    """Least squares of ``seconds = rate x excess`` (through 0: no delay when every rank has
    a core): the rate and each point's relative error."""
    e, t = np.asarray(excess, float), np.asarray(seconds, float)
    rate = max(float(e @ t / (e @ e)), 0.0)
    errors = [(rate * x / y - 1) if y > 0 else 0.0 for x, y in zip(e, t, strict=True)]
    return {"per_rank_s": rate, "errors": errors, "max_error": max(map(abs, errors))}


def linear_in_excess(excess: list[int], seconds: list[float]) -> dict[str, Any]:
    """Least squares of ``seconds = base + rate x excess`` (both >= 0): the nap itself,
    then the competition per rank beyond the cores; each point's relative error."""
    e, t = np.asarray(excess, float), np.asarray(seconds, float)
    rate, base = np.polyfit(e, t, 1)
    if base < 0:
        return {**per_excess_rank(excess, seconds), "base_s": 0.0}
    rate = max(float(rate), 0.0)
    base = float(t.mean() - rate * e.mean())
    errors = [((base + rate * x) / y - 1) if y > 0 else 0.0 for x, y in zip(e, t, strict=True)]
    return {"base_s": base, "per_rank_s": rate, "errors": errors,
            "max_error": max(map(abs, errors))}


def fit_notice(measured: dict[str, Any]) -> dict[str, Any]:
    """:func:`~sim.calibration.measure_host.measure_rendezvous`'s timings with their fits:
    the eager limit from the ping-pong; ``notice_base_s`` + ``notice_s`` per rank beyond the
    cores from the small message's delay less the ping-pong's; ``rendezvous_s`` per rank
    from what the large one adds beyond the ping-pong's growth."""
    pp, excess, noticed = (measured["pingpong_half_rtt_s"], measured["excess_ranks"],
                           measured["noticed_s"])
    limit = eager_limit(measured["pingpong_sizes"][:-1], pp[:-1])  # the sizes below the probe
    notices = [max(got[0] - pp[0], 0.0) for got in noticed]
    # what the large message adds beyond the wire's own growth
    handshakes = [max((got[1] - got[0]) - (pp[-1] - pp[0]), 0.0) for got in noticed]
    notice = linear_in_excess(excess, notices)
    handshake = per_excess_rank(excess, handshakes)
    return {"notice_s": notice["per_rank_s"], "notice_base_s": notice["base_s"],
            "rendezvous_bytes": limit,
            "rendezvous_s": (handshake["per_rank_s"]
                             if limit < measured["notice_sizes"][1] else 0.0),
            "notice_fit": notice, "rendezvous_fit": handshake, **measured}


def fit_share(waiters: list[int], slowdowns: list[float]) -> dict[str, Any]:
    """Least squares of ``slowdown = 1 + share x waiters`` (share >= 0): the share and
    each point's relative error."""
    k, f = np.asarray(waiters, float), np.asarray(slowdowns, float)
    share = max(float(k @ (f - 1) / (k @ k)), 0.0)
    errors = ((1 + share * k) / f - 1).tolist()
    return {"share": share, "slowdowns": f.tolist(), "errors": errors,
            "max_error": max(map(abs, errors))}


def numbers(profile: HostProfile) -> dict[str, float]:
    """The profile's measured numbers by field (its name, source and unset fields left
    out)."""
    return {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)
            if isinstance(getattr(profile, f.name), (int, float))}


def _median(values: Any) -> Any:
    """The element-wise median of equal-shaped lists (or numbers), as plain floats."""
    return np.median(np.asarray(values, float), axis=0).tolist()


def median_measurement(taken: list[dict[str, Any]]) -> dict[str, Any]:
    """One measurement of :func:`~sim.calibration.measure_host.measure_host`'s shape whose
    every timed point (a fit's sample, a ping-pong or notice delay, a slowdown, a reload's
    extra time, a server round) is the median of ``taken``'s, fitted again as each repeat
    was: a fit of medians, so that parameters fitted together (a line's constant and slope)
    stay a pair. A single measurement is returned as it is."""
    if len(taken) == 1:
        return taken[0]
    first = taken[0]
    fits = {name: _median_fit(name, [t["fits"][name] for t in taken]) for name in first["fits"]}
    step = {**first["step"], "step_s": _median([t["step"]["step_s"] for t in taken]),
            "iteration_s": _median([t["step"]["iteration_s"] for t in taken])}
    poll = {**first["poll"], **{k: _median([t["poll"][k] for t in taken])
                                for k in ("poll_s", "p10_s", "p90_s")}}
    rendezvous = fit_notice({**{k: first["rendezvous"][k] for k in (
        "pingpong_sizes", "cores", "excess_ranks", "notice_sizes", "work_s")},
        **{k: _median([t["rendezvous"][k] for t in taken])
           for k in ("pingpong_half_rtt_s", "noticed_s")}})
    share = {**first["share"], "unit_alone_s": _median([t["share"]["unit_alone_s"]
                                                         for t in taken])}
    for wait in ("spin", "sleep"):
        share[wait] = fit_share(first["share"]["waiters"],
                                _median([t["share"][wait]["slowdowns"] for t in taken]))
    reload = {**first["reload"], "warm_s": _median([t["reload"]["warm_s"] for t in taken]),
              **fit_both(first["reload"]["gaps_s"],
                         _median([t["reload"]["extra_s"] for t in taken]),
                         _median([t["reload"]["spin_extra_s"] for t in taken]))}
    message_reload = {**first["message_reload"], **fit_message_reload(
        first["message_reload"]["works_s"],
        _median([t["message_reload"]["extra_s"] for t in taken]))}
    points = [{**p, **{k: _median([t["serving"]["points"][i][k] for t in taken])
                       for k in ("round_s", "kernels_s")}}
              for i, p in enumerate(first["serving"]["points"])]
    serving = fit_serving(points, _median([t["serving"]["pulls_s"] for t in taken]))
    return {"fits": fits, "step": step, "poll": poll, "rendezvous": rendezvous,
            "share": share, "reload": reload, "message_reload": message_reload,
            "serving": serving,
            "cpu_s": sum(t["cpu_s"] for t in taken), "wall_s": sum(t["wall_s"] for t in taken)}


def _median_fit(name: str, fitted: list[dict[str, Any]]) -> dict[str, Any]:
    """The fit ``name`` (copy, update, ...) again on its samples' median seconds."""
    samples = fitted[0]["samples"]
    seconds = _median([[s["seconds"] for s in f["samples"]] for f in fitted])
    nbytes = [s["bytes"] for s in samples]
    if name in ROW_FITS:
        return fit_gather([s["rows"] for s in samples], nbytes, seconds)
    return fit(nbytes, seconds)


def host_profile(m: dict[str, Any], fabric_overhead_s: float,
                 fabric_Bps: float) -> HostProfile:
    """The profile of :func:`~sim.calibration.measure_host.measure_host`'s measurements,
    field by field; the message's constant and rate less the fabric's own (see
    :func:`sim.calibration.sequence.calibrate_host`)."""
    fits, poll, rendezvous, reload = m["fits"], m["poll"], m["rendezvous"], m["reload"]
    return HostProfile(
        name=f"calibrated-{platform.node()}",
        copy_Bps=fits["copy"]["rate_Bps"],
        update_Bps=fits["update"]["rate_Bps"],
        reduce_Bps=fits["reduce"]["rate_Bps"],
        message_s=max(fits["message"]["constant_s"] - fabric_overhead_s, 0.0),
        step_s=max(m["step"]["step_s"], 0.0),
        slice_s=SLICE_S,
        poll_spin_s=poll["poll_spin_s"],
        poll_s=poll["poll_s"],
        message_Bps=beyond_wire_Bps(fits["message"]["rate_Bps"], fabric_Bps),
        copy_call_s=fits["copy"]["constant_s"],
        copy_row_s=fits["copy"]["row_s"],
        update_call_s=fits["update"]["constant_s"],
        reduce_call_s=fits["reduce"]["constant_s"],
        source=f"sim calibrate: host costs through the real runner's code paths; "
               f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} CPUs",
        notice_s=rendezvous["notice_s"],
        rendezvous_bytes=rendezvous["rendezvous_bytes"],
        rendezvous_s=rendezvous["rendezvous_s"],
        spin_share=m["share"]["spin"]["share"],
        nap_share=m["share"]["sleep"]["share"],
        notice_base_s=rendezvous["notice_base_s"],
        reload_s=reload["reload_s"],
        reload_tau_s=reload["reload_tau_s"],
        reload_base_s=reload["reload_base_s"],
        reload_spin_base_s=reload["reload_spin_base_s"],
        message_reload_s=m["message_reload"]["message_reload_s"],
        message_reload_tau_s=m["message_reload"]["message_reload_tau_s"],
        table_call_s=fits["table"]["constant_s"],
        table_row_s=fits["table"]["row_s"],
        table_Bps=fits["table"]["rate_Bps"],
        table_step_call_s=fits["table_step"]["constant_s"],
        table_step_row_s=fits["table_step"]["row_s"],
        table_step_Bps=fits["table_step"]["rate_Bps"],
        unique_call_s=fits["unique"]["constant_s"],
        unique_id_s=1.0 / fits["unique"]["rate_Bps"],
        serve_apply_s=m["serving"]["serve_apply_s"],
        serve_push_s=m["serving"]["serve_push_s"],
        serve_step_s=m["serving"]["serve_step_s"],
        serve_pull_s=m["serving"]["serve_pull_s"])

