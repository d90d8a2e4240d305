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

def bucket_norms(v: np.ndarray, bucket: int) -> np.ndarray:
    """numpy reference: the L2 norm of each run of ``bucket`` entries of v (C order), scaled
    by the run's largest magnitude (np.linalg.norm's squares under- and overflow)."""
    flat = v.reshape(-1).astype(np.float64)

    def norm(x: np.ndarray) -> float:
        top = np.abs(x).max()
        return float(top * np.linalg.norm(x / top)) if top > 0 else 0.0
    return np.array([norm(flat[i:i + bucket]) for i in range(0, flat.size, bucket)])


def per_entry(norms: np.ndarray, bucket: int, n: int) -> np.ndarray:
    """Each entry's bucket norm."""
    return np.asarray(norms, np.float64)[np.arange(n) // bucket]


def round_up_chance(v: np.ndarray, s: int, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """Per entry: its bucket's unit norm / s, and the probability p of rounding up."""
    flat = v.reshape(-1).astype(np.float64)
    unit = per_entry(bucket_norms(v, bucket), bucket, flat.size) / s
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.where(unit > 0, np.abs(flat) / unit, 0.0)
    return unit, a - np.floor(a)


def exact_error(v: np.ndarray, s: int, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """Per entry: the probability p of rounding up, and E|Q_i - v_i|^2 = unit^2 p (1 - p)."""
    unit, p = round_up_chance(v, s, bucket)
    return p, unit**2 * p * (1 - p)


@st.composite
def qsgd_inputs(draw):
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(1, 80))
    v = np.array(draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=n, max_size=n)),
                 dtype)
    if draw(st.booleans()):  # whole zero buckets between non-zero ones
        v[draw(st.integers(0, n - 1)):][:draw(st.integers(0, 30))] = 0
    rows = draw(st.sampled_from([r for r in (1, 2, 3, 5) if n % r == 0]))
    v = v.reshape(rows, n // rows) if rows > 1 else v  # any shape: buckets run in C order
    s = draw(st.sampled_from([1, 2, 4, 7, 16, 255, 2**30]))
    bucket = draw(st.one_of(st.integers(1, 90), st.sampled_from([None, 512, 2**63 - 1])))
    seed = draw(st.integers(0, 2**64 - 1))
    return v, s, bucket, seed


@SETTINGS
@given(qsgd_inputs())
def test_qsgd_levels_norms_shapes_and_reproducibility(case):
    v, s, bucket, seed = case
    n, flat = v.size, v.reshape(-1)
    d = n if bucket is None else bucket
    levels, norms = K.qsgd_quantize(v, s, seed, bucket=bucket)
    assert levels.dtype == np.int32 and levels.shape == v.shape
    assert norms.dtype == v.dtype and norms.shape == (-(-n // d),)
    assert (np.abs(levels.astype(np.int64)) <= s).all()
    ref_norms = bucket_norms(v, d)
    np.testing.assert_allclose(norms, ref_norms, rtol=4 * np.finfo(v.dtype).eps * min(n, d))
    lev = levels.reshape(-1)
    norm_of = per_entry(ref_norms, d, n)
    assert not lev[norm_of == 0].any()  # a zero bucket sends zeros
    # sign kept; |level| is floor or ceil of s |v_i| / (its bucket's norm)
    assert (lev[flat == 0] == 0).all()
    assert (np.sign(lev[lev != 0]) == np.sign(flat[lev != 0])).all()
    live = norm_of > 0
    a = np.abs(flat[live].astype(np.float64)) * s / norm_of[live]
    lv = np.abs(lev[live].astype(np.float64))
    slack = 1e-3 * max(1.0, s * np.finfo(v.dtype).eps * 1e3)
    assert (lv >= np.floor(a - slack)).all() and (lv <= np.ceil(a + slack)).all()
    again, norms2 = K.qsgd_quantize(v, s, seed, bucket=bucket)
    assert np.array_equal(again, levels) and np.array_equal(norms2, norms)
    # into given arrays: the same bits, the same objects back
    out, into = np.empty_like(levels), np.full(norms.shape, np.nan, v.dtype)
    got = K.qsgd_quantize(v, s, seed, out, bucket=bucket, norms=into)
    assert got[0] is out and got[1] is into
    assert np.array_equal(out, levels) and np.array_equal(into, norms)
    # dequantize: shaped like the levels, of the norms' dtype, norms[b] / s per level
    q = K.qsgd_dequantize(levels, norms, s, bucket=bucket)
    assert q.shape == v.shape and q.dtype == v.dtype
    np.testing.assert_allclose(q.reshape(-1), per_entry(norms, d, n) / s * lev,
                               rtol=2 * np.finfo(v.dtype).eps,  # and norm / s subnormal:
                               atol=s * np.finfo(v.dtype).smallest_subnormal)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_seeds_differ(dtype):
    v = np.random.default_rng(0).standard_normal(200).astype(dtype)
    # neighbours, and seeds that differ only in their high bits
    seeds = [*range(10), 2**16, 2**31, 2**32, 2**40, 2**63, 2**63 + 1, 2**64 - 1]
    for bucket in (None, 16):
        runs = {K.qsgd_quantize(v, 4, seed, bucket=bucket)[0].tobytes() for seed in seeds}
        assert len(runs) == len(seeds)


# The single-norm kernel's output before buckets existed (commit fc04d3a): levels and norm
# of v = 3 * standard_normal(24) (default_rng(13)) for (s, seed) = (4, 2017), (16, 2**63 + 5).
SINGLE_NORM = {
    (4, 2017): [1, -2, 1, 0, 1, 1, 1, 0, 0, 0, 0, -1, 0, 1, 1, -1, 0, -1, 1, 0, 1, 0, 2, 1],
    (16, 2**63 + 5): [4, -8, 3, 0, 4, 1, 5, 0, -1, 2, 1, -1, -1, 2, 2, -1, -1, -5, 5, -1, 4, 2,
                      5, 4],
}
SINGLE_NORM_NORM = {np.float64: 17.89283241936053, np.float32: 17.892833709716797}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bucket", [None, 24, 25, 512, 2**63 - 1])
def test_qsgd_one_bucket_is_the_single_norm_quantiser(dtype, bucket):
    """bucket >= n gives bit for bit what the kernel gave before it had buckets."""
    v = (np.random.default_rng(13).standard_normal(24) * 3).astype(dtype)
    for (s, seed), expected in SINGLE_NORM.items():
        levels, norms = K.qsgd_quantize(v, s, seed, bucket=bucket)
        np.testing.assert_array_equal(levels, expected)
        assert norms.tolist() == [SINGLE_NORM_NORM[dtype]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_each_bucket_is_quantised_as_if_alone(dtype):
    """Bucket b of v gives what the single-norm quantiser gives for v with every other entry
    zeroed: the same norm and the same draws (entry i draws uniform(seed, i) whatever the
    bucket). Buckets of 32 entries keep the norms' sums in the same order (the kernels
    accumulate 16 or 32 lanes), so both are bit for bit."""
    rng = np.random.default_rng(3)
    v = rng.standard_normal(128).astype(dtype)
    v[64:96] *= 1e-3  # buckets of very different scales
    levels, norms = K.qsgd_quantize(v, 8, 99, bucket=32)
    for b in range(4):
        alone = np.zeros_like(v)
        alone[32 * b:32 * (b + 1)] = v[32 * b:32 * (b + 1)]
        single, norm = K.qsgd_quantize(alone, 8, 99)
        assert norms[b] == norm[0]
        np.testing.assert_array_equal(levels[32 * b:32 * (b + 1)], single[32 * b:32 * (b + 1)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("s", [1, 4])
@pytest.mark.parametrize("bucket", [None, 16])
def test_qsgd_is_unbiased(dtype, s, bucket):
    rng = np.random.default_rng(s)
    v = rng.standard_normal(70).astype(dtype)  # buckets of 16: the last one holds 6
    v[3] = 0
    v[32:48] *= 1e-3  # a bucket far smaller than the others keeps its own scale
    d = v.size if bucket is None else bucket
    seeds = 2000
    out = np.empty(v.shape, dtype)
    total = np.zeros(v.shape)
    total_sq = np.zeros(v.shape)
    for seed in range(seeds):
        levels, norms = K.qsgd_quantize(v, s, seed, bucket=bucket)
        q = K.qsgd_dequantize(levels, norms, s, out=out, bucket=bucket).astype(np.float64)
        total += q
        total_sq += q * q
    mean = total / seeds
    var = np.maximum(total_sq / seeds - mean**2, 0)
    # the exact per-element variance: unit^2 p (1 - p), p the chance of rounding up
    unit = per_entry(bucket_norms(v, d), d, v.size) / s
    p, _ = exact_error(v, s, d)
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


def kinds_of_vectors(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Gaussian, heavy-tailed (Student t, 1.5 degrees of freedom: infinite variance),
    sparse (2% non-zero, and entries 1024-1535 all zero) and flat (equal magnitudes, random
    signs: where the sqrt(d) / s bound is nearly attained)."""
    sparse = np.where(rng.random(n) < 0.02, rng.standard_normal(n), 0.0)
    sparse[1024:1536] = 0
    return {"gaussian": rng.standard_normal(n), "heavy-tailed": rng.standard_t(1.5, n),
            "sparse": sparse, "flat": rng.choice([-0.3, 0.3], n)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("s", [1, 4, 16])
def test_qsgd_variance_bound_of_lemma_3_1_per_bucket(dtype, s):
    """Alistarh et al. 2017, Lemma 3.1, with d the bucket's size: E[Q_s(v)] = v (above) and
    E|Q_s(v) - v|^2 <= min(d / s^2, sqrt(d) / s) |v|^2, for every bucket, by Monte Carlo
    over seeds; the estimate also matches the exact variance sum_i unit^2 p_i (1 - p_i)."""
    bucket, n, seeds = 512, 4 * 512 + 100, 300  # 5 buckets, the last one of 100 entries
    rng = np.random.default_rng(31)
    starts = np.arange(0, n, bucket)
    sizes = np.minimum(bucket, n - starts)
    bound = np.minimum(sizes / s**2, np.sqrt(sizes) / s)
    levels, norms, q = np.empty(n, np.int32), np.empty(len(starts), dtype), np.empty(n, dtype)
    for kind, v in kinds_of_vectors(rng, n).items():
        v = v.astype(dtype)
        wv = v.astype(np.float64)
        norm_sq = np.add.reduceat(wv * wv, starts)
        errors = np.empty((seeds, len(starts)))
        for seed in range(seeds):
            K.qsgd_quantize(v, s, seed, levels, bucket=bucket, norms=norms)
            K.qsgd_dequantize(levels, norms, s, out=q, bucket=bucket)
            errors[seed] = np.add.reduceat((q - wv) ** 2, starts)
        mc = errors.mean(axis=0)
        stderr = errors.std(axis=0) / np.sqrt(seeds)
        exact = np.add.reduceat(exact_error(v, s, bucket)[1], starts)
        slack = (1e-6 if dtype == np.float32 else 1e-12) * norm_sq
        assert (exact <= bound * norm_sq + slack).all(), (kind, exact / norm_sq, bound)
        assert (mc <= bound * norm_sq + slack).all(), (kind, mc / norm_sq, bound)
        assert (np.abs(mc - exact) <= 5 * stderr + slack).all(), (kind, mc, exact, stderr)
        if kind == "sparse":
            assert (norm_sq == 0).any() and (mc[norm_sq == 0] == 0).all()
        if kind == "flat":  # the bound is tight there: (1 - s / sqrt(d)) of it
            tight = np.sqrt(sizes) > s
            np.testing.assert_allclose((mc / norm_sq)[tight],
                                       (bound * (1 - s / np.sqrt(sizes)))[tight], rtol=0.05)


def variance_ratio(n: int, s: int, bucket: int | None, seeds: int = 10) -> float:
    """E|Q - g|^2 / |g|^2 for a gaussian g of n entries, over seeds."""
    g = np.random.default_rng(0).standard_normal(n)
    ratios = []
    for seed in range(seeds):
        levels, norms = K.qsgd_quantize(g, s, seed, bucket=bucket)
        q = K.qsgd_dequantize(levels, norms, s, bucket=bucket)
        ratios.append(np.sum((q - g) ** 2) / np.sum(g * g))
    return float(np.mean(ratios))


def test_qsgd_buckets_cut_the_variance_of_the_compression_experiment():
    """At the compression experiment's size (the digits MLP: 85,002 parameters) and s = 16,
    one norm gives E|Q - g|^2 / |g|^2 = 13.5 (about sqrt(2 n / pi) / s); buckets of 512 give
    0.33, under d / (4 s^2) = 0.5 (p (1 - p) <= 1/4) and Lemma 3.1's sqrt(d) / s = 1.41."""
    single = variance_ratio(85_002, 16, None)
    bucketed = variance_ratio(85_002, 16, 512)
    assert single == pytest.approx(13.5, rel=0.03)
    assert bucketed == pytest.approx(0.334, rel=0.03)
    assert bucketed < 512 / (4 * 16**2) < np.sqrt(512) / 16


@pytest.mark.parametrize(("dtype", "scale"), [
    (np.float32, 1e-25), (np.float32, 1e25), (np.float32, 1e-40),  # squares under/overflow;
    (np.float64, 1e-170), (np.float64, 1e170), (np.float64, 1e-310)])  # subnormal entries
def test_qsgd_buckets_of_tiny_and_huge_entries(dtype, scale):
    """A bucket whose sum of squares underflows or overflows (float32 entries under 1e-19 or
    over 1e19) still gets its norm (scaled by its largest entry, as BLAS nrm2 does), and a
    subnormal norm (s / norm overflows) still quantises without bias."""
    v = np.array([3, -4, 0, 12, 0.5, -1.5, 2.25, 0.1], np.float64) * scale
    v = np.concatenate([v, [1.0, 2.0, 2.0, 0.0]]).astype(dtype)  # and an ordinary bucket
    levels, norms = K.qsgd_quantize(v, 13, 5, bucket=4)
    np.testing.assert_allclose(norms, bucket_norms(v, 4), rtol=1e-5 if scale < 1e-38 else
                               4 * np.finfo(dtype).eps)
    assert levels[2] == 0 and (np.abs(levels) <= 13).all()
    np.testing.assert_array_equal(levels[[0, 1, 3]], [3, -4, 12])  # |v_i| s / norm = 3, 4, 12
    seeds = 2000
    mean = np.zeros(v.size)
    for seed in range(seeds):
        levels, norms = K.qsgd_quantize(v, 13, seed, bucket=4)
        mean += K.qsgd_dequantize(levels, norms, 13, bucket=4).astype(np.float64) / seeds
    unit, p = round_up_chance(v, 13, 4)
    stderr = unit * np.sqrt(p * (1 - p) / seeds)
    np.testing.assert_array_less(np.abs(mean - v.astype(np.float64)), 5 * stderr + 1e-3 * unit)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_zero_vector_and_zero_buckets(dtype):
    levels, norms = K.qsgd_quantize(np.zeros(17, dtype), 8, 42, bucket=5)
    assert norms.shape == (4,) and not norms.any() and not levels.any()
    np.testing.assert_array_equal(K.qsgd_dequantize(levels, norms, 8, bucket=5), 0)
    v = np.array([1, 2, 0, 0, 0, 0, 3], dtype)  # the middle bucket is all zero
    levels, norms = K.qsgd_quantize(v, 8, 42, bucket=3)
    assert norms[1] == 0 and not levels[3:6].any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_dequantize_matches_numpy(dtype):
    levels = np.array([-4, -1, 0, 2, 4], np.int32)
    out = K.qsgd_dequantize(levels, np.array([3.0, 1.0], dtype), 4, bucket=3)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, [-3, -0.75, 0, 0.5, 1.0], rtol=np.finfo(dtype).eps)
    # a single full-magnitude entry in each bucket comes back exactly
    v = np.array([0, -5, 0, 2, 0, 0, 0.25], dtype)
    levels, norms = K.qsgd_quantize(v, 3, 9, bucket=3)
    np.testing.assert_array_equal(levels, [0, -3, 0, 3, 0, 0, 3])
    np.testing.assert_array_equal(norms, [5, 2, 0.25])
    np.testing.assert_array_equal(K.qsgd_dequantize(levels, norms, 3, bucket=3), v)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_bad_bucket_and_norms_raise_naming_them(dtype):
    v = np.arange(1.0, 11.0, dtype=dtype)
    for bad in (0, -512):
        with pytest.raises(ValueError, match=r"^bucket: expected an integer in \[1, "):
            K.qsgd_quantize(v, 4, 0, bucket=bad)
        with pytest.raises(ValueError, match=r"^bucket: expected an integer in \[1, "):
            K.qsgd_dequantize(np.zeros(10, np.int32), np.ones(3, dtype), 4, bucket=bad)
    with pytest.raises(TypeError, match="^bucket: expected an integer"):
        K.qsgd_quantize(v, 4, 0, bucket=4.0)
    levels, norms = K.qsgd_quantize(v, 4, 0, bucket=4)  # 3 buckets: 4 + 4 + 2 entries
    assert norms.shape == (3,)
    out = np.full(10, 7, dtype)
    for wrong, bucket in [(norms[:2], 4), (np.append(norms, 1), 4), (norms, 5), (norms, None),
                          (norms.reshape(1, 3), 4)]:
        with pytest.raises(ValueError, match=r"^norms: expected shape \("):
            K.qsgd_dequantize(levels, wrong, 4, out=out, bucket=bucket)
        with pytest.raises(ValueError, match=r"^norms: expected shape \("):
            K.qsgd_quantize(v, 4, 0, out=levels.copy(), bucket=bucket,
                            norms=np.empty(wrong.shape, dtype))
    with pytest.raises(TypeError, match="^norms: expected a numpy array"):
        K.qsgd_dequantize(levels, 2.0, 4)
    for bad in (-1.0, np.nan, np.inf):
        broken = norms.copy()
        broken[2] = bad
        with pytest.raises(ValueError, match=r"^norms: expected finite norms >= 0") as info:
            K.qsgd_dequantize(levels, broken, 4, out=out, bucket=4)
        assert not isinstance(info.value, K.NonFiniteError)
        np.testing.assert_array_equal(out, 7)  # checked before any write


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
