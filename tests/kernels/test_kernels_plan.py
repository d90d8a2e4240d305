"""Logistic regression's plans: cache blocks that never change a bit, the two-BLAS-pass path
checked against numpy, and how a plan is chosen (cache sizes, SGD_KERNEL_PLAN, the one-time
measurement per shape class).

Shapes mix sizes below, at and past the register tile (8 rows) and the vector widths
(8 doubles, 16 floats) so that whole tiles, the tail rows and the scalar column tails run.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy_ref import logreg_ref, tol
from sim._native import ffi, lib

from sim import kernels as K
from sim.kernels import caches as caches_mod
from sim.kernels import plans as plans_mod

DTYPES = [np.float32, np.float64]
SHAPES = [(1, 1), (7, 5), (8, 16), (13, 37), (64, 100), (67, 1003), (203, 19), (40, 4099)]
ALL = 1 << 30


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    """Each test starts without chosen plans and with the caches read again (and leaves
    none behind: the next test file measures its own)."""
    monkeypatch.delenv("SGD_KERNEL_PLAN", raising=False)
    monkeypatch.delenv("SGD_CACHE_SIZES", raising=False)
    K.reset_plans()
    yield
    K.reset_plans()


def problem(dtype, n, d, seed=0):
    rng = np.random.default_rng(seed + n * 1000 + d)
    X = rng.standard_normal((n, d)).astype(dtype)
    y = rng.integers(0, 2, n).astype(dtype)
    w = (rng.standard_normal(d) / np.sqrt(d)).astype(dtype)
    return X, y, w


def same_bits(a, b) -> bool:
    return np.asarray(a).tobytes() == np.asarray(b).tobytes()


# ---- block sizes change memory traffic, never a result -------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d", SHAPES)
def test_block_sizes_give_bitwise_identical_loss_and_gradient(dtype, n, d):
    X, y, w = problem(dtype, n, d)
    ref_loss, ref_grad = K.logreg_loss_grad(X, y, w, l2=0.3, plan=K.LogregPlan("fused"))
    for rows in (8, 16, 24, 64, 4096):
        for cols in (1, 7, 16, 100, 1000, ALL):
            loss, grad = K.logreg_loss_grad(X, y, w, l2=0.3,
                                            plan=K.LogregPlan("fused", rows, cols))
            assert same_bits(grad, ref_grad), (rows, cols)
            assert same_bits(np.float64(loss), np.float64(ref_loss)), (rows, cols)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cache_sizes_from_the_environment_change_blocks_not_bits(dtype, monkeypatch):
    n, d = 203, 37
    X, y, w = problem(dtype, n, d)
    results, blocks = [], []
    for sizes in ("4K,64K,1M", "32K,512K,32M", "1M,8M,1G"):
        monkeypatch.setenv("SGD_CACHE_SIZES", sizes)
        K.reset_plans()
        monkeypatch.setenv("SGD_KERNEL_PLAN", "fused")
        assert K.cache_sizes().source == "SGD_CACHE_SIZES"
        blocks.append(K.logreg_plan(dtype, n, d).row_block)
        results.append(K.logreg_loss_grad(X, y, w, l2=0.1))
    assert len(set(blocks)) == 3  # the caches did choose different blocks ...
    for loss, grad in results[1:]:  # ... and not a bit of the results changed
        assert same_bits(grad, results[0][1]) and loss == results[0][0]


def test_blocks_follow_l1d_in_whole_register_tiles():
    caches = K.CacheSizes(32 << 10, 512 << 10, 32 << 20, "test")
    assert K.logreg_blocks(8, 64, caches) == (32, ALL)  # 4 tiles of 4 KiB in 16 KiB
    assert K.logreg_blocks(8, 100, caches) == (16, ALL)
    assert K.logreg_blocks(8, 1000, caches) == (8, ALL)  # one tile at least
    assert K.logreg_blocks(4, 1, caches) == (K.MAX_ROW_BLOCK, ALL)
    for itemsize, d in ((4, 3), (8, 77), (4, 10**6)):
        rows, _ = K.logreg_blocks(itemsize, d, caches)
        assert rows % K.ROW_TILE == 0 and K.ROW_TILE <= rows <= K.MAX_ROW_BLOCK


# ---- the two-BLAS-pass path ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d", SHAPES)
@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_blas_path_matches_numpy(dtype, n, d, l2):
    X, y, w = problem(dtype, n, d)
    out = np.full(d, np.nan, dtype)
    loss, grad = K.logreg_loss_grad(X, y, w, l2=l2, out=out, plan=K.LogregPlan("blas"))
    ref_loss, ref_grad = logreg_ref(X, y, w, l2)
    assert grad is out and grad.dtype == dtype
    np.testing.assert_allclose(loss, ref_loss, **tol(dtype))
    np.testing.assert_allclose(grad, ref_grad, **tol(dtype, 1.0))
    fused_loss, fused_grad = K.logreg_loss_grad(X, y, w, l2=l2, plan=K.LogregPlan("fused"))
    np.testing.assert_allclose(grad, fused_grad, **tol(dtype, 1.0))
    np.testing.assert_allclose(loss, fused_loss, **tol(dtype))


@pytest.mark.parametrize("path", ["fused", "blas"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_both_paths_keep_extreme_margins_finite_and_report_nan(path, dtype):
    X = np.array([[200.0], [-200.0], [200.0], [-200.0]], dtype)
    y = np.array([1, 0, 0, 1], dtype)
    w = np.ones(1, dtype)
    loss, grad = K.logreg_loss_grad(X, y, w, plan=K.LogregPlan(path))
    ref_loss, ref_grad = logreg_ref(X, y, w, 0.0)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5)
    X[2, 0] = np.nan
    with pytest.raises(K.NonFiniteError, match="logreg_loss_grad"):
        K.logreg_loss_grad(X, y, w, plan=K.LogregPlan(path))


@pytest.mark.parametrize("dtype", DTYPES)
def test_blas_path_is_deterministic(dtype):
    X, y, w = problem(dtype, 203, 1003)
    first = K.logreg_loss_grad(X, y, w, plan=K.LogregPlan("blas"))
    again = K.logreg_loss_grad(X, y, w, plan=K.LogregPlan("blas"))
    assert same_bits(first[1], again[1]) and first[0] == again[0]


# ---- bad plans --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    ({"path": "numpy"}, "plan.path: expected 'fused' or 'blas'"),
    ({"path": "fused", "row_block": 12}, "plan.row_block: expected a multiple of 8"),
    ({"path": "fused", "row_block": 0}, r"plan.row_block: expected an integer in \[8, 4096\]"),
    ({"path": "fused", "row_block": 8192}, r"plan.row_block: expected an integer in"),
    ({"path": "fused", "col_block": 0}, r"plan.col_block: expected an integer in \[1,"),
])
def test_bad_plans_raise_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        K.LogregPlan(**kwargs)


def test_plan_of_the_wrong_type_raises_type_error():
    X, y, w = problem(np.float64, 3, 4)
    with pytest.raises(TypeError, match="plan: expected a LogregPlan or None, got str"):
        K.logreg_loss_grad(X, y, w, plan="fused")


@pytest.mark.parametrize("fields,scratch", [
    ({"path": 0, "row_block": 12, "col_block": 8}, True),
    ({"path": 0, "row_block": 8, "col_block": 0}, True),
    ({"path": 0, "row_block": 8192, "col_block": 8}, True),
    ({"path": 7, "row_block": 8, "col_block": 8}, True),
    ({"path": 1, "row_block": 8, "col_block": 8}, False),  # BLAS needs its scratch
])
def test_c_refuses_bad_plans(fields, scratch):
    X, y, w = problem(np.float64, 3, 4)
    grad, loss, z = np.zeros(4), ffi.new("double *"), np.zeros(3)
    p = ffi.new("struct sgd_logreg_plan *", fields)
    cast = lambda a: ffi.from_buffer("double[]", a)  # noqa: E731
    status = lib.logreg_loss_grad_f64(cast(X), cast(y), 3, 4, cast(w), 0.0, cast(grad), loss,
                                      p, cast(z) if scratch else ffi.NULL)
    assert status == lib.SGD_EINVAL
    assert lib.logreg_loss_grad_f64(cast(X), cast(y), 3, 4, cast(w), 0.0, cast(grad), loss,
                                    ffi.NULL, cast(z)) == lib.SGD_EINVAL


# ---- choosing a plan -----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["fused", "blas"])
def test_sgd_kernel_plan_forces_the_path(mode, monkeypatch):
    monkeypatch.setenv("SGD_KERNEL_PLAN", mode)
    monkeypatch.setattr(plans_mod, "_time_paths", lambda *a: pytest.fail("measured a forced plan"))
    X, y, w = problem(np.float64, 67, 1003)
    plan = K.logreg_plan(np.float64, 67, 1003)
    assert plan.path == mode and plan.reason == f"SGD_KERNEL_PLAN={mode}"
    forced = K.logreg_loss_grad(X, y, w, l2=0.1, plan=K.LogregPlan(mode))
    got = K.logreg_loss_grad(X, y, w, l2=0.1)
    assert same_bits(got[1], forced[1]) and got[0] == forced[0]


def test_bad_environment_values_raise_naming_the_variable(monkeypatch):
    monkeypatch.setenv("SGD_KERNEL_PLAN", "fastest")
    with pytest.raises(ValueError, match="SGD_KERNEL_PLAN: expected 'auto', 'fused' or"):
        K.logreg_plan(np.float64, 5, 5)
    monkeypatch.delenv("SGD_KERNEL_PLAN")
    for bad in ("32K,1M", "32K,1M,x", "1M,32K,64M", "0,1M,2M"):
        monkeypatch.setenv("SGD_CACHE_SIZES", bad)
        K.reset_plans()
        with pytest.raises(ValueError, match="SGD_CACHE_SIZES: expected 'L1d,L2,LLC'"):
            K.cache_sizes()


@pytest.mark.parametrize("fused_s,blas_s,path", [
    (1.0, 1.0, "fused"), (1.0, 0.9, "fused"),  # BLAS 1.1x faster: not by the margin
    (1.0, 0.8, "blas"), (1.0, 2.0, "fused")])
def test_auto_measures_once_per_shape_class_and_needs_a_clear_margin(
        fused_s, blas_s, path, monkeypatch):
    calls = []

    def timed(X, y, w, l2, plans):
        calls.append(X.shape)
        assert set(plans) == {"fused", "blas"}
        return {"fused": fused_s, "blas": blas_s}

    monkeypatch.setattr(plans_mod, "_time_paths", timed)
    monkeypatch.setenv("SGD_CACHE_SIZES", "32K,512K,32M")
    monkeypatch.setenv("SGD_KERNEL_PLAN", "auto")
    X, y, w = problem(np.float64, 64, 100)  # 50 KiB: X in L2
    _, grad = K.logreg_loss_grad(X, y, w)
    plan = K.logreg_plan(np.float64, 64, 100)
    assert plan.path == path and plan.shape_class == "float64/L2/tile<=L2/2"
    assert same_bits(grad, K.logreg_loss_grad(X, y, w, plan=K.LogregPlan(path))[1])
    K.logreg_loss_grad(*problem(np.float64, 32, 200))  # the same class: not measured again
    K.logreg_loss_grad(*problem(np.float32, 128, 100))  # another dtype: another class
    assert calls == [(64, 100), (128, 100)]
    assert [p["shape_class"] for p in K.kernel_plans()] == ["float64/L2/tile<=L2/2",
                                                             "float32/L2/tile<=L2/2"]


def test_the_default_is_the_fused_pass_and_times_nothing(monkeypatch):
    """A timed choice would make the bits depend on the build and the machine's load."""

    def timed(*args):
        raise AssertionError("the default plan timed the paths")

    monkeypatch.setattr(plans_mod, "_time_paths", timed)
    for dtype, (n, d) in itertools.product(DTYPES, SHAPES):
        X, y, w = problem(dtype, n, d)
        _, grad = K.logreg_loss_grad(X, y, w)
        plan = K.logreg_plan(dtype, n, d)
        assert plan.path == "fused" and plan.reason == "SGD_KERNEL_PLAN=fused"
        assert same_bits(grad, K.logreg_loss_grad(X, y, w, plan=K.LogregPlan(
            "fused", *K.logreg_blocks(np.dtype(dtype).itemsize, d)))[1])
    assert K.kernel_plans() == []


