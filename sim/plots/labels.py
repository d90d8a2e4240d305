"""Legend labels that name each run by what differs between the runs compared.

The resolved configs are flattened to dotted keys and compared; a run's label lists only
the keys whose values differ, e.g. ``strategy.kind=ssp, strategy.staleness=4``.
``run.seed`` is left out when other keys differ too: runs that differ only by their seed
then share one label (and one colour), and are averaged where a plot averages. When the
seed is the only difference it is kept, and when nothing differs the directory name is used.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

SEED = "run.seed"
IGNORED = ("sweep", "run.seeds")  # the grid itself, not a property of one run


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


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def label_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys labels name: the differing ones, without run.seed unless it is alone."""
    keys = differing_keys(configs)
    return keys if keys == [SEED] else [k for k in keys if k != SEED]


def run_labels(configs: Sequence[Mapping[str, Any]],
               names: Sequence[str] | None = None) -> list[str]:
    """One label per config (see the module doc); ``names`` are the fallback when all match."""
    keys = label_keys(configs)
    flats = [flatten(c) for c in configs]
    if not keys:
        return list(names) if names is not None else [f"run {i}" for i in range(len(flats))]
    return [", ".join(f"{k}={fmt(flat.get(k))}" for k in keys) for flat in flats]


def groups(labels: Sequence[str]) -> dict[str, list[int]]:
    """Label -> indices of the runs carrying it, in first-seen order."""
    out: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        out.setdefault(label, []).append(i)
    return out


def context(configs: Sequence[Mapping[str, Any]]) -> str:
    """A subtitle naming what the runs share, e.g. ``logreg on gaussian, 4 workers, ib-hdr``."""
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
    parts = [" on ".join(p for p in (model, data) if p),
             f"{workers} workers" if workers else "",
             common("cluster.fabric") or "", common("strategy.kind") or ""]
    return ", ".join(p for p in parts if p)


def style_indices(configs: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """(colour, dash) indices, one per config (one config per line).

    With two or more label keys whose last one takes at most four values, the colour
    follows the other keys and the dash pattern the last one (e.g. colour per worker count,
    dashes per fabric); otherwise each distinct label gets its own colour.
    """
    keys = label_keys(configs)
    flats = [flatten(c) for c in configs]

    def index(values: list[Any]) -> list[int]:
        seen: dict[Any, int] = {}
        return [seen.setdefault(v, len(seen)) for v in values]

    if len(keys) >= 2:
        last = [fmt(f.get(keys[-1])) for f in flats]
        if len(set(last)) <= 4:
            rest = [tuple(fmt(f.get(k)) for k in keys[:-1]) for f in flats]
            return list(zip(index(rest), index(last), strict=True))
    return [(i % 10, i // 10) for i in index([tuple(fmt(f.get(k)) for k in keys)
                                               for f in flats])]
