"""Sweeps: a config's ``[sweep]`` grid run as one resumable batch of runs.

:mod:`sim.sweep.grid` expands and names the points; :mod:`sim.sweep.execute` runs them on
local processes or a Dask cluster and collects ``results.csv``.
"""

from sim.sweep.execute import SweepReport, run_point, run_sweep, write_results
from sim.sweep.grid import (
           MAX_NAME,
           Point,
           Sweep,
           flatten,
           format_value,
           grid,
           load_sweep,
           point_names,
)

__all__ = ["MAX_NAME", "Point", "Sweep", "SweepReport", "flatten", "format_value", "grid",
           "load_sweep", "point_names", "run_point", "run_sweep", "write_results"]
