"""The embedding-table kernels of Wide & Deep (issue 30), for float32 and float64: pooled
bags against a float64 loop, the backward against np.add.at and against central finite
differences of sum(forward * G), Adagrad and SGD row steps against numpy, the dense step
(rows = arange(V)) against the sparse one bit for bit, and fixed examples of bad input (the
random corruptions are the shared ones of tests/kernel_cases.py).

Element-wise steps (one IEEE operation at a time, no contraction, correctly rounded sqrt)
are compared with numpy in the same dtype exactly; sums against float64 references within
numpy_ref.tol. Widths D run below, at and past a vector (8 doubles, 16 floats) so that the
vector bodies and the scalar tails both run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from kernel_cases import EMBEDDING_NAMES
from numpy_ref import central_diff, tol, wide

from sim import kernels as K

DTYPES = [np.float32, np.float64]
# (V rows, D columns, n bags, k ids a bag)
SHAPES = [(1, 1, 1, 1), (5, 3, 4, 2), (40, 16, 9, 5), (100, 33, 50, 3), (7, 8, 64, 16)]


def bags(rng, V, n, k):
    """(n, k) int64 ids in [0, V), repeats within a bag on purpose (as in real logs)."""
    ids = rng.integers(0, V, (n, k)).astype(np.int64)
    if k > 1:
        ids[:, -1] = ids[:, 0]
    return ids


def forward_ref(table, ids, mean):
    """out[i] = sum_j table[ids[i, j]] (/ k), in float64, row by row."""
    n, k = ids.shape
    out = np.zeros((n, table.shape[1]))
    for i in range(n):
        for j in range(k):
            out[i] += wide(table[ids[i, j]])
    return out / k if mean else out


def dense_table_grad(ids, grad_out, mean, V):
    """d sum(forward(table) * grad_out) / d table, (V, D), from the definition in float64."""
    n, k = ids.shape
    g = np.zeros((V, grad_out.shape[1]))
    for i in range(n):
        for j in range(k):
            g[ids[i, j]] += wide(grad_out[i]) / (k if mean else 1)
    return g


# ---- forward and backward -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V,D,n,k", SHAPES)
@pytest.mark.parametrize("mean", [False, True])
def test_forward_matches_numpy(dtype, V, D, n, k, mean):
    rng = np.random.default_rng(V * D + n * k)
    table = rng.standard_normal((V, D)).astype(dtype)
    ids = bags(rng, V, n, k)
    before = table.copy()
    out = K.embedding_bag_forward(table, ids, mean)
    assert out.shape == (n, D) and out.dtype == dtype
    np.testing.assert_allclose(out, forward_ref(table, ids, mean), **tol(dtype, k))
    np.testing.assert_array_equal(table, before)
    into = np.full((n, D), np.nan, dtype)
    assert K.embedding_bag_forward(table, ids, mean, out=into) is into
    np.testing.assert_array_equal(into, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_of_one_id_bags_is_a_row_gather(dtype):
    rng = np.random.default_rng(1)
    table = rng.standard_normal((30, 20)).astype(dtype)
    ids = rng.integers(0, 30, (12, 1)).astype(np.int64)
    for mean in (False, True):  # k = 1: the mean divides by 1, exactly
        np.testing.assert_array_equal(K.embedding_bag_forward(table, ids, mean), table[ids[:, 0]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V,D,n,k", SHAPES)
@pytest.mark.parametrize("mean", [False, True])
def test_backward_matches_add_at(dtype, V, D, n, k, mean):
    rng = np.random.default_rng(V + D + n + k)
    ids = bags(rng, V, n, k)
    grad_out = rng.standard_normal((n, D)).astype(dtype)
    unique, inverse = np.unique(ids, return_inverse=True)
    out = K.embedding_bag_backward(ids, grad_out, mean, inverse, len(unique))
    assert out.shape == (len(unique), D) and out.dtype == dtype
    ref = np.zeros((len(unique), D))
    np.add.at(ref, inverse.ravel(), np.repeat(wide(grad_out), k, axis=0) / (k if mean else 1))
    np.testing.assert_allclose(out, ref, **tol(dtype, n * k))
    # summed in (i, j) order, each term divided by k: np.add.at's order in the same dtype
    same = np.zeros((len(unique), D), dtype)
    np.add.at(same, inverse.ravel(), np.repeat(grad_out / dtype(k) if mean else grad_out, k,
                                               axis=0))
    np.testing.assert_array_equal(out, same)
    # the flat inverse of the spec and numpy 2's (n, k) one; a dirty out= is zeroed first
    into = np.full((len(unique), D), 7.0, dtype)
    got = K.embedding_bag_backward(ids, grad_out, mean, inverse.reshape(-1).copy(),
                                   len(unique), out=into)
    assert got is into
    np.testing.assert_array_equal(into, out)
    # the unique rows' gradients are the table's gradient restricted to them
    np.testing.assert_allclose(out, dense_table_grad(ids, grad_out, mean, V)[unique],
                               **tol(dtype, n * k))


@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize("V,D,n,k", [(4, 3, 5, 3), (9, 10, 7, 4), (3, 17, 2, 6)])
def test_backward_is_the_gradient_of_the_forward(V, D, n, k, mean):
    """Central differences of f(table) = sum(forward(table, ids) * G) on every table entry:
    the unique rows get the backward's rows, every other row 0."""
    rng = np.random.default_rng(n * k + D)
    table = rng.standard_normal((V, D))
    ids = bags(rng, V, n, k)
    G = rng.standard_normal((n, D))

    def f():
        return float(np.sum(K.embedding_bag_forward(table, ids, mean) * G))

    numeric, = central_diff(f, [table])
    unique, inverse = np.unique(ids, return_inverse=True)
    analytic = np.zeros_like(table)
    analytic[unique] = K.embedding_bag_backward(ids, G, mean, inverse, len(unique))
    scale = max(1.0, float(np.abs(numeric).max()))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7 * scale)
    untouched = np.setdiff1d(np.arange(V), unique)
    assert not analytic[untouched].any()


