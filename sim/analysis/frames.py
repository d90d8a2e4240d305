"""Run and sweep directories as pandas DataFrames: tables of runs, and their curves.

Everything is read from result files on disk (``config.toml``, ``summary.json``,
``metrics.csv``, a sweep's ``results.csv``) through the readers of :mod:`sim.results`, so a
missing or malformed file raises :class:`sim.errors.UserError` naming the path, exactly as
the plots do. Units follow the result files: ``*_s`` are simulated seconds, losses are
held-out losses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from sim import seeds
from sim.errors import UserError
from sim.results import Run, Sweep, as_runs
from sim.seeds import config_keys
from sim.training.strategies import STRATEGIES

PathLike = str | Path
#: What the functions that read runs accept: a run or sweep directory, a Run, a list of
#: those, or a table from :func:`load_runs` (its ``path`` column names the runs).
Source = PathLike | Run | Sequence[PathLike | Run] | pd.DataFrame

EVAL_COLUMNS = ("time_s", "iteration", "loss", "accuracy")
UPDATE_COLUMNS = ("time_s", "iteration", "worker", "clock", "version_read", "staleness",
                  "clock_gap", "loss")


# ---- tables of runs ------------------------------------------------------------------------

def load_results(path: PathLike) -> pd.DataFrame:
    """A sweep directory's ``results.csv``: one row per finished run, in point order.

    Columns as in the file (``run``, the swept dotted keys, ``run.seed``, the summary's
    scalars, e.g. ``sim_time_s`` in simulated seconds) with ints, floats and booleans
    parsed, blanks as None, and ``path`` (the run's directory) after ``run``.
    Raises UserError when ``path`` is missing or not a sweep directory.
    """
    sweep = Sweep(Path(path))
    frame = pd.DataFrame(sweep.rows)
    if "run" in frame.columns:
        frame.insert(1, "path", [str(sweep.path / "runs" / str(name)) for name in frame["run"]])
    return frame


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config tables as dotted keys; lists become tuples (hashable, groupable)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
    return flat


def strategy_label(config: Mapping[str, Any]) -> str:
    """The strategy of a run's config as the notebooks name it: ``asp``, ``ssp s=2``,
    ``backup b=4`` (the ssp bound and the backup count are part of the name)."""
    strategy = config.get("strategy", {})
    kind = str(strategy.get("kind", "?"))
    if kind not in STRATEGIES:
        return kind
    return STRATEGIES[kind].short.of({f"strategy.{k}": v for k, v in strategy.items()})


def _samples_per_update(summary: Mapping[str, Any]) -> float:
    """Rows of data behind each update (N, N - b or 1 gradients' batches); NaN if unknown."""
    rate, time_s, updates = (summary.get(k) for k in ("samples_per_s", "sim_time_s",
                                                      "iterations"))
    if not all(isinstance(v, int | float) for v in (rate, time_s, updates)) or not updates:
        return math.nan
    return float(rate) * float(time_s) / float(updates)


def load_runs(*sources: PathLike | Run | Sequence[PathLike | Run]) -> pd.DataFrame:
    """One row per run of the run and sweep directories given (sweeps expanded, in order).

    Columns: ``run`` (directory name), ``path``, ``label`` (:func:`strategy_label`), every
    key of the resolved ``config.toml`` as a dotted name (``strategy.kind``,
    ``cluster.workers``, ``run.seed``, ...; lists as tuples), the scalars of
    ``summary.json`` (``sim_time_s``, ``final_loss``, ``samples_per_s``, ``wait_s``, ...)
    and ``samples_per_update`` (samples_per_s x sim_time_s / iterations: the rows of data
    behind each update). Raises UserError for a missing path, a directory that is neither
    a run nor a sweep, or an unreadable file.
    """
    items: list[PathLike | Run] = []
    for source in sources:
        items += list(source) if isinstance(source, list | tuple) else [source]
    rows = []
    for run in as_runs(items):
        summary = {k: v for k, v in run.summary.items() if not isinstance(v, list | dict)}
        rows.append({"run": run.name, "path": str(run.path), "label": strategy_label(run.config),
                     **_flatten(run.config), **summary,
                     "samples_per_update": _samples_per_update(run.summary)})
    return pd.DataFrame(rows)


def _as_table(source: Source, needs: Sequence[str] = ()) -> pd.DataFrame:
    table = source if isinstance(source, pd.DataFrame) else load_runs(source)
    missing = [c for c in ("path", *needs) if c not in table.columns]
    if missing:
        raise UserError(f"expected a table from load_runs (missing columns: "
                        f"{', '.join(missing)})")
    return table


def select(rows: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    """The rows of ``rows`` whose column ``key`` equals ``value`` for every item of
    ``where`` (a list, tuple or set value matches any of its members), in table order.
    Raises UserError naming a column the table lacks."""
    keep = pd.Series(True, index=rows.index)
    for key, value in where.items():
        if key not in rows.columns:
            raise UserError(f"select: no column {key!r} (columns: {', '.join(rows.columns)})")
        if isinstance(value, list | tuple | set | frozenset):
            keep &= rows[key].isin(list(value))
        else:
            keep &= rows[key] == value
    return rows[keep]


def table(rows: pd.DataFrame, index: str, columns: str, values: str,
          where: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Column ``values`` of the rows matching ``where`` laid out with one row per value of
    ``index`` and one column per value of ``columns`` (both in order of first appearance);
    a combination without a run is NaN. Raises UserError for a missing column or for two
    rows with the same (index, columns) pair (narrow them with ``where``)."""
    chosen = select(rows, where or {})
    for key in (index, columns, values):
        if key not in chosen.columns:
            raise UserError(f"table: no column {key!r} (columns: {', '.join(chosen.columns)})")
    twice = chosen[chosen.duplicated([index, columns], keep=False)]
    if len(twice):
        first = twice.iloc[0]
        raise UserError(f"table: {len(twice)} rows share {index}={first[index]!r}, "
                        f"{columns}={first[columns]!r}; add keys to `where`")
    grid = chosen.pivot(index=index, columns=columns, values=values)
    return grid.reindex(index=pd.unique(chosen[index]), columns=pd.unique(chosen[columns]))


def by_config(source: PathLike | pd.DataFrame,
              values: Sequence[str] = ("final_loss", "time_to_target_s"),
              keys: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per configuration: runs that differ only by ``run.seed`` taken together.

    ``source``: a sweep directory or a table from :func:`load_results` or :func:`load_runs`.
    Columns: the configuration's ``keys`` (default: the dotted columns but ``run.seed`` whose
    values differ between rows, e.g. the swept keys), ``runs``, and for each of ``values``
    its mean over the runs, ``<value>_ci`` (half-width of the 95% interval, Student t, see
    :func:`sim.stats.mean_ci`; NaN for one run) and ``<value>_n`` (runs with a finite value:
    for ``time_to_target_s``, how many reached the target). Raises UserError naming a
    missing column.
    """
    frame = source if isinstance(source, pd.DataFrame) else load_results(source)
    missing = [c for c in (*values, *(keys or ())) if c not in frame.columns]
    if missing:
        raise UserError(f"by_config: no column {missing[0]!r} (columns: "
                        f"{', '.join(map(str, frame.columns))})")
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    if keys is None:
        keys = [k for k in config_keys(rows) if len({repr(r.get(k)) for r in rows}) > 1]
    out = []
    for config, members in seeds.by_config(rows, keys).items():
        row: dict[str, Any] = {**dict(zip(keys, config, strict=True)), "runs": len(members)}
        for value in values:
            ci = seeds.summarise(members, value)
            row.update({value: ci.mean, f"{value}_ci": ci.half_width, f"{value}_n": ci.n})
        out.append(row)
    return pd.DataFrame(out, columns=[*keys, "runs", *(f"{v}{end}" for v in values
                                                       for end in ("", "_ci", "_n"))])


# ---- curves --------------------------------------------------------------------------------

def curves(source: Source, kind: str = "eval",
           columns: Sequence[str] = ("label",)) -> pd.DataFrame:
    """The ``metrics.csv`` rows of ``kind`` of every run, stacked (tidy, in file order).

    ``kind="eval"``: ``time_s`` (simulated s), ``iteration`` (updates applied), ``samples``
    (iteration x samples_per_update), ``loss`` and ``accuracy`` (held out).
    ``kind="update"``: ``time_s``, ``iteration``, ``samples``, ``worker`` (-1: an aggregate),
    ``clock``, ``version_read``, ``staleness``, ``clock_gap``, ``loss`` (mini-batch).
    Each row starts with ``path``, ``run`` and the run's ``columns`` of :func:`load_runs`
    (default: ``label``). Blank cells are NaN. Raises UserError for a bad ``kind``, a
    missing column, or a missing or malformed ``metrics.csv`` (named).
    """
    names = {"eval": EVAL_COLUMNS, "update": UPDATE_COLUMNS}.get(kind)
    if names is None:
        raise UserError(f"curves: kind must be 'eval' or 'update', got {kind!r}")
    if clash := [c for c in columns if c in names or c == "samples"]:
        # e.g. the summary's clock ("simulated" / "wall") and the update rows' clock
        raise UserError(f"curves: run column(s) {', '.join(clash)} are also columns of the "
                        f"{kind} rows; select them from load_runs instead")
    runs = _as_table(source, ["run", "samples_per_update", *columns])
    frames = []
    for _, run in runs.iterrows():
        result = Run(Path(run["path"]))
        frame = pd.DataFrame({c: result.column(kind, c) for c in names}, columns=list(names))
        frame["iteration"] = frame["iteration"].astype("int64") \
            if frame["iteration"].notna().all() else frame["iteration"]
        frame.insert(2, "samples", frame["iteration"] * run["samples_per_update"])
        for i, key in enumerate(("path", "run", *columns)):
            frame.insert(i, key, [run[key]] * len(frame))
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["path", "run", *columns, "time_s", "iteration", "samples",
                                     *names[2:]])
    return pd.concat(frames, ignore_index=True)
