"""Runs grouped by legend label: one label, colour and dash pattern per configuration.

Runs that differ only by their seed (or real repeats of one config) share a label; a plot
averages them (:mod:`sim.plots.loss` draws their mean and 95% band). When simulated and
real runs are compared, the ``clock`` pseudo-key (``sim`` / ``real``) joins their configs,
so the two are told apart by dashes in one colour.
"""

from __future__ import annotations

from sim.plots import style as st
from sim.plots.labels import CLOCK, REAL, clock_name, run_labels, style_indices
from sim.results import Run


def _configs(runs: list[Run]) -> list[dict]:
    clocks = [clock_name(r.summary) for r in runs]
    if len(set(clocks)) == 1:
        return [r.config for r in runs]
    return [{**r.config, CLOCK: clock} for r, clock in zip(runs, clocks, strict=True)]


def labelled(runs: list[Run]) -> dict[str, list[Run]]:
    """Legend label -> its runs, in first-seen order; a diverged group and an incomplete
    (interrupted) one say so."""
    configs = _configs(runs)
    # nothing differs: sim runs keep their names, real ones are repeats of one config
    names = [REAL if clock_name(r.summary) == REAL else r.name for r in runs]
    out: dict[str, list[Run]] = {}
    for label, run in zip(run_labels(configs, names), runs, strict=True):
        out.setdefault(label, []).append(run)
    return {_marked(label, members): members for label, members in out.items()}


def _marked(label: str, members: list[Run]) -> str:
    if any(r.summary.get("diverged") for r in members):
        label += " (diverged)"
    if any(r.summary.get("complete") is False for r in members):
        label += " (incomplete)"
    return label


def styles(by_label: dict[str, list[Run]]) -> list[dict]:
    """Line colour and dashes per label (see :func:`sim.plots.labels.style_indices`)."""
    firsts = [members[0] for members in by_label.values()]
    return [st.line_style(*ij) for ij in style_indices(_configs(firsts))]


def repeats(by_label: dict[str, list[Run]]) -> str:
    """How many runs each label averages, for a subtitle: ``3 seeds``, ``2-3 runs``; empty
    when every label is one run."""
    counts = sorted({len(m) for m in by_label.values() if len(m) > 1})
    if not counts:
        return ""
    several = [m for m in by_label.values() if len(m) > 1]
    seeded = all(len({r.config.get("run", {}).get("seed") for r in m}) == len(m)
                 for m in several)
    span = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{span} {'seeds' if seeded else 'runs'}"
