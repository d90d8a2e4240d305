"""Simulated vs real: errors, curves and distributions from two result directories.

Works on result files only (``summary.json``, ``metrics.csv``). A real directory is one run
directory or, from ``sim real --repeat N``, a directory of them (``r0/``, ``r1/``, ...): the
report then also gives the real runs' own spread, and whether the simulated figure lies
inside it (or how far outside, relative to the real mean).

Figures compared (relative errors are (simulated - real mean) / real mean):

* mean iteration time (``sim_time_s / iterations``: per step for bsp, per update for asp);
* time to the target loss (``run.target_loss``), when the runs reached it;
* loss curves: mean absolute difference of held-out loss, over time on the common time span
  and over updates, both relative to the mean real loss there;
* staleness distributions (fraction of updates at each staleness), side by side;
* time by activity (:data:`sim.recorder.KINDS`: compute, data, update, overhead, wire, wait):
  per worker, side by side, and for each activity the mean seconds per worker over the run
  and per update, simulated and real, and the relative error, so the activity the model
  gets wrong stands out;
* with a split replica ([parallel]; either run has ``bubble_fraction``): the bubble, the
  stage messages' and tensor sums' seconds, each stage's compute seconds, simulated and real
  mean, with errors, and the planned peak memory of each.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.errors import UserError
from sim.faults.timeline import GAP_KINDS
from sim.recorder import KINDS
from sim.results import Run, load_repeats
from sim.training.parallel_plan import layout_words

if TYPE_CHECKING:
    from sim.config import Config


def relative_error(simulated: float | None, real: float | None) -> float | None:
    if simulated is None or real is None or not real:
        return None
    return (simulated - real) / real


def spread(values: list[float]) -> dict[str, float]:
    arr = np.array(values, dtype=float)
    return {"mean": float(arr.mean()), "min": float(arr.min()), "max": float(arr.max()),
            "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0, "n": len(arr)}


def outside_spread(simulated: float, s: dict[str, float]) -> float:
    """0 when inside [min, max] of the real runs, else the distance / real mean."""
    if s["min"] <= simulated <= s["max"]:
        return 0.0
    edge = s["min"] if simulated < s["min"] else s["max"]
    return abs(simulated - edge) / s["mean"]


def curve_distance(sim: np.ndarray, real: np.ndarray, column: int) -> float | None:
    """Mean |loss_sim - loss_real| on a common grid of ``column`` (0: time, 1: updates),
    relative to the mean real loss there; None if the curves share no span."""
    finite = [c[np.isfinite(c[:, 2])] for c in (sim, real)]
    if any(len(c) < 2 for c in finite):
        return None
    lo = max(c[0, column] for c in finite)
    hi = min(c[-1, column] for c in finite)
    if hi <= lo:
        return None
    grid = np.linspace(lo, hi, 200)
    a, b = (np.interp(grid, c[:, column], c[:, 2]) for c in finite)
    return float(np.mean(np.abs(a - b)) / np.mean(np.abs(b)))


def staleness_fractions(runs: list[Run]) -> dict[int, float]:
    values = np.concatenate([r.staleness for r in runs]) if runs else np.zeros(0, int)
    if not len(values):
        return {}
    counts = np.bincount(values)
    return {int(k): float(c / len(values)) for k, c in enumerate(counts) if c}


def compare(sim_dir: Path, real_dir: Path) -> dict[str, Any]:
    """The comparison report (JSON-ready)."""
    sims, reals = load_repeats(sim_dir), load_repeats(real_dir)
    if len(sims) != 1:
        raise UserError(f"{sim_dir}: expected one simulated run directory")
    sim = sims[0]
    if sim.summary.get("kind") == "real" or any(r.summary.get("kind") != "real" for r in reals):
        raise UserError(f"expected a simulated run then a real one: sim compare SIM_DIR "
                        f"REAL_DIR (got {sim_dir}, {real_dir})")
    empty = [r.path for r in [sim, *reals] if r.iteration_s is None]
    if empty:
        raise UserError(f"{empty[0]}: the run applied no updates; nothing to compare")
    iteration = spread([r.iteration_s for r in reals])
    config = _config(sim_dir)
    workers = sim.summary.get("workers_n")
    report: dict[str, Any] = {
        "sim_dir": str(sim_dir), "real_dir": str(real_dir), "repeats": len(reals),
        "strategy": sim.summary.get("strategy"), "workers": workers,
        "layout": f"{workers} worker{'' if workers == 1 else 's'}" if config is None
        else layout_words(config),
        "net": reals[0].summary.get("net"), "fabric": sim.summary.get("fabric"),
        "iteration_s": {"sim": sim.iteration_s, "real": iteration,
                        "error": relative_error(sim.iteration_s, iteration["mean"]),
                        "outside_spread": outside_spread(sim.iteration_s, iteration)},
    }
    target = sim.summary.get("time_to_target_s")
    real_targets = [r.summary.get("time_to_target_s") for r in reals]
    reached = [t for t in real_targets if t is not None]
    report["time_to_target_s"] = {
        "sim": target, "real": spread(reached) if reached else None,
        "real_reached": f"{len(reached)}/{len(reals)}",
        "error": relative_error(target, spread(reached)["mean"]) if reached else None,
        "outside_spread": (outside_spread(target, spread(reached))
                           if reached and target is not None else None)}
    report["loss_distance"] = {
        "over_time": _mean([curve_distance(sim.evals, r.evals, 0) for r in reals]),
        "over_updates": _mean([curve_distance(sim.evals, r.evals, 1) for r in reals]),
        "final_loss": {"sim": sim.summary.get("final_loss"),
                       "real": [r.summary.get("final_loss") for r in reals]}}
    report["staleness"] = {"sim": staleness_fractions([sim]),
                           "real": staleness_fractions(reals),
                           "mean": {"sim": sim.summary.get("staleness_mean"),
                                    "real": _mean([r.summary.get("staleness_mean")
                                                   for r in reals])}}
    report["breakdown"] = _breakdown(sim, reals)
    report["faults"] = _faults(sim, reals)
    report["model_parallel"] = _model_parallel(sim, reals)
    report["placement"] = None if config is None else placement_note(
        config, len(sim.summary.get("workers", [])), reals[0].summary)
    report["incomplete"] = [str(r.path) for r in [sim, *reals]
                            if r.summary.get("complete") is False]
    return report


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def _breakdown(sim: Run, reals: list[Run]) -> dict[str, Any]:
    # the fault activities only where a run spent time on them
    kinds = [k for k in KINDS if k not in GAP_KINDS or any(
        (run.summary.get(f"{k}_s") or 0) > 0 for run in (sim, *reals))]
    real_workers = [[[w.get(k, 0.0) for k in kinds] for w in r.summary.get("workers", [])]
                    for r in reals]
    real_mean = (np.mean(np.array(real_workers), axis=0) if real_workers[0]
                 else np.zeros((0, len(kinds))))
    sim_workers = [[w.get(k, 0.0) for k in kinds] for w in sim.summary.get("workers", [])]
    out = {"kinds": list(kinds), "sim": sim_workers, "real": real_mean.tolist()}
    for k in kinds:
        s, r = sim.summary.get(f"{k}_s"), _mean([x.summary.get(f"{k}_s") for x in reals])
        real_per_update = _mean([_per_update(x, k) for x in reals])
        out[f"{k}_s"] = {"sim": s, "real": r, "error": relative_error(s, r),
                         "per_update": {"sim": _per_update(sim, k), "real": real_per_update}}
    return out


FAULT_FIGURES = ("sim_time_s", "restart_time_s", "checkpoint_time_s", "lost_work_s")


def _faults(sim: Run, reals: list[Run]) -> dict[str, Any] | None:
    """Under failures or checkpoints (either side's summary has ``recovery``): the time to
    finish and the fault figures (s), simulated and real mean, with errors; the counts."""
    if not any(run.summary.get("recovery") for run in (sim, *reals)):
        return None
    out: dict[str, Any] = {key: {"sim": sim.summary.get(key),
                                 "real": [r.summary.get(key) for r in reals]}
                           for key in ("failures", "checkpoints")}
    for key in FAULT_FIGURES:
        values = [r.summary.get(key) for r in reals]
        real = spread(values) if all(v is not None for v in values) else None
        out[key] = {"sim": sim.summary.get(key), "real": real,
                    "error": relative_error(sim.summary.get(key), real and real["mean"])}
    return out


MODEL_PARALLEL_FIGURES = ("bubble_fraction", "pipeline_p2p_s", "tensor_allreduce_s")


def _model_parallel(sim: Run, reals: list[Run]) -> dict[str, Any] | None:
    """With a split replica (either side's summary has ``bubble_fraction``): its figures,
    simulated and real mean, with errors; each stage's compute seconds; planned memory."""
    if not any("bubble_fraction" in run.summary for run in (sim, *reals)):
        return None
    out: dict[str, Any] = {}
    for key in MODEL_PARALLEL_FIGURES:
        s, r = sim.summary.get(key), _mean([x.summary.get(key) for x in reals])
        out[key] = {"sim": s, "real": r, "error": relative_error(s, r)}
    stages = [x.summary.get("stage_compute_s") or [] for x in reals]
    real_stages = np.mean(np.array(stages), axis=0).tolist() if all(
        len(x) == len(stages[0]) for x in stages) and stages[0] else None
    sim_stages = sim.summary.get("stage_compute_s")
    out["stage_compute_s"] = {
        "sim": sim_stages, "real": real_stages,
        "error": [relative_error(s, r) for s, r in zip(sim_stages, real_stages, strict=True)]
        if sim_stages and real_stages and len(sim_stages) == len(real_stages) else None}
    out["peak_memory_bytes"] = {"sim": sim.summary.get("peak_memory_bytes"),
                                "real": reals[0].summary.get("peak_memory_bytes")}
    return out


def _per_update(run: Run, kind: str) -> float | None:
    """Seconds of ``kind`` per update (a worker's mean over the run / updates applied)."""
    value, updates = run.summary.get(f"{kind}_s"), run.summary.get("iterations")
    return value / updates if value is not None and updates else None


def _activity_line(kind: str, row: dict[str, Any]) -> str:
    s, r, e = row["sim"], row["real"], row["error"]
    if s is None or r is None:
        return f"  {kind:<9} sim {s}   real {r}"
    each = row.get("per_update") or {}
    per = (f"   per update sim {each['sim'] * 1e6:9.2f} us real {each['real'] * 1e6:9.2f} us"
           if each.get("sim") is not None and each.get("real") is not None else "")
    error = f"{e:+8.1%}" if e is not None else ("   exact" if s == r else "  (real 0)")
    return f"  {kind:<9} sim {s:9.4g} s  real {r:9.4g} s  error {error}{per}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _config(sim_dir: Path) -> Any:
    """The simulated run's resolved config (:class:`sim.config.Config`), None if its
    config.toml is missing or no longer valid."""
    from sim.training.validator import validate

    try:
        return validate(tomllib.loads((sim_dir / "config.toml").read_text()), str(sim_dir))
    except (OSError, tomllib.TOMLDecodeError, UserError):
        return None


def placement_note(config: Config, workers: int, real: dict[str, Any]) -> str | None:
    """A warning when the simulation (its resolved ``config``, ``workers`` worker ranks) did
    not put the ranks where the real run had them (all on this machine's cores, with its
    host costs); None when it did."""
    from sim.simulated.engine import rank_hosts
    from sim.training.strategies import row_of

    cluster, cores = config.cluster, os.cpu_count() or 1
    ranks = workers + row_of(config).server_ranks(config)
    placed = rank_hosts(cluster, ranks)
    if cluster.host != "ideal" and cluster.cores == cores and len(set(placed)) == 1:
        return None
    return (f"note: the real run had its {ranks} ranks on this machine's {cores} cores "
            f"(waiting by {real.get('wait_mode', 'spin')}); the simulation used host "
            f"{cluster.host!r} with {cluster.cores} core(s) per host and "
            f"{len(set(placed))} host(s). To model the real run, let `sim real CONFIG "
            f"--twin` simulate it on this machine's calibrated device, fabric and host, or "
            f'set all of them: compute.device and cluster.fabric = "calibrated:..." and '
            f'cluster.host = "calibrated:DIR/host.json" (sim calibrate), cluster.cores = '
            f"{cores} and cluster.ranks_per_host = {ranks}.")


def _model_parallel_lines(figures: dict[str, Any] | None) -> list[str]:
    """The split replica's figures as text (none without a split)."""
    if not figures:
        return []
    lines = ["  split replica (sim vs real mean):"]
    for key in MODEL_PARALLEL_FIGURES:
        f = figures[key]
        if f["sim"] is not None and f["real"] is not None:
            lines.append(f"  {key:<19} sim {f['sim']:9.4g}   real {f['real']:9.4g}   error "
                         f"{_pct(f['error'])}")
    stages = figures["stage_compute_s"]
    if stages["sim"] and stages["real"]:
        lines.append("  stage_compute_s     sim " + " ".join(f"{x:.4g}" for x in stages["sim"])
                     + "   real " + " ".join(f"{x:.4g}" for x in stages["real"]))
    return lines


def format_report(report: dict[str, Any]) -> str:
    """The headline figures as text."""
    it = report["iteration_s"]
    layout = report.get("layout") or f"{report['workers']} workers"  # older reports lack it
    lines = [f"{report['strategy']}, {layout}, real {report['net']} "
             f"({report['repeats']} repeats) vs simulated {report['fabric']}:",
             f"  iteration time   sim {it['sim'] * 1e3:9.3f} ms   real "
             f"{it['real']['mean'] * 1e3:9.3f} ms [{it['real']['min'] * 1e3:.3f} .. "
             f"{it['real']['max'] * 1e3:.3f}]   error {it['error']:+.1%}"]
    lines += _replay_lines(report.get("replay"))
    tt = report["time_to_target_s"]
    if tt["error"] is not None:
        lines.append(f"  time to target   sim {tt['sim']:9.4f} s    real {tt['real']['mean']:9.4f}"
                     f" s  ({tt['real_reached']} reached)   error {tt['error']:+.1%}")
    else:
        lines.append(f"  time to target   sim {tt['sim']}   real reached {tt['real_reached']}")
    ld = report["loss_distance"]
    for key in ("over_time", "over_updates"):
        if ld[key] is not None:
            lines.append(f"  loss distance {key.replace('_', ' '):<13} {ld[key]:.1%} of the loss")
    b = report["breakdown"]
    lines.append("  time by activity (mean per worker; error = (sim - real) / real):")
    lines += [_activity_line(k, b[f"{k}_s"]) for k in b["kinds"]]
    faults = report.get("faults")
    if faults:
        lines.append(f"  failures         sim {faults['failures']['sim']}   real "
                     f"{faults['failures']['real']}; checkpoints sim "
                     f"{faults['checkpoints']['sim']}   real {faults['checkpoints']['real']}")
        for key in FAULT_FIGURES:
            f = faults[key]
            if f["sim"] is not None and f["real"] is not None:
                lines.append(f"  {key:<17} sim {f['sim']:9.4f} s  real {f['real']['mean']:9.4f}"
                             f" s  error {_pct(f['error'])}")
    lines += _model_parallel_lines(report.get("model_parallel"))
    st = report["staleness"]["mean"]
    lines.append(f"  staleness mean   sim {st['sim']:.3g}   real {st['real']:.3g}")
    if report.get("placement"):
        lines.append("  " + report["placement"])
    for path in report.get("incomplete", []):
        lines.append(f"  note: {path} is incomplete (stopped early); its figures cover the "
                     "updates it reached")
    return "\n".join(lines)


def _replay_lines(replay: dict[str, Any] | None) -> list[str]:
    """``--replay``'s headline: the coordination's error, compute replayed."""
    if not replay:
        return []
    it = replay["iteration_s"]
    each = ", ".join(f"{r['error']:+.1%}" for r in replay["repeats"])
    worst = sorted(replay["activities"].items(), key=lambda kv: -abs(kv[1]))[:3]
    return [f"  compute replayed sim {it['sim'] * 1e3:9.3f} ms   real {it['real'] * 1e3:9.3f} ms"
            f"   error {it['error']:+.1%} (coordination only; repeats {each})",
            "                   sim - real per update: " + ", ".join(
                f"{kind} {diff * 1e6:+.0f} us" for kind, diff in worst)]
