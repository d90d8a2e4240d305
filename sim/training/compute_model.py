"""Compute-time model: how long a worker takes for one gradient, in simulated seconds.

time = per-gradient overhead + FLOPs / device rate + weight traffic / memory bandwidth
+ activation traffic / activation bandwidth + ids read by index x seconds per id, or a fixed
``compute.time_s``.

The traffic term is the roofline's second resource (Williams, Waterman and Patterson 2009):
a pass over a dense layer moves its weights through memory whatever the batch (forward
reads them, backward reads them and writes their gradient), so a small batch or microbatch
(Narayanan et al. 2021, Sec. 3.4: the pass time t(b) of microbatch size b) computes fewer
FLOPs per byte and runs at a lower rate. How it meets the FLOPs is the device's
(``Device.roofline``): the accelerator presets take the roofline's max, layer by layer and
pass by pass (a GEMM streams its operands while it multiplies: NVIDIA's "GPU Performance
Background User's Guide" calls a kernel math- or memory-limited by the longer of the two),
so a compute-bound pass hides its weights and a memory-bound one pays them in full; a
calibrated CPU adds them, as ``sim calibrate`` fits this machine's kernels timed at two
batch sizes. Devices without a memory bandwidth (``memory_Bps = None``) charge FLOPs only.

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

Op classes and precision (``compute.precision`` set): a run's layers split their work into
GEMM-class FLOPs (matrix products, convolutions), run at the device's datasheet peak for the
precision (FP32, or FP16/BF16 on tensor cores) times ``compute.gemm_efficiency``, and the
bytes their other ops read and write (norms, nonlinearities, softmax, pooling, dropout,
residual adds: memory-bound), moved at the memory bandwidth times
``compute.other_efficiency`` (:meth:`Device.at`). Both efficiencies are the fraction of the
roofline's bound a device achieves (Williams et al. 2009), calibrated from a paper's own
single-device baseline. Without a precision a device runs at ``flops_per_s`` and the other
ops are not charged, as before.

The time is multiplied by a noise factor of mean 1 (constant, exponential, shifted
exponential or lognormal), the straggler slowdown of the worker and any named slowdown
active when the gradient starts. Every worker draws from its own generator, spawned from
the run's seed, so a worker's draws do not depend on how events interleave.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibrated import load_profile, write_profile
from sim.training.messages import OTHER_PASSES, LayerCosts, weight_passes
from sim.workloads.precision import ITEMSIZE

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
    # datasheet peaks by precision (FLOP/s; sim.workloads.precision names them); None: the
    # device has no such rate, so a run at that precision is refused
    fp64_flops_per_s: float | None = None
    fp32_flops_per_s: float | None = None
    fp16_flops_per_s: float | None = None
    bf16_flops_per_s: float | None = None
    # bytes/s at which the other ops (not GEMM-class) read and write their elements; None:
    # not charged (set by :meth:`at` from memory_Bps x the other ops' efficiency)
    other_Bps: float | None = None
    # how a pass's weight and activation bytes combine with its FLOPs: True, the roofline's
    # max (Williams et al. 2009), a GEMM streaming its operands while it multiplies, as
    # accelerators' libraries do (the datasheet presets); False, added (the fit
    # `sim calibrate` makes of this machine's kernels, timed at two batch sizes)
    roofline: bool = False

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
        for rate in ("other_Bps", *(peak_field(p) for p in ITEMSIZE)):
            value = getattr(self, rate)
            if value is not None and not (0 < value < math.inf):
                raise ValueError(f"device {self.name!r}: need {rate} > 0 and finite (or "
                                 f"null: none), got {value}")
        if self.lookup_s is not None and not (0 <= self.lookup_s < math.inf):
            raise ValueError(f"device {self.name!r}: need lookup_s >= 0 and finite (or "
                             f"null: not charged), got {self.lookup_s}")

    def peak(self, precision: str) -> float | None:
        """The datasheet peak at ``precision`` (FLOP/s), None where the device has none."""
        return getattr(self, peak_field(precision))

    def at(self, precision: str, gemm_efficiency: float = 1.0,
           other_efficiency: float = 1.0) -> Device:
        """This device running ``precision``: GEMM-class FLOPs at its peak for it x
        ``gemm_efficiency``, other ops' bytes at ``memory_Bps`` x ``other_efficiency`` (not
        charged without a memory bandwidth). Raises ValueError for a precision without a
        peak."""
        peak = self.peak(precision)
        if peak is None:
            known = [p for p in ITEMSIZE if self.peak(p) is not None]
            raise ValueError(f"device {self.name!r} has no {precision} peak (it has: "
                             f"{', '.join(known) or 'none'})")
        other = None if self.memory_Bps is None else self.memory_Bps * other_efficiency
        return replace(self, flops_per_s=peak * gemm_efficiency, other_Bps=other)

    def seconds(self, flops: float, traffic: float = 0.0, lookups: float = 0.0,
                activations: float = 0.0, other: float = 0.0) -> float:
        """Seconds of ``flops`` moving ``traffic`` bytes of weights and ``activations``
        bytes of layers' inputs and outputs, reading ``lookups`` ids by index and ``other``
        bytes of the other ops' elements, without the overhead."""
        moved = traffic / self.memory_Bps if self.memory_Bps is not None else 0.0
        passed = activations / self.activation_Bps if self.activation_Bps is not None else 0.0
        looked = lookups * self.lookup_s if self.lookup_s is not None else 0.0
        others = other / self.other_Bps if self.other_Bps is not None else 0.0
        if self.roofline:  # elementwise, so that per-layer arrays get a max each
            return np.maximum(flops / self.flops_per_s, moved + passed) + looked + others
        return flops / self.flops_per_s + moved + passed + looked + others


