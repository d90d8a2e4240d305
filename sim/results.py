"""Reading result files: run directories, sweep directories, their CSV and JSON.

The one reader of the result contract (:mod:`sim.recorder` writes it): plots, the analysis
helpers and the sim-vs-real comparison all read runs here. Everything works from paths on
disk only. Bad input (a missing directory, a directory
that is neither a run nor a sweep, an unreadable or malformed file) raises
:class:`sim.errors.UserError` naming the path.
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import UserError
from sim.recorder import KINDS
from sim.result_schema import check_fields, check_metrics, check_metrics_end, check_summary
from sim.rundir import RUN_FILES, is_run_dir

RESULTS = "results.csv"  # what makes a directory a sweep directory
_WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\((.*)\)$")  # e.g. np.float64(0.5)


def numeric(value: Any) -> float:
    """A parsed results.csv value as a float: a number as itself, anything else (blank,
    text, a flag) NaN."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else math.nan


def number(text: str | None) -> float:
    """A CSV cell as a float: blank -> NaN; tolerates ``np.float64(x)`` reprs."""
    if text is None:
        return math.nan
    text = text.strip()
    if not text:
        return math.nan
    wrapped = _WRAPPED.match(text)
    if wrapped:
        text = wrapped.group(1)
    try:
        return float(text)
    except ValueError:
        return math.nan


def cell(text: str) -> Any:
    """A results.csv cell as int, float, bool or string (blank -> None)."""
    text = text.strip()
    if not text:
        return None
    if text in ("True", "False", "true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        pass
    value = number(text)
    return text if math.isnan(value) and text.lower() != "nan" else value


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: missing (needed for this plot)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None


def read_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON: {exc}") from None


def read_csv(path: Path) -> list[dict[str, str]]:
    try:
        return list(csv.DictReader(_read_text(path).splitlines()))
    except csv.Error as exc:
        raise UserError(f"{path}: not valid CSV: {exc}") from None


def read_csv_checked(path: Path) -> tuple[list[str] | None, list[dict[str, Any]]]:
    """A CSV's header and rows; a row cut short has None values, one running long a None
    key (csv.DictReader's), for the caller's checks."""
    try:
        reader = csv.DictReader(_read_text(path).splitlines())
        rows = list(reader)
        return reader.fieldnames, rows
    except csv.Error as exc:
        raise UserError(f"{path}: not valid CSV: {exc}") from None


def iteration_s(summary: Mapping[str, Any]) -> float | None:
    """Mean time per update (s): ``sim_time_s / iterations`` (per step for synchronous
    strategies, per gradient for asynchronous ones); None for a run with no updates."""
    if not summary.get("iterations"):
        return None
    return summary["sim_time_s"] / summary["iterations"]


def is_sweep_dir(path: Path) -> bool:
    return (path / RESULTS).is_file()


@dataclass
class Run:
    """One run directory, read lazily (each file at most once)."""

    path: Path
    name: str = ""

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.path.is_dir():
            raise UserError(f"{self.path}: no such run directory")
        if not is_run_dir(self.path):
            raise UserError(f"{self.path}: not a run directory (expected "
                            f"{' and '.join(RUN_FILES)})")
        self.name = self.name or self.path.name

    @cached_property
    def config(self) -> dict[str, Any]:
        try:
            return tomllib.loads(_read_text(self.path / "config.toml"))
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"{self.path / 'config.toml'}: not valid TOML: {exc}") from None

    @cached_property
    def summary(self) -> dict[str, Any]:
        """summary.json, checked against the contract (:mod:`sim.result_schema`)."""
        path = self.path / "summary.json"
        return check_summary(read_json(path), path)

    @cached_property
    def metrics(self) -> list[dict[str, str]]:
        """metrics.csv's rows, checked whole and ending at the summary's last update."""
        path = self.path / "metrics.csv"
        header, rows = read_csv_checked(path)
        check_metrics(header, rows, path)
        check_metrics_end(rows, self.summary, path)
        return rows

    def column(self, kind: str, name: str) -> list[float]:
        """Column ``name`` of the metrics rows of ``kind`` (update or eval), as floats."""
        return [number(row.get(name)) for row in self.metrics if row["kind"] == kind]

    @property
    def iteration_s(self) -> float | None:
        return iteration_s(self.summary)

    @property
    def evals(self) -> np.ndarray:
        """The evaluations as rows (time_s, iteration, loss)."""
        columns = [self.column("eval", name) for name in ("time_s", "iteration", "loss")]
        return np.array(columns, dtype=float).T.reshape(-1, 3)

    @property
    def staleness(self) -> np.ndarray:
        """The staleness of every update that has one (ints)."""
        values = self.column("update", "staleness")
        return np.array([v for v in values if not math.isnan(v)], dtype=int)

    def slices(self) -> list[tuple[int, str, float, float]]:
        """(worker, kind, start_s, end_s) of the worker tracks in trace.json, by start."""
        path = self.path / "trace.json"
        trace = read_json(path)
        events = trace.get("traceEvents") if isinstance(trace, dict) else trace
        if not isinstance(events, list):
            raise UserError(f"{path}: expected Chrome trace events (traceEvents)")
        out = []
        for e in events:
            if (isinstance(e, dict) and e.get("ph") == "X" and e.get("pid", 0) == 0
                    and e.get("cat", e.get("name")) in KINDS):
                start = float(e["ts"]) * 1e-6
                out.append((int(e["tid"]), e.get("cat", e.get("name")), start,
                            start + float(e.get("dur", 0.0)) * 1e-6))
        out.sort(key=lambda s: (s[2], s[0]))
        return out


