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

from sim.record import write_atomic
from sim.training.rules import RULES

ITERATION_TARGET, ITERATION_WORST, TTT_TARGET = 0.05, 0.15, 0.10


def _machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    return (f"{platform.node()}: {os.cpu_count()} x {cpu}, {mem_kb / 2**20:.0f} GiB, "
            f"Linux {platform.release()}, Python {platform.python_version()}")


def _mpi() -> str:
    try:
        from importlib.metadata import version

        return f"MPICH {version('mpich')} (PyPI wheel), mpi4py {version('mpi4py')}"
    except Exception:  # noqa: BLE001 - informational only
        return "MPICH (version unknown)"


def _profile_lines(profiles: dict[str, Path]) -> list[str]:
    lines = []
    for net, place in profiles.items():
        path = place / ("device.json" if net == "device" else "fabric.json")
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if net == "device":
            lines.append(f"- compute: {data['flops_per_s'] / 1e9:.1f} GFLOP/s + "
                         f"{data['overhead_s'] * 1e6:.1f} us per gradient "
                         f"(`{path}`; {data.get('source', '')})")
        else:
            fit = data.get("measurements", {}).get("fit", {})
            lines.append(f"- {net}: alpha {fit.get('alpha_s', 0) * 1e6:.1f} us, "
                         f"{data['bandwidth_Bps'] / 1e9:.3f} GB/s, o "
                         f"{data['overhead_s'] * 1e6:.1f} us (`{path}`)")
    return lines


def effect(row: dict[str, Any]) -> str:
    """Which effect the model lacks, from where the real time went (per update, per worker)."""
    report, cores = row["report"], os.cpu_count() or 1
    error = report["iteration_s"]["error"]
    b = report["breakdown"]
    diffs = {k: (b[f"{k}_s"]["real"] or 0) - (b[f"{k}_s"]["sim"] or 0) for k in b["kinds"]}
    kind = max(diffs, key=lambda k: abs(diffs[k]))
    strategy, net, ranks = row["levels"].get("strategy"), row["levels"].get("network"), \
        row.get("ranks", 0)
    notes = []
    if ranks > cores:
        notes.append(f"CPU oversubscription ({ranks} ranks on {cores} cores: the model gives "
                     "every rank its own core)")
    if error < 0:
        if kind == "compute":
            notes.append("compute slower than calibrated (both cores busy: cache/memory "
                         "contention; the per-step update and parameter copies are not in the "
                         "compute model)")
        elif kind == "comm" and net == "shm":
            notes.append("messages right after a compute phase cost more than the calibrated "
                         "back-to-back ones (ranks drift apart, idle cores wake up), plus "
                         "Python/MPI work around each message")
        elif kind == "comm":
            notes.append("TCP over token-bucket links (bursts, ACK clocking, per-packet CPU) "
                         "is not the alpha-beta / max-min flow model")
        else:
            notes.append("ranks drift apart (OS scheduling, timer wake-ups): barriers, SSP "
                         "gates and the server's queue wait longer than in the model")
        if strategy in RULES and RULES[strategy].uses_servers and kind in ("comm", "wait"):
            notes.append("the server's CPU time (copies, updates) is free in the model")
    elif kind == "compute":
        notes.append("kernels ran faster than when calibrated (the machine's speed drifts: "
                     "see the re-timing above)")
    elif kind == "comm" and net != "shm":
        notes.append("comm over-predicted: these flows went faster than the (alpha, beta) fit "
                     "to ping-pong and 2-rank allreduce (token-bucket bursts after idle "
                     "periods; TCP windows already open on long-lived connections)")
    else:
        notes.append(f"{kind} over-predicted: the calibrated per-message cost is above what "
                     "these messages took")
    spread = report["iteration_s"]["real"]
    if spread["mean"] and spread["std"] / spread["mean"] > 0.1:
        notes.append(f"noisy real runs (spread {spread['std'] / spread['mean']:.0%})")
    return "; ".join(notes)


def _load(row: dict[str, Any]) -> str:
    text = f"{max(row['other_load']):.0%}"
    return text + (f" ({len(row['discarded'])} retaken)" if row["discarded"] else "")