def test_the_measurement_leaves_the_callers_arrays_alone(monkeypatch):
    monkeypatch.setenv("SGD_KERNEL_PLAN", "auto")
    X, y, w = problem(np.float64, 67, 1003)
    copies = X.copy(), y.copy(), w.copy()
    out = np.zeros(1003)
    K.logreg_loss_grad(X, y, w, out=out)  # the first call of its class: measured first
    assert all(same_bits(a, b) for a, b in zip((X, y, w), copies, strict=True))
    plan = K.logreg_plan(np.float64, 67, 1003)
    assert same_bits(out, K.logreg_loss_grad(X, y, w, plan=plan)[1])


@pytest.mark.parametrize("n,d,where", [(4, 4, "L1d"), (64, 100, "L2"), (512, 1000, "LLC"),
                                       (8, 2 << 20, "DRAM")])
def test_shape_classes_follow_the_cache_levels(n, d, where):
    caches = K.CacheSizes(32 << 10, 512 << 10, 32 << 20, "test")
    assert K.shape_class(np.float64, n, d, caches)[1] == where
    tile = "tile<=L2/2" if 8 * d * 8 <= 256 << 10 else "tile>L2/2"
    assert K.shape_class(np.float64, n, d, caches) == ("float64", where, tile)


# ---- cache sizes ----------------------------------------------------------------------------

