"""Where the simulation's signed error lives: each activity's share of it, over the matrix.

A case's error is (simulated - real) / real time per update. Its activities (compute, data,
update, overhead, wire, wait; the mean worker's time per update) split it: the activity's
simulated minus real time, over the case's real time per update, is what that activity
contributes. Averaged over the cases, the contributions add up to the mean signed error
but for ``rest``: time in no activity (a worker between activities, or a run whose
activities overlap). A bias is then a row whose mean stays of one sign case after case,
which noise does not do; that row names the mechanism to look for (issue 31's table).
"""

from __future__ import annotations

import statistics
from typing import Any

REST = "rest"


def contributions(row: dict[str, Any]) -> dict[str, float]:
    """One case: each activity's (simulated - real) time per update over the real time per
    update, and ``rest`` (the error the activities do not account for)."""
    rep = row["report"]
    it = rep["iteration_s"]
    real = it["real"]["mean"]
    out: dict[str, float] = {}
    breakdown = rep["breakdown"]
    for kind in breakdown["kinds"]:
        each = breakdown[f"{kind}_s"].get("per_update") or {}
        if each.get("sim") is not None and each.get("real") is not None:
            out[kind] = (each["sim"] - each["real"]) / real
    out[REST] = it["error"] - sum(out.values())
    return out


def budget(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the completed cases: the mean signed error and how many cases are below zero;
    per activity (and ``rest``) the mean contribution, how many cases it is negative in,
    and the mean |contribution| (its size whatever the sign)."""
    done = [r for r in rows if "error" not in r]
    if not done:
        return {"cases": 0, "mean_error": None, "below": 0, "activities": {}}
    each = [contributions(r) for r in done]
    kinds = [k for k in each[0] if k != REST] + [REST]
    activities = {}
    for kind in kinds:
        values = [c.get(kind, 0.0) for c in each]
        activities[kind] = {"mean": statistics.fmean(values),
                            "negative": sum(v < 0 for v in values),
                            "mean_abs": statistics.fmean(abs(v) for v in values)}
    errors = [r["report"]["iteration_s"]["error"] for r in done]
    return {"cases": len(done), "mean_error": statistics.fmean(errors),
            "below": sum(e < 0 for e in errors), "activities": activities}


def lines(rows: list[dict[str, Any]], scope: str = "") -> list[str]:
    """The README's section: the table of signed error per activity (over the cases
    ``scope`` names, e.g. " with a core per rank")."""
    b = budget(rows)
    if not b["cases"]:
        return []
    n = b["cases"]
    out = [f"## Where the error lives{scope and ':'}{scope}", "",
           f"Mean signed error of the time per update over the {n} cases{scope}: "
           f"**{b['mean_error']:+.1%}** ({b['below']}/{n} simulated faster than real; target "
           "within +-3%). Each activity's simulated minus real time per update, over the "
           "case's real time per update, is its part of the case's error; the means add up "
           "to the mean error (`rest`: time in no activity). A part of one sign in most "
           "cases is a bias, not noise.", "",
           "| activity | mean part of the error | cases where negative | mean abs part |",
           "|---|---|---|---|"]
    for kind, a in sorted(b["activities"].items(), key=lambda kv: kv[1]["mean"]):
        out.append(f"| {kind} | {a['mean']:+.1%} | {a['negative']}/{n} | "
                   f"{a['mean_abs']:.1%} |")
    return out + [""]
