"""Figures from result files only (never from live objects): PNG, SVG and PDF, deterministic.

Every ``plot_*`` function reads run directories (``config.toml``, ``summary.json``,
``metrics.csv``, ``trace.json``) or a sweep directory (``results.csv`` and
``runs/<name>/``), writes ``<stem>.png``, ``<stem>.svg`` and ``<stem>.pdf`` atomically into
an output directory and returns their paths; its ``*_figure`` twin returns the
:class:`matplotlib.figure.Figure` instead, to adjust before saving. Legends name each run by
the config keys that differ between the runs compared, readably (``SSP (s = 3)``, see
:mod:`sim.plots.legends`); seeds of one configuration are drawn as their mean and 95%
confidence interval; a real run is dashed in its simulated twin's colour, on wall-clock time.

- :func:`plot_loss_time`, :func:`plot_loss_updates`: held-out loss, a line per configuration
- :func:`plot_staleness`: staleness histograms of the applied updates (side by side, or a
  panel each for many runs)
- :func:`plot_gantt`: per-worker compute / communication / wait timeline, one per run
- :func:`plot_breakdown`: mean compute / communication / wait time per worker, a bar per run
- :func:`plot_scaling`: throughput and speedup vs workers (log-log) from a sweep's results.csv
- :func:`plot_pipelining`: speedup of each pipelining mode vs M / C, with the ideal;
  :func:`plot_buckets`: iteration time vs bucket size (both from a sweep's results.csv)
- :func:`plot_checkpoint_interval`: wall time vs checkpoint interval under failures, with
  Daly's expectation and optimum and Young's (from a sweep of ``checkpoint.every_steps``)
- :func:`plot_bubble`: pipeline bubble vs its closed form (p - 1)/(m + p - 1) and peak
  memory per schedule; :func:`plot_memory_time`: memory per rank vs time per sample of
  data- and model-parallel layouts (both from a sweep's results.csv); :func:`plot_schedule`:
  a pipelined run's first step, passes labelled by microbatch, a row per rank
- :func:`plot_placements`: where embedding tables live (parameter servers, replicated,
  all-to-all): bytes per worker and step, step time per fabric and shard load against the
  ids' power-law exponent (from a sweep of ``embeddings.placement``)
- :func:`plot_message_parts`: where one message's time goes under each transport (calls,
  copies, serialisation, wire: :func:`sim.training.host_costs.message_parts`) against its
  size; :func:`plot_transports`: time
  per update by model, transport and fabric (from a sweep of ``cluster.transport``)
- :func:`plot_runs`: the kinds asked for (the ``plot`` command);
  :func:`plot_sweep`: a sweep's standard comparison figures into ``SWEEP/plots/`` (both
  in :mod:`sim.plots.kinds`)

This module only re-exports: each figure lives in its own module.
"""

from __future__ import annotations

from sim.plots.checkpoint_interval import interval_figure, plot_checkpoint_interval
from sim.plots.embedding_figures import placements_figure, plot_placements
from sim.plots.figures import breakdown_figure, plot_breakdown, plot_staleness, staleness_figure
from sim.plots.gantt import gantt_figure, plot_gantt
from sim.plots.kinds import KINDS, NO_LOSS, PlotOptions, parse_kinds, plot_runs, plot_sweep
from sim.plots.legends import differing_keys, run_labels
from sim.plots.loss import loss_figure, parse_xlim, plot_loss_time, plot_loss_updates
from sim.plots.parallel_figures import (
    bubble_figure,
    memory_time_figure,
    plot_bubble,
    plot_memory_time,
    plot_schedule,
    schedule_figure,
)
from sim.plots.pipelining import buckets_figure, pipelining_figure, plot_buckets, plot_pipelining
from sim.plots.scaling import plot_scaling, scaling_figure
from sim.plots.transport_figures import (
    message_parts_figure,
    plot_message_parts,
    plot_transport_steps,
    plot_transports,
    transport_rows,
    transport_steps_figure,
)

__all__ = ["KINDS", "NO_LOSS", "PlotOptions", "placements_figure", "plot_placements",
           "bubble_figure", "memory_time_figure", "plot_bubble",
           "plot_memory_time", "plot_schedule", "schedule_figure", "breakdown_figure",
           "buckets_figure", "differing_keys",
           "interval_figure", "plot_checkpoint_interval",
           "gantt_figure", "loss_figure", "parse_kinds", "parse_xlim", "pipelining_figure",
           "plot_breakdown", "plot_buckets", "plot_gantt", "plot_loss_time",
           "plot_loss_updates", "plot_pipelining", "plot_runs", "plot_scaling",
           "plot_staleness", "plot_sweep", "run_labels", "scaling_figure",
           "staleness_figure", "message_parts_figure", "plot_message_parts",
           "plot_transport_steps", "plot_transports", "transport_rows",
           "transport_steps_figure"]
