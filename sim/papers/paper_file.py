"""Reading one paper file of ``experiments/papers/`` (the format: :mod:`sim.papers`).

Every mistake raises :class:`sim.errors.UserError` with one line naming the file and the
key, e.g. ``goyal-2017.toml: figure[2].relative_to: no row 'fig7-9gpu'``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config import read_toml
from sim.errors import UserError
from sim.papers.quantities import QUANTITIES

PAPER_KEYS = ("title", "authors", "year", "where")
CALIBRATION_KEYS = {"parameter", "row", "bracket", "source"}
FIGURE_KEYS = {"id", "quantity", "published", "source", "set", "relative_to", "note",
               "explain"}
EXPLAIN_KEYS = {"parameter", "bracket", "mechanism"}
NUMBER = int | float
TYPE_NAMES: dict[Any, str] = {str: "a string", int: "an integer", list: "a list",
                              dict: "a table", NUMBER: "a number"}


@dataclass(frozen=True)
class Calibration:
    parameter: str              # a dotted config key, e.g. compute.gemm_efficiency
    row: str                    # the id of the baseline row it is fitted to
    bracket: tuple[float, float]
    source: str


@dataclass(frozen=True)
class Explain:
    """A row's measured explanation: the ``parameter`` (a dotted config key) that stands for
    the ``mechanism`` the lab lacks, searched over ``bracket`` for the value at which the
    row would match the paper."""

    parameter: str
    bracket: tuple[float, float]
    mechanism: str


@dataclass(frozen=True)
class Figure:
    id: str
    quantity: str
    published: float | None     # None: a reference row (ratios use it; it has no error)
    source: str
    overrides: dict[str, Any] = field(default_factory=dict)  # dotted key -> value
    relative_to: str | None = None
    note: str = ""
    explain: Explain | None = None


@dataclass(frozen=True)
class Paper:
    name: str                   # the file's stem, e.g. goyal-2017
    path: Path
    meta: dict[str, Any]        # title, authors, year, where
    base: dict[str, Any]        # an experiment config's tables
    calibration: Calibration | None
    figures: tuple[Figure, ...]

    def figure(self, figure_id: str) -> Figure:
        return next(f for f in self.figures if f.id == figure_id)


def _need(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in table:
        raise UserError(f"{where}.{key}: missing")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise UserError(f"{where}.{key}: expected {TYPE_NAMES.get(kind, kind)}, got {value!r}")
    return value


def _extra(table: dict[str, Any], allowed: set[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise UserError(f"{where}.{key}: unknown key; {where} has {', '.join(sorted(allowed))}")


def _calibration(table: dict[str, Any], where: str) -> Calibration:
    _extra(table, CALIBRATION_KEYS, where)
    return Calibration(_need(table, "parameter", str, where), _need(table, "row", str, where),
                       _bracket(table, where), _need(table, "source", str, where))


def _bracket(table: dict[str, Any], where: str) -> tuple[float, float]:
    bracket = _need(table, "bracket", list, where)
    if (len(bracket) != 2 or not all(isinstance(b, NUMBER) for b in bracket)
            or not 0 < bracket[0] < bracket[1]):
        raise UserError(f"{where}.bracket: expected [lo, hi] with 0 < lo < hi, got {bracket!r}")
    return float(bracket[0]), float(bracket[1])


def _explain(table: Any, where: str) -> Explain:
    if not isinstance(table, dict):
        raise UserError(f"{where}: expected a table {{parameter, bracket, mechanism}}")
    _extra(table, EXPLAIN_KEYS, where)
    return Explain(_need(table, "parameter", str, where), _bracket(table, where),
                   _need(table, "mechanism", str, where))


def _figure(table: Any, where: str) -> Figure:
    if not isinstance(table, dict):
        raise UserError(f"{where}: expected a table")
    _extra(table, FIGURE_KEYS, where)
    quantity = _need(table, "quantity", str, where)
    if quantity not in QUANTITIES:
        raise UserError(f"{where}.quantity: unknown {quantity!r}; known: "
                        f"{', '.join(QUANTITIES)}")
    published = None  # a reference row only: what ratios are taken against, no error
    if "published" in table:
        published = float(_need(table, "published", NUMBER, where))
        if published <= 0:
            raise UserError(f"{where}.published: expected a positive value, got {published}")
    relative_to = table.get("relative_to")
    if QUANTITIES[quantity].ratio and not isinstance(relative_to, str):
        raise UserError(f"{where}.relative_to: {quantity} is a ratio and needs the id of "
                        f"the row it is taken against")
    if not QUANTITIES[quantity].ratio and relative_to is not None:
        raise UserError(f"{where}.relative_to: {quantity} is not a ratio")
    overrides = table.get("set", {})
    if not isinstance(overrides, dict):
        raise UserError(f"{where}.set: expected a table of dotted keys")
    if "workload.numerics" in overrides:
        raise UserError(f"{where}.set: rows are timing only; numerics cannot be set")
    return Figure(_need(table, "id", str, where), quantity, published,
                  _need(table, "source", str, where), dict(overrides), relative_to,
                  table.get("note", ""),
                  _explain(table["explain"], f"{where}.explain") if "explain" in table else None)


def load_paper(path: str | Path) -> Paper:
    """The paper file at ``path``, checked. Raises UserError naming the file and the key."""
    path = Path(path)
    data = read_toml(path)
    try:
        return _parse(path, data)
    except UserError as exc:
        raise UserError(f"{path.name}: {exc}") from None


def _parse(path: Path, data: dict[str, Any]) -> Paper:
    _extra(data, {"paper", "base", "calibration", "figure"}, "a paper file")
    meta = _need(data, "paper", dict, "paper file")
    for key in PAPER_KEYS:
        _need(meta, key, int if key == "year" else str, "paper")
    base = _need(data, "base", dict, "paper file")
    if not isinstance(base.get("workload"), dict) or base["workload"].get("numerics") is not False:
        raise UserError("base.workload.numerics: must be false (the suite times runs only)")
    figures = tuple(_figure(t, f"figure[{i}]")
                    for i, t in enumerate(_need(data, "figure", list, "paper file")))
    ids = [f.id for f in figures]
    for i, figure in enumerate(figures):
        if ids.index(figure.id) != i:
            raise UserError(f"figure[{i}].id: {figure.id!r} repeats figure[{ids.index(figure.id)}]")
        if figure.relative_to is not None:
            if figure.relative_to not in ids:
                raise UserError(f"figure[{i}].relative_to: no row {figure.relative_to!r}")
            if figure.relative_to == figure.id:
                raise UserError(f"figure[{i}].relative_to: a row cannot be its own reference")
    calibration = None
    if "calibration" in data:
        calibration = _calibration(_need(data, "calibration", dict, "paper file"),
                                   "calibration")
        if calibration.row not in ids:
            raise UserError(f"calibration.row: no row {calibration.row!r}")
        baseline = figures[ids.index(calibration.row)]
        if baseline.published is None:
            raise UserError(f"calibration.row: {calibration.row!r} has no published value")
        if QUANTITIES[baseline.quantity].ratio:
            raise UserError(f"calibration.row: {calibration.row!r} is a ratio; a baseline row "
                            f"must be an absolute value")
    return Paper(path.stem, path, dict(meta), base, calibration, figures)
