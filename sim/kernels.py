"""The C kernels, safely: the only module that touches ``sim._native``.

Every call checks dtype, shape, C-contiguity and writability first and raises
``TypeError`` / ``ValueError`` naming the argument, because cffi would happily
pass a float64 buffer as ``float *``. The C pointers are ``restrict``, so an array
a kernel writes may share no memory with any other array of the call (``ValueError``
naming both; inputs that are only read may alias each other). Kernel status codes
become exceptions: ``SGD_EINVAL`` -> ``ValueError``, ``SGD_EINDEX`` -> ``ValueError``,
``SGD_ENONFINITE`` -> :class:`NonFiniteError` (NaN/Inf in an input or a
diverged result). Float kernels dispatch on the dtype of their first array
(float32 or float64); optional ``out=`` arguments avoid allocation on hot paths.

Dense layers, softmax regression and dense mat-vec call OpenBLAS (the PyPI wheel
``scipy-openblas64``, linked by native/build.py). It runs on one thread unless the
environment variable ``SGD_BLAS_THREADS`` says otherwise when this module is imported, or
:func:`set_blas_threads` changes it: a simulated worker is one core, and results are then
independent of the thread count.

Logistic regression runs one of two plans (:func:`logreg_plan`): a fused pass over X with
cache blocks sized from the machine's caches (:func:`cache_sizes`, read from sysfs), the
default, or two BLAS mat-vecs, taken on request (``SGD_KERNEL_PLAN=blas``) or, with
``SGD_KERNEL_PLAN=auto``, where they are measured clearly faster on the machine at hand.
Block sizes never change a result; the path does, so the default never depends on a timing
(see :func:`logreg_plan` and the environment variables ``SGD_KERNEL_PLAN`` and
``SGD_CACHE_SIZES``).
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

# Loads libscipy_openblas64_.so (the package's documented preloading) before sim._native,
# whose DT_NEEDED entry the dynamic linker then matches by soname: no LD_LIBRARY_PATH, and
# no dependence on the rpath that native/build.py also records.
import scipy_openblas64  # noqa: F401  (isort keeps it before sim._native)

from sim._native import ffi, lib


class NonFiniteError(FloatingPointError, ValueError):
    """A NaN or Inf reached a kernel's output (from the inputs, or divergence)."""


_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_INT64 = np.dtype(np.int64)
_INT32 = np.dtype(np.int32)
_UINT64 = np.dtype(np.uint64)
_CDECL = {np.dtype(np.float32): "float[]", np.dtype(np.float64): "double[]",
          _INT64: "int64_t[]", _INT32: "int32_t[]", _UINT64: "uint64_t[]"}


# ---- argument checks -------------------------------------------------------

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


# ---- calling C ---------------------------------------------------------------

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


# ---- fast paths ------------------------------------------------------------------
#
# The small dense layers of an MLP (batch 32, 64 -> 64) run in a few microseconds, about
# what the checks above cost. Their wrappers first try a fast path that makes every check
# of the checked path, cheaply: an exact ndarray of a supported dtype (``is``, the dtypes
# numpy creates), shapes compared as tuples, C-contiguity and (outputs) writability left to
# ``ffi.from_buffer``, which refuses a buffer without them, and overlaps compared on the
# pointers themselves (:func:`_clear`). It only accepts: anything it cannot accept, it
# leaves to the checked path, which raises the error naming the argument (or accepts what
# the fast path is stricter about, such as an ndarray subclass or an equal dtype object).

_ND = np.ndarray
_FROM_BUFFER = ffi.from_buffer
#: what ffi.from_buffer raises for a buffer it refuses (not contiguous, read-only)
_REFUSED = (ValueError, TypeError, BufferError)


def _by_dtype(name: str) -> dict[np.dtype, tuple[Any, str]]:
    """{dtype: (the C function ``name`` for it, its cffi array declaration)}."""
    return {dt: (getattr(lib, f"{name}_{sfx}"), _CDECL[dt]) for dt, sfx in _SUFFIX.items()}


def _clear(extents: list, p: Any) -> bool:
    """Whether the buffer ``p`` (an ``ffi.from_buffer`` array, non-empty) overlaps none of
    ``extents``, its [start, end) pointer pairs; if so, it joins them.

    Exact, as :func:`_disjoint` is for the non-empty C-contiguous arrays the fast paths
    accept: cffi orders pointers by address, and such an array is every byte of
    [data, data + nbytes). About 0.05 us a pair.
    """
    end = p + len(p)
    for start, stop in extents:
        if p < stop and start < end:
            return False
    extents.append((p, end))
    return True


def _fast_out(out: Any, dt: np.dtype, cd: str, shape: tuple, extents: list) -> tuple | None:
    """(array, pointer) for an output of the fast path: a fresh array when ``out`` is None
    (it overlaps nothing), else ``out`` if it passes every check of :func:`_out`; None
    otherwise."""
    if out is None:
        out = np.empty(shape, dt)
        return out, _FROM_BUFFER(cd, out)
    if type(out) is not _ND or out.dtype is not dt or out.shape != shape:
        return None
    p = _FROM_BUFFER(cd, out, True)  # require_writable: refuses a read-only or strided one
    return (out, p) if _clear(extents, p) else None


# ---- 0. BLAS threads ------------------------------------------------------------------

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


# ---- cache sizes and kernel plans ------------------------------------------------------

@dataclass(frozen=True)
class CacheSizes:
    """Bytes of one core's L1 data cache, its L2 and the last-level cache, and where they
    were read: ``"SGD_CACHE_SIZES"``, ``"sysfs"`` or ``"defaults"``."""

    l1d: int
    l2: int
    llc: int
    source: str

    def __str__(self) -> str:
        return (f"L1d {_kib(self.l1d)}, L2 {_kib(self.l2)}, LLC {_kib(self.llc)} "
                f"({self.source})")


