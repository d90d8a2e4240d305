"""Legends: how a figure names each run, and which runs share a name, colour and dashes.

One home for legend naming, in three steps:

1. Readable names of strategies, config keys and their values, the way a paper would write
   them: ``BSP``, ``BSP (PS)``, ``SSP (s = 3)``, ``16 workers``, ``10 GbE``. A key without
   a registered name (:data:`KEYS`) reads ``last part = value`` (``lr = 0.05`` for
   ``workload.lr``); an unknown strategy keeps its name.
2. Labels that name each run by what differs between the runs compared. The resolved
   configs are flattened to dotted keys and compared; a run's label names only the keys
   whose values differ, readably: ``SSP (s = 4)``, ``BSP, 16 workers``. ``run.seed`` is
   left out when other keys differ too: runs that differ only by their seed then share one
   label (and one colour) and are averaged where a plot averages. When the seed is the only
   difference it is kept; when nothing differs the directory name is used (``real`` for
   real runs: repeats of one config). Simulated and real runs compared together differ by a
   ``clock`` pseudo-key (``sim`` / ``real``): one colour per config, solid for sim and
   dashed for real.
3. Runs grouped by label (:func:`labelled`): one label, colour and dash pattern per
   configuration; a plot averages a group (:mod:`sim.plots.loss` draws their mean and 95%
   band).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from matplotlib.ticker import EngFormatter

from sim.plots import style as st
from sim.results import Run
from sim.training.strategies import STRATEGIES, fmt

# ---- 1. readable names of strategies, keys and values ------------------------------------

CLOCK = "clock"  # pseudo-key: "sim" or "real" when simulated and real runs are compared
KIND = "strategy.kind"


def strategy_params() -> frozenset[str]:
    """Every key a strategy's name can show (beside strategy.kind itself)."""
    return frozenset(key for row in STRATEGIES.values() for key in row.label.params)


def strategy_name(flat: Mapping[str, Any]) -> str:
    """``strategy.kind`` of a flattened config as a paper names it (with its parameter): its
    row's label; an unknown strategy keeps its name."""
    kind = fmt(flat.get(KIND))
    return STRATEGIES[kind].label.of(flat) if kind in STRATEGIES else kind


def _plural(noun: str) -> Callable[[Any], str]:
    return lambda v: f"{fmt(v)} {noun}{'' if fmt(v) == '1' else 's'}"


_ENG_BYTES = EngFormatter(unit="B", sep=" ")
_FABRIC = ((re.compile(r"eth-(\d+)g"), lambda m: f"{m[1]} GbE"),
           (re.compile(r"roce-(\d+)g"), lambda m: f"RoCE {m[1]}G"),
           (re.compile(r"ib-(\w+)"), lambda m: f"IB {m[1].upper()}"))


def fabric_name(value: Any) -> str:
    """``eth-10g`` -> ``10 GbE``, ``ib-hdr`` -> ``IB HDR``, ``roce-100g`` -> ``RoCE 100G``."""
    text = fmt(value)
    for pattern, name in _FABRIC:
        match = pattern.fullmatch(text)
        if match:
            return name(match)
    return text


def _choice(names: Mapping[Any, str], fallback: Callable[[Any], str]) -> Callable[[Any], str]:
    return lambda v: names.get(v, fallback(v))


