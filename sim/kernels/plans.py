"""Logistic regression's plan: which path (fused or BLAS) and which cache blocks it takes.

Logistic regression runs one of two plans (:func:`logreg_plan`): a fused pass over X with
cache blocks sized from the machine's caches (:func:`~sim.kernels.caches.cache_sizes`), the
default, or two BLAS mat-vecs, taken on request (``SGD_KERNEL_PLAN=blas``) or, with
``SGD_KERNEL_PLAN=auto``, where they are measured clearly faster on the machine at hand.
Block sizes never change a result; the path does, so the default never depends on a timing.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.kernels.arguments import _int
from sim.kernels.caches import CacheSizes, cache_sizes
from sim.kernels.calls import _float_out, _kernel, _ptr
from sim.kernels.library import ffi, lib

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


# The public names: sim.bench.training times every public function of sim.kernels as a
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
