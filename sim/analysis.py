"""Run and sweep directories as pandas DataFrames: the helpers the notebooks use.

Everything is read from result files on disk (``config.toml``, ``summary.json``,
``metrics.csv``, a sweep's ``results.csv``) through the readers of
:mod:`sim.results`, so a missing or malformed file raises
:class:`sim.errors.UserError` naming the path, exactly as the plots do.

- :func:`load_results`: a sweep's ``results.csv``, one row per run
- :func:`load_runs`: runs (and sweeps, expanded) with their resolved config and summary
- :func:`curves`: tidy evaluation (or update) rows of ``metrics.csv``
- :func:`samples_to_target`, :func:`efficiency`, :func:`tradeoff`: hardware vs statistical
  efficiency (seconds per sample, samples to a target loss)
- :func:`select`, :func:`table`: rows matching config values; a value as a 2-D table
- :func:`by_config`: runs differing only by their seed taken together: mean and 95%
  confidence interval per configuration
- :func:`pipeline_bubble`, :func:`layouts`, :func:`fastest_layouts`: model parallelism:
  measured bubble against (p - 1)/(m + p - 1) with peak memory; time per sample and memory
  of D x p x t layouts; the fastest layout that fits per width and fabric (the crossover)
- :func:`override`, :func:`cached_sweep`: ``--set`` text; a sweep run once per overrides
- :func:`setup_notebook`, :func:`show`: a notebook's figure style and results directory;
  the PNGs a plot function wrote, displayed

Units follow the result files: ``*_s`` are simulated seconds, losses are held-out losses.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
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


# ---- hardware vs statistical efficiency ----------------------------------------------------

def samples_to_target(samples: Sequence[float] | np.ndarray,
                      loss: Sequence[float] | np.ndarray, target: float) -> float:
    """Samples processed when ``loss`` first reached ``target`` (loss <= target),
    interpolated linearly between the two evaluations around the crossing; the first
    point's samples if it already met it, NaN if the loss never did. ``samples`` and
    ``loss`` are parallel, in evaluation order. Raises UserError if their lengths differ."""
    x, y = np.asarray(samples, dtype=float), np.asarray(loss, dtype=float)
    if x.shape != y.shape:
        raise UserError(f"samples_to_target: {x.size} samples but {y.size} losses")
    reached = np.flatnonzero(y <= target)
    if not reached.size:
        return math.nan
    k = int(reached[0])
    if k == 0:
        return float(x[0])
    share = (y[k - 1] - target) / (y[k - 1] - y[k])
    return float(x[k - 1] + share * (x[k] - x[k - 1]))


def efficiency(source: Source, slack: float = 1.05,
               target: float | None = None) -> pd.DataFrame:
    """Hardware and statistical efficiency of each run (one row per run, in order).

    Columns: ``path``, ``run``, ``label``, ``run.seed``, ``s_per_sample`` (simulated
    seconds per sample, 1 / samples_per_s: hardware efficiency), ``target_loss`` and
    ``samples_to_target`` (samples processed until the held-out loss first reached it,
    interpolated: statistical efficiency; NaN if never). Their product is the time to the
    target. The target is ``target`` if given, else per seed ``slack`` x the worst
    best-loss among that seed's runs, so that with slack >= 1 every run reaches it.
    Raises UserError for slack < 1 or for what :func:`curves` raises.
    """
    if not slack >= 1:
        raise UserError(f"efficiency: slack must be at least 1, got {slack}")
    runs = _as_table(source, ["run", "label", "run.seed", "samples_per_s",
                              "samples_per_update"])
    evals = curves(runs, "eval", columns=())
    best = evals.groupby("path", sort=False)["loss"].min()
    out = runs[["path", "run", "label", "run.seed"]].reset_index(drop=True)
    out["s_per_sample"] = 1.0 / runs["samples_per_s"].to_numpy(dtype=float)
    if target is None:
        worst_best = out["path"].map(best).groupby(out["run.seed"]).transform(
            lambda s: s.max(skipna=False))
        out["target_loss"] = slack * worst_best
    else:
        out["target_loss"] = float(target)
    by_path = dict(tuple(evals.groupby("path", sort=False)))
    out["samples_to_target"] = [
        samples_to_target(by_path[p]["samples"], by_path[p]["loss"], goal) if p in by_path
        else math.nan for p, goal in zip(out["path"], out["target_loss"], strict=True)]
    return out


def tradeoff(points: pd.DataFrame) -> pd.DataFrame:
    """One point per strategy label for the hardware vs statistical efficiency picture:
    the means over runs (seeds) of :func:`efficiency`'s ``s_per_sample`` and
    ``samples_to_target`` (NaN if any run's is), ``time_to_target_s`` (their product,
    simulated s) and ``runs`` (how many), labels in order of first appearance.
    Raises UserError if ``points`` lacks those columns."""
    needed = ["label", "s_per_sample", "samples_to_target"]
    missing = [c for c in needed if c not in points.columns]
    if missing:
        raise UserError(f"tradeoff: expected a table from efficiency (missing columns: "
                        f"{', '.join(missing)})")
    groups = points.groupby("label", sort=False)
    out = groups[needed[1:]].agg(lambda s: s.mean(skipna=False))
    out["time_to_target_s"] = out["s_per_sample"] * out["samples_to_target"]
    out["runs"] = groups.size()
    return out.reset_index()


# ---- running sweeps from a notebook --------------------------------------------------------

def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | np.integer | np.floating):
        return repr(value.item() if isinstance(value, np.generic) else value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise UserError(f"override: cannot write {value!r} ({type(value).__name__}) as TOML")


def override(key: str, value: Any) -> str:
    """The ``--set`` text ``key=value`` with ``value`` (bool, number, string or a list of
    them) written as TOML, e.g. ``override("sweep.cluster.workers", [1, 4])`` ->
    ``'sweep.cluster.workers=[1, 4]'``. Raises UserError for other types."""
    return f"{key}={_toml(value)}"


def cached_sweep(config: PathLike, out: PathLike, overrides: Sequence[str] = (),
                 quiet: bool = False, jobs: int | None = None) -> Path:
    """Run (or resume) the ``[sweep]`` of ``config`` with ``--set`` ``overrides`` into
    ``OUT-<hash of the overrides>`` and return that directory.

    Changed overrides get a fresh directory; unchanged ones reuse the finished runs (the
    sweep is resumable). ``jobs``: local worker processes (default: one per core; 1 runs
    the points in this process). Prints one line (runs made, reused, where) unless ``quiet``.
    Raises UserError for a bad config or override, or naming the points that failed.
    """
    from sim.sweep import run_sweep

    tag = hashlib.sha256(json.dumps(list(overrides)).encode()).hexdigest()[:8]
    target = Path(out)
    report = run_sweep(config, target.with_name(f"{target.name}-{tag}"), list(overrides),
                       jobs=jobs, plots=False, progress=False)
    if report.failed:
        raise UserError(f"{config}: failed runs: {report.failed}")
    if not quiet:
        print(f"{Path(config).stem}: {len(report.ran)} runs, {len(report.skipped)} reused "
              f"-> {report.out}")
    return Path(report.out)


# ---- model parallelism ---------------------------------------------------------------------

def pipeline_bubble(sweep_dir: PathLike, reference: bool = True) -> pd.DataFrame:
    """A pipeline sweep's runs: run, pipeline, microbatches, schedule, bubble_fraction, the
    closed form (p - 1)/(m + p - 1), their difference ``excess`` and peak_memory_bytes (the
    values :func:`sim.plots.plot_bubble` draws). With ``reference``, also the bubble
    :func:`sim.training.pipeline_schedule.evaluate` gives for each stage's own mean forward
    and backward pass times in the run's first step (from trace.json; free messages): what
    is left of the excess beyond it is communication. Raises UserError when no run reports
    a bubble."""
    from sim.plots.parallel_figures import bubble_rows

    rows = pd.DataFrame(bubble_rows(Path(sweep_dir)))
    rows["excess"] = rows["bubble_fraction"] - rows["closed_form"]
    if reference:
        rows["reference"] = [_reference_bubble(Path(sweep_dir) / "runs" / r.run, r.schedule,
                                               r.pipeline, r.microbatches)
                             for r in rows.itertuples()]
    return rows


def _reference_bubble(run_dir: Path, schedule: str, p: int, m: int) -> float:
    """The schedule's bubble for the stages' measured pass times (replica 0, shard 0)."""
    from sim.plots.parallel_figures import first_step, schedule_slices
    from sim.training.pipeline_schedule import evaluate, schedule_ops

    if not (run_dir / "trace.json").is_file():
        return math.nan
    passes = first_step(schedule_slices(run_dir), m)
    times: dict[tuple[int, str], list[float]] = {}
    for rank, kind, _k, start, end in passes:
        times.setdefault((rank, kind), []).append(end - start)
    try:
        forward = [float(np.mean(times[(s, "F")])) for s in range(p)]
        backward = [float(np.mean(times[(s, "B")])) for s in range(p)]
    except KeyError:
        return math.nan
    return evaluate(schedule_ops(schedule, p, m), forward, backward).bubble_fraction


def layouts(sweep_dir: PathLike) -> pd.DataFrame:
    """A sweep of D x p x t layouts: layout, replicas, pipeline, tensor, fabric, width,
    time_per_sample_s, peak_memory_bytes, device_memory_bytes, memory_fits (the values
    :func:`sim.plots.plot_memory_time` draws)."""
    from sim.plots.parallel_figures import layout_rows

    return pd.DataFrame(layout_rows(Path(sweep_dir)))


def fastest_layouts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per width and fabric, the layout with the least time per sample among those that fit
    in the device's memory (``memory_fits`` not False), and the runner-up's time: where the
    winner changes along a row or column is the crossover."""
    fits = rows[rows["memory_fits"].map(lambda v: v is not False)]
    out = []
    for (width, fabric), group in fits.groupby(["width", "fabric"], sort=True):
        ranked = group.sort_values("time_per_sample_s")
        first = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        out.append({"width": width, "fabric": fabric, "fastest": first["layout"],
                    "time_per_sample_s": first["time_per_sample_s"],
                    "runner_up": None if second is None else second["layout"],
                    "runner_up_s": math.nan if second is None else second["time_per_sample_s"]})
    return pd.DataFrame(out)


