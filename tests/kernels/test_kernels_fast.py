"""The fast paths of the dense-layer wrappers (sim/kernels/dense.py) accept exactly what their
checked paths accept, and give the same result or the same error.

``dense_forward`` and ``dense_backward`` first try a cheap path and hand anything it does
not accept to the checked one (``_dense_forward_checked``, ``_dense_backward_checked``).
Here: plain valid calls never reach the checked path (the fast one is what the MLP bench
measures), the calls it declines still work, and with every array of a call placed at
random offsets of one buffer (overlapping or not) both paths agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy_ref import tol, wide

from sim import kernels as K
from sim.kernels import dense

DTYPES = [np.float32, np.float64]


def layer(dtype, n=5, din=7, dout=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, din)).astype(dtype),
            "W": rng.standard_normal((dout, din)).astype(dtype),
            "b": rng.standard_normal(dout).astype(dtype),
            "delta": rng.standard_normal((n, dout)).astype(dtype)}


def forward_ref(a):
    return np.maximum(wide(a["x"]) @ wide(a["W"]).T + wide(a["b"]), 0)


def backward_ref(a):
    x, delta, W = wide(a["x"]), wide(a["delta"]), wide(a["W"])
    return delta.T @ x, delta.sum(axis=0), (delta @ W) * (x > 0)


@pytest.fixture
def checked_path_refused(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("took the checked path")
    monkeypatch.setattr(dense, "_dense_forward_checked", refuse)
    monkeypatch.setattr(dense, "_dense_backward_checked", refuse)


@pytest.mark.parametrize("dtype", DTYPES)
def test_plain_calls_take_the_fast_path(dtype, checked_path_refused):
    a = layer(dtype)
    n, din, dout = 5, 7, 3
    want_f, (want_dW, want_db, want_din) = forward_ref(a), backward_ref(a)
    out = np.empty((n, dout), dtype)
    assert K.dense_forward(a["x"], a["W"], a["b"], True, out=out) is out
    for got in (out, K.dense_forward(a["x"], a["W"], a["b"], relu=True)):
        assert got.dtype == dtype
        np.testing.assert_allclose(wide(got), want_f, **tol(dtype, 10.0))
    dW, db, d_in = np.empty((dout, din), dtype), np.empty(dout, dtype), np.empty((n, din), dtype)
    got = K.dense_backward(a["x"], a["delta"], a["W"], True, dW=dW, db=db, delta_in=d_in)
    assert got[0] is dW and got[1] is db and got[2] is d_in
    for result in (got, K.dense_backward(a["x"], a["delta"], a["W"], relu_in=True)):
        for g, w in zip(result, (want_dW, want_db, want_din), strict=True):
            assert g.dtype == dtype
            np.testing.assert_allclose(wide(g), w, **tol(dtype, 10.0))
    # the MLP's first layer: no input gradient; outputs as views of one flat buffer
    flat = np.empty(dout * din + dout, dtype)
    dW, db = flat[:dout * din].reshape(dout, din), flat[dout * din:]
    assert K.dense_backward(a["x"], a["delta"], a["W"], False, input_grad=False,
                            dW=dW, db=db)[2] is None
    np.testing.assert_allclose(wide(flat), np.concatenate([want_dW.ravel(), want_db]),
                               **tol(dtype, 10.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_inputs_that_alias_stay_on_the_fast_path(dtype, checked_path_refused):
    """Only written arrays must be disjoint: x passed as delta too (din == dout) is fine."""
    x = layer(dtype)["x"]
    W = np.random.default_rng(1).standard_normal((7, 7)).astype(dtype)
    got = K.dense_backward(x, x, W, True)
    for g, w in zip(got, backward_ref({"x": x, "delta": x, "W": W}), strict=True):
        np.testing.assert_allclose(wide(g), w, **tol(dtype, 10.0))


class Sub(np.ndarray):
    pass


@pytest.mark.parametrize("dtype", DTYPES)
def test_what_the_fast_path_declines_still_works(dtype):
    """An ndarray subclass, or a dtype equal to but not numpy's own object, is left to the
    checked path, which accepts it."""
    a = layer(dtype)
    same = np.dtype(dtype, metadata={"unit": "m"})
    assert same == np.dtype(dtype) and same is not np.dtype(dtype)
    x_meta = np.empty(a["x"].shape, same)
    x_meta[...] = a["x"]
    for x in (a["x"].view(Sub), x_meta):
        np.testing.assert_allclose(wide(K.dense_forward(x, a["W"], a["b"], True)),
                                   forward_ref(a), **tol(dtype, 10.0))
        for g, w in zip(K.dense_backward(x, a["delta"], a["W"], True), backward_ref(a),
                        strict=True):
            np.testing.assert_allclose(wide(g), w, **tol(dtype, 10.0))


def test_refusals_name_the_argument_as_before():
    a = layer(np.float64)
    ro = np.empty((3, 7))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="^dW: array is read-only"):
        K.dense_backward(a["x"], a["delta"], a["W"], True, dW=ro)
    with pytest.raises(ValueError, match="^delta_in: must be C-contiguous"):
        K.dense_backward(a["x"], a["delta"], a["W"], True, delta_in=np.empty((7, 5)).T)
    with pytest.raises(ValueError, match="^W: must be C-contiguous"):
        K.dense_forward(a["x"], np.asfortranarray(a["W"]), a["b"], True)
    with pytest.raises(TypeError, match="^b: expected dtype float64, got float32"):
        K.dense_forward(a["x"], a["W"], a["b"].astype(np.float32), True)
    with pytest.raises(ValueError, match="^db: shares memory with dW; pass a separate"):
        dW = np.empty((3, 7))
        K.dense_backward(a["x"], a["delta"], a["W"], True, dW=dW, db=dW.reshape(-1)[4:7])
    with pytest.raises(ValueError, match="^out: shares memory with x; pass a separate"):
        K.dense_forward(a["x"], a["W"], a["b"], True, out=a["x"].reshape(-1)[:15].reshape(5, 3))


# ---- both paths on arrays placed anywhere in one buffer -----------------------------------

SHAPES = {"dense_forward": lambda n, din, dout: {"x": (n, din), "W": (dout, din),
                                                 "b": (dout,), "out": (n, dout)},
          "dense_backward": lambda n, din, dout: {"x": (n, din), "delta": (n, dout),
                                                  "W": (dout, din), "dW": (dout, din),
                                                  "db": (dout,), "delta_in": (n, din)}}


def call(name, fn, v):
    if name == "dense_forward":
        return fn(v["x"], v["W"], v["b"], True, v["out"])
    return fn(v["x"], v["delta"], v["W"], True, True, v["dW"], v["db"], v["delta_in"])


def outcome(name, fn, base, offsets, shapes, dtype):
    """(result arrays or the error's type and message, the buffer afterwards)."""
    base = base.copy()
    item = np.dtype(dtype).itemsize
    views = {k: base[o:o + item * int(np.prod(s))].view(dtype).reshape(s)
             for (k, s), o in zip(shapes.items(), offsets, strict=True)}
    try:
        result = call(name, fn, views)
    except (TypeError, ValueError) as e:
        return (type(e), str(e)), base
    parts = result if isinstance(result, tuple) else (result,)
    return tuple(p.tobytes() for p in parts), base


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(name=st.sampled_from(sorted(SHAPES)), dtype=st.sampled_from(DTYPES),
       dims=st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 4)), data=st.data())
