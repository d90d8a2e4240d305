"""Layer-wise messages of a step: which layers leave together, and what each layer costs.

Pure (numpy only): the simulated overlap with backprop (:mod:`sim.simulated.backprop_overlap`)
and the real pipelined ranks (:mod:`sim.real.executors.bsp_pipelined`) plan the same messages here.

- ``none``: one message with every layer, after the whole backward;
- ``wfbp``: one message per layer, as soon as backward has produced it (Poseidon's
  wait-free backprop, Zhang et al. 2017);
- ``bucket``: layers fused into buckets of at least ``bucket_bytes`` in backward order
  (PyTorch DDP's gradient buckets, Li et al. 2020);
- ``fusion``: Horovod's Tensor Fusion (Sergeev and Del Balso 2018, sec. 4 "Tensor
  Fusion"; horovod/common/controller.cc ``FuseResponses``): every ``cycle_s`` the
  coordinator takes the gradients ready so far and packs them, in the order they became
  ready, into fusion buffers of at most ``fusion_bytes`` (a buffer closes when the next
  gradient would overflow it, so one larger than the threshold goes alone), each buffer
  one allreduce. The packing depends on when backward produces each layer (``ready_s``),
  so the buffers are planned once from a step's nominal layer times; in the run a buffer
  leaves at the first cycle tick after its last layer is produced (:func:`next_tick`).
  Horovod's defaults before v0.21: 64 MiB and 5 ms (horovod/common/operations.cc; v0.21
  changed them to 128 MiB and 1 ms, Horovod's changelog, PR #2468).

A mode is a row of :data:`MODES`: how it plans, whether real ranks run it, and whether its
messages wait for the coordinator's cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# bytes of a layer's other ops (not GEMM-class) moved by its forward and by its backward, in
# units of the forward's: an elementwise op's backward reads its output's gradient and what
# the forward stashed and writes its input's gradient, about twice the forward's one read
# and one write (the same 1 : 2 as a matrix product's FLOPs)
OTHER_PASSES = (1, 2)


@dataclass(frozen=True)
class Message:
    """Layers ``lo..hi`` (forward indices, inclusive) sent together."""

    lo: int
    hi: int
    nbytes: int


@dataclass(frozen=True)
class Packing:
    """What the modes read besides the layers' bytes: a bucket's cap (bytes), a fusion
    buffer's threshold (bytes) and the coordinator's cycle (s), and when backward has
    produced each layer (forward index; s after the backward pass started; None: not
    known, for the modes that do not need it)."""

    bucket_bytes: float = 0.0
    fusion_bytes: float = math.inf
    cycle_s: float = 0.0
    ready_s: Sequence[float] | None = None


@dataclass(frozen=True)
class Mode:
    """One ``strategy.pipelining`` mode: its planner (layer bytes, packing -> the messages in
    the order they become ready), whether the real pipelined ranks run it, and whether a
    message waits for the coordinator's next cycle tick once its layers are produced."""

    plan: Callable[[Sequence[int], Packing], list[Message]]
    real: bool = True
    cycled: bool = False


def _whole(layer_bytes: Sequence[int], packing: Packing) -> list[Message]:
    return [Message(0, len(layer_bytes) - 1, int(sum(layer_bytes)))]


def _per_layer(layer_bytes: Sequence[int], packing: Packing) -> list[Message]:
    return [Message(i, i, int(layer_bytes[i])) for i in range(len(layer_bytes) - 1, -1, -1)]


def _buckets(layer_bytes: Sequence[int], packing: Packing) -> list[Message]:
    messages, hi, size = [], len(layer_bytes) - 1, 0
    for i in range(len(layer_bytes) - 1, -1, -1):
        size += layer_bytes[i]
        if size >= packing.bucket_bytes or i == 0:  # DDP closes a bucket once it reaches the cap
            messages.append(Message(i, hi, int(size)))
            hi, size = i - 1, 0
    return messages


def next_tick(elapsed_s: float, cycle_s: float) -> float:
    """The first cycle tick at or after ``elapsed_s`` (s since the backward pass started;
    ticks at k x cycle_s; cycle 0: at once). A time within 1e-9 of a cycle of a tick is
    on it, so that sums of layer times land where their exact values would."""
    if cycle_s <= 0:
        return elapsed_s
    return cycle_s * max(0, math.ceil(elapsed_s / cycle_s - 1e-9))


