"""The validation README: the machine, the targets, every case and its error, and for each
miss the effect the model lacks (read off where the real time went that the model did not).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from sim.machine import cpu_model, meminfo_bytes
from sim.rundir import write_atomic
from sim.training.compute_model import describe_rates
from sim.validation import bias, drift, placement, ratios, reproducibility

ITERATION_TARGET, ITERATION_WORST, TTT_TARGET = 0.05, 0.15, 0.10


def _machine() -> str:
    return (f"{platform.node()}: {os.cpu_count()} x {cpu_model()}, "
            f"{meminfo_bytes('MemTotal') / 2**30:.0f} GiB, "
            f"Linux {platform.release()}, Python {platform.python_version()}")


def _mpi() -> str:
    try:
        from importlib.metadata import version

        return f"MPICH {version('mpich')} (PyPI wheel), mpi4py {version('mpi4py')}"
    except Exception:  # noqa: BLE001 - informational only
        return "MPICH (version unknown)"


def _profile_lines(profiles: dict[str, Path]) -> list[str]:
    lines = _recovery_profile_lines(profiles.get("recovery"))
    for net, place in profiles.items():
        path = place / ("device.json" if net == "device" else "fabric.json")
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if net == "device":
            rates = describe_rates(data["flops_per_s"], data["overhead_s"],
                                   data.get("memory_Bps"), data.get("lookup_s"),
                                   data.get("activation_Bps"))
            lines.append(f"- compute: {rates} (`{path}`; {data.get('source', '')})")
        else:
            fit = data.get("measurements", {}).get("fit", {})
            buckets = (f" (token buckets of {data['burst_s'] * 1e3:.3g} ms, peak "
                       f"{data['peak_Bps'] / 1e9:.3f} GB/s)" if data.get("burst_s") else "")
            lines.append(f"- {net}: alpha {fit.get('alpha_s', 0) * 1e6:.1f} us, "
                         f"{data['bandwidth_Bps'] / 1e9:.3f} GB/s{buckets}, o "
                         f"{data['overhead_s'] * 1e6:.1f} us (`{path}`)")
    return lines


def _recovery_profile_lines(place: Path | None) -> list[str]:
    try:
        storage = json.loads((place / "storage.json").read_text())
        restart = json.loads((place / "recovery.json").read_text())
    except (OSError, TypeError, json.JSONDecodeError):
        return []
    each = ", ".join(f"{p.get('workload', '?')} {p['restart_s']:.3f} s" for p in restart["points"])
    return [f"- checkpoint files: write {storage['write_latency_s'] * 1e3:.2f} ms + bytes / "
            f"{storage['write_Bps'] / 1e6:.0f} MB/s, read {storage['read_latency_s'] * 1e3:.2f} "
            f"ms + bytes / {storage['read_Bps'] / 1e6:.0f} MB/s (`{place / 'storage.json'}`); "
            f"restart delay {each} (`{place / 'recovery.json'}`)"]


def _fault_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The section on the cases with failures: time to finish and each fault figure."""
    faulty = [r for r in rows if "error" not in r and r["report"].get("faults")]
    if not faulty:
        return []
    lines = ["## Failures and restarts", "",
             "The cases whose runs lose a rank: the time to finish (the run's wall time, "
             "restart included) and what the failure and the checkpoints cost, simulated "
             "vs real (mean of the repeats [min..max]), s. restart: from the kill to the "
             "resumed job's start (the simulation: the calibrated restart delay plus the "
             "checkpoint's read); lost work: the work since the checkpoint, done again.", "",
             "| case | time to finish | restart | checkpoints (time) | lost work |",
             "|---|---|---|---|---|"]
    for row in faulty:
        f = row["report"]["faults"]
        cells = []
        for key in ("sim_time_s", "restart_time_s", "checkpoint_time_s", "lost_work_s"):
            real = f[key]["real"]
            cells.append("-" if f[key]["sim"] is None or real is None else
                         f"{f[key]['sim']:.3f} vs {real['mean']:.3f} [{real['min']:.3f}.."
                         f"{real['max']:.3f}] ({_pct(f[key]['error'])})")
        cells[2] = f"{f['checkpoints']['sim']} vs {f['checkpoints']['real'][0]}: {cells[2]}"
        lines.append(f"| {row['case']} | " + " | ".join(cells) + " |")
    return lines + [""]


def activities(row: dict[str, Any]) -> str:
    """Each activity's simulated - real time per update (us; the mean worker), largest
    first: where the model's time went wrong."""
    b = row["report"]["breakdown"]
    gaps = []
    for kind in b["kinds"]:
        each = b[f"{kind}_s"].get("per_update") or {}
        if each.get("sim") is not None and each.get("real") is not None:
            gaps.append((each["sim"] - each["real"], kind))
    gaps.sort(key=lambda g: -abs(g[0]))
    return ", ".join(f"{kind} {gap * 1e6:+.0f}" for gap, kind in gaps if abs(gap) >= 0.5e-6)


