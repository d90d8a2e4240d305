"""Legend labels that name each run by what differs between the runs compared.

The resolved configs are flattened to dotted keys and compared; a run's label names only
the keys whose values differ, readably (:mod:`sim.plots.readable`): ``SSP (s = 4)``,
``BSP, 16 workers``. ``run.seed`` is left out when other keys differ too: runs that differ
only by their seed then share one label (and one colour) and are averaged where a plot
averages. When the seed is the only difference it is kept; when nothing differs the
directory name is used (``real`` for real runs: repeats of one config). Simulated and real
runs compared together differ by a ``clock`` pseudo-key (``sim`` / ``real``): one colour per
config, solid for sim and dashed for real.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sim.plots.readable import (
    CLOCK,
    KIND,
    STRATEGIES,
    fabric_name,
    fmt,
    key_value,
    strategy_name,
    strategy_params,
)

__all__ = ["CLOCK", "SEED", "context", "differing_keys", "flatten", "fmt",
           "is_real", "label_keys", "run_labels", "style_indices", "time_name"]

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
             f"{workers} workers" if workers else "",
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


# ---- simulated or real ---------------------------------------------------------------------

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
