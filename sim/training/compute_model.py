"""Compute-time model: how long a worker takes for one gradient, in simulated seconds.

time = (FLOPs / device rate + per-call overhead), or a fixed ``compute.time_s``;
times a noise factor of mean 1 (constant, exponential, shifted exponential or lognormal),
times the
straggler slowdown of the worker, times any named slowdown active when the
gradient starts. Every worker draws from its own generator, spawned from the
run's seed, so a worker's draws do not depend on how events interleave.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibrated import load_profile, write_profile

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

    def __post_init__(self) -> None:
        if not (self.flops_per_s > 0 and math.isfinite(self.overhead_s)
                and self.overhead_s >= 0):
            raise ValueError(f"device {self.name!r}: need flops_per_s > 0 and overhead_s >= 0, "
                             f"got {self.flops_per_s} and {self.overhead_s}")
        if self.memory_bytes is not None and not (0 < self.memory_bytes < math.inf):
            raise ValueError(f"device {self.name!r}: need memory_bytes > 0 and finite (or "
                             f"null: not known), got {self.memory_bytes}")


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
    "v100": Device("v100", 15.7e12, 10e-6, "NVIDIA V100 datasheet (FP32 peak, 32 GB HBM2)",
                   memory_bytes=32 * 2**30),
    # NVIDIA A100 SXM datasheet: 19.5 TFLOP/s FP32 peak (156 TF32 with tensor cores).
    # Memory: the datasheet's 80 GB HBM2e model (a 40 GB one exists too).
    "a100": Device("a100", 19.5e12, 10e-6, "NVIDIA A100 datasheet (FP32 peak, 80 GB HBM2e)",
                   memory_bytes=80 * 2**30),
    # NVIDIA H100 SXM datasheet: 67 TFLOP/s FP32 peak; 80 GB HBM3.
    "h100": Device("h100", 67e12, 10e-6, "NVIDIA H100 datasheet (FP32 peak, 80 GB HBM3)",
                   memory_bytes=80 * 2**30),
}


def load_device(spec: str) -> Device:
    """A preset name or ``calibrated:PATH`` (JSON: flops_per_s, and optionally overhead_s,
    name, source, on_host). Raises ValueError."""
    return load_profile(spec, DEVICES, Device, PROFILE_FORMAT, what="device profile",
                        preset="device", measurements={"points", "concurrency"},
                        required=["flops_per_s"], defaults=lambda path: {
                            "name": path.stem, "source": str(path), "overhead_s": 0.0,
                            "on_host": True})  # calibrate measures this CPU


def save_device_profile(path: str | Path, flops_per_s: float, overhead_s: float,
                        source: str, **extra: object) -> None:
    """Write a device profile that ``compute.device = "calibrated:PATH"`` reads (``extra``:
    its name, default the file's; how it was measured: points, concurrency)."""
    path = Path(path)
    device = Device(name=str(extra.pop("name", path.stem)), flops_per_s=flops_per_s,
                    overhead_s=overhead_s, source=source, on_host=True)
    write_profile(path, device, PROFILE_FORMAT, **extra)


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

    def __init__(self, cfg, flops_per_gradient: float, workers: int, seed: int) -> None:
        self.device = load_device(cfg.device)
        self.flops_per_gradient = flops_per_gradient
        self.base_s = cfg.time_s if cfg.time_s is not None else (
            self.device.overhead_s + flops_per_gradient / self.device.flops_per_s)
        self.noise, self.cfg = NOISE[cfg.distribution], cfg
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

    def base_for(self, flops: float) -> float:
        """Seconds for ``flops`` of a gradient before noise and slowdowns: the device's rate
        and per-gradient overhead, or ``compute.time_s`` scaled by their share of a whole
        gradient's FLOPs (``base_s`` exactly for a whole gradient's)."""
        if self.cfg.time_s is not None:
            return self.cfg.time_s * (flops / self.flops_per_gradient)
        return self.device.overhead_s + flops / self.device.flops_per_s

    def part_duration(self, worker: int, now: float, flops: float) -> float:
        """Seconds for rank ``worker``'s part of a step, ``flops`` of the gradient (a stage's
        shard under model parallelism), starting at ``now``: :meth:`base_for`, times the
        noise, straggler and slowdown factors :meth:`duration` applies."""
        return self._drawn(worker, now, self.base_for(flops))

    def _drawn(self, worker: int, now: float, base_s: float) -> float:
        t = base_s * self.noise(self.rngs[worker], self.cfg) * self.factor[worker]
        for slow in self.slowdowns:
            if slow.worker == worker and slow.start_s <= now and (
                    slow.end_s is None or now < slow.end_s):
                t *= slow.factor
        return t
