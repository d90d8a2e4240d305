"""Valid calls of every kernel wrapper, and ways to break them (shared by the bad-input tests
and the crash-safety subprocess they start).

A :class:`Case` holds one valid call as a flat dict of named arguments (``bufs[1]`` and
``workspace.acc`` are names too: they are what the wrapper's messages say), plus what the
wrapper promises about each argument. A corruption takes a case, an argument name and a
``random.Random`` (hypothesis's ``st.randoms()`` in the tests) and returns the bad value and
the exception it must raise.
"""

from __future__ import annotations

import ctypes
import mmap
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim import kernels as K

NAN_INF = (np.nan, np.inf, -np.inf)


@dataclass
class Case:
    name: str
    args: dict[str, Any]
    call: Callable[[dict[str, Any]], Any]
    outputs: tuple[str, ...] = ()  # arrays the kernel writes (must be writable)
    finite: tuple[str, ...] = ()  # float inputs whose NaN/Inf always reaches an output
    defining: tuple[str, ...] = ()  # arrays whose dtype/shape the others are checked against
    shaped: tuple[str, ...] = ()  # arrays whose shape cannot change without an error
    scalars: dict[str, list] = field(default_factory=dict)  # scalar -> bad values
    labels: tuple[str, int] | None = None  # (label array, number of classes)
    csr: tuple[str, str, int] | None = None  # (indptr, indices, number of columns)
    idx: tuple[str, int] | None = None  # (scatter index array, output size)

    def run(self, args: dict[str, Any] | None = None) -> Any:
        return self.call(self.args if args is None else args)

    def arrays(self) -> list[str]:
        return [k for k, v in self.args.items() if isinstance(v, np.ndarray)]

    def stridable(self) -> list[str]:
        """Arrays with more than one element (a 1-element array is always contiguous)."""
        return [k for k in self.arrays() if self.args[k].size > 1]


F_BAD = [-1.0, np.nan, np.inf, -np.inf, None, "abc", [0.5]]  # for scalars that must be >= 0
A_BAD = [np.nan, np.inf, -np.inf, None, "abc"]  # for any-sign real scalars


def _csr_args(rng, n, d, dtype):
    rows = [np.sort(rng.choice(d, size=min(d, 1 + i % 3), replace=False)) for i in range(n)]
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int64)
    return indptr, indices, rng.standard_normal(len(indices)).astype(dtype)


