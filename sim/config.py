"""Experiment configs: the typed schema, defaults, validation and dotted ``--set`` overrides.

A config is a TOML file with the tables ``[cluster]``, ``[workload]``, ``[strategy]``,
``[compute]``, ``[run]`` and optionally ``[sweep]``. Every key has a default, so an empty
file is a valid experiment. :func:`load_config` returns the resolved :class:`Config`;
:func:`dump_config` writes it back as TOML (defaults filled in), which reruns identically.
Anything wrong raises :class:`sim.errors.UserError` naming the file, the dotted key and
what was expected.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.errors import UserError

PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Cluster(Section):
    workers: PositiveInt = 4
    fabric: str | dict[str, Any] = "ib-hdr"  # preset, calibrated:PATH, or a custom table
    topology: str = "star"
    oversubscription: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.0
    hosts_per_leaf: PositiveInt = 16
    placement: Literal["block", "round-robin"] = "block"
    servers: PositiveInt = 1  # parameter-server shards (key ranges)
    network: Literal["flow", "analytical"] = "flow"


class Workload(Section):
    model: str = "logreg"
    dataset: str = "gaussian"
    features: PositiveInt = 64
    samples: Annotated[int, Field(strict=True, ge=2)] = 4096
    classes: Annotated[int, Field(strict=True, ge=2)] = 2
    hidden: list[PositiveInt] = [64]
    batch: PositiveInt = 32
    lr: Positive = 0.1
    momentum: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0
    weight_decay: NonNegative = 0.0  # optimizer decay (PyTorch semantics), not in the loss
    l2: NonNegative = 0.0  # penalty inside the loss (reported losses include it)
    separation: Positive = 2.0
    noise: NonNegative = 1.0
    nnz_per_row: PositiveInt = 20
    zipf_exponent: Positive = 1.1
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    shard: Literal["contiguous", "shuffled"] = "shuffled"


class Strategy(Section):
    kind: str = "bsp"
    staleness: NonNegativeInt = 2  # ssp bound s
    backup: NonNegativeInt = 0  # backup workers b (gradients dropped per step)
    collective: str = "ring"  # allreduce algorithm for bsp and local-sgd
    compression: Literal["none", "topk", "qsgd"] = "none"
    topk_ratio: Annotated[float, Field(gt=0, le=1)] = 0.01
    qsgd_levels: Annotated[int, Field(strict=True, ge=1, le=2**30)] = 16
    staleness_lr: bool = False  # divide lr by the gradient's staleness (Zhang et al. 2016)
    local_steps: PositiveInt = 4  # local-sgd H; easgd communication period tau
    elasticity: Annotated[float, Field(gt=0, le=1)] | None = None  # easgd alpha; 0.9/workers


class Slowdown(Section):
    worker: NonNegativeInt
    start_s: NonNegative = 0.0
    end_s: Positive | None = None  # None: until the end of the run
    factor: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 2.0


class Compute(Section):
    device: str = "cpu-core"  # a preset or calibrated:PATH
    time_s: Positive | None = None  # fixed seconds per gradient, instead of FLOPs / rate
    distribution: Literal["constant", "exponential", "lognormal"] = "constant"
    sigma: Positive = 0.5  # lognormal shape
    straggler_fraction: Fraction = 0.0
    straggler_slowdown: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.0
    slowdowns: list[Slowdown] = []


class Run(Section):
    iterations: PositiveInt = 200  # updates applied
    seed: NonNegativeInt = 0
    eval_every: PositiveInt = 20
    target_loss: Positive | None = None
    seeds: list[NonNegativeInt] = []  # sweeps repeat each point for every seed


class Config(Section):
    cluster: Cluster = Cluster()
    workload: Workload = Workload()
    strategy: Strategy = Strategy()
    compute: Compute = Compute()
    run: Run = Run()
    sweep: dict[str, list[Any]] = {}

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        for check in CHECKS:
            check(self)
        return self


# ---- cross-key checks: each raises ValueError("dotted.key: message") -------------------

def _known(key: str, value: str, names: list[str]) -> None:
    if value not in names:
        raise ValueError(f"{key}: unknown {key.split('.')[-1]} {value!r}; "
                         f"expected one of {', '.join(sorted(names))}")


def _check_names(c: Config) -> None:
    from sim.network.collectives import REGISTRY as COLLECTIVES
    from sim.network.topology import TOPOLOGIES
    from sim.training.compute import CALIBRATED, DEVICES
    from sim.training.strategies import STRATEGIES
    from sim.workloads.datasets import DATASETS
    from sim.workloads.models import MODELS

    _known("strategy.kind", c.strategy.kind, list(STRATEGIES))
    _known("workload.model", c.workload.model, list(MODELS))
    _known("workload.dataset", c.workload.dataset, list(DATASETS))
    _known("cluster.topology", c.cluster.topology, list(TOPOLOGIES))
    allreduce = [n for n, cls in COLLECTIVES.items() if cls.kind == "allreduce" and n != "ps"]
    _known("strategy.collective", c.strategy.collective, allreduce)
    if not c.compute.device.startswith(CALIBRATED):
        _known("compute.device", c.compute.device, list(DEVICES))
    else:
        from sim.training.compute import load_device

        try:
            load_device(c.compute.device)
        except ValueError as exc:
            raise ValueError(f"compute.device: {exc}") from None


def _check_topology(c: Config) -> None:
    from sim.network.topology import topology_options

    accepted = topology_options(c.cluster.topology)
    defaults = Cluster()
    for key in ("oversubscription", "hosts_per_leaf"):
        if key not in accepted and getattr(c.cluster, key) != getattr(defaults, key):
            raise ValueError(f"cluster.{key}: not an option of topology "
                             f"{c.cluster.topology!r} (only of leaf-spine / fat-tree)")


def _check_fabric(c: Config) -> None:
    from sim.network.fabrics import get_fabric

    try:
        get_fabric(c.cluster.fabric)
    except (ValueError, OSError) as exc:
        raise ValueError(f"cluster.fabric: {exc}") from None


def _check_workload(c: Config) -> None:
    from sim.workloads.datasets import dataset_shape
    from sim.workloads.models import MODELS

    w = c.workload
    rows, features, classes, sparse = dataset_shape(w.dataset, w.samples, w.features,
                                                    w.classes)
    model = MODELS[w.model]
    if model.sparse != sparse:
        kind = "a sparse" if model.sparse else "a dense"
        raise ValueError(f"workload.model: {w.model!r} needs {kind} dataset, "
                         f"{w.dataset!r} is not")
    if model.binary and classes != 2:
        raise ValueError(f"workload.classes: {w.model!r} is binary but {w.dataset!r} has "
                         f"{classes} classes")
    shard = int(rows * (1 - w.test_fraction)) // c.cluster.workers
    if w.batch > shard:
        raise ValueError(f"workload.batch: {w.batch} is larger than a worker's shard "
                         f"({shard} rows = {rows} x (1 - test_fraction) / "
                         f"{c.cluster.workers} workers)")


def _check_strategy(c: Config) -> None:
    s = c.strategy
    if s.compression != "none" and c.workload.model == "sparse-logreg":
        raise ValueError("strategy.compression: sparse-logreg already sends only the touched "
                         "features; compression applies to dense models")
    if s.backup >= c.cluster.workers:
        raise ValueError(f"strategy.backup: expected fewer than cluster.workers "
                         f"({c.cluster.workers}) backup workers, got {s.backup}")
    for slow in c.compute.slowdowns:
        if slow.worker >= c.cluster.workers:
            raise ValueError(f"compute.slowdowns: worker {slow.worker} does not exist "
                             f"(cluster.workers = {c.cluster.workers})")
        if slow.end_s is not None and slow.end_s <= slow.start_s:
            raise ValueError(f"compute.slowdowns: end_s ({slow.end_s}) must be after "
                             f"start_s ({slow.start_s})")


def _fill_derived_defaults(c: Config) -> None:
    """Defaults that depend on other keys, written out so config.toml shows them."""
    if c.strategy.elasticity is None:  # Zhang et al. 2015: alpha = beta / p with beta = 0.9
        c.strategy.elasticity = min(1.0, 0.9 / c.cluster.workers)


CHECKS = [_check_names, _check_topology, _check_fabric, _check_workload, _check_strategy,
          _fill_derived_defaults]


# ---- loading, overrides, dumping -----------------------------------------------------

def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b=value`` -> (["a", "b"], value); the value is read as TOML, else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {text!r}: expected KEY=VALUE, e.g. cluster.workers=8")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``a.b=value`` set (tables created as needed)."""
    import copy

    data = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"--set {text!r}: {part} is not a table")
            node = child
        node[path[-1]] = value
    return data


def _describe(error: dict[str, Any]) -> str:
    loc = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{loc}: unknown key"
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] == "value_error":  # our cross-key checks name their own key
        return msg
    got = error.get("input")
    shown = "" if isinstance(got, dict) else f", got {got!r}"
    return f"{loc}: {msg.lower()}{shown}"


def validate(data: dict[str, Any], source: str = "<config>") -> Config:
    """The resolved Config, or UserError naming ``source``, the key and what was expected."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{source}: {_describe(exc.errors()[0])}") from None


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read, override and validate a config file. Raises UserError."""
    return validate(apply_overrides(read_toml(path), overrides or []), str(path))


def resolved(config: Config) -> dict[str, Any]:
    """Every key with its value (defaults included); None values are left out (TOML has none)."""
    return config.model_dump(mode="json", exclude_none=True)


def dump_config(config: Config) -> str:
    """The resolved config as TOML text."""
    return tomli_w.dumps(resolved(config))
