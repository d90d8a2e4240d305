"""Bad input to the kernel wrappers raises clean Python errors and never reaches C unchecked.

Every test starts from a valid call (tests/kernel_cases.py), breaks one thing, and checks the
exception type and, where the wrapper does the check, that the message names the argument.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import (
    EMBEDDING_NAMES,
    NAMES,
    bad_index,
    build,
    guard_all,
    names_any,
    names_arg,
    non_contiguous,
    non_finite,
    read_only,
    wrong_dtype,
    wrong_shape,
)

from sim import kernels as K

DTYPES = [np.float32, np.float64]
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)
rnds = st.randoms(use_true_random=False)


def cases_with(attr: str = "name") -> st.SearchStrategy:
    """Valid cases of the kernels for which ``attr`` (a Case field) is non-empty."""
    names = [n for n in NAMES if getattr(build(n, np.float64), attr)]
    return st.builds(build, st.sampled_from(names), st.sampled_from(DTYPES))


cases = cases_with()


def expect(case, arg, value, exc, named=True):
    """Call ``case`` with ``arg`` replaced; it must raise ``exc`` naming the argument and,
    when ``named`` (a check made before the call reaches C), write none of its outputs."""
    args = dict(case.args)
    args[arg] = value
    before = {k: v.copy() for k, v in case.args.items() if isinstance(v, np.ndarray)}
    with pytest.raises(exc) as info:
        case.run(args)
    msg = str(info.value)
    if named:
        ok = names_any(msg, case) if arg in case.defining else names_arg(msg, arg)
        assert ok, f"{case.name}: error for {arg!r} does not name it: {msg}"
        for out in case.outputs:  # bytewise: np.empty outputs may hold NaN patterns
            assert case.args[out].tobytes() == before[out].tobytes(), f"{out} was written"
    return info.value, before


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_valid_cases_run(name, dtype):
    """The starting points are valid (so every failure below is caused by the corruption)."""
    case = build(name, dtype)
    result = case.run()
    parts = result if isinstance(result, tuple) else (result,)
    for part in parts:  # every output is finite and of the case's precision
        assert np.isfinite(part).all()
        if isinstance(part, np.ndarray) and part.dtype.kind == "f":
            assert part.dtype == dtype


@SETTINGS
@given(cases, rnds)
def test_wrong_dtype_raises_type_error(case, rnd):
    arg = rnd.choice(case.arrays())
    value, exc = wrong_dtype(case, arg, rnd)
    expect(case, arg, value, exc)


@SETTINGS
@given(cases_with("shaped"), rnds)
def test_wrong_shape_raises_value_error(case, rnd):
    arg = rnd.choice(case.shaped)
    value, exc = wrong_shape(case, arg, rnd)
    err, _ = expect(case, arg, value, exc)
    assert not isinstance(err, TypeError)


@SETTINGS
@given(cases, rnds)
def test_non_contiguous_raises_value_error(case, rnd):
    arg = rnd.choice(case.stridable())
    value, exc = non_contiguous(case, arg, rnd)
    assert not value.flags.c_contiguous and value.shape == case.args[arg].shape
    err, _ = expect(case, arg, value, exc)
    assert "contiguous" in str(err)


@SETTINGS
@given(cases, rnds)
def test_read_only_output_raises_value_error(case, rnd):
    arg = rnd.choice(case.outputs)
    value, exc = read_only(case, arg, rnd)
    err, before = expect(case, arg, value, exc)
    assert "read-only" in str(err)
    np.testing.assert_array_equal(value, before[arg])  # untouched


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_read_only_inputs_are_accepted(name, dtype):
    case = build(name, dtype)
    expected = case.run(guard_all({k: (v.copy() if isinstance(v, np.ndarray) else v)
                                   for k, v in case.args.items()}))
    case = build(name, dtype)
    for k, v in case.args.items():
        if isinstance(v, np.ndarray) and k not in case.outputs:
            v.setflags(write=False)
    got = case.run()
    for e, g in zip(np.atleast_1d(np.asarray(expected, object)), np.atleast_1d(
            np.asarray(got, object)), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


@SETTINGS
@given(cases_with("finite"), rnds)
def test_nan_and_inf_inputs_raise_non_finite_error(case, rnd):
    arg = rnd.choice(case.finite)
    value, exc = non_finite(case, arg, rnd)
    err, _ = expect(case, arg, value, exc, named=False)
    assert isinstance(err, ValueError) and isinstance(err, FloatingPointError)


@SETTINGS
@given(st.builds(build, st.sampled_from(["softmax_loss_grad", "softmax_xent",
                                          "sparse_logreg_grad", "csr_matvec", "csr_matmat",
                                          "scatter_add", *EMBEDDING_NAMES]),
                 st.sampled_from(DTYPES)), rnds)
def test_out_of_range_labels_and_indices_raise_value_error(case, rnd):
    args = bad_index(case, rnd)
    before = {k: v.copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    with pytest.raises(ValueError) as info:
        case.run(args)
    assert not isinstance(info.value, K.NonFiniteError)
    assert "out of range" in str(info.value) or "indptr" in str(info.value)
    if case.name in ("scatter_add", "csr_matmat"):  # checked before any write
        np.testing.assert_array_equal(args["out"], before["out"])
    if case.name in EMBEDDING_NAMES:  # checked before any write, and named
        assert names_arg(str(info.value), case.idx[0]), str(info.value)
        for out in case.outputs:
            assert args[out].tobytes() == before[out].tobytes(), f"{out} was written"
    if case.name == "sparse_logreg_grad":  # scratch untouched: still all zero
        assert not args["workspace.acc"].any() and not args["workspace.mark"].any()


@SETTINGS
@given(cases_with("scalars"), rnds)
def test_bad_scalars_raise_naming_the_argument(case, rnd):
    arg = rnd.choice(sorted(case.scalars))
    value = rnd.choice(case.scalars[arg])
    err, _ = expect(case, arg, value, (TypeError, ValueError))
    if value is None or isinstance(value, (str, list)):
        assert isinstance(err, TypeError)


def test_non_finite_error_is_a_value_error():
    assert issubclass(K.NonFiniteError, ValueError)


@pytest.mark.parametrize("xdt,wdt", [(np.float32, np.float64), (np.float64, np.float32)])
def test_mixed_dtypes_name_the_odd_argument(xdt, wdt):
    X, y, w = np.ones((3, 4), xdt), np.ones(3, xdt), np.ones(4, wdt)
    with pytest.raises(TypeError, match=r"^w: expected dtype"):
        K.logreg_loss_grad(X, y, w)
    with pytest.raises(TypeError, match=r"^W: expected dtype"):
        K.dense_forward(X, np.ones((2, 4), wdt), np.ones(2, xdt), True)
    with pytest.raises(TypeError, match=r"^src: expected dtype"):
        K.sum_into(np.ones(4, xdt), np.ones(4, wdt))


def test_outputs_that_alias_inputs_are_rejected():
    """The kernels' pointers are restrict: an out= overlapping an input is refused."""
    rng = np.random.default_rng(0)
    bufs = [rng.standard_normal(8) for _ in range(3)]
    with pytest.raises(ValueError, match=r"^out: shares memory with bufs\[1\]"):
        K.average(bufs, out=bufs[1])
    logits = rng.standard_normal((4, 3))
    with pytest.raises(ValueError, match="^out: shares memory with logits"):
        K.softmax_xent(logits, np.zeros(4, np.int32), out=logits)
    x, W = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    with pytest.raises(ValueError, match="^out: shares memory with x"):
        K.dense_forward(x, W, np.zeros(4), True, out=x)
    with pytest.raises(ValueError, match="^delta_in: shares memory with x"):
        K.dense_backward(x, W.copy(), W, True, delta_in=x)
    g = rng.standard_normal(8)
    with pytest.raises(ValueError, match="^scratch: shares memory with g"):
        K.topk_ef(g, np.zeros(8), 2, scratch=g)
    A = rng.standard_normal((8, 8))
    with pytest.raises(ValueError, match="^out: shares memory with A"):
        K.dense_matvec(A, rng.standard_normal(8), out=A[2])
    indptr, indices = np.array([0, 1, 2], np.int64), np.array([0, 3], np.int64)
    with pytest.raises(ValueError, match="^out: shares memory with B"):
        K.csr_matmat(indptr, indices, np.ones(2), A, out=A[:2])