def fake_sysfs(root, entries):
    for i, (level, kind, size) in enumerate(entries):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "type").write_text(f"{kind}\n")
        (index / "size").write_text(f"{size}\n")
    return root


def test_sysfs_caches_are_read_by_level_and_type(tmp_path):
    root = fake_sysfs(tmp_path / "a", [(1, "Data", "48K"), (1, "Instruction", "32K"),
                                       (2, "Unified", "2048K"), (3, "Unified", "266240K")])
    assert caches_mod._sysfs_caches(root) == K.CacheSizes(48 << 10, 2 << 20, 260 << 20, "sysfs")
    no_l3 = fake_sysfs(tmp_path / "b", [(1, "Data", "64K"), (2, "Unified", "1M")])
    assert caches_mod._sysfs_caches(no_l3) == K.CacheSizes(64 << 10, 1 << 20, 1 << 20, "sysfs")
    assert caches_mod._sysfs_caches(tmp_path / "missing") is None
    bad = fake_sysfs(tmp_path / "c", [(1, "Data", "lots"), (2, "Unified", "1M")])
    assert caches_mod._sysfs_caches(bad) is None


def test_defaults_where_sysfs_says_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(caches_mod, "SYSFS_CACHE", tmp_path)
    monkeypatch.setattr(caches_mod._sysfs_caches, "__defaults__", (tmp_path,))
    K.reset_plans()
    assert K.cache_sizes() == K.DEFAULT_CACHES