# ---- row steps ----------------------------------------------------------------------------

def adagrad_ref(table, accum, rows, grads, lr, eps):
    """TensorFlow's Adagrad step in numpy, in the arrays' dtype, one operation at a time."""
    dt = table.dtype.type
    table, accum = table.copy(), accum.copy()
    a = accum[rows] + grads * grads
    accum[rows] = a
    table[rows] = table[rows] - dt(lr) * grads / (np.sqrt(a) + dt(eps))
    return table, accum


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V,D,u", [(1, 1, 1), (10, 7, 4), (50, 16, 50), (200, 33, 37)])
@pytest.mark.parametrize("eps", [0.0, 1e-7])
def test_adagrad_rows_matches_numpy(dtype, V, D, u, eps):
    rng = np.random.default_rng(V * D + u)
    table = rng.standard_normal((V, D)).astype(dtype)
    accum = np.full((V, D), 0.1, dtype)  # TF's initial_accumulator_value
    t0, a0 = table.copy(), accum.copy()
    for _ in range(3):  # the accumulator grows step by step
        rows = rng.permutation(V)[:u].astype(np.int64)  # distinct, in any order
        grads = rng.standard_normal((u, D)).astype(dtype)
        ref_t, ref_a = adagrad_ref(table, accum, rows, grads, 0.05, eps)
        assert K.adagrad_rows(table, accum, rows, grads, 0.05, eps) is table
        np.testing.assert_array_equal(table, ref_t)
        np.testing.assert_array_equal(accum, ref_a)
    # and near the float64 formula, from the same start, one step
    table, accum = t0.copy(), a0.copy()
    rows = np.arange(V, dtype=np.int64)
    grads = rng.standard_normal((V, D)).astype(dtype)
    K.adagrad_rows(table, accum, rows, grads, 0.05, eps)
    a64 = wide(a0) + wide(grads) ** 2
    np.testing.assert_allclose(accum, a64, **tol(dtype, 4.0))
    np.testing.assert_allclose(table, wide(t0) - 0.05 * wide(grads) / (np.sqrt(a64) + eps),
                               **tol(dtype, 4.0))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V,D,u", [(1, 1, 1), (10, 7, 4), (200, 33, 37)])