def fitting(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("ranks", 0) <= (os.cpu_count() or 1)]


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


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| case | ranks | sim ms/update | real ms/update (mean [min..max]) | error | "
             "in spread | TTT sim s | TTT real s | TTT error | loss dist. | other load | "
             "effect the model lacks (misses) |",
             "|" + "---|" * 12]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['case']} | {row.get('ranks', '-')} | FAILED: "
                         f"{row['error']} |" + " |" * 9)
            continue
        rep = row["report"]
        it, tt = rep["iteration_s"], rep["time_to_target_s"]
        real = it["real"]
        inside = "yes" if it["outside_spread"] == 0 else f"no ({it['outside_spread']:.0%} out)"
        miss = abs(it["error"]) > ITERATION_TARGET or (
            tt["error"] is not None and abs(tt["error"]) > TTT_TARGET)
        ttt_real = f"{tt['real']['mean']:.3f} ({tt['real_reached']})" if tt["real"] else \
            f"- ({tt['real_reached']})"
        ttt_sim = "-" if tt["sim"] is None else f"{tt['sim']:.3f}"
        dist = rep["loss_distance"]["over_time"]
        lines.append(
            f"| {row['case']} | {row['ranks']} | {it['sim'] * 1e3:.3f} | "
            f"{real['mean'] * 1e3:.3f} [{real['min'] * 1e3:.3f}..{real['max'] * 1e3:.3f}] | "
            f"{it['error']:+.1%} | {inside} | {ttt_sim} | {ttt_real} | {_pct(tt['error'])} | "
            f"{'-' if dist is None else f'{dist:.1%}'} | {_load(row)} | "
            f"{effect(row) if miss else ''} |")
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
        "- calibrated profiles:", *[f"  {line}" for line in _profile_lines(meta["profiles"])],
        *_drift_lines(meta.get("drift", [])),
        f"- this machine is shared with other work. Each real repeat waited (up to "
        f"{meta['quiet'][1]:.0f} s) for other processes to use at most {meta['quiet'][0]:.0%} "
        "of the CPUs, measured their share during the repeat, and was taken again (at most "
        f"{meta['retries']} times, keeping the least disturbed) when it was higher. 'other "
        "load' in the table is the worst share among the kept repeats.",
        "",
        "## Targets",
        "",
        *summary_lines(rows),
        "",
        f"Only the cases with no more ranks than cores ({len(fitting(rows))} of {len(rows)}; "
        "the model's premise that every rank has its own core holds there):",
        "",
        *summary_lines(fitting(rows), " (ranks <= cores)"),
        "",
        *([f"Only the cases whose kept repeats all saw other load <= {meta['quiet'][0]:.0%} "
           f"({len(quiet_rows(rows, meta['quiet'][0]))} of {len(rows)}):", "",
           *summary_lines(quiet_rows(rows, meta["quiet"][0]), " (quiet cases)"), ""]
          if len(quiet_rows(rows, meta["quiet"][0])) < len(rows) else []),
        "## Cases",
        "",
        "Case names: workers-strategy-network-model-stragglers. ms/update: simulated time / "
        "updates (a bsp/backup step is one update; asp/ssp apply one gradient per update). "
        "TTT: time to the target loss (reached in how many real repeats). Loss dist.: mean "
        "|loss_sim - loss_real| over the common time span, relative to the real loss.",
        "",
        *_table(rows),
        "",
    ]
    if skipped:
        text += [f"Skipped (emulated network not available here): {', '.join(skipped)}", ""]
    text += [
        "## What the model lacks (the effects named above)",
        "",
        "- **CPU oversubscription.** This machine has "
        f"{os.cpu_count()} cores; cases with more ranks (4 workers, or workers plus the "
        "parameter server) share them. The simulator gives every worker and server its own "
        "core, so it misses time spent waiting for a CPU: slower kernels, and messages that "
        "wait for their receiver to be scheduled (the calibration leaves allreduces on more "
        "ranks than cores out of the fit for this reason).",
        "- **Software cost per message, after idling.** The calibrated alpha comes from MPI "
        "micro-benchmarks that send messages back to back. In training, messages follow a "
        "compute phase: on this VM a 2 KB ring allreduce on 2 ranks took 23 us back to back "
        "but 50-110 us after a 2 ms pause (ranks drift apart by the pause's jitter, idle cores "
        "wake up). A step also adds Python and copies around each message (headers, the "
        "server copying parameters into a reply, applying updates), which the model does not "
        "charge.",
        "- **TCP over shaped links.** The emulated network is TCP through token buckets: "
        "bursts of the bucket depth go at memory speed, flows ramp up and are ACK-clocked, and "
        "several flows into the server's link do not share it max-min fairly at every "
        "instant. The model is alpha-beta messages with max-min flow sharing.",
        "- **Drift and jitter.** Real ranks drift (timer wake-ups, scheduling); the model is "
        "deterministic, so barriers and gates wait less in it. Asynchronous strategies also "
        "interleave differently, so their loss curves (and times to target) differ by chance.",
        "",
    ]
    write_atomic(path, "\n".join(text))