def fuse(layer_bytes: Sequence[int], ready_s: Sequence[float], fusion_bytes: float,
         cycle_s: float) -> list[Message]:
    """Horovod's fusion buffers (module docstring) for layers produced at ``ready_s`` (s
    after backward starts; backward order is ready order): a buffer holds layers that
    leave on one cycle tick, consecutive in ready order, whose bytes stay within
    ``fusion_bytes``; the first layer of a buffer opens it whatever its size. Raises
    ValueError when ``ready_s`` does not give one time per layer."""
    if len(ready_s) != len(layer_bytes):
        raise ValueError(f"fusion needs a ready time per layer: {len(ready_s)} for "
                         f"{len(layer_bytes)} layers")
    messages: list[Message] = []
    hi, size, tick = len(layer_bytes) - 1, 0, None
    for i in range(len(layer_bytes) - 1, -1, -1):
        at = next_tick(ready_s[i], cycle_s)
        if tick is not None and (at != tick or size + layer_bytes[i] > fusion_bytes):
            messages.append(Message(i + 1, hi, int(size)))  # the next goes in a new buffer
            hi, size = i, 0
        size, tick = size + layer_bytes[i], at
    messages.append(Message(0, hi, int(size)))
    return messages


def _fusion(layer_bytes: Sequence[int], packing: Packing) -> list[Message]:
    if packing.ready_s is None:
        raise ValueError("fusion: the layers' ready times are needed to pack them")
    return fuse(layer_bytes, packing.ready_s, packing.fusion_bytes, packing.cycle_s)


MODES: dict[str, Mode] = {
    "none": Mode(_whole),
    "wfbp": Mode(_per_layer),
    "bucket": Mode(_buckets),
    # the real ranks have no coordinator: they would have to agree on every cycle's buffers
    "fusion": Mode(_fusion, real=False, cycled=True),
}


def plan_messages(layer_bytes: Sequence[int], mode: str, bucket_bytes: float = 0.0,
                  packing: Packing | None = None) -> list[Message]:
    """The messages of a mode, in the order they become ready (backward order).
    ``packing``: what the mode reads (default: only ``bucket_bytes``). Raises ValueError
    for an unknown mode, or a fusion without ready times."""
    if mode not in MODES:
        raise ValueError(f"pipelining mode: expected one of {', '.join(MODES)}, got {mode!r}")
    return MODES[mode].plan(layer_bytes, packing or Packing(bucket_bytes=bucket_bytes))


def ready_times(backward_s: np.ndarray) -> np.ndarray:
    """When backward has produced each layer (forward index), s after it started: it runs
    from the last layer down, so layer i is ready after layers L-1..i."""
    return np.cumsum(np.asarray(backward_s, float)[::-1])[::-1]


@dataclass
class StepCosts:
    """Seconds of forward and backward per layer (forward order) for one worker's step."""

    forward_s: np.ndarray
    backward_s: np.ndarray