def test_both_paths_agree_wherever_the_arrays_lie(name, dtype, dims, data):
    shapes = SHAPES[name](*dims)
    item = np.dtype(dtype).itemsize
    sizes = [item * int(np.prod(s)) for s in shapes.values()]
    if data.draw(st.booleans()):  # packed one after another, small gaps: mostly disjoint
        gaps = data.draw(st.lists(st.integers(-2, 2), min_size=len(sizes), max_size=len(sizes)))
        offsets, at = [], 0
        for size, gap in zip(sizes, gaps, strict=True):
            at = max(0, at + gap * item)
            offsets.append(at)
            at += size
    else:  # anywhere: mostly overlapping
        offsets = [item * data.draw(st.integers(0, sum(sizes) // item)) for _ in sizes]
    rng = np.random.default_rng(dims)
    n_items = (max(o + s for o, s in zip(offsets, sizes, strict=True)) + item) // item
    base = rng.standard_normal(n_items).astype(dtype).view(np.uint8)
    fast = getattr(K, name)
    checked = getattr(dense, f"_{name}_checked")
    got, got_base = outcome(name, fast, base, offsets, shapes, dtype)
    want, want_base = outcome(name, checked, base, offsets, shapes, dtype)
    assert got == want
    assert got_base.tobytes() == want_base.tobytes()