#: dotted key -> its value as a legend shows it
KEYS: dict[str, Callable[[Any], str]] = {
    "cluster.workers": _plural("worker"),
    "cluster.servers": _plural("server"),
    "cluster.fabric": fabric_name,
    "cluster.topology": fmt,
    "cluster.network": lambda v: f"{fmt(v)} network model",
    "cluster.oversubscription": lambda v: f"{fmt(v)}:1 oversubscribed",
    "cluster.cores": _plural("core"),
    "workload.model": fmt,
    "workload.dataset": fmt,
    "workload.profile": fmt,
    "workload.batch": lambda v: f"batch {fmt(v)}",
    "workload.hidden": lambda v: f"hidden {fmt(v)}",
    "strategy.staleness": lambda v: f"s = {fmt(v)}",
    "strategy.backup": lambda v: f"b = {fmt(v)}",
    "strategy.local_steps": lambda v: f"H = {fmt(v)}",
    "strategy.collective": lambda v: f"{fmt(v)} allreduce",
    "strategy.compression": _choice({"none": "no compression", "topk": "top-k",
                                     "qsgd": "QSGD"}, fmt),
    "strategy.topk_ratio": lambda v: f"top {v:.3g}" if isinstance(v, float) else fmt(v),
    "strategy.qsgd_levels": lambda v: f"{fmt(v)} levels",
    "strategy.pipelining": _choice({"none": "no pipelining", "wfbp": "WFBP",
                                    "bucket": "buckets", "fusion": "Tensor Fusion"}, fmt),
    "strategy.bucket_bytes": lambda v: f"{_ENG_BYTES(v)} buckets"
    if isinstance(v, int | float) else fmt(v),
    "strategy.priority": _choice({True: "priority", False: "no priority"}, fmt),
    "compute.distribution": lambda v: f"{fmt(v)} compute",
    "compute.straggler_fraction": lambda v: f"{v:.0%} stragglers"
    if isinstance(v, int | float) else fmt(v),
    "compute.straggler_slowdown": lambda v: f"stragglers {fmt(v)}× slower",
    "run.seed": lambda v: f"seed {fmt(v)}",
    KIND: lambda v: STRATEGIES[v].label.bare if v in STRATEGIES else fmt(v),
    CLOCK: fmt,
}


def key_value(key: str, value: Any) -> str:
    """One part of a label: ``cluster.workers``, 16 -> ``16 workers``; unknown keys read
    ``last part = value``."""
    if key in KEYS:
        return KEYS[key](value)
    return f"{key.rsplit('.', 1)[-1]} = {fmt(value)}"


# ---- 2. labels from the keys that differ ------------------------------------------------

SEED = "run.seed"
IGNORED = ("sweep", "run.seeds")  # the grid itself, not a property of one run
SIM, REAL = "sim", "real"


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists become hashable JSON text."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted + "."))
        elif isinstance(value, (list, tuple, Mapping)):
            out[dotted] = json.dumps(value, sort_keys=True)
        else:
            out[dotted] = value
    return out


def _derived(key: str, flat: Mapping[str, Any]) -> bool:
    """True when ``key`` holds the default derived from other keys (not a choice)."""
    if key == "strategy.elasticity":  # sim.config: min(1, 0.9 / workers) unless given
        workers = flat.get("cluster.workers")
        value = flat.get(key)
        return isinstance(workers, int) and isinstance(value, (int, float)) \
            and math.isclose(value, min(1.0, 0.9 / workers))
    return False


def differing_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Dotted keys whose values are not the same in every config, in config order."""
    flats = [flatten(c) for c in configs]
    order: dict[str, None] = {}
    for flat in flats:
        order.update(dict.fromkeys(flat))
    missing = object()
    keys = []
    for key in order:
        if key in IGNORED or key.startswith(tuple(f"{k}." for k in IGNORED)):
            continue
        values = [flat.get(key, missing) for flat in flats]
        if any(v is not values[0] and v != values[0] for v in values[1:]) \
                and not all(_derived(key, flat) for flat in flats):
            keys.append(key)
    return keys


def label_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys labels name: the differing ones, without run.seed unless it is alone."""
    keys = differing_keys(configs)
    return keys if keys == [SEED] else [k for k in keys if k != SEED]


def _strategy_first(flat: Mapping[str, Any], keys: list[str]) -> list[str]:
    """Label parts with the strategy keys as one readable name (``SSP (s = 3)``)."""
    params = strategy_params()
    strategy = [k for k in keys if k == KIND or k in params]
    if not strategy:
        return [key_value(k, flat.get(k)) for k in keys]
    first = keys.index(strategy[0])
    rest = [key_value(k, flat.get(k)) for k in keys if k not in strategy]
    return [*rest[:first], strategy_name(flat), *rest[first:]]


def _each_key(flat: Mapping[str, Any], keys: list[str]) -> list[str]:
    return [key_value(k, flat.get(k)) for k in keys]


def _raw(flat: Mapping[str, Any], keys: list[str]) -> list[str]:
    return [f"{k}={fmt(flat.get(k))}" for k in keys]


# the first of these that tells every distinct config apart names the runs
_LABELLERS: tuple[Callable[[Mapping[str, Any], list[str]], list[str]], ...] = (
    _strategy_first, _each_key, _raw)


