"""Number formats a run's tensors are stored and sent in: the one home of their byte sizes.

A run's ``compute.precision`` sets the bytes of its gradients, activations and pipeline
messages, and which of a device's peaks its GEMM-class layers run at (mixed precision:
Micikevicius et al. 2018 keep FP16 weights, activations and gradients with an FP32 master
copy in the optimizer). ``fp64`` is the lab's own kernels' dtype, the default, so runs
without a precision are unchanged.
"""

from __future__ import annotations

from sim.names import unknown

# bytes per element (IEEE 754 binary64, binary32, binary16; bfloat16 is 16 bits)
ITEMSIZE: dict[str, int] = {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2}


def itemsize(precision: str) -> int:
    """Bytes per element of ``precision``; raises ValueError naming the known ones."""
    try:
        return ITEMSIZE[precision]
    except KeyError:
        raise ValueError(unknown("precision", precision, ITEMSIZE)) from None
