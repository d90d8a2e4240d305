"""Calling a C kernel: arrays become pointers, and a status code becomes an exception.

Status codes: ``SGD_EINVAL`` -> ``ValueError``, ``SGD_EINDEX`` -> ``ValueError``,
``SGD_ENONFINITE`` -> :class:`NonFiniteError` (NaN/Inf in an input or a diverged result).
Float kernels dispatch on the dtype of their first array (float32 or float64).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from sim.kernels.arguments import _CDECL, _SUFFIX
from sim.kernels.library import ffi, lib


class NonFiniteError(FloatingPointError, ValueError):
    """A NaN or Inf reached a kernel's output (from the inputs, or divergence)."""


@cache
def _kernel(name: str, dtype: np.dtype) -> Any:
    return getattr(lib, f"{name}_{_SUFFIX[dtype]}")


def _ptr(a: np.ndarray) -> Any:
    return ffi.from_buffer(_CDECL[a.dtype], a)


def _raise_for(name: str, status: int) -> None:
    """Map a kernel's non-zero status to the matching exception."""
    if status == lib.SGD_ENONFINITE:
        raise NonFiniteError(f"{name}: NaN or Inf in the result (non-finite input or divergence)")
    if status == lib.SGD_EINDEX:
        raise ValueError(f"{name}: an index or label is out of range, or indptr is not "
                         "non-decreasing from 0")
    raise ValueError(f"{name}: invalid size or scalar argument (status {status})")


def _call(name: str, dtype: np.dtype, *args: Any) -> None:
    """Call kernel ``name`` for ``dtype``; arrays become pointers, status becomes exceptions."""
    from_buffer = ffi.from_buffer
    cargs = [from_buffer(_CDECL[a.dtype], a) if isinstance(a, np.ndarray) else a for a in args]
    status = _kernel(name, dtype)(*cargs)
    if status:
        _raise_for(name, status)


def _float_out(dtype: np.dtype) -> Any:
    return ffi.new("float *" if dtype == np.float32 else "double *")


#: cffi's buffer wrapper, looked up once (the hot paths call it per array)
_FROM_BUFFER = ffi.from_buffer


def _call_indexed(name: str, dtype: np.dtype, index: str, bound: int, *args: Any) -> None:
    """:func:`_call`, with an index out of range reported as the fault of ``index``."""
    cargs = [_FROM_BUFFER(_CDECL[a.dtype], a) if isinstance(a, np.ndarray) else a for a in args]
    status = _kernel(name, dtype)(*cargs)
    if status == lib.SGD_EINDEX:
        raise ValueError(f"{index}: an entry is out of range [0, {bound}) (nothing was written)")
    if status:
        _raise_for(name, status)
