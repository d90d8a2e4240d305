"""The C kernels, safely: this package is the only importer of ``sim._native``.

Every call checks dtype, shape, C-contiguity and writability first and raises
``TypeError`` / ``ValueError`` naming the argument, because cffi would happily pass a
float64 buffer as ``float *``; an array a kernel writes may share no memory with any other
array of the call. Kernel status codes become exceptions (``ValueError``, or
:class:`NonFiniteError` for NaN/Inf in an input or a diverged result). Float kernels
dispatch on the dtype of their first array (float32 or float64); optional ``out=``
arguments avoid allocation on hot paths.

Every public name is importable from here; each lives in one module:

- :mod:`~sim.kernels.library`: the compiled library (OpenBLAS preloaded, then ``sim._native``);
- :mod:`~sim.kernels.arguments`: the checks on arguments;
- :mod:`~sim.kernels.calls`: calling C, status codes to exceptions;
- :mod:`~sim.kernels.blas`: BLAS thread control (``SGD_BLAS_THREADS``);
- :mod:`~sim.kernels.caches`: the machine's cache sizes (``SGD_CACHE_SIZES``, sysfs);
- :mod:`~sim.kernels.plans`: logistic regression's plan (``SGD_KERNEL_PLAN``);
- :mod:`~sim.kernels.dense`: logistic and softmax regression, MLP layers, dense mat-vec;
- :mod:`~sim.kernels.sparse`: CSR logistic regression, mat-vec and mat-mat;
- :mod:`~sim.kernels.vectors`: in-place vector ops, the SGD step, averages;
- :mod:`~sim.kernels.compression_kernels`: top-k with error feedback, QSGD, scatter-add;
- :mod:`~sim.kernels.embedding_tables`: embedding bags and row-wise optimizer steps.

Call sites go through ``sim.kernels.name``: ``sim bench training`` times the public
functions by replacing them here, and none of them calls another (it would count twice).
"""

from __future__ import annotations

from sim.kernels.blas import blas_threads, set_blas_threads
from sim.kernels.caches import DEFAULT_CACHES, SYSFS_CACHE, CacheSizes, cache_sizes
from sim.kernels.calls import NonFiniteError
from sim.kernels.compression_kernels import qsgd_dequantize, qsgd_quantize, scatter_add, topk_ef
from sim.kernels.dense import (
    dense_backward,
    dense_forward,
    dense_matvec,
    logreg_loss_grad,
    softmax_loss_grad,
    softmax_xent,
)
from sim.kernels.embedding_tables import (
    adagrad_rows,
    embedding_bag_backward,
    embedding_bag_forward,
    sgd_rows,
)
from sim.kernels.plans import (
    BLAS_MARGIN,
    MAX_ROW_BLOCK,
    PATHS,
    ROW_TILE,
    LogregPlan,
    kernel_plans,
    logreg_blocks,
    logreg_plan,
    reset_plans,
    shape_class,
)
from sim.kernels.sparse import SparseWorkspace, csr_matmat, csr_matvec, sparse_logreg_grad
from sim.kernels.vectors import average, axpy, copy, scale, sgd_update, sum_into

__all__ = [
    "BLAS_MARGIN", "DEFAULT_CACHES", "MAX_ROW_BLOCK", "PATHS", "ROW_TILE", "SYSFS_CACHE",
    "CacheSizes", "LogregPlan", "NonFiniteError", "SparseWorkspace",
    "adagrad_rows", "average", "axpy", "blas_threads", "cache_sizes", "copy", "csr_matmat",
    "csr_matvec", "dense_backward", "dense_forward", "dense_matvec", "embedding_bag_backward",
    "embedding_bag_forward", "kernel_plans", "logreg_blocks", "logreg_loss_grad",
    "logreg_plan", "qsgd_dequantize", "qsgd_quantize", "reset_plans", "scale",
    "scatter_add", "set_blas_threads", "sgd_rows", "sgd_update", "shape_class",
    "softmax_loss_grad", "softmax_xent", "sparse_logreg_grad", "sum_into", "topk_ef",
]