@dataclass(frozen=True)
class LayerCosts:
    """The work of each layer (forward order): FLOPs per sample, gradient bytes, and the
    bytes of weights a pass over the layer moves through memory whatever the batch
    (:meth:`sim.training.compute_model.ComputeModel.layer_seconds` charges them)."""

    forward_flops: np.ndarray
    backward_flops: np.ndarray
    grad_bytes: np.ndarray
    source: str  # "model" or "profile:NAME"
    # per layer: a dense layer's weights, moved as weight_passes counts; 0 where the layer
    # touches only a batch's rows (sparse)
    weight_bytes: np.ndarray | None = None
    # per layer: ids per sample it reads by index (embedding lookups); None: none anywhere
    lookups_per_sample: np.ndarray | None = None
    # per layer: bytes of its inputs and outputs a step's passes move per sample
    # (activation_traffic); None: none known (a published network's profile)
    activations_per_sample: np.ndarray | None = None
    # per layer: bytes its other ops (norms, nonlinearities, softmax, pooling, dropout,
    # residual adds) read and write in one forward per sample; None: none known
    other_per_sample: np.ndarray | None = None

    @classmethod
    def from_model(cls, model: Any, itemsize: int = 8) -> LayerCosts:
        layers = model.layers
        grad_bytes = np.array([(layer.params.stop - layer.params.start) * itemsize
                               for layer in layers], np.int64)
        dense = np.array([layer.shape is not None for layer in layers])
        lookups = np.array([layer.lookups for layer in layers], float)
        widths = np.array([sum(layer.shape) if layer.shape else 0 for layer in layers], float)
        forward = np.array([layer.forward_flops for layer in layers], float)
        backward = np.array([layer.backward_flops for layer in layers], float)
        return cls(forward, backward, grad_bytes, "model",
                   np.where(dense, grad_bytes, 0).astype(float),
                   lookups if lookups.any() else None,
                   activation_traffic(forward, backward, widths, itemsize))

    @classmethod
    def from_profile(cls, profile: Any, itemsize: int = 4) -> LayerCosts:
        """A published network's layers; gradients and other ops' elements of ``itemsize``
        bytes (float32, as such networks train, unless the run's precision says)."""
        n = len(profile.layers)
        grad_bytes = np.array([layer.params * itemsize for layer in profile.layers], np.int64)
        other = np.array([layer.other_elements * itemsize for layer in profile.layers], float)
        return cls(np.array([layer.forward_flops for layer in profile.layers], float),
                   np.array([profile.backward_flops(i) for i in range(n)], float),
                   grad_bytes, f"profile:{profile.name}", grad_bytes.astype(float),
                   other_per_sample=other if other.any() else None)

    def flops(self, batch: int) -> float:
        """Forward + backward FLOPs of one mini-batch."""
        return batch * float(self.forward_flops.sum() + self.backward_flops.sum())

    def traffic(self) -> float:
        """Bytes of weights one forward and backward pass over every layer moves."""
        return 0.0 if self.weight_bytes is None else weight_traffic(self.weight_bytes, 1)

    def activations(self, batch: int) -> float:
        """Bytes of layers' inputs and outputs one mini-batch's passes move."""
        return 0.0 if self.activations_per_sample is None else \
            batch * float(self.activations_per_sample.sum())

    def other(self, batch: int) -> float:
        """Bytes the other ops of one mini-batch's forward and backward read and write."""
        return 0.0 if self.other_per_sample is None else \
            batch * float(self.other_per_sample.sum()) * sum(OTHER_PASSES)

    def lookups(self, batch: int) -> float:
        """Ids one mini-batch reads by index (and scatters back), over every layer."""
        return 0.0 if self.lookups_per_sample is None else \
            batch * float(self.lookups_per_sample.sum())

    def split(self, seconds: float, shares: tuple[np.ndarray, np.ndarray] | None = None
              ) -> StepCosts:
        """A step of ``seconds`` shared out over the layers in proportion to their FLOPs, or
        to ``shares`` (forward and backward weights per layer) when given."""
        forward, backward = shares or (self.forward_flops, self.backward_flops)
        total = forward.sum() + backward.sum()
        scale = seconds / total if total > 0 else 0.0
        return StepCosts(forward * scale, backward * scale)


def activation_traffic(forward_flops: np.ndarray, backward_flops: np.ndarray,
                       widths: np.ndarray, itemsize: int) -> np.ndarray:
    """Bytes per sample that a step's passes move through layers whose inputs plus outputs
    are ``widths`` values (0 for a layer that is no matrix product): each matrix product
    reads or writes both, once in the forward and once or twice in the backward (the
    weights' gradient, and the input's where the layer computes it), as many products as
    the backward has the forward's FLOPs."""
    products = 1.0 + np.divide(backward_flops, forward_flops,
                               out=np.zeros_like(backward_flops), where=forward_flops > 0)
    return products * widths * itemsize


def weight_traffic(weight_bytes: np.ndarray, microbatches: int) -> float:
    """Bytes of weights a step over layers of ``weight_bytes`` moves in ``microbatches``."""
    return float(weight_bytes.sum()) * sum(weight_passes(microbatches))


def weight_passes(microbatches: int) -> tuple[int, int]:
    """How many times a step's forward and backward passes move a dense layer's weights (in
    units of its bytes) over ``microbatches``: each forward reads them; each backward reads
    them (for its input's gradient) and writes their gradient, and from the second
    microbatch on the gradient is accumulated (read it and the sum, write the sum: 3 more),
    as PyTorch's autograd accumulates ``.grad`` and the lab's split replicas do."""
    m = microbatches
    return m, 2 * m + 3 * (m - 1)


def message_slice(msg: Message, model: Any) -> slice:
    """The part of the flat parameter vector that carries layers msg.lo..msg.hi."""
    return slice(model.layers[msg.lo].params.start, model.layers[msg.hi].params.stop)