def peak_field(precision: str) -> str:
    """The :class:`Device` field of ``precision``'s peak, e.g. "fp16_flops_per_s"."""
    return f"{precision}_flops_per_s"


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
    # layer's weights run at it (Williams et al. 2009's roofline). Every accelerator preset
    # is a roofline device: a pass takes the longer of its FLOPs and its weights' bytes
    # (NVIDIA's "GPU Performance Background User's Guide": math- or memory-limited).
    # Peaks by precision (compute.precision): the same datasheet's 7.8 TFLOP/s FP64, 15.7
    # FP32 and 125 FP16 on tensor cores (Volta has no BF16).
    "v100": Device("v100", 15.7e12, 10e-6, "NVIDIA V100 datasheet (FP32 peak, 32 GB HBM2, "
                   "900 GB/s)", memory_bytes=32 * 2**30,
                   memory_Bps=900e9, fp64_flops_per_s=7.8e12, fp32_flops_per_s=15.7e12,
                   fp16_flops_per_s=125e12, roofline=True),
    # NVIDIA A100 SXM datasheet: 19.5 TFLOP/s FP32 peak (156 TF32 with tensor cores).
    # Memory: the datasheet's 80 GB HBM2e model (a 40 GB one exists too).
    # Peaks: 19.5 FP64 on tensor cores (9.7 without), 19.5 FP32, 312 FP16 and 312 BF16 on
    # tensor cores (dense; the 624 figures are with structured sparsity). TF32 (156) is a
    # compute mode of FP32 tensors, not a storage precision: a calibrated gemm_efficiency
    # of an FP32 run covers it.
    "a100": Device("a100", 19.5e12, 10e-6, "NVIDIA A100 datasheet (FP32 peak, 80 GB HBM2e, "
                   "2,039 GB/s)",
                   memory_bytes=80 * 2**30, memory_Bps=2039e9, fp64_flops_per_s=19.5e12,
                   fp32_flops_per_s=19.5e12, fp16_flops_per_s=312e12,
                   bf16_flops_per_s=312e12, roofline=True),
    # NVIDIA H100 SXM datasheet: 67 TFLOP/s FP32 peak; 80 GB HBM3.
    # Peaks: 67 FP64 tensor, 67 FP32, 989 FP16 and BF16 tensor (dense; 1,979 with sparsity).
    "h100": Device("h100", 67e12, 10e-6, "NVIDIA H100 datasheet (FP32 peak, 80 GB HBM3, "
                   "3.35 TB/s)",
                   memory_bytes=80 * 2**30, memory_Bps=3.35e12, fp64_flops_per_s=67e12,
                   fp32_flops_per_s=67e12, fp16_flops_per_s=989e12, bf16_flops_per_s=989e12,
                   roofline=True),
    # NVIDIA Tesla P100 datasheet, SXM2 (NVLink) module: 5.3 FP64, 10.6 FP32, 21.2 FP16
    # TFLOP/s (Pascal's FP16 is packed half2 on the CUDA cores: no tensor cores, no BF16);
    # 16 GB CoWoS HBM2 at 732 GB/s. The GPU of Big Basin, the servers of Goyal et al. 2017
    # (Sec. 5: 8 P100 SXM2 with NVLink).
    "p100-sxm2": Device("p100-sxm2", 10.6e12, 10e-6, "NVIDIA Tesla P100 datasheet (SXM2: "
                        "10.6 FP32, 21.2 FP16, 5.3 FP64 TFLOP/s; 16 GB HBM2, 732 GB/s)",
                        memory_bytes=16 * 2**30, memory_Bps=732e9, fp64_flops_per_s=5.3e12,
                        fp32_flops_per_s=10.6e12, fp16_flops_per_s=21.2e12, roofline=True),
    # The same datasheet's PCIe card (lower clocks, 250 W): 4.7 FP64, 9.3 FP32, 18.7 FP16
    # TFLOP/s; the 16 GB model's 732 GB/s (the 12 GB one has 549 GB/s). Horovod's servers
    # (Sergeev and Del Balso 2018: 4 Pascal GPUs a server).
    "p100-pcie": Device("p100-pcie", 9.3e12, 10e-6, "NVIDIA Tesla P100 datasheet (PCIe "
                        "16 GB: 9.3 FP32, 18.7 FP16, 4.7 FP64 TFLOP/s; 732 GB/s)",
                        memory_bytes=16 * 2**30, memory_Bps=732e9, fp64_flops_per_s=4.7e12,
                        fp32_flops_per_s=9.3e12, fp16_flops_per_s=18.7e12, roofline=True),
    # DGX-2H's V100 SXM3 at 450 W: NVIDIA DGX-2H datasheet, 2.1 PFLOP/s of FP16 tensor for
    # 16 GPUs = 131 TFLOP/s each (the DGX-2's 2.0 PFLOP/s at 10 kW rose to 2.1 at 12 kW:
    # Tom's Hardware, "Nvidia's DGX-2 ... just got faster", 2018). The clock that gives
    # (131.25e12 / 81,920 tensor FLOP per clock = 1.60 GHz) gives 5,120 lanes x 2 x 1.60 GHz
    # = 16.4 FP32 and 8.2 FP64 TFLOP/s. 32 GB HBM2 at 900 GB/s (V100 datasheet).
    # Megatron-LM 2019 (Shoeybi et al., Sec. 5) trained on these.
    "v100-sxm3": Device("v100-sxm3", 16.4e12, 10e-6, "NVIDIA DGX-2H datasheet (2.1 PFLOP/s "
                        "FP16 tensor / 16 GPUs = 131 TFLOP/s; FP32 and FP64 at its clock); "
                        "32 GB HBM2, 900 GB/s", memory_bytes=32 * 2**30, memory_Bps=900e9,
                        fp64_flops_per_s=8.2e12, fp32_flops_per_s=16.4e12,
                        fp16_flops_per_s=131.25e12, roofline=True),
    # One core (TensorCore) of a Cloud TPU v3 chip: Google Cloud "TPU v3" page, 123 TFLOP/s
    # bf16 and 32 GiB HBM2 at 900 GB/s per chip of two cores -> 61.5 TFLOP/s, 16 GiB and
    # 450 GB/s a core. Its matrix units multiply bf16 only (FP32 matmuls run as several bf16
    # passes, no peak published), so bf16 is its one peak and its flops_per_s. GPipe (Huang
    # et al. 2019) partitions over these cores.
    "tpu-v3": Device("tpu-v3", 61.5e12, 10e-6, "Google Cloud TPU v3 page (123 TFLOP/s bf16, "
                     "32 GiB HBM2 at 900 GB/s per chip of 2 cores), per core",
                     memory_bytes=16 * 2**30, memory_Bps=450e9, bf16_flops_per_s=61.5e12,
                     roofline=True),
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


