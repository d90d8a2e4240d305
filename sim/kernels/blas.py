"""How many threads the kernels' BLAS calls run on.

Dense layers, softmax regression and dense mat-vec call OpenBLAS (the PyPI wheel
``scipy-openblas64``, linked by native/build.py). It runs on one thread unless the
environment variable ``SGD_BLAS_THREADS`` says otherwise when this module is imported, or
:func:`set_blas_threads` changes it: a simulated worker is one core, and results are then
independent of the thread count.
"""

from __future__ import annotations

import os

from sim.kernels.arguments import _int
from sim.kernels.library import lib


def set_blas_threads(n: int) -> None:
    """Run the kernels' BLAS calls on ``n`` >= 1 threads (process-wide; ValueError or
    TypeError otherwise). More threads change the summation order inside a product, so
    results are reproducible for a given thread count."""
    if lib.sgd_blas_set_threads(_int("n", n, 1, 1 << 16)):
        raise ValueError(f"n: expected an integer >= 1, got {n}")


def blas_threads() -> int:
    """The number of threads the kernels' BLAS calls run on."""
    return int(lib.sgd_blas_threads())


def _threads_from_env() -> int:
    value = os.environ.get("SGD_BLAS_THREADS", "1")
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"SGD_BLAS_THREADS: expected an integer >= 1, got {value!r}")
    return threads


set_blas_threads(_threads_from_env())
