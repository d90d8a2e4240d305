"""The validation's targets by placement: cases with a core per rank, and oversubscribed ones.

Where ranks outnumber cores, a run's time depends on how the OS scheduler interleaves them
as much as on the model, so nothing is averaged across the two groups. Each group gets two
errors per case (issue 48):

* end to end: simulated on the profiles calibrated for the validation;
* coordination only: each real repeat simulated again with its own compute, data and
  update times replayed (:mod:`sim.validation.replay`), so the error left is the model's
  messages, wire, waiting and servers, not the machine's speed on the day.

Targets are set against the real runs' own reproducibility (:mod:`sim.validation.
reproducibility`: this validation's real times against the last one's, case by case): a
simulation cannot be checked more finely than the runs it is compared with repeat.
"""

from __future__ import annotations

import copy
import os
import statistics
from typing import Any

from sim.validation import ratios

MEAN_TARGET = 0.03  # |mean signed error|, both errors, both groups
REPLAY_WORST = 0.15  # worst |error| with compute replayed, a core per rank
END_TO_END_FACTOR = 1.5  # end to end: median at most this x reproducibility
OVERSUBSCRIBED_FACTOR = 1.5  # oversubscribed, replayed: median at most this x reproducibility


def has_core(row: dict[str, Any], cores: int | None = None) -> bool:
    """Whether the case's ranks had a core each on this machine."""
    return row.get("ranks", 0) <= (cores or os.cpu_count() or 1)


def groups(rows: list[dict[str, Any]], cores: int | None = None
           ) -> dict[str, list[dict[str, Any]]]:
    """The completed cases split by placement."""
    done = [r for r in rows if "error" not in r]
    return {"core": [r for r in done if has_core(r, cores)],
            "oversubscribed": [r for r in done if not has_core(r, cores)]}


def replayed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cases with a replay, each row's time per update replaced by the replay's (so
    :mod:`ratios` ranks the pairs on it)."""
    out = []
    for row in rows:
        replay = row.get("replay")
        if not isinstance(replay, dict):  # none, or why there is none
            continue
        twin = copy.deepcopy(row)
        it = twin["report"]["iteration_s"]
        it["sim"], it["error"] = replay["iteration_s"]["sim"], replay["iteration_s"]["error"]
        it["real"] = {**it["real"], "mean": replay["iteration_s"]["real"]}
        out.append(twin)
    return out


def repeat_spread(rows: list[dict[str, Any]]) -> float:
    """The median over ``rows`` of (max - min) / mean of each case's real repeats."""
    spans = [(it["max"] - it["min"]) / it["mean"]
             for it in (r["report"]["iteration_s"]["real"] for r in rows)]
    return statistics.median(spans) if spans else float("nan")


def figures(errors: list[float]) -> dict[str, float] | None:
    """Median |error|, mean signed error and worst |error|; None for no case."""
    if not errors:
        return None
    return {"median": statistics.median(abs(e) for e in errors),
            "mean": statistics.fmean(errors), "worst": max(abs(e) for e in errors),
            "cases": len(errors)}


def group_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One placement group: end-to-end and replayed figures, and the replayed ranking of
    decisive pairs."""
    twins = replayed(rows)
    ranking = ratios.summary(ratios.pairs(twins)) if twins else None
    return {"end_to_end": figures([r["report"]["iteration_s"]["error"] for r in rows]),
            "replayed": figures([r["replay"]["iteration_s"]["error"] for r in twins]),
            "ranking": ranking}


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def _line(label: str, f: dict[str, float] | None, median_target: float | None,
          worst_target: float | None = None) -> str:
    if f is None:
        return f"- {label}: no case"
    median = f"median |error| **{f['median']:.1%}**"
    if median_target is not None:
        median += f" (target <= {median_target:.1%}: {_verdict(f['median'] <= median_target)})"
    worst = f"worst **{f['worst']:.1%}**"
    if worst_target is not None:
        worst += f" (target <= {worst_target:.0%}: {_verdict(f['worst'] <= worst_target)})"
    mean = (f"mean signed **{f['mean']:+.1%}** (target within +-{MEAN_TARGET:.0%}: "
            f"{_verdict(abs(f['mean']) <= MEAN_TARGET)})")
    return f"- {label} ({f['cases']} cases): {median}, {mean}, {worst}"


def _times(factor: float, reproducibility: float | None) -> float | None:
    return None if reproducibility is None else factor * reproducibility


def lines(rows: list[dict[str, Any]], reproducibility: float | None,
          cores: int | None = None) -> list[str]:
    """The README's targets, one section per placement group."""
    floor = (f"the real runs' reproducibility, **{reproducibility:.1%}**"
             if reproducibility is not None else
             "the real runs' reproducibility (unknown: no earlier validation's real.json "
             "to compare with; the targets on it are not judged)")
    split = groups(rows, cores)
    out = ["## Targets, by placement", "",
           f"Judged against {floor}. Nothing is averaged across the two groups.", ""]
    for key, title, replay_target, worst in (
            ("core", "Cases with a core per rank (the headline)", 1.0, REPLAY_WORST),
            ("oversubscribed", "Oversubscribed cases (more ranks than cores)",
             OVERSUBSCRIBED_FACTOR, None)):
        f = group_figures(split[key])
        out += [f"### {title}", ""]
        out.append(_line("compute replayed (coordination only)", f["replayed"],
                         _times(replay_target, reproducibility), worst))
        out.append(_line("end to end (calibrated profiles)", f["end_to_end"],
                         _times(END_TO_END_FACTOR, reproducibility) if key == "core" else None))
        if key == "core" and f["replayed"] and f["end_to_end"]:
            out.append(f"- what to expect on a machine with a core for every rank: the "
                       f"model's coordination within {f['replayed']['median']:.0%} of a "
                       f"run (median; worst {f['replayed']['worst']:.0%}) once its compute "
                       f"is known, and the whole step within {f['end_to_end']['median']:.0%} "
                       f"(median; worst {f['end_to_end']['worst']:.0%}) from a calibration "
                       "of the same machine")
        if f["ranking"] and key == "core":
            r = f["ranking"]
            out.append(f"- decisive pairs (real times differ by more than "
                       f"{ratios.DECISIVE:.0%}) ranked as the real runs rank them, compute "
                       f"replayed: **{r['ranked']}/{r['decisive']}** (target: all)")
        out.append("")
    return out
