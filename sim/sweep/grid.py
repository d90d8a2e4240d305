"""Sweep definitions: the ``[sweep]`` grid, its points and their run names.

The ``[sweep]`` table's lists (dotted keys) are crossed in key order, times ``run.seeds``;
every point is validated before anything runs, and each gets a readable, unique run name.
A key naming several dotted keys joined by commas (``"cluster.workers,parallel.pipeline"``)
sweeps them together: each of its values is a list with one value per key (coupled
settings, e.g. the D x p x t layouts of 8 ranks), and the points carry the keys one by one.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config import Config, apply_overrides, dump_config, read_toml
from sim.errors import UserError
from sim.names import close_match
from sim.quick import reduce_seeds
from sim.training.config_warnings import common_warnings
from sim.training.validator import validate, validate_reduced

FORMAT = "sgd-lab.sweep/1"
MAX_NAME = 80  # characters of a run directory name before it is shortened with a hash
TEMP_RUN = re.compile(r"^\..+\.tmp-\d+$")  # write_run's temporary directories


@dataclass(frozen=True)
class Point:
    name: str  # run directory name under DIR/runs/
    values: dict[str, Any]  # swept dotted key -> value (run.seed when run.seeds is given)
    data: dict[str, Any]  # the point's config as data; validates to its resolved Config
    seed: int
    config_sha256: str  # of the resolved config.toml


@dataclass
class Sweep:
    source: str  # the config file
    definition: dict[str, Any]  # the file after --set, [sweep] flattened to dotted keys
    keys: list[str]  # columns of the grid, in order
    points: list[Point]
    # valid settings with no effect at any of its points
    warnings: list[str] = field(default_factory=list)

    def manifest(self) -> dict[str, Any]:
        return {"format": FORMAT, "source": self.source, "keys": self.keys,
                "points": [{"name": p.name, "values": p.values,
                            "config_sha256": p.config_sha256} for p in self.points]}


# ---- the grid ------------------------------------------------------------------------------

def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables (bare ``cluster.workers = [...]``, ``--set sweep.a.b=[...]``) as dotted
    keys; a later spelling of a key replaces the earlier one in place."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        flat.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict)
                    else {f"{prefix}{key}": value})
    return flat


def coupled(key: str) -> list[str]:
    """The dotted keys a sweep key names: one, or several joined by commas."""
    return [part.strip() for part in key.split(",")]


def grid(sweep: dict[str, list[Any]], seeds: list[int] | None = None) -> list[dict[str, Any]]:
    """The points' values: the product of the lists in key order, each repeated per seed; a
    coupled key's value (a list) is spread over its keys."""
    keys, lists = list(sweep), list(sweep.values())
    if seeds:
        keys, lists = [*keys, "run.seed"], [*lists, list(seeds)]
    points = []
    for combo in itertools.product(*lists):
        values: dict[str, Any] = {}
        for key, value in zip(keys, combo, strict=True):
            parts = coupled(key)
            values.update(zip(parts, value, strict=True) if len(parts) > 1 else {key: value})
        points.append(values)
    return points


