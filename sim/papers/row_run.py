"""One figure row through the simulator: its config, the run, its :class:`Measure`.

A row's config is the paper's ``[base]`` with the row's ``set`` keys and any calibrated
parameter over it, validated by the one validator and run by the library call ``python -m
sim run`` makes (:func:`sim.simulated.engine.simulate`), timing only.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from sim.config import Config, set_key
from sim.errors import UserError
from sim.papers.quantities import Measure
from sim.training.validator import validate
from sim.workloads.timing_profiles import get_profile


@dataclass(frozen=True)
class RowRun:
    measure: Measure
    wall_s: float                # the simulator's wall time for this row
    summary: dict[str, Any]


def row_config(base: dict[str, Any], overrides: dict[str, Any], source: str) -> Config:
    """``base`` with each dotted key of ``overrides`` set, validated. Raises UserError naming
    ``source`` and the key (an unknown key: one line, with the closest known one)."""
    data = copy.deepcopy(base)
    for key, value in overrides.items():
        set_key(data, key.split("."), value, source)
    return validate(data, source)  # timing only: the paper file's loader checked numerics


def measure(config: Config, summary: dict[str, Any]) -> Measure:
    """The quantities' inputs from a finished run of ``config``."""
    iterations = summary["iterations"]
    par = config.parallel
    flops = share = None
    if config.workload.profile is not None:
        profile = get_profile(config.workload.profile)
        forward = profile.forward_flops
        backward = sum(profile.backward_flops(i) for i in range(len(profile.layers)))
        flops, share = forward + backward, backward / (forward + backward)
    return Measure(step_s=summary["sim_time_s"] / iterations,
                   gpus=config.cluster.workers * par.pipeline * par.tensor,
                   samples_per_step=float(config.cluster.workers * config.workload.batch),
                   compute_s_per_step=summary["compute_s"] / iterations,
                   flops_per_sample=flops, backward_share=share)


def run_row(config: Config) -> RowRun:
    """Simulate ``config``; raises UserError if the run did not finish."""
    from sim.simulated.engine import simulate  # the executor: imported when a row runs

    start = time.perf_counter()
    result = simulate(config)
    wall = time.perf_counter() - start
    summary = result.summary
    if not summary.get("complete", True) or not summary["iterations"]:
        raise UserError("the run stopped before its last step")
    return RowRun(measure(config, summary), wall, summary)