# ---- embedding tables ------------------------------------------------------------------------

def placements(sweep_dir: PathLike) -> pd.DataFrame:
    """A sweep of embedding placements (``embeddings.placement`` and its options): one row
    per run with its layout name, zipf, fabric, step_s, bytes per step, shard load, cache
    hit rate and time to target (the values :func:`sim.plots.plot_placements` draws)."""
    from sim.plots.embedding_figures import placement_rows

    return pd.DataFrame(placement_rows(Path(sweep_dir)))


# ---- a notebook's setup --------------------------------------------------------------------

#: The checkout this module belongs to (holds ``sim/`` and ``experiments/``).
CHECKOUT = Path(__file__).resolve().parent.parent


class NotebookPaths(NamedTuple):
    """Where a notebook reads and writes (:func:`setup_notebook`)."""

    root: Path  # the checkout
    experiments: Path  # root / "experiments": the experiment configs
    runs: Path  # this notebook's results directory (it exists)


def setup_notebook(name: str, quick: bool | None = None,
                   root: PathLike | None = None) -> NotebookPaths:
    """What every notebook does first: draw figures in :data:`sim.plots.style.STYLE` (at
    100 dpi) and choose, create and print where the notebook ``name`` writes results.

    ``quick`` (default: ``SGD_LAB_QUICK=1`` in the environment) is the small form the tests
    run. Results go to ``$SGD_LAB_RUNS/NAME`` if set, else to a fresh temporary directory
    (quick) or ``ROOT/runs/notebooks/NAME``. ``root`` defaults to this module's checkout.
    Raises UserError for a ``name`` that is not one plain path component, a root without
    ``experiments/``, or a results directory that cannot be created (naming it).
    """
    import matplotlib

    from sim.plots.style import STYLE

    if not name or name in (".", "..") or Path(name).name != name or "\\" in name:
        raise UserError(f"setup_notebook: name must be one path component, got {name!r}")
    quick = os.environ.get("SGD_LAB_QUICK") == "1" if quick is None else quick
    checkout = Path(root).resolve() if root is not None else CHECKOUT
    experiments = checkout / "experiments"
    if not experiments.is_dir():
        raise UserError(f"{experiments}: missing (start the notebook inside a checkout of "
                        "sgd-lab, or pass root=)")
    base = os.environ.get("SGD_LAB_RUNS")
    if base:
        runs = Path(base) / name
    elif quick:
        runs = Path(tempfile.mkdtemp(prefix="sgd-lab-")) / name
    else:
        runs = checkout / "runs" / "notebooks" / name
    try:
        runs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{runs}: cannot create the results directory: {exc}") from None
    matplotlib.rcParams.update({**STYLE, "figure.dpi": 100})
    print(f"results in {runs}" + ("  (quick form)" if quick else ""))
    return NotebookPaths(checkout, experiments, runs)


def show(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    """Display in the notebook the PNG images among ``paths`` (what a ``sim.plots``
    function returns: PNG and SVG of each figure) and return them; other files are skipped.
    Raises UserError naming a PNG that does not exist."""
    from IPython.display import Image, display

    items = [paths] if isinstance(paths, str | Path) else list(paths)
    shown = [Path(p) for p in items if Path(p).suffix.lower() == ".png"]
    for path in shown:
        if not path.is_file():
            raise UserError(f"{path}: no such image")
        display(Image(filename=str(path)))
    return shown
