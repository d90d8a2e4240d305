"""The checks every kernel makes on its arguments before calling C.

cffi would happily pass a float64 buffer as ``float *``, so each array is checked for
dtype, shape, C-contiguity and (outputs) writability, and each scalar for its range; a
failure raises ``TypeError`` (wrong kind) or ``ValueError`` (wrong value), naming the
argument. The C pointers are ``restrict``: an array a kernel writes may share no memory
with any other array of the call (``ValueError`` naming both, :func:`_disjoint`).

The names are private to :mod:`sim.kernels`: its modules share them, no caller outside does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_INT64 = np.dtype(np.int64)
_INT32 = np.dtype(np.int32)
_UINT64 = np.dtype(np.uint64)
_CDECL = {np.dtype(np.float32): "float[]", np.dtype(np.float64): "double[]",
          _INT64: "int64_t[]", _INT32: "int32_t[]", _UINT64: "uint64_t[]"}


def _array(name: str, a: Any, dtype: np.dtype | None = None, shape: tuple | None = None,
           writable: bool = False) -> np.ndarray:
    """Return ``a`` if it is a C-contiguous ndarray of the expected dtype and shape."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array, got {type(a).__name__}")
    if dtype is None and a.dtype not in _SUFFIX:
        raise TypeError(f"{name}: expected float32 or float64, got {a.dtype}")
    if dtype is not None and a.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype)}, got {a.dtype}")
    if shape is not None and a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous (np.ascontiguousarray makes a copy)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: array is read-only")
    return a


def _ndim(name: str, a: np.ndarray, ndim: int) -> np.ndarray:
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name}: array is empty")
    return a


# np.may_share_memory without the __array_function__ dispatch (half its cost on a hot path)
_may_share = getattr(np.may_share_memory, "_implementation", np.may_share_memory)


def _disjoint(name: str, a: np.ndarray, other: str, b: np.ndarray | None) -> None:
    """Refuse ``a`` if it shares memory with ``b`` (named ``other``; None is skipped).

    The kernels' pointers are ``restrict``: a written array that overlaps another gives
    silently wrong results, so every array a kernel writes is checked here against every
    other array of the call. Comparing bounds is exact, not a heuristic: both arrays were
    checked C-contiguous, and a contiguous array owns every byte between its bounds
    (whatever the dtypes). ``name`` comes first: the argument to replace by a separate
    array. About 0.1 us a pair.
    """
    if b is not None and _may_share(a, b):
        raise ValueError(f"{name}: shares memory with {other}; pass a separate array")


def _out(name: str, out: np.ndarray | None, dtype: np.dtype, shape: tuple,
         inputs: dict[str, Any] | None = None) -> np.ndarray:
    """A fresh output array, or ``out`` checked as writable with that dtype and shape and
    sharing no memory with ``inputs`` (:func:`_disjoint`)."""
    if out is None:
        return np.empty(shape, dtype)
    out = _array(name, out, dtype, shape, writable=True)
    for other, a in (inputs or {}).items():
        _disjoint(name, out, other, a)
    return out


def _scalar(name: str, value: Any, low: float = 0.0) -> float:
    """A finite real number >= low."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a real number, got {value!r}") from None
    if not math.isfinite(x) or x < low:
        raise ValueError(f"{name}: expected a finite number >= {low}, got {value!r}")
    return x


def _int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{name}: expected an integer in [{low}, {high}], got {value}")
    return int(value)


def _csr(indptr: Any, indices: Any, data: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check the three CSR arrays agree; row order and index range are checked in C."""
    indptr = _ndim("indptr", _array("indptr", indptr, _INT64), 1)
    indices = _array("indices", indices, _INT64)
    data = _array("data", data)
    if len(indptr) < 2:
        raise ValueError("indptr: needs at least 2 entries (one row)")
    nnz = int(indptr[-1])
    if indices.shape != (nnz,) or data.shape != (nnz,):
        raise ValueError(f"indices, data: expected shape ({nnz},) = indptr[-1], "
                         f"got {indices.shape} and {data.shape}")
    return indptr, indices, data


def _pair(dst_name: str, dst: Any, src_name: str, src: Any) -> tuple[np.ndarray, np.ndarray]:
    """An in-place kernel's (written, read) arrays: same dtype and shape, no shared memory
    (not even ``src is dst``: the C loops are ``restrict``, and no caller needs it)."""
    dst = _array(dst_name, dst, writable=True)
    src = _array(src_name, src, dst.dtype, dst.shape)
    _disjoint(src_name, src, dst_name, dst)
    return dst, src


def _real(name: str, value: Any, dtype: np.dtype) -> float:
    """A finite real >= 0 that stays finite in ``dtype`` (1e39 is Inf as a float32)."""
    x = _scalar(name, value)
    if x > float(np.finfo(dtype).max):
        raise ValueError(f"{name}: {value!r} overflows {np.dtype(dtype)}")
    return x