def test_sgd_rows_matches_numpy(dtype, V, D, u):
    rng = np.random.default_rng(V + D + u)
    table = rng.standard_normal((V, D)).astype(dtype)
    rows = rng.permutation(V)[:u].astype(np.int64)
    grads = rng.standard_normal((u, D)).astype(dtype)
    ref = table.copy()
    ref[rows] = ref[rows] - dtype(0.3) * grads
    assert K.sgd_rows(table, rows, grads, 0.3) is table
    np.testing.assert_array_equal(table, ref)


def special_table(rng, V, D, dtype):
    """Values on which a careless `table -= 0` shows: -0.0, subnormals, huge and tiny."""
    table = rng.standard_normal((V, D)).astype(dtype)
    flat = table.reshape(-1)
    tiny = np.finfo(dtype).smallest_subnormal
    picks = rng.choice(flat.size, min(flat.size, 4 * V), replace=False)
    flat[picks] = rng.choice(np.array([-0.0, 0.0, tiny, -3 * tiny, 1e30, -1e-30], dtype),
                             len(picks))
    return table


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V,D,u", [(1, 1, 1), (12, 5, 3), (64, 16, 20), (300, 33, 1),
                                   (100, 40, 100)])
@pytest.mark.parametrize("eps", [0.0, 1e-8])
def test_dense_step_equals_sparse_step_bit_for_bit(dtype, V, D, u, eps):
    """rows = arange(V) with zero gradients off the touched rows gives exactly the sparse
    step of the touched rows, and the untouched rows (g = 0) stay as they were, -0.0 and
    subnormals included: accum += 0 and table -= 0 change no bit."""
    rng = np.random.default_rng(V * u + D)
    table = special_table(rng, V, D, dtype)
    accum = (np.abs(rng.standard_normal((V, D))) + 0.01).astype(dtype)
    touched = rng.permutation(V)[:u].astype(np.int64)
    grads = rng.standard_normal((u, D)).astype(dtype)
    grads.reshape(-1)[:: 3] = 0  # zero entries inside touched rows too
    dense_grads = np.zeros((V, D), dtype)
    dense_grads[touched] = grads
    untouched = np.setdiff1d(np.arange(V), touched)

    sparse_t, sparse_a = table.copy(), accum.copy()
    dense_t, dense_a = table.copy(), accum.copy()
    K.adagrad_rows(sparse_t, sparse_a, touched, grads, 0.1, eps)
    K.adagrad_rows(dense_t, dense_a, np.arange(V, dtype=np.int64), dense_grads, 0.1, eps)
    assert dense_t.tobytes() == sparse_t.tobytes()
    assert dense_a.tobytes() == sparse_a.tobytes()
    assert dense_t[untouched].tobytes() == table[untouched].tobytes()
    assert dense_a[untouched].tobytes() == accum[untouched].tobytes()
    zero = grads == 0  # zero entries of touched rows keep their bits too
    assert sparse_t[touched][zero].tobytes() == table[touched][zero].tobytes()

    sparse_t, dense_t = table.copy(), table.copy()
    K.sgd_rows(sparse_t, touched, grads, 0.1)
    K.sgd_rows(dense_t, np.arange(V, dtype=np.int64), dense_grads, 0.1)
    assert dense_t.tobytes() == sparse_t.tobytes()
    assert dense_t[untouched].tobytes() == table[untouched].tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_steps_with_no_rows_change_nothing(dtype):
    table, accum = np.ones((4, 3), dtype), np.ones((4, 3), dtype)
    rows, grads = np.empty(0, np.int64), np.empty((0, 3), dtype)
    K.adagrad_rows(table, accum, rows, grads, 0.1, 0.0)
    K.sgd_rows(table, rows, grads, 0.1)
    assert (table == 1).all() and (accum == 1).all()


