"""What a published figure measures, computed from a simulated run.

Absolute quantities read one run (:class:`Measure`); ratios (``ratio = True``) read a row and
the row it is taken against (``relative_to``). Units: seconds, samples per second, TFLOP/s,
fractions. FLOPs are the workload profile's model FLOPs (forward, and backward at 2x forward
but 1x for the first layer: :class:`sim.workloads.timing_profiles.Profile`); a rerun forward
(recomputation) is not counted, as the papers count model FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.errors import UserError


@dataclass(frozen=True)
class Measure:
    """One simulated run, reduced to what the quantities need."""

    step_s: float                    # simulated seconds per step (sim_time_s / iterations)
    gpus: int                        # ranks: replicas x pipeline stages x tensor shards
    samples_per_step: float          # global batch: replicas x workload.batch
    compute_s_per_step: float        # one worker's compute per step (summary compute_s)
    flops_per_sample: float | None   # model FLOPs (forward + backward); None without a profile
    backward_share: float | None     # backward FLOPs / (forward + backward); None likewise

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_step / self.step_s

    def flops_per_s(self, what: str) -> float:
        if self.flops_per_sample is None:
            raise UserError(f"{what} needs workload.profile (the FLOPs of a sample)")
        return self.flops_per_sample * self.samples_per_s


@dataclass(frozen=True)
class Quantity:
    ratio: bool
    description: str
    absolute: Callable[[Measure], float] | None = None
    relative: Callable[[Measure, Measure], float] | None = None

    def value(self, row: Measure, ref: Measure | None = None) -> float:
        if self.ratio:
            assert self.relative is not None and ref is not None
            return self.relative(row, ref)
        assert self.absolute is not None
        return self.absolute(row)


def _backward_s(m: Measure) -> float:
    if m.backward_share is None:
        raise UserError("backward_s needs workload.profile (the backward's share of FLOPs)")
    return m.compute_s_per_step * m.backward_share


def _scaling_efficiency(row: Measure, ref: Measure) -> float:
    """Work per second per GPU against the reference row's (weak scaling): FLOPs where both
    rows have a profile (models of different sizes, Megatron-LM), samples otherwise."""
    if row.flops_per_sample is not None and ref.flops_per_sample is not None:
        return (row.flops_per_s("") / row.gpus) / (ref.flops_per_s("") / ref.gpus)
    return (row.samples_per_s / row.gpus) / (ref.samples_per_s / ref.gpus)


QUANTITIES: dict[str, Quantity] = {
    "step_s": Quantity(False, "seconds per step (iteration)", absolute=lambda m: m.step_s),
    "samples_per_s": Quantity(False, "samples (images, sequences) per second, all GPUs",
                              absolute=lambda m: m.samples_per_s),
    "tflops_per_gpu": Quantity(False, "model TFLOP/s per GPU",
                               absolute=lambda m: m.flops_per_s("tflops_per_gpu")
                               / m.gpus / 1e12),
    "backward_s": Quantity(False, "one worker's backward pass per step, seconds",
                           absolute=_backward_s),
    "speedup": Quantity(True, "samples per second against the reference row's",
                        relative=lambda row, ref: row.samples_per_s / ref.samples_per_s),
    "scaling_efficiency": Quantity(True, "work per second per GPU against the reference "
                                   "row's", relative=_scaling_efficiency),
    "step_ratio": Quantity(True, "seconds per step over the reference row's",
                           relative=lambda row, ref: row.step_s / ref.step_s),
}


def relative_error(lab: float, published: float) -> float:
    """lab / published - 1: +0.05 is 5% above the paper."""
    return lab / published - 1.0
