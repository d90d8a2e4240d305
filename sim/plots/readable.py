"""Readable names for legends: strategies, config keys and their values.

A legend names a run the way a paper would: ``BSP``, ``BSP (PS)``, ``SSP (s = 3)``,
``16 workers``, ``10 GbE``. A key without a registered name reads ``last part = value``
(``lr = 0.05`` for ``workload.lr``); an unknown strategy keeps its name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from matplotlib.ticker import EngFormatter

from sim.training.strategies import STRATEGIES, fmt

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
    return lambda v: f"{fmt(v)} {noun}{'' if v == 1 else 's'}"


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
                                    "bucket": "buckets"}, fmt),
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