# ---- non-finite results -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_results_raise(dtype):
    big = np.finfo(dtype).max
    table, accum = np.ones((3, 4), dtype), np.full((3, 4), 0.1, dtype)
    rows = np.array([2, 0], np.int64)
    grads = np.ones((2, 4), dtype)
    for bad in (np.nan, np.inf):
        g = grads.copy()
        g[1, 3] = bad
        with pytest.raises(K.NonFiniteError):
            K.adagrad_rows(table.copy(), accum.copy(), rows, g, 0.1, 1e-7)
        with pytest.raises(K.NonFiniteError):
            K.sgd_rows(table.copy(), rows, g, 0.1)
    # g * g overflows: accum is Inf while the step it divides is 0 and the table stays finite
    a = accum.copy()
    with pytest.raises(K.NonFiniteError):
        K.adagrad_rows(table.copy(), a, rows, np.full((2, 4), big, dtype) / 2, 0.1, 0.0)
    assert np.isinf(a[2]).all()
    # g = 0 on an empty accumulator without eps: 0 / 0, as in TensorFlow
    with pytest.raises(K.NonFiniteError):
        K.adagrad_rows(table.copy(), np.zeros((3, 4), dtype), rows, np.zeros((2, 4), dtype),
                       0.1, 0.0)
    # the table's NaN reaches the bags that hold its row; the backward's NaN its row
    t = table.copy()
    t[1, 2] = np.nan
    ids = np.array([[0, 1], [2, 2]], np.int64)
    with pytest.raises(K.NonFiniteError):
        K.embedding_bag_forward(t, ids, False)
    K.embedding_bag_forward(t, np.array([[0, 2]], np.int64), True)  # row 1 unused: fine
    go = np.ones((2, 4), dtype)
    go[0, 0] = np.inf
    unique, inverse = np.unique(ids, return_inverse=True)
    with pytest.raises(K.NonFiniteError):
        K.embedding_bag_backward(ids, go, True, inverse, len(unique))


# ---- bad input ----------------------------------------------------------------------------
# The valid calls of these kernels and the ways to break them are in tests/kernel_cases.py
# (embedding_case, in NAMES), so the shared bad-input, crash-safety and aliasing tests
# (test_kernels_bad_input.py, test_kernels_overlap.py) cover them with every other kernel:
# wrong dtype, shape, contiguity, read-only outputs, non-finite inputs, out-of-range ids,
# inverse and rows (nothing written), bad scalars, overlapping arrays. Here: fixed examples
# with their messages, and guard-page calls at shapes the shared cases never take.

@pytest.mark.parametrize("dtype", DTYPES)
def test_written_arrays_that_alias_others_are_refused(dtype):
    rng = np.random.default_rng(2)
    table = rng.standard_normal((6, 4)).astype(dtype)
    ids = np.array([[0, 1], [2, 3]], np.int64)

    def refused(pattern, fn, *args, **kw):
        with pytest.raises(ValueError, match=pattern):
            fn(*args, **kw)

    refused("^out: shares memory with table", K.embedding_bag_forward, table, ids, False,
            out=table[:2])
    unique, inverse = np.unique(ids, return_inverse=True)
    both = np.zeros((6, 4), dtype)  # grad_out in rows 0-1, out in rows 1-4: overlapping
    refused("^out: shares memory with grad_out", K.embedding_bag_backward, ids, both[:2],
            False, inverse, len(unique), out=both[1:5])
    accum = np.full((6, 4), 0.1, dtype)
    rows, grads = np.array([1, 4], np.int64), rng.standard_normal((2, 4)).astype(dtype)
    refused("^accum: shares memory with table", K.adagrad_rows, table, table, rows, grads,
            0.1, 0.0)
    refused("^grads: shares memory with table", K.adagrad_rows, table, accum, rows, table[:2],
            0.1, 0.0)
    refused("^grads: shares memory with accum", K.adagrad_rows, table, accum, rows, accum[4:],
            0.1, 0.0)
    refused("^rows: shares memory with table", K.sgd_rows, table,
            table.view(np.int64).reshape(-1)[:2], grads, 0.1)
    refused("^grads: shares memory with table", K.sgd_rows, table, rows, table[3:5], 0.1)
    # disjoint views of one buffer are fine
    K.sgd_rows(both[:3], np.array([0, 2], np.int64), both[4:6], 0.1)