def run_labels(configs: Sequence[Mapping[str, Any]],
               names: Sequence[str] | None = None) -> list[str]:
    """One readable label per config (see the module doc); ``names`` are the fallback
    when all configs match."""
    keys = label_keys(configs)
    flats = [flatten(c) for c in configs]
    if not keys:
        return list(names) if names is not None else [f"run {i}" for i in range(len(flats))]
    distinct = len({tuple(fmt(f.get(k)) for k in keys) for f in flats})
    for labeller in _LABELLERS:
        labels = [", ".join(labeller(flat, keys)) for flat in flats]
        if len(set(labels)) == distinct:
            return labels
    return labels


def context(configs: Sequence[Mapping[str, Any]]) -> str:
    """A subtitle naming what the runs share, e.g. ``logreg on gaussian, 4 workers, IB HDR,
    BSP``."""
    if not configs:
        return ""
    differ = set(differing_keys(configs))
    flat = flatten(configs[0])

    def common(key: str) -> str | None:
        return fmt(flat[key]) if key in flat and key not in differ else None

    model, data = common("workload.model"), common("workload.dataset")
    if flat.get("workload.profile") and "workload.profile" not in differ:
        timed = f"{fmt(flat['workload.profile'])} profile"
        model, data = (timed, None) if flat.get("workload.numerics") is False else \
            (f"{model} (timed as {timed})", data)
    workers = common("cluster.workers")
    fabric = common("cluster.fabric")
    kind = fmt(flat.get(KIND))
    shown = {KIND, *(STRATEGIES[kind].label.params if kind in STRATEGIES else ())}
    parts = [" on ".join(p for p in (model, data) if p),
             _plural("worker")(workers) if workers else "",
             fabric_name(fabric) if fabric else "",
             strategy_name(flat) if KIND in flat and not shown & differ else ""]
    return ", ".join(p for p in parts if p)


def _index(values: list[Any]) -> list[int]:
    seen: dict[Any, int] = {}
    return [seen.setdefault(v, len(seen)) for v in values]


def style_indices(configs: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """(colour, dash) indices, one per config (one config per line).

    Simulated and real runs (the ``clock`` key) share the colour of their config and take
    dashes 0 (solid, sim) and 1 (dashed, real). Otherwise, with two or more label keys whose
    last one takes at most four values, the colour follows the other keys and the dash
    pattern the last one (e.g. colour per worker count, dashes per fabric); else each
    distinct label gets its own colour.
    """
    keys = label_keys(configs)
    flats = [flatten(c) for c in configs]
    if CLOCK in keys:
        rest = [tuple(fmt(f.get(k)) for k in keys if k != CLOCK) for f in flats]
        return [(c, int(f.get(CLOCK) == REAL)) for c, f in zip(_index(rest), flats, strict=True)]
    if len(keys) >= 2:
        last = [fmt(f.get(keys[-1])) for f in flats]
        if len(set(last)) <= 4:
            rest = [tuple(fmt(f.get(k)) for k in keys[:-1]) for f in flats]
            return list(zip(_index(rest), _index(last), strict=True))
    return [(i % 10, i // 10) for i in _index([tuple(fmt(f.get(k)) for k in keys)
                                                for f in flats])]


# ---- 3. simulated or real ------------------------------------------------------------------

def is_real(summary: Mapping[str, Any]) -> bool:
    """Whether a run's times are wall-clock (a real run): the summary's ``clock``
    (``wall`` or ``simulated``) when it has one, else its ``kind`` (``real``)."""
    clock = summary.get("clock")
    if clock in ("wall", "simulated"):
        return clock == "wall"
    return summary.get("kind") == "real"


def clock_name(summary: Mapping[str, Any]) -> str:
    """``real`` or ``sim``: how a legend names a run's clock."""
    return REAL if is_real(summary) else SIM


def time_name(summaries: Sequence[Mapping[str, Any]]) -> str:
    """What a time axis shows: ``simulated time``, ``wall-clock time`` or both."""
    real = {is_real(s) for s in summaries}
    if real == {True}:
        return "wall-clock time"
    if real == {True, False}:
        return "simulated (sim) / wall-clock (real) time"
    return "simulated time"


# ---- 4. runs grouped by label -------------------------------------------------------------

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
    """Line colour and dashes per label (see :func:`sim.plots.legends.style_indices`)."""
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
