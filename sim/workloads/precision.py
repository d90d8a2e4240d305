"""Number formats a run's tensors are stored and sent in: the one home of their byte sizes.

A run's ``compute.precision`` sets the bytes of its gradients, activations and pipeline
messages, and which of a device's peaks its GEMM-class layers run at (mixed precision:
Micikevicius et al. 2018 keep FP16 weights, activations and gradients with an FP32 master
copy in the optimizer). Without a precision
(``compute.precision`` unset) a run keeps its workload's own dtype, so runs without one are
unchanged: ``fp64`` for the lab's own models (its kernels' dtype), ``fp32`` for a published
network's timing profile (such networks train in float32). :func:`run_itemsize` decides it
for every caller: a layer's gradient bytes, the data-parallel allreduce, a plan's
activation, pipeline and tensor-allreduce messages and its memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.names import unknown

if TYPE_CHECKING:
    from sim.config import Config

# bytes per element (IEEE 754 binary64, binary32, binary16; bfloat16 is 16 bits)
ITEMSIZE: dict[str, int] = {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2}


def itemsize(precision: str) -> int:
    """Bytes per element of ``precision``; raises ValueError naming the known ones."""
    try:
        return ITEMSIZE[precision]
    except KeyError:
        raise ValueError(unknown("precision", precision, ITEMSIZE)) from None


# a workload's own precision when the run sets none: a published network's profile trains in
# float32, the lab's own models in its kernels' float64
PROFILE_PRECISION, MODEL_PRECISION = "fp32", "fp64"


def run_precision(config: Config) -> str:
    """The precision ``config``'s tensors are stored and sent in: ``compute.precision``,
    else its workload's own (:data:`PROFILE_PRECISION` for a timing profile,
    :data:`MODEL_PRECISION` for the lab's models)."""
    if config.compute.precision is not None:
        return config.compute.precision
    return PROFILE_PRECISION if config.workload.profile else MODEL_PRECISION


def run_itemsize(config: Config) -> int:
    """Bytes per element of ``config``'s gradients, activations and messages."""
    return itemsize(run_precision(config))