def run_device(cfg: Any) -> Device:
    """The device of a run's ``[compute]`` table: ``compute.device``, at
    ``compute.precision`` with its two efficiencies when a precision is set
    (:meth:`Device.at`). Raises ValueError (the validator names the key)."""
    device = load_device(cfg.device)
    precision = getattr(cfg, "precision", None)  # a bare table without the key: none
    if precision is None:
        return device
    return device.at(precision, cfg.gemm_efficiency, cfg.other_efficiency)


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
                 activations_per_gradient: float = 0.0, other_per_gradient: float = 0.0
                 ) -> None:
        self.cfg, self.device = cfg, run_device(cfg)
        self.flops_per_gradient = flops_per_gradient
        self.base_s = cfg.time_s if cfg.time_s is not None else (
            self.base_for(flops_per_gradient, traffic_per_gradient, lookups_per_gradient,
                          activations_per_gradient, other_per_gradient))
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
        # a real run's measured steps, replayed instead of drawn (sim.simulated.replayed)
        self.replay: Any = None

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
                 activations: float = 0.0, other: float = 0.0) -> float:
        """Seconds for ``flops`` of a gradient moving ``traffic`` bytes of weights,
        ``activations`` bytes of inputs and outputs and ``other`` bytes of the other ops'
        elements, and reading ``lookups`` ids by index, before noise and slowdowns: the
        device's per-gradient overhead, rate, bandwidths and cost per id, or
        ``compute.time_s`` scaled by their share of a whole gradient's FLOPs (``base_s``
        exactly for a whole gradient's)."""
        if self.cfg.time_s is not None:
            return self.cfg.time_s * (flops / self.flops_per_gradient)
        return self.device.overhead_s + self.device.seconds(flops, traffic, lookups,
                                                            activations, other)

    def part_duration(self, worker: int, now: float, flops: float, traffic: float = 0.0,
                      activations: float = 0.0, other: float = 0.0,
                      layers: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        """Seconds for rank ``worker``'s part of a step, ``flops`` of the gradient (a stage's
        shard under model parallelism) moving ``traffic`` bytes of weights and
        ``activations`` bytes of inputs and outputs and ``other`` bytes of the other ops'
        elements, starting at ``now``: :meth:`base_for` (on a roofline device the sum of
        ``layers``, the part's :meth:`layer_shares`), times the noise, straggler and
        slowdown factors :meth:`duration` applies."""
        base = self.roofline_base(layers)
        if base is None:
            base = self.base_for(flops, traffic, 0.0, activations, other)
        return self._drawn(worker, now, base)

    def roofline_base(self, layers: tuple[np.ndarray, np.ndarray] | None) -> float | None:
        """A step's seconds before noise on a roofline device: the overhead and each layer's
        passes (``layers``: :meth:`layer_shares`, each the longer of its FLOPs and its
        bytes), so that one layer's memory-bound pass is not hidden under another's FLOPs.
        None where totals give it (an additive device, FLOPs alone, ``compute.time_s``)."""
        if layers is None or not self.device.roofline or self.cfg.time_s is not None:
            return None
        return self.device.overhead_s + float(layers[0].sum() + layers[1].sum())

    def shares_of(self, layers: LayerCosts, batch: int) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`layer_shares` of a whole model's ``layers`` at ``batch`` (one pass each)."""
        def per_batch(per_sample: np.ndarray | None) -> np.ndarray | None:
            return None if per_sample is None else batch * per_sample
        return self.layer_shares(
            (batch * layers.forward_flops, batch * layers.backward_flops), layers.weight_bytes,
            lookups=per_batch(layers.lookups_per_sample),
            activations=per_batch(layers.activations_per_sample),
            other=per_batch(layers.other_per_sample))

    @classmethod
    def of_layers(cls, cfg, layers: LayerCosts, batch: int, workers: int,
                  seed: int) -> ComputeModel:
        """The compute model of a run whose gradient is ``layers`` at ``batch``."""
        model = cls(cfg, layers.flops(batch), workers, seed, layers.traffic(),
                    layers.lookups(batch), layers.activations(batch), layers.other(batch))
        base = model.roofline_base(model.shares_of(layers, batch))
        if base is not None:
            model.base_s = base
        return model

    def layer_shares(self, flops: tuple[np.ndarray, np.ndarray],
                     weight_bytes: np.ndarray | None, passes: int = 1,
                     lookups: np.ndarray | None = None,
                     activations: np.ndarray | None = None,
                     other: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray] | None:
        """How a step's compute divides over its layers' forward and backward passes, by
        their seconds on the device: ``flops`` (forward, backward per layer, the whole
        step's), each layer's ``weight_bytes`` moved as ``passes`` microbatches move them
        (:func:`sim.training.messages.weight_passes`), its ``activations`` (bytes of inputs
        and outputs, the whole step's, shared as the FLOPs: one matrix product's operands
        in the forward, one or two in the backward) and the ids it reads (``lookups``,
        the whole step's: half the cost per id in the forward's gather, half in the
        backward's scatter), and the bytes its other ops read and write in one forward
        (``other``, the whole step's; the backward moves :data:`~sim.training.messages.
        OTHER_PASSES` times as many). None when FLOPs alone divide it (no memory, activation,
        other-op or lookup term, or a modelled ``compute.time_s``)."""
        device = self.device
        memory = device.memory_Bps is not None and weight_bytes is not None
        passed = device.activation_Bps is not None and activations is not None
        sparse = device.lookup_s is not None and lookups is not None and bool(lookups.any())
        others = device.other_Bps is not None and other is not None and bool(other.any())
        if not (memory or passed or sparse or others) or self.cfg.time_s is not None:
            return None
        ids = lookups / 2 if sparse else 0.0
        total = flops[0] + flops[1]
        shares = [np.divide(f, total, out=np.zeros_like(total), where=total > 0) for f in flops]
        return tuple(device.seconds(f, times * weight_bytes if memory else 0.0, ids,
                                    share * activations if passed else 0.0,
                                    moves * other if others else 0.0)
                     for f, times, share, moves in zip(flops, weight_passes(passes), shares,
                                                       OTHER_PASSES, strict=True))

    def _drawn(self, worker: int, now: float, base_s: float) -> float:
        if self.replay is not None:  # the measured step already holds noise and slowdowns
            return self.replay.step_s(worker)
        t = base_s * self.noise(self.rngs[worker], self.cfg) * self.factor[worker]
        for slow in self.slowdowns:
            if slow.worker == worker and slow.start_s <= now and (
                    slow.end_s is None or now < slow.end_s):
                t *= slow.factor
        return t