def _kib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"


#: used where sysfs says nothing (not Linux, a container without /sys): small enough for any
#: current x86-64 or ARM server core, so blocks stay in cache; glibc's sysconf is not asked,
#: as it reads CPUID, which a hypervisor may report wrongly (256 MiB of L3 on a 32 MiB VM)
DEFAULT_CACHES = CacheSizes(32 << 10, 256 << 10, 8 << 20, "defaults")
SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)


def _bytes(text: str) -> int:
    """'48K', '2M', '2MiB', '32768' -> bytes; ValueError otherwise."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def _sysfs_caches(root: Path = SYSFS_CACHE) -> CacheSizes | None:
    """cpu0's L1 data, L2 and last-level cache from sysfs (``index*/{level,type,size}``);
    None when there is no L1 data or L2 entry. No L3: the L2 is the last level."""
    found: dict[int, int] = {}
    try:
        for index in sorted(root.glob("index[0-9]*")):
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            found[int((index / "level").read_text())] = _bytes((index / "size").read_text())
    except (OSError, ValueError):
        return None
    if not found.get(1) or not found.get(2):
        return None
    return CacheSizes(found[1], found[2], found[max(found)], "sysfs")


def _env_caches(value: str) -> CacheSizes:
    try:
        l1d, l2, llc = (_bytes(part) for part in value.split(","))
    except ValueError:
        l1d = 0
    if not 0 < l1d <= l2 <= llc:
        raise ValueError(f"SGD_CACHE_SIZES: expected 'L1d,L2,LLC' sizes, non-decreasing "
                         f"(e.g. '48K,2M,260M'), got {value!r}")
    return CacheSizes(l1d, l2, llc, "SGD_CACHE_SIZES")


@cache
def cache_sizes() -> CacheSizes:
    """The cache sizes the kernels' blocks are chosen from, read once per process: the
    environment variable ``SGD_CACHE_SIZES`` (``"L1d,L2,LLC"``, e.g. ``"48K,2M,260M"``) when
    set, else sysfs (cpu0's caches), else :data:`DEFAULT_CACHES`."""
    if os.environ.get("SGD_CACHE_SIZES"):
        return _env_caches(os.environ["SGD_CACHE_SIZES"])
    return _sysfs_caches() or DEFAULT_CACHES


PATHS = {"fused": lib.SGD_PATH_FUSED, "blas": lib.SGD_PATH_BLAS}
#: rows of the fused kernel's register tile: the unit of its row blocks
ROW_TILE = int(lib.SGD_ROW_BLOCK)
MAX_ROW_BLOCK = int(lib.SGD_MAX_ROW_BLOCK)


@dataclass(frozen=True)
class LogregPlan:
    """How :func:`logreg_loss_grad` computes: ``path`` "fused" (one pass over X, blocks of
    ``row_block`` rows, a multiple of :data:`ROW_TILE`, and gradient chunks of ``col_block``
    columns) or "blas" (two BLAS mat-vecs; the blocks are then unused). Block sizes never
    change a result; the path does, in the last bits. ``shape_class`` and ``reason`` say
    how an automatic plan was chosen."""

    path: str
    row_block: int = ROW_TILE
    col_block: int = 1 << 30
    shape_class: str = ""
    reason: str = "given"
    c: Any = field(default=None, repr=False, compare=False)  # the struct passed to C

    def __post_init__(self) -> None:
        if self.path not in PATHS:
            raise ValueError(f"plan.path: expected 'fused' or 'blas', got {self.path!r}")
        _int("plan.row_block", self.row_block, ROW_TILE, MAX_ROW_BLOCK)
        if self.row_block % ROW_TILE:
            raise ValueError(f"plan.row_block: expected a multiple of {ROW_TILE}, "
                             f"got {self.row_block}")
        _int("plan.col_block", self.col_block, 1, 2**62)
        object.__setattr__(self, "c", ffi.new("struct sgd_logreg_plan *", {
            "path": PATHS[self.path], "row_block": self.row_block,
            "col_block": self.col_block}))

    def describe(self) -> str:
        """'fused rows=32 cols=1024' or 'blas'."""
        if self.path == "blas":
            return "blas"
        cols = "all" if self.col_block >= 1 << 30 else str(self.col_block)
        return f"fused rows={self.row_block} cols={cols}"


def _logreg_blocks(itemsize: int, d: int, caches: CacheSizes | None = None) -> tuple[int, int]:
    """(row_block, col_block) of the fused logistic-regression pass for rows of d items.

    Rows: as many whole register tiles as fit in half of L1d, at least one tile, so the
    gradient pass re-reads the block from L1 where it can (rows longer than that are
    re-read from L2, or past it from the last-level cache, one tile at a time: blocks sized
    to half of L2, with column chunks, measured no faster than one tile; see
    docs/measurements/kernels.md). Columns: the whole row, as one tile's
    gradient pass needs no chunks. Neither changes a result (see ``struct sgd_logreg_plan``
    in native/kernels.h); :class:`LogregPlan` takes any others.
    """
    caches = caches or cache_sizes()
    tiles = (caches.l1d // 2) // max(1, d * itemsize * ROW_TILE)
    return min(max(1, tiles) * ROW_TILE, MAX_ROW_BLOCK), 1 << 30


#: auto takes BLAS only where its fastest call beats the fused one's by this factor. A
#: shape class whose true ratio sits near the threshold would flip between processes (and
#: flip the results' last bits), so the margin is wider than the run-to-run noise of the
#: ratio (a 10% margin flipped one class in one run of three: docs/measurements/kernels.md).
BLAS_MARGIN = 1.20
_PLAN_ROUNDS = 9
_PLAN_ROUND_S = 1e-3
_PLAN_LOCK = threading.Lock()
_PATH_OF_CLASS: dict[tuple, dict] = {}  # shape class -> {"path", "fused_s", "blas_s", ...}
_PLAN_OF_SHAPE: dict[tuple, LogregPlan] = {}  # (dtype, n, d) -> plan


def _plan_mode() -> str:
    mode = os.environ.get("SGD_KERNEL_PLAN", "fused") or "fused"
    if mode not in ("auto", "fused", "blas"):
        raise ValueError(f"SGD_KERNEL_PLAN: expected 'auto', 'fused' or 'blas', got {mode!r}")
    return mode


def _shape_class(dtype: Any, n: int, d: int, caches: CacheSizes | None = None) -> tuple:
    """The class a plan is chosen for: (dtype name, where X fits: 'L1d', 'L2', 'LLC' or
    'DRAM', where one register tile of rows fits: 'tile<=L2/2' or 'tile>L2/2')."""
    caches = caches or cache_sizes()
    size = np.dtype(dtype).itemsize
    xbytes = n * d * size
    where = next((name for name, limit in (("L1d", caches.l1d), ("L2", caches.l2),
                                           ("LLC", caches.llc)) if xbytes <= limit), "DRAM")
    tile = "tile<=L2/2" if ROW_TILE * d * size <= caches.l2 // 2 else "tile>L2/2"
    return (np.dtype(dtype).name, where, tile)


def _time_paths(X: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float,
                plans: dict[str, LogregPlan]) -> dict[str, float]:
    """Each plan's fastest single call on these inputs, over alternating rounds (the least
    disturbed call: robust to another process's bursts on a shared machine). Outputs go to
    scratch arrays: the caller's are untouched."""
    n, d = X.shape
    fn = _kernel("logreg_loss_grad", X.dtype)
    px, py, pw = _ptr(X), _ptr(y), _ptr(w)
    calls = {}
    for name, plan in plans.items():
        grad, scratch, loss = np.empty(d, X.dtype), np.empty(n, X.dtype), _float_out(X.dtype)
        calls[name] = (px, py, n, d, pw, l2, _ptr(grad), loss, plan.c, _ptr(scratch), grad,
                       scratch)
    clock = time.perf_counter
    best = dict.fromkeys(calls, math.inf)
    for name, args in calls.items():  # warm: page faults, BLAS's buffers
        fn(*args[:10])
        start = clock()
        fn(*args[:10])
        best[name] = clock() - start
    once = min(best.values())
    loops = max(1, min(200, int(_PLAN_ROUND_S / max(once, 1e-7))))
    for _ in range(_PLAN_ROUNDS):
        for name, args in calls.items():
            args = args[:10]
            for _ in range(loops):
                start = clock()
                fn(*args)
                best[name] = min(best[name], clock() - start)
    return best


def _logreg_plan(dtype: Any, n: int, d: int,
                  inputs: tuple[np.ndarray, np.ndarray, np.ndarray, float] | None = None
                 ) -> LogregPlan:
    """The plan :func:`logreg_loss_grad` takes for X of shape (n, d) and this dtype.

    Blocks come from :func:`logreg_blocks`. The path comes from ``SGD_KERNEL_PLAN``:
    ``fused`` (the default) or ``blas`` force it, so a run's numbers never depend on how
    loaded the machine was when it started, nor on the build (a portable build's fused pass
    is slower and would lose the race where a native one wins). ``auto`` measures both paths
    once per :func:`shape_class` and process, on the first call's inputs (``inputs``: X, y,
    w, l2; without them, seeded random ones), and keeps the fused pass unless BLAS is faster
    by :data:`BLAS_MARGIN` (each path's fastest call over several alternating rounds), so
    that a noisy timing rarely flips the plan between runs on one machine. The paths round
    differently: where the automatic choice differs (between machines, builds, or runs on a
    loaded machine), results differ in their last bits.
    """
    dtype = np.dtype(dtype)
    key = (dtype, n, d)
    plan = _PLAN_OF_SHAPE.get(key)
    if plan is not None:
        return plan
    caches = cache_sizes()
    rows, cols = _logreg_blocks(dtype.itemsize, d, caches)
    klass = _shape_class(dtype, n, d, caches)
    name = "/".join(klass)
    mode = _plan_mode()
    if mode != "auto":
        plan = LogregPlan(mode, rows, cols, name, f"SGD_KERNEL_PLAN={mode}")
        return _PLAN_OF_SHAPE.setdefault(key, plan)
    with _PLAN_LOCK:
        chosen = _PATH_OF_CLASS.get(klass)
        if chosen is None:
            fused = LogregPlan("fused", rows, cols)
            if inputs is None:
                rng = np.random.default_rng(0)
                inputs = (rng.standard_normal((n, d)).astype(dtype),
                          (rng.random(n) < 0.5).astype(dtype),
                          (rng.standard_normal(d) * 0.01).astype(dtype), 0.0)
            times = _time_paths(*inputs, {"fused": fused, "blas": LogregPlan("blas")})
            faster = times["blas"] * BLAS_MARGIN < times["fused"]
            chosen = {"path": "blas" if faster else "fused", "fused_s": times["fused"],
                      "blas_s": times["blas"], "measured_on": (n, d)}
            _PATH_OF_CLASS[klass] = chosen
    ratio = chosen["fused_s"] / chosen["blas_s"]
    reason = (f"auto: blas/fused {ratio:.2f}x faster on ({chosen['measured_on'][0]}, "
              f"{chosen['measured_on'][1]})")
    plan = LogregPlan(chosen["path"], rows, cols, name, reason)
    return _PLAN_OF_SHAPE.setdefault(key, plan)


# The public names: sim.bench.training times every public function of this module as a
# kernel, and none may call another (it would be counted twice), so the kernels call the
# private ones above.

def logreg_blocks(itemsize: int, d: int, caches: CacheSizes | None = None) -> tuple[int, int]:
    """(row_block, col_block) of the fused pass for rows of d items (:func:`_logreg_blocks`)."""
    return _logreg_blocks(itemsize, d, caches)


def shape_class(dtype: Any, n: int, d: int, caches: CacheSizes | None = None) -> tuple:
    """The class a logreg plan is chosen for (:func:`_shape_class`)."""
    return _shape_class(dtype, n, d, caches)


def logreg_plan(dtype: Any, n: int, d: int,
                inputs: tuple[np.ndarray, np.ndarray, np.ndarray, float] | None = None
                ) -> LogregPlan:
    """The plan :func:`logreg_loss_grad` takes for X (n, d) of this dtype, chosen (and
    measured, once per shape class) as :func:`_logreg_plan` says."""
    return _logreg_plan(dtype, n, d, inputs)


def kernel_plans() -> list[dict]:
    """The paths chosen so far in this process: one dict per measured shape class."""
    return [{"shape_class": "/".join(k), **v} for k, v in _PATH_OF_CLASS.items()]


def reset_plans() -> None:
    """Forget the chosen plans and the cache sizes (they are read again, environment
    included, on the next call): for tests and benchmarks."""
    with _PLAN_LOCK:
        _PATH_OF_CLASS.clear()
        _PLAN_OF_SHAPE.clear()
        cache_sizes.cache_clear()


# ---- 1-2. logistic and softmax regression ---------------------------------------

def logreg_loss_grad(X: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 0.0,
                     out: np.ndarray | None = None, plan: LogregPlan | None = None
                     ) -> tuple[float, np.ndarray]:
    """Binary logistic regression: (mean loss + l2/2|w|^2, gradient (d,)).

    X: (n, d); y: (n,) labels in {0, 1} of X's dtype; w: (d,). ``plan`` (a
    :class:`LogregPlan`) forces a path and blocks; None takes :func:`logreg_plan`'s.
    """
    X = _ndim("X", _array("X", X), 2)
    n, d = X.shape
    y = _array("y", y, X.dtype, (n,))
    w = _array("w", w, X.dtype, (d,))
    grad = _out("out", out, X.dtype, (d,), {"X": X, "y": y, "w": w})
    l2 = _scalar("l2", l2)
    if plan is None:
        plan = _PLAN_OF_SHAPE.get((X.dtype, n, d)) or _logreg_plan(X.dtype, n, d, (X, y, w, l2))
    elif not isinstance(plan, LogregPlan):
        raise TypeError(f"plan: expected a LogregPlan or None, got {type(plan).__name__}")
    scratch = np.empty(n, X.dtype) if plan.path == "blas" else ffi.NULL
    loss = _float_out(X.dtype)
    _call("logreg_loss_grad", X.dtype, X, y, n, d, w, l2, grad, loss, plan.c, scratch)
    return float(loss[0]), grad


def softmax_loss_grad(X: np.ndarray, labels: np.ndarray, W: np.ndarray, l2: float = 0.0,
                      out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Softmax regression, fused: (mean cross-entropy + l2/2|W|^2, gradient (k, d)).

    X: (n, d); labels: (n,) int32 in [0, k); W: (k, d), one row per class.
    """
    X = _ndim("X", _array("X", X), 2)
    n, d = X.shape
    labels = _array("labels", labels, _INT32, (n,))
    W = _ndim("W", _array("W", W, X.dtype), 2)
    k = W.shape[0]
    if W.shape[1] != d or k < 2:
        raise ValueError(f"W: expected shape (k >= 2, {d}), got {W.shape}")
    grad = _out("out", out, X.dtype, (k, d), {"X": X, "labels": labels, "W": W})
    loss = _float_out(X.dtype)
    scratch = np.empty(min(n, lib.SGD_SOFTMAX_BLOCK) * k, X.dtype)
    _call("softmax_loss_grad", X.dtype, X, labels, n, d, k, W, _scalar("l2", l2), grad, loss,
          scratch)
    return float(loss[0]), grad


# ---- 3. MLP layers ------------------------------------------------------------------

_DENSE_FORWARD = _by_dtype("dense_forward")


def dense_forward(x: np.ndarray, W: np.ndarray, b: np.ndarray, relu: bool,
                  out: np.ndarray | None = None) -> np.ndarray:
    """One dense layer: act(x W^T + b), x: (n, din), W: (dout, din), b: (dout,) -> (n, dout)."""
    if type(x) is _ND and type(W) is _ND and type(b) is _ND:  # the fast path (see above)
        dt = x.dtype
        entry = _DENSE_FORWARD.get(dt)
        xs, ws = x.shape, W.shape
        if (entry is not None and W.dtype is dt and b.dtype is dt and len(xs) == 2
                and len(ws) == 2 and xs[0] and xs[1] and ws[0] and ws[1] == xs[1]
                and b.shape == (ws[0],)):
            fn, cd = entry
            try:
                px, pw, pb = _FROM_BUFFER(cd, x), _FROM_BUFFER(cd, W), _FROM_BUFFER(cd, b)
                extents = [(px, px + len(px)), (pw, pw + len(pw)), (pb, pb + len(pb))]
                o = _fast_out(out, dt, cd, (xs[0], ws[0]), extents)
            except _REFUSED:
                o = None
            if o is not None:
                status = fn(px, xs[0], xs[1], pw, pb, ws[0], 1 if relu else 0, o[1])
                if status:
                    _raise_for("dense_forward", status)
                return o[0]
    return _dense_forward_checked(x, W, b, relu, out)


def _dense_forward_checked(x: Any, W: Any, b: Any, relu: bool, out: Any) -> np.ndarray:
    x = _ndim("x", _array("x", x), 2)
    n, din = x.shape
    W = _ndim("W", _array("W", W, x.dtype), 2)
    dout = W.shape[0]
    if W.shape[1] != din:
        raise ValueError(f"W: expected shape (dout, {din}), got {W.shape}")
    b = _array("b", b, x.dtype, (dout,))
    out = _out("out", out, x.dtype, (n, dout), {"x": x, "W": W, "b": b})
    _call("dense_forward", x.dtype, x, n, din, W, b, dout, int(bool(relu)), out)
    return out


def softmax_xent(logits: np.ndarray, labels: np.ndarray,
                 out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Softmax cross-entropy head: (mean loss, d loss / d logits), logits: (n, k)."""
    logits = _ndim("logits", _array("logits", logits), 2)
    n, k = logits.shape
    if k < 2:
        raise ValueError(f"logits: expected at least 2 classes, got shape {logits.shape}")
    labels = _array("labels", labels, _INT32, (n,))
    delta = _out("out", out, logits.dtype, (n, k), {"logits": logits, "labels": labels})
    loss = _float_out(logits.dtype)
    _call("softmax_xent", logits.dtype, logits, labels, n, k, delta, loss)
    return float(loss[0]), delta


_DENSE_BACKWARD = _by_dtype("dense_backward")


def dense_backward(x: np.ndarray, delta: np.ndarray, W: np.ndarray, relu_in: bool,
                   input_grad: bool = True, dW: np.ndarray | None = None,
                   db: np.ndarray | None = None, delta_in: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Backward through one layer: (dW (dout, din), db (dout,), delta_in (n, din) or None).

    delta: (n, dout), gradient w.r.t. this layer's pre-activation; x: (n, din), its input.
    delta_in is the gradient w.r.t. the previous layer's pre-activation (masked by x > 0
    when ``relu_in``); it is skipped when ``input_grad`` is false (the first layer).
    """
    if type(x) is _ND and type(delta) is _ND and type(W) is _ND:  # the fast path (see above)
        dt = x.dtype
        entry = _DENSE_BACKWARD.get(dt)
        xs, ds = x.shape, delta.shape
        if (entry is not None and delta.dtype is dt and W.dtype is dt and len(xs) == 2
                and len(ds) == 2 and xs[0] and xs[1] and ds[1] and ds[0] == xs[0]
                and W.shape == (ds[1], xs[1])):
            fn, cd = entry
            try:
                px, pd, pw = _FROM_BUFFER(cd, x), _FROM_BUFFER(cd, delta), _FROM_BUFFER(cd, W)
                extents = [(px, px + len(px)), (pd, pd + len(pd)), (pw, pw + len(pw))]
                gw = _fast_out(dW, dt, cd, (ds[1], xs[1]), extents)
                gb = gw and _fast_out(db, dt, cd, (ds[1],), extents)
                gi = gb and (_fast_out(delta_in, dt, cd, xs, extents) if input_grad
                             else (None, ffi.NULL))
            except _REFUSED:
                gi = None
            if gi is not None:
                status = fn(px, pd, xs[0], xs[1], ds[1], pw, 1 if relu_in else 0, gw[1], gb[1],
                            gi[1])
                if status:
                    _raise_for("dense_backward", status)
                return gw[0], gb[0], gi[0]
    return _dense_backward_checked(x, delta, W, relu_in, input_grad, dW, db, delta_in)


def _dense_backward_checked(x: Any, delta: Any, W: Any, relu_in: bool, input_grad: bool,
                            dW: Any, db: Any, delta_in: Any
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    x = _ndim("x", _array("x", x), 2)
    n, din = x.shape
    delta = _ndim("delta", _array("delta", delta, x.dtype), 2)
    dout = delta.shape[1]
    if delta.shape[0] != n:
        raise ValueError(f"delta: expected shape ({n}, dout), got {delta.shape}")
    W = _array("W", W, x.dtype, (dout, din))
    inputs = {"x": x, "delta": delta, "W": W}
    dW = _out("dW", dW, x.dtype, (dout, din), inputs)
    db = _out("db", db, x.dtype, (dout,), {**inputs, "dW": dW})
    d_in = (_out("delta_in", delta_in, x.dtype, (n, din), {**inputs, "dW": dW, "db": db})
            if input_grad else None)
    _call("dense_backward", x.dtype, x, delta, n, din, dout, W, int(bool(relu_in)), dW, db,
          ffi.NULL if d_in is None else _ptr(d_in))
    return dW, db, d_in


# ---- 4. sparse logistic regression ------------------------------------------------------

class SparseWorkspace:
    """Scratch for :func:`sparse_logreg_grad` over d features; reusable, returned all zero."""

    def __init__(self, d: int, dtype: Any = np.float64) -> None:
        self.acc = np.zeros(_int("d", d, 1, 2**62), np.dtype(dtype))
        self.mark = np.zeros((d + 63) // 64, np.uint64)  # bitmap of touched features


def sparse_logreg_grad(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                       y: np.ndarray, w: np.ndarray, l2: float = 0.0,
                       workspace: SparseWorkspace | None = None
                       ) -> tuple[float, np.ndarray, np.ndarray]:
    """Logistic regression on CSR rows: (loss, feature ids (sorted), gradient values).

    Only touched features appear; l2 applies to them only (lazy regularisation).
    indptr: (n+1,) int64; indices: (nnz,) int64 in [0, d); data: (nnz,); y: (n,); w: (d,).
    """
    indptr, indices, data = _csr(indptr, indices, data)
    n, dtype = len(indptr) - 1, data.dtype
    y = _array("y", y, dtype, (n,))
    w = _ndim("w", _array("w", w, dtype), 1)
    d = len(w)
    ws = workspace if workspace is not None else SparseWorkspace(d, dtype)
    acc = _array("workspace.acc", ws.acc, dtype, (d,), writable=True)
    mark = _array("workspace.mark", ws.mark, _UINT64, ((d + 63) // 64,), writable=True)
    for other, a in {"indptr": indptr, "indices": indices, "data": data, "y": y, "w": w}.items():
        _disjoint("workspace.acc", acc, other, a)
        _disjoint("workspace.mark", mark, other, a)
    _disjoint("workspace.mark", mark, "workspace.acc", acc)
    out_idx = np.empty(len(indices), np.int64)
    out_val = np.empty(len(indices), dtype)
    count, loss = ffi.new("int64_t *"), _float_out(dtype)
    _call("sparse_logreg_grad", dtype, indptr, indices, data, n, d, y, w, _scalar("l2", l2),
          out_idx, out_val, count, loss, ws.acc, ws.mark)
    return float(loss[0]), out_idx[:count[0]], out_val[:count[0]]


# ---- 5. vector ops ------------------------------------------------------------------

def _pair(dst_name: str, dst: Any, src_name: str, src: Any) -> tuple[np.ndarray, np.ndarray]:
    """An in-place kernel's (written, read) arrays: same dtype and shape, no shared memory
    (not even ``src is dst``: the C loops are ``restrict``, and no caller needs it)."""
    dst = _array(dst_name, dst, writable=True)
    src = _array(src_name, src, dst.dtype, dst.shape)
    _disjoint(src_name, src, dst_name, dst)
    return dst, src


def sum_into(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """dst += src in place (any shape, equal shapes and dtypes); returns dst."""
    dst, src = _pair("dst", dst, "src", src)
    _call("sum_into", dst.dtype, dst, src, dst.size)
    return dst


def axpy(a: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y += a x in place; returns y."""
    y, x = _pair("y", y, "x", x)
    _call("axpy", y.dtype, _scalar("a", a, -np.inf), x, y, y.size)
    return y


def scale(a: float, x: np.ndarray) -> np.ndarray:
    """x *= a in place; returns x."""
    x = _array("x", x, writable=True)
    _call("scale", x.dtype, _scalar("a", a, -np.inf), x, x.size)
    return x


def copy(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """dst[...] = src; returns dst."""
    dst, src = _pair("dst", dst, "src", src)
    _call("copy", dst.dtype, dst, src, dst.size)
    return dst


def sgd_update(w: np.ndarray, g: np.ndarray, v: np.ndarray | None, lr: float,
               momentum: float = 0.0, weight_decay: float = 0.0) -> np.ndarray:
    """In-place SGD step, PyTorch semantics: v = mu v + (g + wd w); w -= lr v. Returns w.

    v (the momentum buffer) may be None when momentum is 0; given, it shares no memory
    with w or g.
    """
    w, g = _pair("w", w, "g", g)
    momentum = _scalar("momentum", momentum)
    if v is None:
        if momentum != 0:
            raise ValueError("v: a momentum buffer is required when momentum > 0")
        v = w  # never read or written by the kernel when momentum == 0: restrict holds
    else:
        v = _array("v", v, w.dtype, w.shape, writable=True)
        _disjoint("v", v, "w", w)
        _disjoint("v", v, "g", g)
    _call("sgd_update", w.dtype, w, g, v, w.size, _scalar("lr", lr), momentum,
          _scalar("weight_decay", weight_decay))
    return w


def average(bufs: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """Element-wise mean of k equal-shaped buffers, summed in index order."""
    if len(bufs) == 0:
        raise ValueError("bufs: expected at least one buffer")
    first = _array("bufs[0]", bufs[0])
    arrays = [_array(f"bufs[{i}]", b, first.dtype, first.shape) for i, b in enumerate(bufs)]
    out = _out("out", out, first.dtype, first.shape,
               {f"bufs[{i}]": a for i, a in enumerate(arrays)})
    ctype = "float *[]" if first.dtype == np.float32 else "double *[]"
    keep = [_ptr(a) for a in arrays]  # keeps the buffers alive across the call
    _call("average", first.dtype, out, ffi.new(ctype, keep), len(arrays), out.size)
    return out


# ---- 6. compression --------------------------------------------------------------------

def topk_ef(g: np.ndarray, residual: np.ndarray, k: int,
            scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k with error feedback: (indices ascending (k,), values (k,)); updates residual.

    acc = g + residual; the k largest |acc| (ties: lowest index) are sent and the rest
    stays in residual, so scatter(indices, values) + residual == acc exactly.
    """
    residual, g = _pair("residual", residual, "g", g)
    n = residual.size
    k = _int("k", k, 0, n)
    scratch = _out("scratch", scratch, g.dtype, (n,), {"g": g, "residual": residual})
    idx, val = np.empty(k, np.int64), np.empty(k, g.dtype)
    _call("topk_ef", g.dtype, g, residual, n, k, idx, val, scratch)
    return idx, val


def _qsgd_buckets(bucket: Any, n: int) -> tuple[int, int]:
    """(entries per bucket, number of buckets) for n entries; bucket None is one bucket."""
    bucket = max(n, 1) if bucket is None else _int("bucket", bucket, 1, 2**63 - 1)
    return bucket, -(-n // bucket)


def qsgd_quantize(v: np.ndarray, s: int, seed: int, out: np.ndarray | None = None, *,
                  bucket: int | None = None,
                  norms: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """QSGD with s levels in buckets of ``bucket`` consecutive entries of v (the last may be
    shorter; None: one bucket, the whole vector): (int32 levels in [-s, s] shaped like v,
    each bucket's L2 norm as an array (ceil(v.size / bucket),) of v's dtype), reproducible
    per seed; ``out`` and ``norms`` receive them when given. Entry i in bucket b stands for
    norms[b] * levels[i] / s, unbiased (Alistarh et al. 2017)."""
    v = _array("v", v)
    bucket, count = _qsgd_buckets(bucket, v.size)
    levels = _out("out", out, _INT32, v.shape, {"v": v})
    norms = _out("norms", norms, v.dtype, (count,), {"v": v, "out": levels})
    _call("qsgd_quantize", v.dtype, v, v.size, _int("s", s, 1, 2**30), bucket,
          _int("seed", seed, 0, 2**64 - 1), levels, norms)
    return levels, norms


def qsgd_dequantize(levels: np.ndarray, norms: np.ndarray, s: int,
                    out: np.ndarray | None = None, *, bucket: int | None = None) -> np.ndarray:
    """(norms[b] / s) * levels in each bucket b of ``bucket`` entries (None: one bucket), as
    an array of the norms' dtype (or into ``out``); levels, norms and bucket as
    :func:`qsgd_quantize` takes and returns them."""
    levels = _array("levels", levels, _INT32)
    bucket, count = _qsgd_buckets(bucket, levels.size)
    norms = _array("norms", norms, shape=(count,))
    out = _out("out", out, norms.dtype, levels.shape, {"levels": levels, "norms": norms})
    s = _int("s", s, 1, 2**30)
    try:
        _call("qsgd_dequantize", norms.dtype, levels, levels.size, s, bucket, norms, out)
    except ValueError:  # sizes, s and bucket are checked above: only a norm is left
        raise ValueError("norms: expected finite norms >= 0 (checked before any write)") \
            from None
    return out


def scatter_add(idx: np.ndarray, val: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out.flat[idx] += val (indices checked first: nothing is written when one is bad)."""
    out = _array("out", out, writable=True)
    idx = _array("idx", idx, _INT64)
    if idx.ndim != 1:
        raise ValueError(f"idx: expected a 1-D array, got shape {idx.shape}")
    val = _array("val", val, out.dtype, idx.shape)
    _disjoint("idx", idx, "out", out)
    _disjoint("val", val, "out", out)
    _call("scatter_add", out.dtype, idx, val, idx.size, out, out.size)
    return out


# ---- 7. matrix-vector and matrix-matrix ------------------------------------------------

def csr_matvec(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
    """y = A x for A in CSR with len(x) columns; returns y (m,)."""
    indptr, indices, data = _csr(indptr, indices, data)
    x = _ndim("x", _array("x", x, data.dtype), 1)
    m = len(indptr) - 1
    y = _out("out", out, data.dtype, (m,),
             {"indptr": indptr, "indices": indices, "data": data, "x": x})
    _call("csr_matvec", data.dtype, indptr, indices, data, m, len(x), x, y)
    return y


def csr_matmat(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, B: np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
    """Y = A B for A in CSR with B.shape[0] columns and B (n, k) row-major; returns Y (m, k).

    Bad indices or row pointer: ValueError, raised before anything is written."""
    indptr, indices, data = _csr(indptr, indices, data)
    B = _ndim("B", _array("B", B, data.dtype), 2)
    m, (n, k) = len(indptr) - 1, B.shape
    Y = _out("out", out, data.dtype, (m, k),
             {"indptr": indptr, "indices": indices, "data": data, "B": B})
    _call("csr_matmat", data.dtype, indptr, indices, data, m, n, B, k, Y)
    return Y


def dense_matvec(A: np.ndarray, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """y = A x for A (m, n) row-major (BLAS gemv); returns y (m,)."""
    A = _ndim("A", _array("A", A), 2)
    m, n = A.shape
    x = _array("x", x, A.dtype, (n,))
    y = _out("out", out, A.dtype, (m,), {"A": A, "x": x})
    _call("dense_matvec", A.dtype, A, m, n, x, y)
    return y


# ---- 8. embedding tables (Wide & Deep) ---------------------------------------------------

def _real(name: str, value: Any, dtype: np.dtype) -> float:
    """A finite real >= 0 that stays finite in ``dtype`` (1e39 is Inf as a float32)."""
    x = _scalar(name, value)
    if x > float(np.finfo(dtype).max):
        raise ValueError(f"{name}: {value!r} overflows {np.dtype(dtype)}")
    return x


def _call_indexed(name: str, dtype: np.dtype, index: str, bound: int, *args: Any) -> None:
    """:func:`_call`, with an index out of range reported as the fault of ``index``."""
    cargs = [_FROM_BUFFER(_CDECL[a.dtype], a) if isinstance(a, np.ndarray) else a for a in args]
    status = _kernel(name, dtype)(*cargs)
    if status == lib.SGD_EINDEX:
        raise ValueError(f"{index}: an entry is out of range [0, {bound}) (nothing was written)")
    if status:
        _raise_for(name, status)


def _bags(ids: Any) -> np.ndarray:
    """ids: (n, k) int64, n, k >= 1 (a bag of k ids per row)."""
    return _ndim("ids", _array("ids", ids, _INT64), 2)


def embedding_bag_forward(table: np.ndarray, ids: np.ndarray, mean: bool,
                          out: np.ndarray | None = None) -> np.ndarray:
    """Pooled rows of an embedding table: out[i] = the sum over j of table[ids[i, j]] (added
    in j order), divided by k when ``mean``; returns out (n, D).

    table: (V, D) float32 or float64; ids: (n, k) int64 in [0, V), repeats allowed (a bag of
    k ids per row). An id out of range: ValueError naming ids, before anything is written.
    """
    table = _ndim("table", _array("table", table), 2)
    V, D = table.shape
    ids = _bags(ids)
    n, k = ids.shape
    out = _out("out", out, table.dtype, (n, D), {"table": table, "ids": ids})
    _call_indexed("embedding_bag_forward", table.dtype, "ids", V, table, V, D, ids, n, k,
                  1 if mean else 0, out)
    return out


def embedding_bag_backward(ids: np.ndarray, grad_out: np.ndarray, mean: bool,
                           inverse: np.ndarray, unique_count: int,
                           out: np.ndarray | None = None) -> np.ndarray:
    """Row gradients of :func:`embedding_bag_forward` on the unique ids: out (u, D), zeroed,
    then out[inverse[i k + j]] += grad_out[i] (divided by k when ``mean``), in (i, j) order.

    ids: (n, k) int64, the forward's (only its shape is used); grad_out: (n, D) float32 or
    float64; (unique, inverse) = np.unique(ids, return_inverse=True): inverse (n * k,) or
    (n, k) (numpy 2 gives the latter) int64 in [0, u), unique_count u = len(unique) in
    [1, n * k]. An inverse entry out of range: ValueError naming inverse, out untouched.
    """
    ids = _bags(ids)
    n, k = ids.shape
    grad_out = _ndim("grad_out", _array("grad_out", grad_out), 2)
    if grad_out.shape[0] != n:
        raise ValueError(f"grad_out: expected shape ({n}, D), got {grad_out.shape}")
    D = grad_out.shape[1]
    inverse = _array("inverse", inverse, _INT64)
    if inverse.shape not in ((n * k,), (n, k)):
        raise ValueError(f"inverse: expected shape ({n * k},) or ({n}, {k}), "
                         f"got {inverse.shape}")
    u = _int("unique_count", unique_count, 1, n * k)
    out = _out("out", out, grad_out.dtype, (u, D),
               {"ids": ids, "grad_out": grad_out, "inverse": inverse})
    _call_indexed("embedding_bag_backward", grad_out.dtype, "inverse", u, inverse, n, k,
                  grad_out, D, 1 if mean else 0, u, out)
    return out


def _row_grads(table: np.ndarray, rows: Any, grads: Any,
               written: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """rows (u,) int64 (u may be 0) and grads (u, D) of table's dtype, sharing no memory with
    the arrays the step writes."""
    rows = _array("rows", rows, _INT64)
    if rows.ndim != 1:
        raise ValueError(f"rows: expected a 1-D array, got shape {rows.shape}")
    grads = _array("grads", grads, table.dtype, (len(rows), table.shape[1]))
    for name, a in written.items():
        _disjoint("rows", rows, name, a)
        _disjoint("grads", grads, name, a)
    return rows, grads


def adagrad_rows(table: np.ndarray, accum: np.ndarray, rows: np.ndarray, grads: np.ndarray,
                 lr: float, eps: float) -> np.ndarray:
    """Adagrad on the listed rows, TensorFlow's form, in place; returns table. For r =
    rows[q], g = grads[q]: accum[r] += g * g; table[r] -= lr * g / (sqrt(accum[r]) + eps).

    table, accum: (V, D) float32 or float64 (TensorFlow's initial_accumulator_value lives in
    accum); rows: (u,) int64 in [0, V), distinct (not checked: a repeated row is stepped
    twice in turn); grads: (u, D); lr, eps >= 0. The dense step is rows = arange(V): the
    same bits on every row. A row out of range: ValueError naming rows, nothing written. A
    non-finite table or accum (0 / 0 too: g = 0 with accum = eps = 0): NonFiniteError.
    """
    table = _ndim("table", _array("table", table, writable=True), 2)
    V, D = table.shape
    accum = _array("accum", accum, table.dtype, (V, D), writable=True)
    _disjoint("accum", accum, "table", table)
    rows, grads = _row_grads(table, rows, grads, {"table": table, "accum": accum})
    _call_indexed("adagrad_rows", table.dtype, "rows", V, table, accum, V, D, rows, len(rows),
                  grads, _real("lr", lr, table.dtype), _real("eps", eps, table.dtype))
    return table


def sgd_rows(table: np.ndarray, rows: np.ndarray, grads: np.ndarray, lr: float) -> np.ndarray:
    """SGD on the listed rows in place: table[rows[q]] -= lr * grads[q]; returns table.

    table: (V, D) float32 or float64; rows: (u,) int64 in [0, V), distinct; grads: (u, D);
    lr >= 0. A row out of range: ValueError naming rows, nothing written; a non-finite
    result: NonFiniteError.
    """
    table = _ndim("table", _array("table", table, writable=True), 2)
    V, D = table.shape
    rows, grads = _row_grads(table, rows, grads, {"table": table})
    _call_indexed("sgd_rows", table.dtype, "rows", V, table, V, D, rows, len(rows), grads,
                  _real("lr", lr, table.dtype))
    return table