def pipelining_speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every case with ``strategy.pipelining`` set, its speedup over the same case with
    ``none``, simulated and real, and the error of the simulated one."""
    done = {r["case"]: r for r in rows if "error" not in r}
    out = []
    for name, row in done.items():
        level = row["levels"].get("pipelining")
        if level in (None, "none"):
            continue
        base = done.get(name.replace(f"-{level}", "-none"))
        if base is None:
            continue
        it, it0 = row["report"]["iteration_s"], base["report"]["iteration_s"]
        sim, real = it0["sim"] / it["sim"], it0["real"]["mean"] / it["real"]["mean"]
        out.append({"case": name, "sim": sim, "real": real, "error": sim / real - 1})
    return out


def _speedup_lines(rows: list[dict[str, Any]]) -> list[str]:
    speedups = pipelining_speedups(rows)
    if not speedups:
        return []
    worst = max(abs(s["error"]) for s in speedups)
    lines = ["## Pipelining speedups", "",
             f"Speedup of each pipelined case over the same case without pipelining (time per "
             f"update, none / pipelined); worst |error| **{worst:.1%}** (target <= 10%: "
             f"{'met' if worst <= 0.10 else 'missed'}).", "",
             "| case | sim speedup | real speedup | error |", "|---|---|---|---|"]
    lines += [f"| {s['case']} | {s['sim']:.3f} | {s['real']:.3f} | {s['error']:+.1%} |"
              for s in speedups]
    return lines + [""]


def _load(row: dict[str, Any]) -> str:
    text = f"{max(row['other_load']):.0%}"
    return text + (f" ({len(row['discarded'])} retaken)" if row["discarded"] else "")


def quiet_rows(rows: list[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    return [r for r in rows if "error" not in r and max(r["other_load"]) <= threshold]


def _drift_lines(drift: list[dict[str, Any]]) -> list[str]:
    if not drift:
        return []
    return ["- the same kernels timed again after the last case (the machine's speed drifts): "
            + "; ".join(f"{d['workload']}: {d['start_s'] * 1e6:.0f} -> {d['end_s'] * 1e6:.0f} "
                        f"us ({d['change']:+.0%})" for d in drift)]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _replayed(row: dict[str, Any]) -> str:
    """The case's error with its compute replayed, or why there is none."""
    replay = row.get("replay")
    if isinstance(replay, dict):
        return f"{replay['iteration_s']['error']:+.1%}"
    return "-" if replay is None else f"- ({replay})"


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| case | ranks | sim ms/update | real ms/update (mean [min..max]) | error | "
             "error, compute replayed | in spread | TTT sim s | TTT real s | TTT error | "
             "loss dist. | other load | sim - real per activity, us/update |",
             "|" + "---|" * 13]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['case']} | {row.get('ranks', '-')} | FAILED: "
                         f"{row['error']} |" + " |" * 10)
            continue
        rep = row["report"]
        it, tt = rep["iteration_s"], rep["time_to_target_s"]
        real = it["real"]
        inside = "yes" if it["outside_spread"] == 0 else f"no ({it['outside_spread']:.0%} out)"
        ttt_real = f"{tt['real']['mean']:.3f} ({tt['real_reached']})" if tt["real"] else \
            f"- ({tt['real_reached']})"
        ttt_sim = "-" if tt["sim"] is None else f"{tt['sim']:.3f}"
        dist = rep["loss_distance"]["over_time"]
        lines.append(
            f"| {row['case']} | {row['ranks']} | {it['sim'] * 1e3:.3f} | "
            f"{real['mean'] * 1e3:.3f} [{real['min'] * 1e3:.3f}..{real['max'] * 1e3:.3f}] | "
            f"{it['error']:+.1%} | {_replayed(row)} | {inside} | {ttt_sim} | {ttt_real} | "
            f"{_pct(tt['error'])} | "
            f"{'-' if dist is None else f'{dist:.1%}'} | {_load(row)} | "
            f"{activities(row)} |")
    return lines


def summary_lines(rows: list[dict[str, Any]], label: str = "") -> list[str]:
    done = [r for r in rows if "error" not in r]
    if not done:
        return ["No case completed."]
    errors = [abs(r["report"]["iteration_s"]["error"]) for r in done]
    ttt = [abs(r["report"]["time_to_target_s"]["error"]) for r in done
           if r["report"]["time_to_target_s"]["error"] is not None]
    inside = sum(r["report"]["iteration_s"]["outside_spread"] == 0 for r in done)
    near = sum(r["report"]["iteration_s"]["outside_spread"] <= 0.05 for r in done)
    med, worst = statistics.median(errors), max(errors)
    lines = [f"- iteration time{label}: median |error| **{med:.1%}** (target <= 5%: "
             f"{'met' if med <= ITERATION_TARGET else 'missed'}), worst **{worst:.1%}** "
             f"(target <= 15%: {'met' if worst <= ITERATION_WORST else 'missed'}); "
             f"{sum(e <= ITERATION_TARGET for e in errors)}/{len(errors)} cases within 5%, "
             f"{sum(e <= ITERATION_WORST for e in errors)}/{len(errors)} within 15%"]
    if ttt:
        lines.append(f"- time to target loss: median |error| **{statistics.median(ttt):.1%}**, "
                     f"worst {max(ttt):.1%}; {sum(e <= TTT_TARGET for e in ttt)}/{len(ttt)} "
                     "cases within 10% (target <= 10%)")
    lines.append(f"- simulated iteration time inside the real runs' [min, max]: {inside}/"
                 f"{len(done)} cases; within 5% of it: {near}/{len(done)}")
    if len(done) < len(rows):
        lines.append(f"- {len(rows) - len(done)} case(s) failed (see the table)")
    return lines


