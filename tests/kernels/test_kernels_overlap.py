"""Arrays that share memory: the C pointers are ``restrict``, so an array a kernel writes may
overlap no other array of the call. Overlaps are refused with a ``ValueError`` naming both
arguments (before anything is written); disjoint views of one buffer give exactly what
separate arrays give, and match numpy.

The property test places two arguments of a valid call (tests/kernel_cases.py) at random
offsets of one byte buffer, overlapping or not, and decides which from the byte intervals
alone (not from numpy's overlap test).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import NAMES, build
from numpy_ref import logreg_ref, softmax_ref, tol, wide, xent_ref

from sim import kernels as K

DTYPES = [np.float32, np.float64]
SETTINGS = settings(max_examples=10, deadline=None, derandomize=True, database=None)

# every kernel with more than one array (scale has one)
KERNELS = [n for n in NAMES if n != "scale"]

# The order in which a wrapper checks its arrays, where it is not the argument order: the
# in-place array comes first. An overlap is reported by the later one ("src: shares memory
# with dst"), the argument the caller should replace by a separate array.
CHECK_ORDER = {"axpy": ["y", "x"], "topk_ef": ["residual", "g", "scratch"],
               "scatter_add": ["out", "idx", "val"]}


def message(first: str, second: str) -> str:
    return rf"^{re.escape(first)}: shares memory with {re.escape(second)}; pass a separate"


def expected_message(case, a: str, b: str) -> str:
    order = CHECK_ORDER.get(case.name, list(case.args))
    first, second = (a, b) if order.index(a) > order.index(b) else (b, a)
    return message(first, second)


def csr_dense(indptr, indices, data, d):
    dense = np.zeros((len(indptr) - 1, d))
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    np.add.at(dense, (rows, indices), wide(data))
    return dense


def numpy_reference(name: str, a: dict) -> dict:
    """What the call should give, from numpy on copies of its inputs: {output argument or
    "result" (the return value, flattened to a tuple): expected}."""
    if name == "sum_into":
        return {"dst": np.add(a["dst"], a["src"])}
    if name == "copy":
        return {"dst": a["src"].copy()}
    if name == "axpy":
        return {"y": wide(a["y"]) + a["a"] * wide(a["x"])}
    if name == "sgd_update":
        w, g, v = wide(a["w"]), wide(a["g"]), wide(a["v"])
        v = a["momentum"] * v + g + a["weight_decay"] * w
        return {"v": v, "w": w - a["lr"] * v}
    if name == "average":
        return {"out": (wide(a["bufs[0]"]) + wide(a["bufs[1]"]) + wide(a["bufs[2]"])) / 3}
    if name == "topk_ef":
        acc = a["g"] + a["residual"]  # the same IEEE addition the kernel does
        idx = np.sort(np.argsort(-np.abs(wide(acc)), kind="stable")[:a["k"]])
        residual = acc.copy()
        residual[idx] = 0
        return {"result": (idx, acc[idx]), "residual": residual}
    if name == "qsgd_quantize":  # the levels are random draws; the buckets' norms are not
        v, b = wide(a["v"]), a["bucket"]
        return {"norms": np.array([np.linalg.norm(v[i:i + b]) for i in range(0, v.size, b)])}
    if name == "qsgd_dequantize":
        unit = np.repeat(wide(a["norms"]) / a["s"], a["bucket"])[:a["levels"].size]
        return {"out": unit * a["levels"]}
    if name == "scatter_add":
        out = a["out"].copy()
        np.add.at(out, a["idx"], a["val"])
        return {"out": out}
    if name == "dense_matvec":
        return {"out": wide(a["A"]) @ wide(a["x"])}
    if name == "csr_matvec":
        dense = csr_dense(a["indptr"], a["indices"], a["data"], len(a["x"]))
        return {"out": dense @ wide(a["x"])}
    if name == "csr_matmat":
        dense = csr_dense(a["indptr"], a["indices"], a["data"], len(a["B"]))
        return {"out": dense @ wide(a["B"])}
    if name == "dense_forward":  # kernel_cases calls it with relu=True
        return {"out": np.maximum(wide(a["x"]) @ wide(a["W"]).T + wide(a["b"]), 0)}
    if name == "dense_backward":  # relu_in=True
        x, delta, W = wide(a["x"]), wide(a["delta"]), wide(a["W"])
        return {"dW": delta.T @ x, "db": delta.sum(axis=0), "delta_in": (delta @ W) * (x > 0)}
    if name == "softmax_xent":
        return {"result": xent_ref(a["logits"], a["labels"])}
    if name == "logreg_loss_grad":
        return {"result": logreg_ref(a["X"], a["y"], a["w"], a["l2"])}
    if name == "softmax_loss_grad":
        return {"result": softmax_ref(a["X"], a["labels"], a["W"], a["l2"])}
    if name == "embedding_bag_forward":  # kernel_cases calls it with mean=True
        return {"out": wide(a["table"])[a["ids"]].mean(axis=1)}
    if name == "embedding_bag_backward":  # mean=True
        n, k = a["ids"].shape
        out = np.zeros((a["unique_count"], a["grad_out"].shape[1]))
        np.add.at(out, a["inverse"], np.repeat(wide(a["grad_out"]), k, axis=0) / k)
        return {"out": out}
    if name == "adagrad_rows":
        table, accum = wide(a["table"]).copy(), wide(a["accum"]).copy()
        rows, g = a["rows"], wide(a["grads"])
        accum[rows] += g * g
        table[rows] -= a["lr"] * g / (np.sqrt(accum[rows]) + a["eps"])
        return {"table": table, "accum": accum}
    if name == "sgd_rows":
        table = wide(a["table"]).copy()
        table[a["rows"]] -= a["lr"] * wide(a["grads"])
        return {"table": table}
    if name == "sparse_logreg_grad":
        d = len(a["w"])
        loss, grad = logreg_ref(csr_dense(a["indptr"], a["indices"], a["data"], d), a["y"],
                                a["w"], 0.0)
        touched = np.unique(a["indices"])
        wt = wide(a["w"])[touched]
        return {"result": (loss + 0.5 * a["l2"] * wt @ wt, touched,
                           grad[touched] + a["l2"] * wt)}
    raise KeyError(name)


def fresh(args: dict) -> dict:
    """The arguments with every array copied (kernels write theirs in place)."""
    return {key: v.copy() if isinstance(v, np.ndarray) else v for key, v in args.items()}


def flat(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def place(draw, case, a: str, b: str, overlap: bool) -> tuple[np.ndarray, dict]:
    """Copies of arguments ``a`` and ``b`` as views of one byte buffer at drawn offsets, each
    aligned to its itemsize, whose byte ranges overlap or not; returns (buffer, views)."""
    arrs = {name: case.args[name] for name in (a, b)}
    fixed, moving = draw(st.permutations([a, b]))
    n_fix, n_mov, al_mov = arrs[fixed].nbytes, arrs[moving].nbytes, arrs[moving].itemsize
    o_fix = 8 * (draw(st.integers(0, 2)) + -(-n_mov // 8))  # room for `moving` below it
    # every aligned offset of `moving`, below, across or above `fixed` (up to 24 bytes away)
    starts = [o for o in range(0, o_fix + n_fix + 25, al_mov)
              if (o_fix - n_mov < o < o_fix + n_fix) == overlap]
    offsets = {fixed: o_fix, moving: draw(st.sampled_from(starts))}
    lo, hi = sorted((offsets[k], offsets[k] + arrs[k].nbytes) for k in (a, b))
    assert (hi[0] < lo[1]) == overlap  # the byte intervals decide, not numpy
    base = np.zeros(max(o + arrs[k].nbytes for k, o in offsets.items()) + 8, np.uint8)
    views = {k: base[o:o + arrs[k].nbytes].view(arrs[k].dtype).reshape(arrs[k].shape)
             for k, o in offsets.items()}
    # the output first, then the input over it: an input keeps its (valid) values
    for k in sorted(views, key=lambda k: k not in case.outputs):
        views[k][...] = arrs[k]
    return base, views


def pairs(name: str) -> list[tuple[str, str]]:
    """Every two arrays of a call of which at least one is written by the kernel."""
    case = build(name, np.float64)
    arrays = case.arrays()
    return [(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:]
            if a in case.outputs or b in case.outputs]


PAIRS = [(name, a, b) for name in KERNELS for a, b in pairs(name)]


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "disjoint"])
@pytest.mark.parametrize(("name", "a", "b"), PAIRS, ids=[f"{n}:{a}/{b}" for n, a, b in PAIRS])
@SETTINGS
@given(data=st.data())
def test_overlap_is_refused_and_disjoint_views_are_exact(name, a, b, overlap, data):
    draw = data.draw
    dtype = draw(st.sampled_from(DTYPES))
    n, d, k = draw(st.integers(1, 6)), draw(st.integers(1, 9)), draw(st.integers(2, 4))
    case = build(name, dtype, n, d, k)
    base, views = place(draw, case, a, b, overlap)
    args = {**fresh(case.args), **views}
    copies = fresh(case.args)

    if overlap:
        before = base.copy()
        others = {key: v.copy() for key, v in args.items()
                  if isinstance(v, np.ndarray) and key not in views}
        with pytest.raises(ValueError, match=expected_message(case, a, b)):
            case.run(args)
        assert np.array_equal(base, before), "an overlapping call wrote before refusing"
        for key, v in others.items():  # bitwise: np.empty outputs may hold NaN
            assert args[key].tobytes() == v.tobytes(), key
        return

    got = flat(case.run(args))
    # the same call on separate arrays: placement in a shared buffer changes no bit
    want = flat(case.run(copies))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    for out in case.outputs:
        np.testing.assert_array_equal(args[out], copies[out], err_msg=out)
    # and numpy agrees
    for key, expected in numpy_reference(name, fresh(case.args)).items():
        if key == "result":
            for g, e in zip(got, flat(expected), strict=True):
                np.testing.assert_allclose(wide(g), wide(e), **tol(dtype, 10.0))
        else:
            np.testing.assert_allclose(wide(args[key]), wide(expected), **tol(dtype, 10.0),
                                       err_msg=key)


# ---- fixed examples ---------------------------------------------------------------------

def test_issue_example_is_refused_and_leaves_the_array_alone():
    a = np.arange(10.)
    with pytest.raises(ValueError, match=message("src", "dst")):
        K.sum_into(a[1:], a[:-1])
    np.testing.assert_array_equal(a, np.arange(10.))


@pytest.mark.parametrize("dtype", DTYPES)
def test_adjacent_views_are_disjoint(dtype):
    a = np.arange(10, dtype=dtype)
    ref = a.copy()
    np.add(ref[5:], ref[:5], out=ref[5:])
    K.sum_into(a[5:], a[:5])
    np.testing.assert_array_equal(a, ref)
    K.copy(a[:5], a[5:])
    np.testing.assert_array_equal(a[:5], a[5:])


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_same_array_twice_is_refused(dtype):
    """Exact in-place use (src is dst) is refused too: restrict forbids it and no caller
    needs it (numpy's ``x += x`` is ``K.scale(2.0, x)``)."""
    x = np.arange(1.0, 7.0, dtype=dtype)
    keep = x.copy()
    idx = np.array([0, 2], np.int64)
    for call, first, second in [
            (lambda: K.sum_into(x, x), "src", "dst"),
            (lambda: K.copy(x, x), "src", "dst"),
            (lambda: K.axpy(2.0, x, x), "x", "y"),
            (lambda: K.sgd_update(x, x, None, 0.1), "g", "w"),
            (lambda: K.sgd_update(x, np.ones_like(x), x, 0.1, 0.9), "v", "w"),
            (lambda: K.topk_ef(x, x, 2), "g", "residual"),
            (lambda: K.scatter_add(idx, x[:2], x), "val", "out"),
            (lambda: K.qsgd_quantize(x, 4, 0, out=x.view(np.int32)[:6]), "out", "v")]:
        with pytest.raises(ValueError, match=message(first, second)):
            call()
        np.testing.assert_array_equal(x, keep)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_update_without_momentum_buffer_still_works(dtype):
    """v=None passes w as v internally: the kernel never touches v when momentum is 0."""
    rng = np.random.default_rng(1)
    w, g = rng.standard_normal(9).astype(dtype), rng.standard_normal(9).astype(dtype)
    ref = wide(w) - 0.1 * (wide(g) + 0.01 * wide(w))
    assert K.sgd_update(w, g, None, 0.1, 0.0, 0.01) is w
    np.testing.assert_allclose(w, ref, **tol(dtype))


def test_non_contiguous_views_are_refused_before_overlap():
    """Interleaved views share no element, but only C-contiguous arrays are accepted."""
    a = np.arange(10.)
    with pytest.raises(ValueError, match="^dst: must be C-contiguous"):
        K.sum_into(a[::2], a[1::2])
    with pytest.raises(ValueError, match="^src: must be C-contiguous"):
        K.sum_into(np.zeros(5), a[::2])
    np.testing.assert_array_equal(a, np.arange(10.))


def test_partial_overlap_across_dtypes_is_found():
    """An int32 output over half of a float64 input's last element still overlaps."""
    raw = np.zeros(64, np.uint8)
    v = raw[:32].view(np.float64)
    v[:] = [1.0, -2.0, 3.0, 0.5]
    with pytest.raises(ValueError, match=message("out", "v")):
        K.qsgd_quantize(v, 4, 0, out=raw[28:44].view(np.int32))
    levels, norms = K.qsgd_quantize(v, 4, 0, out=raw[32:48].view(np.int32))  # adjacent: fine
    np.testing.assert_allclose(norms, [np.linalg.norm([1.0, -2.0, 3.0, 0.5])])
    with pytest.raises(ValueError, match=message("norms", "v")):  # the norms over v's end
        K.qsgd_quantize(v, 4, 0, bucket=2, norms=raw[24:40].view(np.float64))
    np.testing.assert_array_equal(levels, K.qsgd_quantize(v.copy(), 4, 0)[0])


def test_empty_views_share_nothing():
    a = np.arange(4.)
    assert K.sum_into(a[2:2], a[1:1]).size == 0
    np.testing.assert_array_equal(a, np.arange(4.))


def test_inputs_that_are_only_read_may_alias():
    """restrict allows aliasing between arrays nobody writes."""
    rng = np.random.default_rng(2)
    b = rng.standard_normal(8)
    np.testing.assert_allclose(K.average([b, b, b[:]]), b, **tol(np.float64))
    A = rng.standard_normal((8, 8))
    np.testing.assert_allclose(K.dense_matvec(A, A[0]), A @ A[0], **tol(np.float64, 8.0))


def test_sparse_workspace_must_not_overlap_inputs():
    indptr = np.array([0, 2, 3], np.int64)
    indices = np.array([0, 3, 1], np.int64)
    data, y, w = np.ones(3), np.array([0.0, 1.0]), np.zeros(4)
    ws = K.SparseWorkspace(4)
    ws.acc = w
    with pytest.raises(ValueError, match=message("workspace.acc", "w")):
        K.sparse_logreg_grad(indptr, indices, data, y, w, workspace=ws)
    ws = K.SparseWorkspace(4)
    ws.mark = indices[:1].view(np.uint64)
    with pytest.raises(ValueError, match=message("workspace.mark", "indices")):
        K.sparse_logreg_grad(indptr, indices, data, y, w, workspace=ws)
