"""Compression kernels: top-k with error feedback, QSGD, scatter_add."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import kernels as K

DTYPES = [np.float32, np.float64]
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)


def decompress(idx, val, n, dtype):
    dense = np.zeros(n, dtype)
    return K.scatter_add(idx, val, dense)


def topk_reference(acc: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest |acc|, ties lowest index first, returned ascending."""
    order = np.argsort(-np.abs(acc.astype(np.float64)), kind="stable")
    return np.sort(order[:k])


# small integers make ties common; the float part keeps magnitudes varied
values = st.one_of(st.integers(-3, 3).map(float),
                   st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))


@st.composite
def topk_inputs(draw):
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(1, 80))
    g = np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype)
    r = np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype)
    k = draw(st.integers(0, n))
    return g, r, k


@SETTINGS
@given(topk_inputs())
def test_topk_keeps_largest_and_reconstructs_exactly(case):
    g, residual_old, k = case
    n, dtype = len(g), g.dtype
    acc = g + residual_old  # the same IEEE addition the kernel does
    residual = residual_old.copy()
    idx, val = K.topk_ef(g, residual, k)

    assert idx.dtype == np.int64 and val.dtype == dtype and len(idx) == len(val) == k
    assert (np.diff(idx) > 0).all()  # strictly ascending
    np.testing.assert_array_equal(idx, topk_reference(acc, k))
    np.testing.assert_array_equal(val, acc[idx])
    assert (residual[idx] == 0).all()
    # compressed + residual == g + residual_old, bitwise
    assert np.array_equal(decompress(idx, val, n, dtype) + residual, acc)
    # nothing left behind is larger than what was sent
    if 0 < k < n:
        assert np.abs(residual).max() <= np.abs(val).min()


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_ties_lowest_index_first(dtype):
    g = np.array([1, -2, 2, 0.5, -2, 2, 1], dtype)
    residual = np.zeros(7, dtype)
    idx, val = K.topk_ef(g, residual, 3)
    np.testing.assert_array_equal(idx, [1, 2, 4])
    np.testing.assert_array_equal(val, [-2, 2, -2])
    np.testing.assert_array_equal(residual, [1, 0, 0, 0.5, 0, 2, 1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_k_zero_and_k_n(dtype):
    g = np.array([3, -1, 2], dtype)
    residual = np.array([1, 1, 1], dtype)
    idx, val = K.topk_ef(g, residual, 0)
    assert idx.size == 0 and val.size == 0
    np.testing.assert_array_equal(residual, [4, 0, 3])  # everything kept for later
    idx, val = K.topk_ef(g, residual, 3)
    np.testing.assert_array_equal(idx, [0, 1, 2])
    np.testing.assert_array_equal(val, [7, -1, 5])
    np.testing.assert_array_equal(residual, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(10, 1), (1000, 10), (5000, 500)])
def test_error_feedback_conserves_the_gradient_sum(dtype, n, k):
    rng = np.random.default_rng(n + k)
    residual = np.zeros(n, dtype)
    scratch = np.empty(n, dtype)
    sent = np.zeros(n, np.float64)
    total_g = np.zeros(n, np.float64)
    steps = 12
    for _ in range(steps):
        g = rng.standard_normal(n).astype(dtype)
        idx, val = K.topk_ef(g, residual, k, scratch=scratch)
        assert len(idx) == k
        np.add.at(sent, idx, val.astype(np.float64))
        total_g += g
    eps = np.finfo(dtype).eps
    # nothing is lost: what was sent plus what is still owed is everything
    np.testing.assert_allclose(sent + residual, total_g, rtol=0, atol=steps * 8 * eps * 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_scratch_may_be_reused(dtype):
    rng = np.random.default_rng(1)
    g = rng.standard_normal(100).astype(dtype)
    r1, r2 = np.zeros(100, dtype), np.zeros(100, dtype)
    scratch = np.full(100, 123, dtype)
    a = K.topk_ef(g, r1, 7, scratch=scratch)
    b = K.topk_ef(g, r2, 7)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(r1, r2)


# ---- QSGD -----------------------------------------------------------------------------

@st.composite
def qsgd_inputs(draw):
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(1, 60))
    v = np.array(draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=n, max_size=n)),
                 dtype)
    s = draw(st.sampled_from([1, 2, 4, 7, 255, 2**30]))
    seed = draw(st.integers(0, 2**64 - 1))
    return v, s, seed


