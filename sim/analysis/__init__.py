"""Result files as pandas DataFrames, and the helpers the notebooks use.

Every public name is importable from here; each lives in one module:

- :mod:`~sim.analysis.frames`: tables of runs and sweeps, and their curves:
  :func:`load_results` (a sweep's ``results.csv``), :func:`load_runs` (runs with their
  resolved config and summary), :func:`curves` (tidy rows of ``metrics.csv``),
  :func:`select`, :func:`table` (rows matching config values; a value as a 2-D table),
  :func:`by_config` (runs differing only by their seed: mean and 95% confidence interval)
- :mod:`~sim.analysis.efficiency`: :func:`samples_to_target`, :func:`efficiency`,
  :func:`tradeoff`: hardware vs statistical efficiency (seconds per sample, samples to a
  target loss)
- :mod:`~sim.analysis.layout_frames`: :func:`pipeline_bubble`, :func:`layouts`,
  :func:`fastest_layouts`, :func:`placements`: model parallelism (measured bubble against
  (p - 1)/(m + p - 1) with peak memory; time per sample and memory of D x p x t layouts;
  the fastest layout that fits per width and fabric) and embedding placements
- :mod:`~sim.analysis.notebook_sweeps`: :func:`override`, :func:`cached_sweep`: ``--set``
  text; a sweep run once per overrides
- :mod:`~sim.analysis.notebook_setup`: :func:`setup_notebook`, :func:`show`: a notebook's
  figure style and results directory; the PNGs a plot function wrote, displayed

Units follow the result files: ``*_s`` are simulated seconds, losses are held-out losses.
"""

from __future__ import annotations

from sim.analysis.efficiency import efficiency, samples_to_target, tradeoff
from sim.analysis.frames import (
    EVAL_COLUMNS,
    UPDATE_COLUMNS,
    PathLike,
    Source,
    by_config,
    curves,
    load_results,
    load_runs,
    select,
    strategy_label,
    table,
)
from sim.analysis.layout_frames import fastest_layouts, layouts, pipeline_bubble, placements
from sim.analysis.notebook_setup import CHECKOUT, NotebookPaths, setup_notebook, show
from sim.analysis.notebook_sweeps import cached_sweep, override

__all__ = [
    "CHECKOUT", "EVAL_COLUMNS", "UPDATE_COLUMNS", "NotebookPaths", "PathLike", "Source",
    "by_config", "cached_sweep", "curves", "efficiency", "fastest_layouts", "layouts",
    "load_results", "load_runs", "override", "pipeline_bubble", "placements", "samples_to_target",
    "select", "setup_notebook", "show", "strategy_label", "table", "tradeoff",
]
