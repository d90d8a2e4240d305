"""Compute-time model: how long a worker takes for one gradient, in simulated seconds.

time = per-gradient overhead + FLOPs / device rate + weight traffic / memory bandwidth
+ activation traffic / activation bandwidth + ids read by index x seconds per id, or a fixed
``compute.time_s``.

The traffic term is the roofline's second resource (Williams, Waterman and Patterson 2009),
added rather than overlapped: a pass over a dense layer moves its weights through memory
whatever the batch (forward reads them, backward reads them and writes their gradient), so
a small batch or microbatch (Narayanan et al. 2021, Sec. 3.4: the pass time t(b) of
microbatch size b) computes fewer FLOPs per byte and runs at a lower rate. Devices without
a memory bandwidth (``memory_Bps = None``) charge FLOPs only.

The activation term is the rest of each matrix product's operands: a dense layer's pass over
b rows reads and writes b x (inputs + outputs) values besides its weights (forward: the
input and the output; backward: the output's gradient and the input for the weights'
gradient, the output's gradient again and the input's gradient), the bytes of a GEMM's
arithmetic intensity. They grow with the batch, not with the microbatches, and are few
enough to stay in the caches, so they have a bandwidth of their own
(``activation_Bps``; None: not charged). A wide input with one output (logistic regression
on thousands of features) is all activation traffic.

The ids term is the sparse part's: an embedding bag reads each of a batch's ids by index,
and its backward finds the distinct ones and scatters their row gradients back, work that
grows with the ids, not with FLOPs or weights (the embedding operators that dominate
recommendation models: Gupta et al. 2020, "The architectural implications of Facebook's
DNN-based personalized recommendation", HPCA; Naumov et al. 2019's DLRM). Devices without
``lookup_s`` charge nothing per id.

The time is multiplied by a noise factor of mean 1 (constant, exponential, shifted
exponential or lognormal), the straggler slowdown of the worker and any named slowdown
active when the gradient starts. Every worker draws from its own generator, spawned from
the run's seed, so a worker's draws do not depend on how events interleave.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibrated import load_profile, write_profile
from sim.training.messages import weight_passes

PROFILE_FORMAT = "sgd-lab.device-profile/1"


@dataclass(frozen=True)
class Device:
    name: str
    flops_per_s: float  # sustained rate on the training kernels
    overhead_s: float  # fixed cost per gradient (kernel launches, framework)
    source: str
    on_host: bool = False  # the gradient runs on a host core (a CPU device)
    # what one rank may hold (parameters, gradients, optimizer state, stashed activations);
    # None: not known, so a config is never refused for memory, only reported
    memory_bytes: float | None = None
    # bytes/s at which a pass moves its layers' weights (the roofline's memory bandwidth);
    # None: not charged, a pass costs its FLOPs only
    memory_Bps: float | None = None
    # seconds per id a gradient reads by index, its forward gather and backward scatter
    # together (the sparse part's work); None: not charged
    lookup_s: float | None = None
    # bytes/s at which a pass moves its layers' inputs and outputs (activation traffic);
    # None: not charged
    activation_Bps: float | None = None

    def __post_init__(self) -> None:
        if not (self.flops_per_s > 0 and math.isfinite(self.overhead_s)
                and self.overhead_s >= 0):
            raise ValueError(f"device {self.name!r}: need flops_per_s > 0 and overhead_s >= 0, "
                             f"got {self.flops_per_s} and {self.overhead_s}")
        if self.memory_bytes is not None and not (0 < self.memory_bytes < math.inf):
            raise ValueError(f"device {self.name!r}: need memory_bytes > 0 and finite (or "
                             f"null: not known), got {self.memory_bytes}")
        if self.memory_Bps is not None and not (0 < self.memory_Bps < math.inf):
            raise ValueError(f"device {self.name!r}: need memory_Bps > 0 and finite (or "
                             f"null: not charged), got {self.memory_Bps}")
        if self.activation_Bps is not None and not (0 < self.activation_Bps < math.inf):
            raise ValueError(f"device {self.name!r}: need activation_Bps > 0 and finite (or "
                             f"null: not charged), got {self.activation_Bps}")
        if self.lookup_s is not None and not (0 <= self.lookup_s < math.inf):
            raise ValueError(f"device {self.name!r}: need lookup_s >= 0 and finite (or "
                             f"null: not charged), got {self.lookup_s}")

    def seconds(self, flops: float, traffic: float = 0.0, lookups: float = 0.0,
                activations: float = 0.0) -> float:
        """Seconds of ``flops`` moving ``traffic`` bytes of weights and ``activations``
        bytes of layers' inputs and outputs, and reading ``lookups`` ids by index, without
        the overhead."""
        moved = traffic / self.memory_Bps if self.memory_Bps is not None else 0.0
        passed = activations / self.activation_Bps if self.activation_Bps is not None else 0.0
        looked = lookups * self.lookup_s if self.lookup_s is not None else 0.0
        return flops / self.flops_per_s + moved + passed + looked


DEVICES: dict[str, Device] = {
    # One core of the lab's machine by `python -m sim bench kernels` (fused logistic
    # regression, n=64, d=1000, float64, the simulator's dtype); the per-call cost is the
    # Python wrapper's. The run and its machine: docs/measurements/kernels.md. Its memory
    # is the host's, shared by every rank on it: not a per-rank number, so left unknown.
    "cpu-core": Device("cpu-core", 21e9, 3.5e-6, "measured here (bench kernels, float64)",
                       True),
    # NVIDIA V100 SXM2 datasheet: 15.7 TFLOP/s FP32 peak; ~10 us of kernel launches per step.
    # Memory: the datasheet's 32 GB HBM2 model (a 16 GB one exists too); HBM "GB" are GiB,
    # and the driver keeps a few hundred MiB of them for itself.
    # Memory bandwidth: the datasheets' HBM peak (900 GB/s V100 SXM2, 2,039 GB/s A100 80 GB
    # SXM, 3.35 TB/s H100 SXM), as the FLOP rate is their peak: small-batch passes over a
    # layer's weights run at it (Williams et al. 2009's roofline).
    "v100": Device("v100", 15.7e12, 10e-6, "NVIDIA V100 datasheet (FP32 peak, 32 GB HBM2, "
                   "900 GB/s)", memory_bytes=32 * 2**30, memory_Bps=900e9),
    # NVIDIA A100 SXM datasheet: 19.5 TFLOP/s FP32 peak (156 TF32 with tensor cores).
    # Memory: the datasheet's 80 GB HBM2e model (a 40 GB one exists too).
    "a100": Device("a100", 19.5e12, 10e-6, "NVIDIA A100 datasheet (FP32 peak, 80 GB HBM2e, "
                   "2,039 GB/s)", memory_bytes=80 * 2**30, memory_Bps=2039e9),
    # NVIDIA H100 SXM datasheet: 67 TFLOP/s FP32 peak; 80 GB HBM3.
    "h100": Device("h100", 67e12, 10e-6, "NVIDIA H100 datasheet (FP32 peak, 80 GB HBM3, "
                   "3.35 TB/s)", memory_bytes=80 * 2**30, memory_Bps=3.35e12),
}


def load_device(spec: str) -> Device:
    """A preset name or ``calibrated:PATH`` (JSON: flops_per_s, and optionally overhead_s,
    name, source, on_host). Raises ValueError."""
    return load_profile(spec, DEVICES, Device, PROFILE_FORMAT, what="device profile",
                        preset="device",
                        measurements={"points", "concurrency", "in_run_sigma"},
                        required=["flops_per_s"], defaults=lambda path: {
                            "name": path.stem, "source": str(path), "overhead_s": 0.0,
                            "on_host": True})  # calibrate measures this CPU


def save_device_profile(path: str | Path, flops_per_s: float, overhead_s: float,
                        source: str, memory_Bps: float | None = None,
                        lookup_s: float | None = None, activation_Bps: float | None = None,
                        **extra: object) -> None:
    """Write a device profile that ``compute.device = "calibrated:PATH"`` reads (``extra``:
    its name, default the file's; how it was measured: points, concurrency)."""
    path = Path(path)
    device = Device(name=str(extra.pop("name", path.stem)), flops_per_s=flops_per_s,
                    overhead_s=overhead_s, source=source, on_host=True,
                    memory_Bps=memory_Bps, lookup_s=lookup_s, activation_Bps=activation_Bps)
    write_profile(path, device, PROFILE_FORMAT, **extra)


def describe_rates(flops_per_s: float, overhead_s: float, memory_Bps: float | None,
                   lookup_s: float | None = None, activation_Bps: float | None = None) -> str:
    """A device's compute model in words: "36.7 GFLOP/s + 9.6 us per gradient" and, with a
    memory term, "+ weights at 11.2 GB/s", with an activation term, "+ activations at
    150.0 GB/s", with a lookup term, "+ 270 ns per id"."""
    text = f"{flops_per_s / 1e9:.1f} GFLOP/s + {overhead_s * 1e6:.1f} us per gradient"
    text += f" + weights at {memory_Bps / 1e9:.1f} GB/s" if memory_Bps else ""
    text += f" + activations at {activation_Bps / 1e9:.1f} GB/s" if activation_Bps else ""
    return text + (f" + {lookup_s * 1e9:.0f} ns per id" if lookup_s else "")


# name -> factor(rng, compute config), each of mean 1
NOISE: dict[str, Callable[[np.random.Generator, Any], float]] = {
    "constant": lambda rng, cfg: 1.0,
    # can take almost no time: below the FLOP limit of the device
    "exponential": lambda rng, cfg: rng.exponential(1.0),
    # a fixed minimum (the work itself) plus an exponential tail (interference): Dutta et
    # al. 2018, "Slow and stale gradients can win the race", Sec. 5
    "shifted-exponential": lambda rng, cfg: cfg.shift + rng.exponential(1.0 - cfg.shift)
    if cfg.shift < 1 else 1.0,
    "lognormal": lambda rng, cfg: rng.lognormal(-cfg.sigma ** 2 / 2, cfg.sigma),
}


class ComputeModel:
    """Seconds per gradient for each worker (see the module docstring)."""

    def __init__(self, cfg, flops_per_gradient: float, workers: int, seed: int,
                 traffic_per_gradient: float = 0.0, lookups_per_gradient: float = 0.0,
                 activations_per_gradient: float = 0.0) -> None:
        self.cfg, self.device = cfg, load_device(cfg.device)
        self.flops_per_gradient = flops_per_gradient
        self.base_s = cfg.time_s if cfg.time_s is not None else (
            self.base_for(flops_per_gradient, traffic_per_gradient, lookups_per_gradient,
                          activations_per_gradient))
        self.noise = NOISE[cfg.distribution]
        streams = np.random.SeedSequence([seed, 0xC0FFEE]).spawn(workers + 1)
        self.rngs = [np.random.default_rng(s) for s in streams[:workers]]
        chooser = np.random.default_rng(streams[-1])
        slow = chooser.choice(workers, int(round(cfg.straggler_fraction * workers)),
                              replace=False)
        self.factor = np.ones(workers)
        self.factor[slow] = cfg.straggler_slowdown
        self.slowdowns = cfg.slowdowns
        # a modelled compute.time_s is a sleep on real ranks, not CPU work
        self.on_host = self.device.on_host and cfg.time_s is None

    @property
    def stragglers(self) -> list[int]:
        """The workers ever slowed: the fixed stragglers and the named slowdowns'."""
        return sorted({window["worker"] for window in self.slowdown_windows})

    @property
    def slowdown_windows(self) -> list[dict[str, Any]]:
        """Every slowdown as {worker, factor, start_s, end_s (None: to the end)}: the fixed
        stragglers' for the whole run, then compute.slowdowns' (factor 1 changes nothing)."""
        fixed = [{"worker": w, "factor": float(self.factor[w]), "start_s": 0.0, "end_s": None}
                 for w in np.flatnonzero(self.factor > 1).tolist()]
        named = [{"worker": s.worker, "factor": s.factor, "start_s": s.start_s,
                  "end_s": s.end_s} for s in self.slowdowns if s.factor > 1]
        return fixed + named

    def duration(self, worker: int, now: float) -> float:
        """Seconds for worker's next gradient, starting at simulated time ``now``."""
        return self._drawn(worker, now, self.base_s)

    def base_for(self, flops: float, traffic: float = 0.0, lookups: float = 0.0,
                 activations: float = 0.0) -> float:
        """Seconds for ``flops`` of a gradient moving ``traffic`` bytes of weights and
        ``activations`` bytes of inputs and outputs, and reading ``lookups`` ids by index,
        before noise and slowdowns: the device's per-gradient overhead, rate, bandwidths and
        cost per id, or ``compute.time_s`` scaled by their share of a whole gradient's FLOPs
        (``base_s`` exactly for a whole gradient's)."""
        if self.cfg.time_s is not None:
            return self.cfg.time_s * (flops / self.flops_per_gradient)
        return self.device.overhead_s + self.device.seconds(flops, traffic, lookups,
                                                            activations)

    def part_duration(self, worker: int, now: float, flops: float, traffic: float = 0.0,
                      activations: float = 0.0) -> float:
        """Seconds for rank ``worker``'s part of a step, ``flops`` of the gradient (a stage's
        shard under model parallelism) moving ``traffic`` bytes of weights and
        ``activations`` bytes of inputs and outputs, starting at ``now``: :meth:`base_for`,
        times the noise, straggler and slowdown factors :meth:`duration` applies."""
        return self._drawn(worker, now, self.base_for(flops, traffic, 0.0, activations))

    def layer_shares(self, flops: tuple[np.ndarray, np.ndarray],
                     weight_bytes: np.ndarray | None, passes: int = 1,
                     lookups: np.ndarray | None = None,
                     activations: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray] | None:
        """How a step's compute divides over its layers' forward and backward passes, by
        their seconds on the device: ``flops`` (forward, backward per layer, the whole
        step's), each layer's ``weight_bytes`` moved as ``passes`` microbatches move them
        (:func:`sim.training.messages.weight_passes`), its ``activations`` (bytes of inputs
        and outputs, the whole step's, shared as the FLOPs: one matrix product's operands
        in the forward, one or two in the backward) and the ids it reads (``lookups``,
        the whole step's: half the cost per id in the forward's gather, half in the
        backward's scatter). None when FLOPs alone divide it (no memory, activation or
        lookup term, or a modelled ``compute.time_s``)."""
        device = self.device
        memory = device.memory_Bps is not None and weight_bytes is not None
        passed = device.activation_Bps is not None and activations is not None
        sparse = device.lookup_s is not None and lookups is not None and bool(lookups.any())
        if not (memory or passed or sparse) or self.cfg.time_s is not None:
            return None
        ids = lookups / 2 if sparse else 0.0
        total = flops[0] + flops[1]
        shares = [np.divide(f, total, out=np.zeros_like(total), where=total > 0) for f in flops]
        return tuple(device.seconds(f, times * weight_bytes if memory else 0.0, ids,
                                    share * activations if passed else 0.0)
                     for f, times, share in zip(flops, weight_passes(passes), shares,
                                                strict=True))

    def _drawn(self, worker: int, now: float, base_s: float) -> float:
        t = base_s * self.noise(self.rngs[worker], self.cfg) * self.factor[worker]
        for slow in self.slowdowns:
            if slow.worker == worker and slow.start_s <= now and (
                    slow.end_s is None or now < slow.end_s):
                t *= slow.factor
        return t