@SETTINGS
@given(qsgd_inputs())
def test_qsgd_levels_norm_and_reproducibility(case):
    v, s, seed = case
    levels, norm = K.qsgd_quantize(v, s, seed)
    assert levels.dtype == np.int32 and levels.shape == v.shape
    assert (np.abs(levels.astype(np.int64)) <= s).all()
    ref_norm = np.linalg.norm(v.astype(np.float64))
    np.testing.assert_allclose(norm, ref_norm, rtol=4 * np.finfo(v.dtype).eps * len(v))
    if ref_norm == 0:
        assert not levels.any()
    else:
        # sign kept; |level| is floor or ceil of s |v_i| / norm
        assert (levels[v == 0] == 0).all()
        assert (np.sign(levels[levels != 0]) == np.sign(v[levels != 0])).all()
        a = np.abs(v.astype(np.float64)) * s / ref_norm
        lv = np.abs(levels.astype(np.float64))
        slack = 1e-3 * max(1.0, s * np.finfo(v.dtype).eps * 1e3)
        assert (lv >= np.floor(a - slack)).all() and (lv <= np.ceil(a + slack)).all()
    again, norm2 = K.qsgd_quantize(v, s, seed)
    assert np.array_equal(again, levels) and norm2 == norm


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_seeds_differ(dtype):
    v = np.random.default_rng(0).standard_normal(200).astype(dtype)
    # neighbours, and seeds that differ only in their high bits
    seeds = [*range(10), 2**16, 2**31, 2**32, 2**40, 2**63, 2**63 + 1, 2**64 - 1]
    runs = {K.qsgd_quantize(v, 4, seed)[0].tobytes() for seed in seeds}
    assert len(runs) == len(seeds)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("s", [1, 4])
def test_qsgd_is_unbiased(dtype, s):
    rng = np.random.default_rng(s)
    v = rng.standard_normal(64).astype(dtype)
    v[3] = 0
    seeds = 2000
    out = np.empty(v.shape, dtype)
    total = np.zeros(v.shape)
    total_sq = np.zeros(v.shape)
    for seed in range(seeds):
        levels, norm = K.qsgd_quantize(v, s, seed)
        q = K.qsgd_dequantize(levels, norm, s, out=out).astype(np.float64)
        total += q
        total_sq += q * q
    mean = total / seeds
    var = np.maximum(total_sq / seeds - mean**2, 0)
    # the exact per-element variance: unit^2 p (1 - p), p the chance of rounding up
    unit = np.linalg.norm(v.astype(np.float64)) / s
    a = np.abs(v.astype(np.float64)) / unit
    p = a - np.floor(a)
    stderr = unit * np.sqrt(p * (1 - p) / seeds)
    assert mean[3] == 0 and var[3] == 0
    np.testing.assert_array_less(np.abs(mean - v), 5 * stderr + 1e-5 * unit)
    # pooled over elements: a small bias towards zero (or away) shows up as a drift of the
    # sign-aligned z-scores, which are N(0, 1) for an unbiased quantiser
    random = p > 0.05
    z = (mean - v)[random] / stderr[random] * np.sign(v[random])
    assert abs(z.sum() / np.sqrt(z.size)) < 4, z.mean()
    # the estimator really is random where it should be (not a deterministic rounding)
    assert (var[random] > 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_zero_vector(dtype):
    levels, norm = K.qsgd_quantize(np.zeros(17, dtype), 8, 42)
    assert norm == 0 and not levels.any()
    np.testing.assert_array_equal(K.qsgd_dequantize(levels, norm, 8, dtype), 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_dequantize_matches_numpy(dtype):
    levels = np.array([-4, -1, 0, 2, 4], np.int32)
    out = K.qsgd_dequantize(levels, 3.0, 4, dtype)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, 0.75 * levels, rtol=np.finfo(dtype).eps)
    # a single full-magnitude entry comes back exactly
    levels, norm = K.qsgd_quantize(np.array([0, -5, 0], dtype), 3, 9)
    np.testing.assert_array_equal(levels, [0, -3, 0])
    np.testing.assert_array_equal(K.qsgd_dequantize(levels, norm, 3, dtype), [0, -5, 0])


# ---- scatter_add ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_add_matches_numpy_add_at(dtype):
    rng = np.random.default_rng(2)
    out = rng.standard_normal(50).astype(dtype)
    idx = rng.integers(0, 50, 200).astype(np.int64)  # many duplicates
    val = rng.standard_normal(200).astype(dtype)
    ref = out.astype(np.float64)
    np.add.at(ref, idx, val.astype(np.float64))
    assert K.scatter_add(idx, val, out) is out
    np.testing.assert_allclose(out, ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)
    # any output shape: indices address the flattened array
    grid = np.zeros((3, 4), dtype)
    K.scatter_add(np.array([5, 11], np.int64), np.array([1, 2], dtype), grid)
    assert grid[1, 1] == 1 and grid[2, 3] == 2 and grid.sum() == 3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [-1, 10, 2**62])
def test_scatter_add_bad_index_writes_nothing(dtype, bad):
    out = np.arange(10, dtype=dtype)
    idx = np.array([0, 3, bad, 4], np.int64)
    with pytest.raises(ValueError):
        K.scatter_add(idx, np.ones(4, dtype), out)
    np.testing.assert_array_equal(out, np.arange(10))