@dataclass
class Sweep:
    """A sweep directory: results.csv (one row per run) and runs/<name>/."""

    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)  # the finished runs
    failed: dict[str, str] = field(default_factory=dict)  # run name -> why it failed

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.path.is_dir():
            raise UserError(f"{self.path}: no such sweep directory")
        if not is_sweep_dir(self.path):
            raise UserError(f"{self.path}: not a sweep directory (no {RESULTS})")
        header, raw = read_csv_checked(self.path / RESULTS)
        for line, row in enumerate(raw, start=2):
            check_fields(row, header or [], self.path / RESULTS, line)
        rows = [{k: cell(v or "") for k, v in row.items() if k} for row in raw]
        self.failed = {str(r["run"]): str(r["error"]) for r in rows if r.get("error")}
        self.rows = [{k: v for k, v in r.items() if k != "error"} for r in rows
                     if not r.get("error")]

    @property
    def swept(self) -> list[str]:
        """The swept dotted keys (results.csv columns with a dot; summary keys have none)."""
        columns = list(self.rows[0]) if self.rows else []
        return [c for c in columns if "." in c]

    def runs(self) -> list[Run]:
        """The runs of results.csv, in its order (else every run directory under runs/)."""
        base = self.path / "runs"
        if self.rows and "run" in self.rows[0]:
            names = [str(row["run"]) for row in self.rows]
        else:
            names = sorted(p.name for p in base.iterdir() if is_run_dir(p)) \
                if base.is_dir() else []
        if not names:
            raise UserError(f"{self.path}: the sweep has no finished runs")
        return [Run(base / name) for name in names]


def load_repeats(path: Path) -> list[Run]:
    """A run directory, or every ``r<K>/`` run directory inside ``path`` (the repeats of
    ``sim real --repeat N``), in order. Warns on stderr, naming them, about repeats that are
    missing (a gap in r0, r1, ...) or incomplete (no summary.json). Raises UserError if there
    is no run at all."""
    path = Path(path)
    if is_run_dir(path):
        return [Run(path)]
    numbered = {int(p.name[1:]): p for p in path.glob("r*")
                if p.is_dir() and p.name[1:].isdigit()}
    repeats = [numbered[k] for k in sorted(numbered) if is_run_dir(numbered[k])]
    if not repeats:
        raise UserError(f"{path}: no config.toml and summary.json there, nor in r0/, r1/, ... "
                        "(expected the output of `sim run` or `sim real`)")
    lost = [f"r{k}" for k in range(max(numbered) + 1)
            if k not in numbered or not is_run_dir(numbered[k])]
    if lost:
        print(f"warning: {path}: repeats {', '.join(lost)} missing or incomplete (no "
              f"summary.json); using the {len(repeats)} complete ones", file=sys.stderr)
    return [Run(p) for p in repeats]


def expand(paths: list[Path]) -> tuple[list[Run], list[Sweep]]:
    """Run and sweep directories named on the command line -> runs (sweeps and the repeats
    of a real run expanded)."""
    runs: list[Run] = []
    sweeps: list[Sweep] = []
    for path in map(Path, paths):
        if not path.exists():
            raise UserError(f"{path}: no such directory")
        if not path.is_dir():
            raise UserError(f"{path}: not a directory")
        if is_sweep_dir(path):
            sweep = Sweep(path)
            sweeps.append(sweep)
            runs += sweep.runs()
        elif is_run_dir(path):
            runs.append(Run(path))
        elif any(is_run_dir(p) for p in path.glob("r*")):  # sim real --repeat N
            runs += load_repeats(path)
        else:
            raise UserError(f"{path}: neither a run directory (config.toml, summary.json) nor "
                            f"a sweep directory ({RESULTS}) nor the repeats of a real run "
                            "(r0/, r1/, ...)")
    return runs, sweeps


def as_runs(items: list[Path | str | Run] | tuple[Path | str | Run, ...]) -> list[Run]:
    """Runs from Run objects, run directories and sweep directories (expanded)."""
    runs: list[Run] = []
    for item in items:
        runs += [item] if isinstance(item, Run) else expand([Path(item)])[0]
    if not runs:
        raise UserError("no run directories given")
    return runs
