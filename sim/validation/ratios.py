"""Ratios between cases, which is what users decide by: for every two cases that differ in
one axis of the matrix (strategy, network, workers, pipelining, ...), the simulated ratio
of their times per update against the real ratio, and whether the simulation ranks them as
the real runs do.

A ratio's error is sim_ratio / real_ratio - 1, with each pair ordered by case name (the
error of b/a is 1 / (1 + e) - 1, as large). A pair counts for the ranking only when its
real times differ by more than :data:`DECISIVE`: closer than that the real runs
themselves do not rank it reliably (their reproducibility is ~6% a case).
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from typing import Any

DECISIVE = 0.10  # real times that differ by more than this must be ranked alike
RATIO_TARGET = 0.05  # median |ratio error| (issue 31)


def pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of completed cases whose levels differ in exactly one axis: the axis, the
    two cases, simulated and real ratio (second over first), its error, whether the real
    times differ decisively and whether the simulation orders them the same way."""
    done = sorted((r for r in rows if "error" not in r), key=lambda r: r["case"])
    axes = sorted({axis for r in done for axis in r["levels"]})
    out = []
    for axis in axes:
        groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
        for r in done:
            rest = tuple(sorted((k, str(v)) for k, v in r["levels"].items() if k != axis))
            groups[rest].append(r)
        for group in groups.values():
            for a, b in itertools.combinations(group, 2):
                if a["levels"].get(axis) == b["levels"].get(axis):
                    continue
                out.append(_pair(axis, a, b))
    return out


def _pair(axis: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    ia, ib = a["report"]["iteration_s"], b["report"]["iteration_s"]
    sim = ib["sim"] / ia["sim"]
    real = ib["real"]["mean"] / ia["real"]["mean"]
    decisive = abs(real - 1) > DECISIVE
    return {"axis": axis, "first": a["case"], "second": b["case"],
            "levels": (a["levels"].get(axis), b["levels"].get(axis)),
            "sim": sim, "real": real, "error": sim / real - 1, "decisive": decisive,
            "same_order": (sim > 1) == (real > 1)}


def summary(found: list[dict[str, Any]]) -> dict[str, Any]:
    """Median |ratio error|, and the decisive pairs ranked alike, over ``found``."""
    decisive = [p for p in found if p["decisive"]]
    return {"pairs": len(found),
            "median": statistics.median(abs(p["error"]) for p in found) if found else None,
            "worst": max((abs(p["error"]) for p in found), default=None),
            "decisive": len(decisive),
            "ranked": sum(p["same_order"] for p in decisive)}


def lines(rows: list[dict[str, Any]]) -> list[str]:
    """The README's section: ratio errors by axis, and every misranked decisive pair."""
    found = pairs(rows)
    if not found:
        return []
    whole = summary(found)
    out = ["## Ratios between cases", "",
           f"Every two cases that differ in one axis ({whole['pairs']} pairs): the simulated "
           "ratio of their times per update against the real ratio. Median |ratio error| "
           f"**{whole['median']:.1%}** (target <= {RATIO_TARGET:.0%}: "
           f"{'met' if whole['median'] <= RATIO_TARGET else 'missed'}), worst "
           f"{whole['worst']:.1%}; of the {whole['decisive']} pairs whose real times differ "
           f"by more than {DECISIVE:.0%}, **{whole['ranked']}** are ranked as the real runs "
           f"rank them (target: all).", "",
           "| axis | pairs | median abs ratio error | worst | decisive pairs ranked alike |",
           "|---|---|---|---|---|"]
    by_axis: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in found:
        by_axis[p["axis"]].append(p)
    for axis, some in sorted(by_axis.items()):
        s = summary(some)
        out.append(f"| {axis} | {s['pairs']} | {s['median']:.1%} | {s['worst']:.1%} | "
                   f"{s['ranked']}/{s['decisive']} |")
    wrong = [p for p in found if p["decisive"] and not p["same_order"]]
    if wrong:
        out += ["", "Ranked otherwise than the real runs:", ""]
        out += [f"- {p['first']} vs {p['second']} ({p['axis']} {p['levels'][0]} -> "
                f"{p['levels'][1]}): real ratio {p['real']:.3f}, simulated {p['sim']:.3f}"
                for p in wrong]
    return out + [""]