def build(name: str, dtype: Any, n: int = 5, d: int = 6, k: int = 3) -> Case:
    """A fresh valid call of kernel ``name`` (n rows, d features, k classes / units; for the
    embedding kernels n bags of k ids from a table of d + k rows of d columns)."""
    if name in EMBEDDING_NAMES:
        return embedding_case(name, dtype, V=d + k, D=d, n=n, k=k)
    rng = np.random.default_rng(0)

    def f(*shape):
        return rng.standard_normal(shape).astype(dtype)

    labels = rng.integers(0, k, n).astype(np.int32)
    if name == "logreg_loss_grad":
        return Case(name, {"X": f(n, d), "y": rng.integers(0, 2, n).astype(dtype), "w": f(d),
                           "l2": 0.1, "out": np.empty(d, dtype)},
                    lambda a: K.logreg_loss_grad(a["X"], a["y"], a["w"], a["l2"], out=a["out"]),
                    ("out",), ("X", "y", "w"), ("X",), ("X", "y", "w", "out"), {"l2": F_BAD})
    if name == "softmax_loss_grad":
        return Case(name, {"X": f(n, d), "labels": labels, "W": f(k, d), "l2": 0.1,
                           "out": np.empty((k, d), dtype)},
                    lambda a: K.softmax_loss_grad(a["X"], a["labels"], a["W"], a["l2"],
                                                  out=a["out"]),
                    ("out",), ("X", "W"), ("X", "W"), ("X", "labels", "W", "out"),
                    {"l2": F_BAD}, labels=("labels", k))
    if name == "dense_forward":
        return Case(name, {"x": f(n, d), "W": f(k, d), "b": f(k), "out": np.empty((n, k), dtype)},
                    lambda a: K.dense_forward(a["x"], a["W"], a["b"], True, out=a["out"]),
                    ("out",), ("x", "W", "b"), ("x", "W"), ("x", "W", "b", "out"))
    if name == "softmax_xent":  # -inf logits are legal (a masked class): only NaN / +inf
        return Case(name, {"logits": f(n, k), "labels": labels, "out": np.empty((n, k), dtype)},
                    lambda a: K.softmax_xent(a["logits"], a["labels"], out=a["out"]),
                    ("out",), ("logits",), ("logits",), ("logits", "labels", "out"),
                    labels=("labels", k))
    if name == "dense_backward":
        return Case(name, {"x": f(n, d), "delta": f(n, k), "W": f(k, d),
                           "dW": np.empty((k, d), dtype), "db": np.empty(k, dtype),
                           "delta_in": np.empty((n, d), dtype)},
                    lambda a: K.dense_backward(a["x"], a["delta"], a["W"], True, dW=a["dW"],
                                               db=a["db"], delta_in=a["delta_in"]),
                    ("dW", "db", "delta_in"), ("x", "delta"), ("x", "delta"),
                    ("x", "delta", "W", "dW", "db", "delta_in"))
    if name in ("sparse_logreg_grad", "csr_matvec", "csr_matmat"):
        indptr, indices, data = _csr_args(rng, n, d, dtype)
        args = {"indptr": indptr, "indices": indices, "data": data}
        if name == "csr_matmat":  # B: d rows (A's columns) of k columns; Y: n x k
            args |= {"B": f(d, k), "out": np.empty((n, k), dtype)}
            return Case(name, args,
                        lambda a: K.csr_matmat(a["indptr"], a["indices"], a["data"], a["B"],
                                               out=a["out"]),
                        ("out",), ("data",), ("indptr", "data"),
                        ("indptr", "indices", "data", "out"), csr=("indptr", "indices", d))
        if name == "csr_matvec":
            args |= {"x": f(d), "out": np.empty(n, dtype)}
            return Case(name, args,
                        lambda a: K.csr_matvec(a["indptr"], a["indices"], a["data"], a["x"],
                                               out=a["out"]),
                        ("out",), ("data",), ("indptr", "data"),
                        ("indptr", "indices", "data", "out"), csr=("indptr", "indices", d))
        ws = K.SparseWorkspace(d, dtype)  # its layout (acc, mark bitmap) is the wrapper's
        args |= {"y": rng.integers(0, 2, n).astype(dtype), "w": f(d), "l2": 0.1,
                 "workspace.acc": ws.acc, "workspace.mark": ws.mark}

        def sparse(a):
            ws = K.SparseWorkspace(1, dtype)
            ws.acc, ws.mark = a["workspace.acc"], a["workspace.mark"]  # may be broken
            return K.sparse_logreg_grad(a["indptr"], a["indices"], a["data"], a["y"], a["w"],
                                        a["l2"], workspace=ws)
        return Case(name, args, sparse, ("workspace.acc", "workspace.mark"), ("data", "y"),
                    ("indptr", "data", "w"), tuple(a for a in args if a != "l2"),
                    {"l2": F_BAD}, csr=("indptr", "indices", d))
    if name in ("sum_into", "copy"):
        fn = getattr(K, name)
        return Case(name, {"dst": f(d), "src": f(d)}, lambda a: fn(a["dst"], a["src"]),
                    ("dst",), ("src",) if name == "copy" else ("dst", "src"), ("dst",),
                    ("dst", "src"))
    if name == "axpy":
        return Case(name, {"a": 0.5, "x": f(d), "y": f(d)},
                    lambda a: K.axpy(a["a"], a["x"], a["y"]),
                    ("y",), ("x", "y"), ("y",), ("x", "y"), {"a": A_BAD})
    if name == "scale":
        return Case(name, {"a": 0.5, "x": f(d)}, lambda a: K.scale(a["a"], a["x"]),
                    ("x",), ("x",), ("x",), (), {"a": A_BAD})
    if name == "sgd_update":
        return Case(name, {"w": f(d), "g": f(d), "v": f(d), "lr": 0.1, "momentum": 0.9,
                           "weight_decay": 0.01},
                    lambda a: K.sgd_update(a["w"], a["g"], a["v"], a["lr"], a["momentum"],
                                           a["weight_decay"]),
                    ("w", "v"), ("w", "g", "v"), ("w",), ("w", "g", "v"),
                    {"lr": F_BAD, "momentum": F_BAD, "weight_decay": F_BAD})
    if name == "average":
        return Case(name, {"bufs[0]": f(d), "bufs[1]": f(d), "bufs[2]": f(d),
                           "out": np.empty(d, dtype)},
                    lambda a: K.average([a["bufs[0]"], a["bufs[1]"], a["bufs[2]"]],
                                        out=a["out"]),
                    ("out",), ("bufs[0]", "bufs[1]", "bufs[2]"), ("bufs[0]",),
                    ("bufs[0]", "bufs[1]", "bufs[2]", "out"))
    if name == "topk_ef":
        return Case(name, {"g": f(d), "residual": f(d), "k": min(k, d),
                           "scratch": np.empty(d, dtype)},
                    lambda a: K.topk_ef(a["g"], a["residual"], a["k"], scratch=a["scratch"]),
                    ("residual", "scratch"), ("g", "residual"), ("residual",),
                    ("g", "residual", "scratch"),
                    {"k": [-1, d + 1, 2.0, np.nan, None, True, "1"]})
    if name in ("qsgd_quantize", "qsgd_dequantize"):
        bucket = 4  # several buckets from d = 5 on; the last one shorter unless 4 divides d
        norms = -(-d // bucket)
        if name == "qsgd_quantize":
            return Case(name, {"v": f(d), "s": 4, "seed": 7, "bucket": bucket,
                               "out": np.empty(d, np.int32), "norms": np.empty(norms, dtype)},
                        lambda a: K.qsgd_quantize(a["v"], a["s"], a["seed"], out=a["out"],
                                                  bucket=a["bucket"], norms=a["norms"]),
                        ("out", "norms"), ("v",), ("v",), ("v", "out", "norms"),
                        {"s": [0, -1, 2**30 + 1, 1.5, None, "4"],
                         "seed": [-1, 2**64, 0.5, np.nan, None, "7"],
                         "bucket": [0, -1, 2**63, 4.0, np.nan, True, "4"]})
        return Case(name, {"levels": rng.integers(-4, 5, d).astype(np.int32),
                           "norms": np.abs(f(norms)) + 0.5, "s": 4, "bucket": bucket,
                           "out": np.empty(d, dtype)},
                    lambda a: K.qsgd_dequantize(a["levels"], a["norms"], a["s"], out=a["out"],
                                                bucket=a["bucket"]),
                    ("out",), (), ("levels", "norms"), ("levels", "norms", "out"),
                    {"s": [0, -3, 2**31, 2.0, None], "bucket": [0, -4, 2**63, 4.0, True, "4"]})
    if name == "scatter_add":
        return Case(name, {"idx": rng.integers(0, d, n).astype(np.int64), "val": f(n),
                           "out": f(d)},
                    lambda a: K.scatter_add(a["idx"], a["val"], a["out"]),
                    ("out",), ("val",), ("idx", "out"), ("idx", "val"), idx=("idx", d))
    if name == "dense_matvec":
        return Case(name, {"A": f(n, d), "x": f(d), "out": np.empty(n, dtype)},
                    lambda a: K.dense_matvec(a["A"], a["x"], out=a["out"]),
                    ("out",), ("A", "x"), ("A",), ("A", "x", "out"))
    raise KeyError(name)


def embedding_case(name: str, dtype: Any, V: int = 6, D: int = 5, n: int = 4,
                   k: int = 3) -> Case:
    """A valid call of an embedding-table kernel: a table of V rows of D columns, n bags of
    k ids (:func:`build` maps its n, d, k here; tests/kernels/test_kernels_embedding.py calls this
    directly for shapes that mapping never gives, V = 1 and one-id bags). Each index array
    (``idx``) is checked before anything is written."""
    rng = np.random.default_rng(0)

    def f(*shape):
        return rng.standard_normal(shape).astype(dtype)

    ids = rng.integers(0, V, (n, k)).astype(np.int64)
    if name == "embedding_bag_forward":  # a NaN in the table reaches out only if looked up
        return Case(name, {"table": f(V, D), "ids": ids, "out": np.empty((n, D), dtype)},
                    lambda a: K.embedding_bag_forward(a["table"], a["ids"], True, out=a["out"]),
                    outputs=("out",), defining=("table", "ids"), shaped=("out",),
                    idx=("ids", V))
    if name == "embedding_bag_backward":
        unique, inverse = np.unique(ids, return_inverse=True)
        u = len(unique)
        return Case(name, {"ids": ids, "grad_out": f(n, D), "inverse": inverse.reshape(-1),
                           "unique_count": u, "out": np.empty((u, D), dtype)},
                    lambda a: K.embedding_bag_backward(a["ids"], a["grad_out"], True,
                                                       a["inverse"], a["unique_count"],
                                                       out=a["out"]),
                    outputs=("out",), finite=("grad_out",), defining=("ids", "grad_out"),
                    shaped=("ids", "grad_out", "inverse", "out"),
                    scalars={"unique_count": [0, -1, n * k + 1, 2.0, None, True, "3"]},
                    idx=("inverse", u))
    u = min(3, V)
    rows = rng.permutation(V)[:u].astype(np.int64)
    # lr = 1e39 is finite as a float64 but overflows a float32: bad for float32 only
    overflow = [1e39] if np.dtype(dtype) == np.float32 else []
    if name == "adagrad_rows":  # only the listed rows are stepped (and probed): not table
        return Case(name, {"table": f(V, D), "accum": np.full((V, D), 0.1, dtype),
                           "rows": rows, "grads": f(u, D), "lr": 0.1, "eps": 1e-7},
                    lambda a: K.adagrad_rows(a["table"], a["accum"], a["rows"], a["grads"],
                                             a["lr"], a["eps"]),
                    outputs=("table", "accum"), finite=("grads",),
                    defining=("table", "rows"), shaped=("table", "accum", "rows", "grads"),
                    scalars={"lr": [-1.0, np.nan, np.inf, None, "abc", *overflow],
                             "eps": [-1e-7, np.nan, -np.inf, None, [0.1]]},
                    idx=("rows", V))
    if name == "sgd_rows":
        return Case(name, {"table": f(V, D), "rows": rows, "grads": f(u, D), "lr": 0.1},
                    lambda a: K.sgd_rows(a["table"], a["rows"], a["grads"], a["lr"]),
                    outputs=("table",), finite=("grads",), defining=("table", "rows"),
                    shaped=("rows", "grads"),
                    scalars={"lr": [-0.5, np.nan, np.inf, None, "abc", *overflow]},
                    idx=("rows", V))
    raise KeyError(name)


EMBEDDING_NAMES = ["embedding_bag_forward", "embedding_bag_backward", "adagrad_rows",
                   "sgd_rows"]

NAMES = ["logreg_loss_grad", "softmax_loss_grad", "dense_forward", "softmax_xent",
         "dense_backward", "sparse_logreg_grad", "sum_into", "axpy", "scale", "copy",
         "sgd_update", "average", "topk_ef", "qsgd_quantize", "qsgd_dequantize", "scatter_add",
         "csr_matvec", "csr_matmat", "dense_matvec", *EMBEDDING_NAMES]


def names_arg(msg: str, name: str) -> bool:
    """True when the message names ``name`` as an argument ("name:" or "name, other:")."""
    return re.search(rf"(^|[\s,(]){re.escape(name)}[:,]", msg) is not None


def names_any(msg: str, case: Case) -> bool:
    return any(names_arg(msg, a) for a in case.args)


# ---- corruptions: (case, argument, rnd) -> (bad value, expected exception) --------------

def wrong_dtype(case: Case, arg: str, rnd: random.Random) -> tuple[Any, type]:
    a = case.args[arg]
    if a.dtype.kind == "f":
        choices = [np.int64, np.int32, np.float16, np.complex128]
        floats = [k for k in case.arrays() if case.args[k].dtype.kind == "f"]
        if floats != [arg]:  # the only float array picks the precision: then both are fine
            choices.append(np.float64 if a.dtype == np.float32 else np.float32)
    else:
        choices = [d for d in (np.int32, np.int64, np.uint8, np.float64) if d != a.dtype]
    if rnd.random() < 0.2:
        return a.tolist(), TypeError
    with np.errstate(invalid="ignore", over="ignore"):  # np.empty outputs: any bit pattern
        return a.astype(rnd.choice(choices)), TypeError


def wrong_shape(case: Case, arg: str, rnd: random.Random) -> tuple[Any, type]:
    a = case.args[arg]
    how = rnd.choice(["grow", "shrink", "ndim"])
    if how == "ndim":
        return (a.reshape(1, *a.shape) if a.ndim == 1 or rnd.random() < 0.5
                else a.reshape(-1)), ValueError
    axis = rnd.randrange(a.ndim)
    if how == "grow":
        return np.concatenate([a, np.take(a, [0], axis=axis)], axis=axis), ValueError
    return np.take(a, range(a.shape[axis] - 1), axis=axis), ValueError


def non_contiguous(case: Case, arg: str, rnd: random.Random) -> tuple[Any, type]:
    a = case.args[arg]
    if a.ndim == 2 and rnd.random() < 0.5:
        return np.asfortranarray(a), ValueError  # a transposed layout of the same values
    axis = rnd.choice([i for i in range(a.ndim) if a.shape[i] > 1])
    wide = np.repeat(a, 2, axis=axis)
    return wide[(slice(None),) * axis + (slice(None, None, 2),)], ValueError


def read_only(case: Case, arg: str, rnd: random.Random) -> tuple[Any, type]:
    a = case.args[arg].copy()
    a.setflags(write=False)
    return a, ValueError


def non_finite(case: Case, arg: str, rnd: random.Random) -> tuple[Any, type]:
    a = case.args[arg].copy()
    bad = rnd.choice(NAN_INF[:2] if case.name == "softmax_xent" else NAN_INF)
    a.reshape(-1)[rnd.randrange(a.size)] = bad
    return a, K.NonFiniteError


def bad_index(case: Case, rnd: random.Random) -> dict[str, Any]:
    """A copy of the case's arguments with one label / index / row pointer broken."""
    args = dict(case.args)
    if case.labels:
        name, k = case.labels
        lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
        bad = rnd.choice([-1, k, rnd.randint(lo, -1), rnd.randint(k, hi)])
    elif case.idx:
        name, k = case.idx
        bad = rnd.choice([-1, k, -(2**62), 2**62, rnd.randint(k, 2**40)])
    else:
        indptr_name, name, k = case.csr
        if rnd.random() < 0.5:  # the row pointer: not from 0, or not non-decreasing
            p = args[indptr_name].copy()
            i = rnd.randrange(len(p) - 1)
            p[i] = rnd.choice([p[i + 1] + 1, p[i + 1] + 2**40, -1]) if i else rnd.choice([1, -1])
            args[indptr_name] = p
            return args
        bad = rnd.choice([-1, k, 2**62, -(2**62)])
    a = args[name].copy()
    a.reshape(-1)[rnd.randrange(a.size)] = bad  # one entry, of a 2-D array (ids) too
    args[name] = a
    return args


# ---- guard pages: any read or write past the end of an array faults ------------------

_KEEP: list[Any] = []
_PAGE = mmap.PAGESIZE


def guarded(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` that ends exactly where an inaccessible page begins (Linux)."""
    if not sys.platform.startswith("linux") or a.size == 0 or not a.flags.c_contiguous:
        return a
    pages = -(-a.nbytes // _PAGE) + 1
    m = mmap.mmap(-1, pages * _PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mprotect(ctypes.c_void_p(base + (pages - 1) * _PAGE), _PAGE, 0) != 0:
        return a
    g = np.ndarray(a.shape, a.dtype, buffer=m, offset=(pages - 1) * _PAGE - a.nbytes)
    g[...] = a
    g.setflags(write=a.flags.writeable)
    _KEEP.append(m)
    return g


def guard_all(args: dict[str, Any]) -> dict[str, Any]:
    return {k: guarded(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
