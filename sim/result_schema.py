"""The result contract of a run directory as schemas, shared by its writers and its readers.

``summary.json`` is a :class:`Summary` (the keys every run writes, typed; a strategy's or a
runner's own keys ride along) and ``metrics.csv`` has :data:`METRIC_COLUMNS` with one row
per update and per evaluation. :class:`sim.recorder.Recorder` checks what it writes against
them and :mod:`sim.results` checks what it reads, so a damaged or foreign file is named
(exit 2) instead of being drawn from as if it were whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, ValidationError

from sim.errors import UserError

METRIC_COLUMNS = ("kind", "time_s", "iteration", "worker", "clock", "version_read",
                  "staleness", "clock_gap", "loss", "accuracy")
METRIC_KINDS = ("update", "eval")  # metrics.csv's row kinds
_NUMERIC_COLUMNS = ("time_s", "iteration")  # every row has them


class Summary(BaseModel):
    """summary.json's common keys (docs/reference/results.md); seconds are simulated or,
    for a real run (``clock = "wall"``), wall-clock."""

    model_config = ConfigDict(extra="allow")

    sim_time_s: float
    clock: str
    iterations: StrictInt
    final_loss: float | None
    final_accuracy: float | None
    time_to_target_s: float | None
    samples_per_s: float | None
    staleness_mean: float
    staleness_max: StrictInt
    compute_s: float
    data_s: float
    update_s: float
    overhead_s: float
    wire_s: float
    wait_s: float
    comm_s: float
    events: StrictInt
    wall_s: float
    seed: StrictInt
    complete: StrictBool


SUMMARY_KEYS = tuple(Summary.model_fields)


def check_summary(summary: Any, path: Path | str) -> dict[str, Any]:
    """``summary`` (parsed from ``path``) as it is, if it holds the contract's keys with
    their types. Raises UserError naming the file and the keys missing or wrong."""
    if not isinstance(summary, dict):
        raise UserError(f"{path}: expected a JSON object with the run's figures")
    missing = [key for key in SUMMARY_KEYS if key not in summary]
    if missing:
        raise UserError(f"{path}: lacks the required keys {', '.join(missing)} (a damaged "
                        "or foreign file; rerun to rewrite it)")
    try:
        Summary.model_validate(summary)
    except ValidationError as exc:
        wrong = ", ".join(f"{'.'.join(map(str, e['loc']))} ({e['msg']})" for e in exc.errors())
        raise UserError(f"{path}: wrong types: {wrong}") from None
    return summary


def check_metrics(header: list[str] | None, rows: list[dict[str, Any]],
                  path: Path | str) -> None:
    """Raise UserError naming ``path`` and the first bad line if metrics.csv's ``header``
    lacks the contract's first columns or a row is cut short, runs long, has an unknown
    kind or a time or iteration that is not a number (lines count from 1, the header)."""
    if header is None:
        raise UserError(f"{path}: empty (expected the header {','.join(METRIC_COLUMNS)})")
    if list(header[:3]) != list(METRIC_COLUMNS[:3]):
        raise UserError(f"{path}: expected the columns {', '.join(METRIC_COLUMNS)}, got "
                        f"{', '.join(header)}")
    for line, row in enumerate(rows, start=2):
        check_fields(row, header, path, line)
        if row["kind"] not in METRIC_KINDS:
            raise UserError(f"{path}: line {line}: kind {row['kind']!r} is not one of "
                            f"{', '.join(METRIC_KINDS)} (a damaged file)")
        for column in _NUMERIC_COLUMNS:
            if not _is_number(row[column]):
                raise UserError(f"{path}: line {line}: {column} {row[column]!r} is not a "
                                "number (a damaged file)")


def check_fields(row: dict[Any, Any], header: list[str], path: Path | str, line: int) -> None:
    """Raise UserError if a csv.DictReader ``row`` is cut short (its missing fields are
    None) or runs long (its extra ones are under the key None)."""
    if None in row or any(value is None for value in row.values()):
        got = sum(v is not None for k, v in row.items() if k is not None)
        got += len(row.get(None) or [])
        raise UserError(f"{path}: line {line} has {got} fields, the header {len(header)} "
                        "(a truncated or appended-to file)")


def check_metrics_end(rows: list[dict[str, Any]], summary: Mapping[str, Any],
                      path: Path | str) -> None:
    """Raise UserError if metrics.csv does not end where the summary says the run ended:
    its last update is not the summary's last one, or its last evaluation's loss and
    accuracy are not the summary's final ones (the file was cut, or belongs to another
    run)."""
    updates = [row for row in rows if row["kind"] == "update"]
    last = int(float(updates[-1]["iteration"])) if updates else 0
    if last != summary["iterations"]:
        raise UserError(f"{path}: its last update is {last}, summary.json records "
                        f"{summary['iterations']} (a truncated or mismatched file)")
    evals = [row for row in rows if row["kind"] == "eval"]
    for column, key in (("loss", "final_loss"), ("accuracy", "final_accuracy")):
        final = summary[key]
        if final is not None and (not evals or not _same(evals[-1][column], final)):
            seen = evals[-1][column] if evals else "none"
            raise UserError(f"{path}: its last evaluation's {column} is {seen}, "
                            f"summary.json's {key} {final} (a truncated or mismatched file)")


def _same(text: str, value: float) -> bool:
    try:
        return math.isclose(float(text), value, rel_tol=1e-12, abs_tol=0.0)
    except ValueError:
        return False


def _is_number(text: str) -> bool:
    try:
        return not math.isnan(float(text)) or text.strip().lower() == "nan"
    except (TypeError, ValueError):
        return False