def run_child(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter that can import sim and kernel_cases: a memory
    error there fails one test instead of killing the test run."""
    tests = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tests), str(tests.parent)]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=120)


def test_csr_matvec_decreasing_row_pointer_reads_nothing_past_nnz():
    """Regression: row 0 ending at 2**40 was summed (reading past indices and data) before
    row 1 was found to go backwards."""
    proc = run_child("""
        import numpy as np
        import kernel_cases as kc
        from sim import kernels as K
        indices, data = (kc.guarded(a) for a in (np.arange(3), np.ones(3)))
        for indptr in ([0, 2**40, 3], [0, 5, 3], [0, 3, 2, 3]):
            try:
                K.csr_matvec(np.array(indptr, np.int64), indices, data, np.ones(3))
            except ValueError as e:
                assert "indptr" in str(e), e
            else:
                raise SystemExit(f"accepted {indptr}")
        print("ok")
    """)
    assert (proc.returncode, proc.stdout) == (0, "ok\n"), proc.stderr[-2000:]


def test_sparse_workspace_not_all_zero_is_refused_without_overflow():
    """Regression: a mark bitmap with stale bits made the scan write one entry per bit into
    out_idx/out_val (room for nnz): a heap overflow. Now: ValueError, scratch cleared."""
    proc = run_child("""
        import numpy as np
        from sim import kernels as K
        d = 100_000
        indptr, indices = np.array([0, 3], np.int64), np.array([1, 5, 9], np.int64)
        args = (indptr, indices, np.ones(3), np.ones(1), np.ones(d))
        ref = K.sparse_logreg_grad(*args)
        for stale in ([2**64 - 1] * ((d + 63) // 64), [0] * ((d + 63) // 64 - 1) + [2**63]):
            ws = K.SparseWorkspace(d)
            ws.mark[:] = np.array(stale, np.uint64)  # bits past nnz, or past d
            try:
                K.sparse_logreg_grad(*args, workspace=ws)
            except ValueError:
                pass
            else:
                raise SystemExit("a dirty workspace was accepted")
            assert not ws.mark.any() and not ws.acc.any()  # handed back clean ...
            got = K.sparse_logreg_grad(*args, workspace=ws)  # ... and reusable
            assert got[0] == ref[0] and (got[1] == ref[1]).all() and (got[2] == ref[2]).all()
        print("ok")
    """)
    assert (proc.returncode, proc.stdout) == (0, "ok\n"), proc.stderr[-2000:]


CRASH_SCRIPT = """
    import random
    import numpy as np
    import kernel_cases as kc

    rnd, calls = random.Random(0), 0
    corrupt = [kc.wrong_dtype, kc.wrong_shape, kc.non_contiguous, kc.read_only, kc.non_finite]
    for name in kc.NAMES:
        for dtype in (np.float32, np.float64):
            for n, d, k in [(1, 1, 2), (5, 6, 3), (8, 16, 4), (9, 33, 5), (17, 100, 2),
                            (33, 70, 11)]:
                case = kc.build(name, dtype, n, d, k)
                case.run(kc.guard_all(case.args))  # valid: stays inside every array
                calls += 1
            case = kc.build(name, dtype)
            for rep in range(12):
                kinds = [(f, a) for f in corrupt for a in case.arrays()]
                kinds = [(f, a) for f, a in kinds if a in {
                    kc.wrong_shape: case.shaped, kc.read_only: case.outputs,
                    kc.non_finite: case.finite, kc.non_contiguous: case.stridable()
                }.get(f, case.args)]
                f, arg = rnd.choice(kinds)
                args = dict(case.args)
                args[arg] = f(case, arg, rnd)[0]
                if case.labels or case.csr or case.idx:
                    args = kc.bad_index(case, rnd) if rep % 2 else args
                try:
                    case.run(kc.guard_all(args))
                except (TypeError, ValueError):
                    calls += 1
                else:
                    raise SystemExit(f"{name}: {f.__name__}({arg}) was accepted")
    print("calls", calls)
"""


def test_bad_calls_do_not_crash_the_interpreter():
    """A batch of valid and broken calls, every array followed by an unmapped page, in a
    child process: a stray read or write past any array ends it with SIGSEGV."""
    proc = run_child(CRASH_SCRIPT)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.split() == ["calls", str(len(NAMES) * 2 * (6 + 12))], proc.stdout
