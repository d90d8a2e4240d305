"""How well the real runs reproduce: this validation's real times against the last one's.

A simulation can be checked no more finely than the real runs it is compared with repeat.
Each validation keeps its real mean time per update, case by case, in ``real.json`` beside
its README; the next one reports how far its own real runs are from those (the same
configs, run the same way, at another time), as the floor under its errors.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from pathlib import Path
from typing import Any

from sim.machine import cpu_model
from sim.rundir import write_atomic

FORMAT = "sgd-lab.validation-real/1"
CLOSE = 0.05  # "within 5%", as the iteration-time target


def real_means(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each completed case's real mean time per update (s)."""
    return {r["case"]: r["report"]["iteration_s"]["real"]["mean"] for r in rows
            if "error" not in r}


def save(path: Path, rows: list[dict[str, Any]]) -> None:
    write_atomic(path, json.dumps({"format": FORMAT,
                                   "date": dt.datetime.now().isoformat(timespec="minutes"),
                                   "cpu": cpu_model(), "real_s": real_means(rows)},
                                  indent=2) + "\n")


def comparable(before: dict[str, Any] | None) -> bool:
    """Whether the last validation's real times were taken on this machine's CPU (one that
    did not record its CPU is taken as another: machines differ between sessions)."""
    return bool(before) and before.get("cpu") == cpu_model()


def load(path: Path) -> dict[str, Any] | None:
    """The last validation's real times, or None (none yet, or not one we can read)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT \
            or not isinstance(data.get("real_s"), dict):
        return None
    return data


def compare(now: dict[str, float], before: dict[str, float]) -> dict[str, Any] | None:
    """|now / before - 1| over the cases both hold: median, worst (and which), and how many
    within :data:`CLOSE`; None when they share no case."""
    diffs = {case: abs(now[case] / before[case] - 1) for case in now
             if isinstance(before.get(case), (int, float)) and before[case] > 0}
    if not diffs:
        return None
    worst = max(diffs, key=diffs.__getitem__)
    return {"cases": len(diffs), "median": statistics.median(diffs.values()),
            "worst": diffs[worst], "worst_case": worst,
            "close": sum(d <= CLOSE for d in diffs.values())}


def against(rows: list[dict[str, Any]], before: dict[str, Any] | None
            ) -> dict[str, Any] | None:
    """:func:`compare` of ``rows``' real times with ``before``'s, None where there is no
    earlier validation taken on this CPU."""
    if not before or not comparable(before):
        return None
    return compare(real_means(rows), before["real_s"])


def floor(rows: list[dict[str, Any]], before: dict[str, Any] | None) -> float | None:
    """The median |difference| of ``rows``' real times from ``before``'s (the targets'
    reproducibility), None where it is not known."""
    found = against(rows, before)
    return None if found is None else found["median"]


def lines(rows: list[dict[str, Any]], before: dict[str, Any] | None) -> list[str]:
    """The README's section on it (empty without an earlier validation to compare with)."""
    if before and not comparable(before):
        return ["## Reproducibility of the real runs", "",
                f"The last validation's real times (`real.json`, {before['date']}) were taken "
                f"on another CPU ({before.get('cpu', 'not recorded')}; this one: "
                f"{cpu_model()}), so they say nothing of how this machine's runs repeat; "
                "the targets set against reproducibility are not judged here.", ""]
    spread = against(rows, before)
    if spread is None:
        return []
    return ["## Reproducibility of the real runs", "",
            f"This validation's real time per update against the last one's ({before['date']}, "
            f"`real.json`), case by case over the {spread['cases']} cases both ran: median "
            f"|difference| **{spread['median']:.1%}**, worst **{spread['worst']:.1%}** "
            f"({spread['worst_case']}); {spread['close']}/{spread['cases']} within "
            f"{CLOSE:.0%}. A simulation cannot be checked more finely than this.", ""]