def format_value(value: Any) -> str:
    """A value as it appears in a run name (before making it filesystem-safe)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "-".join(map(format_value, value))
    if isinstance(value, dict):
        return "-".join(f"{k}-{format_value(v)}" for k, v in value.items())
    return repr(value) if isinstance(value, float) else str(value)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def _digest(value: Any, size: int = 8) -> str:
    return hashlib.sha256(_canon(value).encode()).hexdigest()[:size]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def point_names(points: list[dict[str, Any]]) -> list[str]:
    """Deterministic, readable, filesystem-safe names, e.g. ``fabric=eth-10g_workers=8_seed=1``.

    A key is shortened to its last part unless two swept keys share it. A name that would be
    longer than MAX_NAME, or that two points would share (ignoring case), gets a short hash
    of its values.
    """
    keys = list(dict.fromkeys(k for p in points for k in p))
    last = [k.rsplit(".", 1)[-1] for k in keys]
    short = {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}
    names = []
    for values in points:
        name = "_".join(f"{_safe(short[k])}={_safe(format_value(v))}" for k, v in values.items())
        if len(name) > MAX_NAME:
            name = f"{name[:MAX_NAME - 9].rstrip('_=')}_{_digest(values)}"
        names.append(name)
    folded = [n.lower() for n in names]  # collide on case-insensitive file systems too
    return [f"{n}_{_digest(v)}" if folded.count(n.lower()) > 1 else n
            for n, v in zip(names, points, strict=True)]


def _check_key(key: str, where: str) -> None:
    """``key`` must name a leaf of the config schema (not a table, not the sweep itself)."""
    if key == "run.seeds" or key.split(".")[0] == "sweep":
        raise UserError(f"{where}: cannot be swept (seeds go in run.seeds, outside [sweep])")
    model: type = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            match = close_match(part, fields)
            hint = f" (did you mean {'.'.join([*parts[:i], match])}?)" if match else ""
            known = ", ".join(fields) if fields else "nothing (a value, not a table)"
            raise UserError(f"{where}: unknown key{hint}; "
                            f"{'.'.join(parts[:i]) or 'a config'} has {known}")
        model = fields[part].annotation
    if hasattr(model, "model_fields"):
        raise UserError(f"{where}: {key!r} is a table; sweep one of its keys, "
                        f"e.g. {key}.{next(iter(model.model_fields))}")


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    *tables, last = key.split(".")
    for part in tables:
        data = data.setdefault(part, {})
    data[last] = copy.deepcopy(value)


def seed_range(data: dict[str, Any], count: int) -> list[int]:
    """``--seeds N``: the config's run.seed (default 0) and the N - 1 after it.
    Raises UserError for N < 1."""
    if count < 1:
        raise UserError(f"--seeds {count}: expected at least 1 seed")
    run = data.get("run", {})
    first = run.get("seed", 0) if isinstance(run, dict) else 0
    first = first if isinstance(first, int) and not isinstance(first, bool) else 0
    return list(range(first, first + count))


def load_sweep(path: str | Path, overrides: list[str] | None = None,
               seeds: int | None = None, quick: bool = False) -> Sweep:
    """Read, override, expand and validate every point; ``seeds`` (``--seeds N``) replaces
    run.seeds by N seeds from run.seed; ``quick``: every point and the seeds in the reduced
    form of :mod:`sim.quick`. Raises UserError; writes nothing."""
    source = str(path)
    data = apply_overrides(read_toml(path), overrides or [])
    table = data.pop("sweep", {})
    if not isinstance(table, dict):
        raise UserError(f"{source}: sweep: expected a table of dotted keys -> lists, "
                        f"got {table!r}")
    table = flatten(table)
    run = data.get("run", {})
    listed = run.pop("seeds", []) if isinstance(run, dict) else []
    seeds_list = seed_range(data, seeds) if seeds is not None else listed
    # the shapes of the table and the seeds, with the schema's own messages
    validate({"sweep": table, "run": {"seeds": seeds_list}}, source)
    if quick:
        seeds_list = reduce_seeds(seeds_list)
    named: list[str] = []
    for key, values in table.items():
        where = f"{source}: sweep.{key}"
        parts = coupled(key)
        for part in parts:
            _check_key(part, where if len(parts) == 1 else f"{where}: {part}")
            if part in named:
                raise UserError(f"{where}: {part} is swept twice")
            named.append(part)
        if not values:
            raise UserError(f"{where}: expected a non-empty list of values")
        if len(parts) > 1:
            for value in values:
                if not isinstance(value, list) or len(value) != len(parts):
                    raise UserError(f"{where}: expected each value to be a list of "
                                    f"{len(parts)} values, one per key, got {value!r}")
        canon = list(map(_canon, values))
        for value, text in zip(values, canon, strict=True):
            if canon.count(text) > 1:
                raise UserError(f"{where}: {value!r} appears twice (two points, one run)")
    if "run.seed" in named and seeds_list:
        given = f"--seeds {seeds}" if seeds is not None else "run.seeds"
        raise UserError(f"{source}: sweep.run.seed: {given} is also given; use one of them")
    if not table and not seeds_list:
        raise UserError(f"{source}: no [sweep] table, run.seeds or --seeds: nothing to sweep "
                        f"(`python -m sim run` runs a single config)")
    values_list = grid(table, seeds_list)
    points: list[Point] = []
    configs = []
    seen: dict[str, str] = {}
    for name, values in zip(point_names(values_list), values_list, strict=True):
        point_data = copy.deepcopy(data)
        for key, value in values.items():
            _set(point_data, key, value)
        where = f"{source}: sweep point {name}"
        config = validate(point_data, where)
        if quick:
            point_data, config = validate_reduced(point_data, config, where)
        sha = hashlib.sha256(dump_config(config).encode()).hexdigest()
        if sha in seen:
            raise UserError(f"{source}: sweep points {seen[sha]} and {name} are the same run "
                            f"(their values resolve to one config)")
        seen[sha] = name
        points.append(Point(name, values, point_data, config.run.seed, sha))
        configs.append(config)
    definition = {**copy.deepcopy(data), "sweep": table}
    if seeds_list:
        definition.setdefault("run", {})["seeds"] = seeds_list
    return Sweep(source, definition, list(values_list[0]), points, common_warnings(configs))