def _group_lines(rows: list[dict[str, Any]], quiet: float) -> list[str]:
    """Each placement group's iteration-time, time-to-target and spread figures."""
    out = []
    for key, label in (("core", " (a core per rank)"), ("oversubscribed", " (oversubscribed)")):
        some = placement.groups(rows)[key]
        if some:
            out += [f"### All figures{label}", "", *summary_lines(some, label),
                    f"- repeat spread (max - min over the mean of a case's real repeats): "
                    f"median **{placement.repeat_spread(some):.1%}**", ""]
    calm = quiet_rows(rows, quiet)
    if 0 < len(calm) < len(rows):
        out += [f"Only the cases whose kept repeats all saw other load <= {quiet:.0%} "
                f"({len(calm)} of {len(rows)}; both placements):", "",
                *summary_lines(calm, " (quiet cases)"), ""]
    return out


def write_readme(path: Path, rows: list[dict[str, Any]], skipped: list[str],
                 meta: dict[str, Any]) -> None:
    matrix = meta["matrix"]
    axes = ", ".join(f"{a} {{{', '.join(map(str, v))}}}" for a, v in matrix.axes.items())
    command = "python -m sim " + " ".join(["validate", *sys.argv[2:]]) \
        if sys.argv[1:2] == ["validate"] else "python -m sim validate"
    text = [
        "# Validation: simulated vs real runs",
        "",
        "Written by `python -m sim validate` (do not edit by hand; rerun it). Every case of "
        f"`{matrix.path.name}` ({axes}) is simulated once on the profiles calibrated at the "
        f"start of the run and run for real {meta['repeat']} times on MPI ranks of this "
        "machine; the error is (simulated - real mean) / real mean.",
        "",
        f"- date: {dt.datetime.now().isoformat(timespec='minutes')}",
        f"- machine: {_machine()}",
        f"- MPI: {_mpi()}",
        f"- command: `{command}` ({meta['elapsed_s'] / 60:.1f} min); results in "
        f"`{meta['out']}`",
        *([f"- real runs: not run again; those of `{meta['resimulated']}` (`sim validate "
            "--resimulate`), each case simulated again with the model as it is now"]
          if meta.get("resimulated") else []),
        "- calibrated profiles:", *[f"  {line}" for line in _profile_lines(meta["profiles"])],
        *_drift_lines(meta.get("drift", [])),
        *drift.lines(meta.get("recalibrations", [])),
        f"- this machine is shared with other work. Each real repeat waited (up to "
        f"{meta['quiet'][1]:.0f} s) for other processes to use at most {meta['quiet'][0]:.0%} "
        "of the CPUs, measured their share during the repeat, and was taken again (at most "
        f"{meta['retries']} times, keeping the least disturbed) when it was higher. 'other "
        "load' in the table is the worst share among the kept repeats.",
        "",
        *reproducibility.lines(rows, meta.get("before")),
        *placement.lines(rows, reproducibility.floor(rows, meta.get("before"))),
        *_group_lines(rows, meta["quiet"][0]),
        *bias.lines(placement.groups(rows)["core"], " with a core per rank"),
        *bias.lines(placement.groups(rows)["oversubscribed"], " oversubscribed"),
        *ratios.lines(rows),
        "## Cases",
        "",
        "Case names: the matrix's levels, axis by axis. The last column is each activity's "
        "simulated minus real time per update (the mean worker's; compute, data, update, "
        "overhead, wire, wait), largest first. ms/update: simulated time / "
        "updates (a bsp/backup step is one update; asp/ssp apply one gradient per update). "
        "TTT: time to the target loss (reached in how many real repeats). Loss dist.: mean "
        "|loss_sim - loss_real| over the common time span, relative to the real loss. "
        "A case ending in `killed` loses rank 1 to a SIGKILL mid-run; the job starts again "
        "from its last checkpoint, so its time per update covers the checkpoints, the "
        "restart and the work done again (checkpoint, restart and recompute in the last "
        "column; see also [Failures and restarts](#failures-and-restarts)).",
        "",
        *_table(rows),
        "",
    ]
    text += _speedup_lines(rows) + _fault_lines(rows)
    if skipped:
        text += [f"Skipped (emulated network not available here): {', '.join(skipped)}", ""]
    write_atomic(path, "\n".join(text))