def test_bad_shapes_and_types_name_the_argument():
    table = np.zeros((5, 3))
    ids = np.zeros((2, 2), np.int64)
    with pytest.raises(TypeError, match="^ids: expected dtype int64"):
        K.embedding_bag_forward(table, ids.astype(np.int32), False)
    with pytest.raises(TypeError, match="^table: expected float32 or float64"):
        K.embedding_bag_forward(table.astype(np.int64), ids, False)
    with pytest.raises(ValueError, match="^ids: expected a 2-D array"):
        K.embedding_bag_forward(table, ids.reshape(-1), False)
    with pytest.raises(ValueError, match="^ids: array is empty"):
        K.embedding_bag_forward(table, np.zeros((2, 0), np.int64), False)
    with pytest.raises(ValueError, match="^ids: must be C-contiguous"):
        K.embedding_bag_forward(table, np.zeros((2, 3, 2), np.int64)[:, 0, :], False)
    with pytest.raises(ValueError, match="^ids: an entry is out of range"):
        K.embedding_bag_forward(table, np.array([[0, 5]], np.int64), False)
    inverse = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="^grad_out: expected shape"):
        K.embedding_bag_backward(ids, np.zeros((3, 3)), False, inverse, 1)
    with pytest.raises(ValueError, match="^inverse: expected shape"):
        K.embedding_bag_backward(ids, np.zeros((2, 3)), False, inverse[:3], 1)
    with pytest.raises(ValueError, match="^unique_count: expected an integer in"):
        K.embedding_bag_backward(ids, np.zeros((2, 3)), False, inverse, 5)
    with pytest.raises(ValueError, match=r"^inverse: an entry is out of range \[0, 1\)"):
        K.embedding_bag_backward(ids, np.zeros((2, 3)), False, inverse + 1, 1)
    with pytest.raises(ValueError, match="^grads: expected shape"):
        K.sgd_rows(table, np.array([0, 1], np.int64), np.zeros((2, 4)), 0.1)
    with pytest.raises(ValueError, match="^rows: expected a 1-D array"):
        K.sgd_rows(table, np.array([[0, 1]], np.int64), np.zeros((2, 3)), 0.1)
    with pytest.raises(ValueError, match="^accum: expected shape"):
        K.adagrad_rows(table, np.zeros((5, 4)), np.array([0], np.int64), np.zeros((1, 3)),
                       0.1, 0.0)
    with pytest.raises(ValueError, match="^lr: 1e\\+39 overflows float32"):
        K.sgd_rows(table.astype(np.float32), np.array([0], np.int64),
                   np.zeros((1, 3), np.float32), 1e39)


GUARDED = """
    import numpy as np
    import kernel_cases as kc

    calls = 0
    for name in kc.EMBEDDING_NAMES:
        for dtype in (np.float32, np.float64):
            for V, D, n, k in [(1, 1, 1, 1), (6, 5, 4, 3), (9, 17, 3, 8), (40, 33, 7, 2)]:
                case = kc.embedding_case(name, dtype, V, D, n, k)
                case.run(kc.guard_all(case.args))  # the last row of every array: in bounds
                arg, bound = case.idx
                for bad in (-1, bound, 2**62):
                    args = dict(case.args)
                    args[arg] = args[arg].copy()
                    args[arg].reshape(-1)[-1] = bad
                    try:
                        case.run(kc.guard_all(args))
                    except ValueError:
                        calls += 1
                    else:
                        raise SystemExit(f"{name}: {arg} = {bad} was accepted")
    print("refused", calls)
"""


def test_calls_stay_inside_their_arrays():
    """Valid calls, and calls with the last entry of the index array out of range, with
    every array followed by an unmapped page, in a child process: a read or write past any
    array ends it with SIGSEGV. One-row tables, one-id bags and widths past a vector here;
    test_kernels_bad_input.py's crash test adds random corruptions at its own shapes."""
    tests = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tests), str(tests.parent)]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(GUARDED)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.split() == ["refused", str(len(EMBEDDING_NAMES) * 2 * 4 * 3)], \
        proc.stdout
