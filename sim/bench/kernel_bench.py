"""``python -m sim bench kernels``: each C kernel against equivalent numpy code.

Every case times the kernel and numpy on the same data in alternating rounds
of one run (BLAS limited to one thread, numpy's and the kernels' alike), so the
printed ratio is meaningful on a noisy machine. Memory-bound kernels also report GB/s
against a copy timed in the same rounds. Targets: the BLAS-backed dense layers
and softmax regression >= 0.95x numpy at every size, float32 and float64; fused logistic
regression >= 1.2x numpy in cache and, out of cache (X of 51 MB), streaming X at >= 80%
of the copy bandwidth; memory-bound vector kernels >= 70% of it. Bytes are counted
STREAM-style (reads + writes, no write-allocate), so an in-place kernel, which needs no
write-allocate read, can exceed 100% of a copy into a separate array.

Logistic regression runs the plan ``sim.kernels.logreg_plan`` gives (``SGD_KERNEL_PLAN``:
the fused pass by default, ``auto`` to time both): each row says which path it took (fused,
with its row block and column chunk, or two BLAS mat-vecs), and times the other path in the
same rounds (the "other" column: its speedup over numpy). Its out-of-cache sizes follow the
last-level cache the machine reports (``sim.kernels.cache_sizes``), one of them X of 96 rows
x 2.5 x LLC bytes. The header
names the CPU and its caches, and the table ends with every kernel slower than numpy.

The sparse crossover: CSR x vector against BLAS gemv and CSR x dense matrix (k columns)
against BLAS gemm (k = 16, 256) over a range of densities; each crossover is the density
at which CSR stops being faster (log-linear between the two densities measured around it).
"""

from __future__ import annotations

import argparse
import math
import platform
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from sim import kernels as K
from sim.bench.side_by_side import compare
from sim.machine import cpu_model


@dataclass
class Case:
    kernel: str
    dtype: str
    size: str
    c: Callable[[], object]
    numpy: Callable[[], object]
    bytes_moved: int = 0  # memory traffic of one call, for memory-bound kernels
    min_speedup: float | None = None
    min_copy_fraction: float | None = None  # of the copy bandwidth, for memory-bound ones
    extra: dict = field(default_factory=dict)  # fields copied into the row (density, k)
    others: dict = field(default_factory=dict)  # more candidates timed in the same rounds


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def out_of_cache_bytes() -> int:
    """The last-level cache the kernels' plans see (sysfs, or SGD_CACHE_SIZES)."""
    return K.cache_sizes().llc


def logreg_cases(rng: np.random.Generator, quick: bool) -> Iterator[Case]:
    llc = out_of_cache_bytes()
    for dtype in (np.float64, np.float32):
        item = np.dtype(dtype).itemsize
        big = 100_000 if dtype == np.float64 else 200_000
        sizes = [(16, 100), (64, 1_000), (256, 1_000), (64, 10_000), (64, big)]
        if dtype == np.float64 and not quick:  # the case: 96 x 2.5 x LLC bytes
            sizes.append((96, max(1, int(2.5 * llc) // (96 * item))))
        for n, d in sizes[:4] if quick and dtype == np.float32 else sizes:
            X = rng.standard_normal((n, d)).astype(dtype)
            y = (rng.random(n) < 0.5).astype(dtype)
            w = (rng.standard_normal(d) * 0.01).astype(dtype)
            out, other_out = np.empty(d, dtype), np.empty(d, dtype)

            def numpy_logreg(X=X, y=y, w=w, n=n):  # reads X twice: X @ w, then X.T @ r
                z = X @ w
                loss = np.mean(np.logaddexp(0, z) - y * z)
                return loss, X.T @ ((_sigmoid(z) - y) / n)

            plan = K.logreg_plan(dtype, n, d, (X, y, w, 0.0))  # auto would time it here
            other = K.LogregPlan("blas" if plan.path == "fused" else "fused",
                                 *K.logreg_blocks(item, d))
            streamed = X.nbytes > llc
            yield Case("logreg_loss_grad", np.dtype(dtype).name, f"n={n} d={d:g}",
                       lambda X=X, y=y, w=w, out=out: K.logreg_loss_grad(X, y, w, out=out),
                       numpy_logreg, bytes_moved=X.nbytes if streamed else 0,
                       min_speedup=None if streamed else 1.2,
                       min_copy_fraction=0.80 if streamed else None,
                       extra={"path": plan.describe(), "shape_class": plan.shape_class,
                              "other_path": other.describe()},
                       others={"other": lambda X=X, y=y, w=w, o=other_out, p=other:
                               K.logreg_loss_grad(X, y, w, out=o, plan=p)})


#: (batch, inputs, hidden units): this project's digits MLP, and an MNIST-sized layer
MODEL_SIZES = [(32, 64, 64), (64, 784, 256)]


def model_cases(rng: np.random.Generator, quick: bool) -> Iterator[Case]:
    k = 10
    for dtype in (np.float64, np.float32):
        name = np.dtype(dtype).name
        for n, d, h in MODEL_SIZES:
            yield from _model_cases(rng, np.dtype(dtype), name, n, d, k, h)
    logits = rng.standard_normal((256, k))
    lab256 = rng.integers(0, k, 256).astype(np.int32)
    xent = np.empty((256, k))

    def numpy_xent():
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.mean(np.log(p[np.arange(256), lab256]))
        p[np.arange(256), lab256] -= 1
        return loss, p / 256

    yield Case("softmax_xent", "float64", f"n=256 k={k}",
               lambda: K.softmax_xent(logits, lab256, out=xent), numpy_xent)
    yield from sparse_logreg_cases(rng, quick)


def _model_cases(rng: np.random.Generator, dtype: np.dtype, name: str, n: int, d: int, k: int,
                 h: int) -> Iterator[Case]:
    """Softmax regression and one dense layer forward and backward (BLAS in both)."""
    X = rng.standard_normal((n, d)).astype(dtype)
    labels = rng.integers(0, k, n).astype(np.int32)
    W = (rng.standard_normal((k, d)) * 0.01).astype(dtype)
    onehot = np.eye(k, dtype=dtype)[labels]

    def numpy_softmax():
        z = X @ W.T
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return -np.mean(np.log(p[np.arange(n), labels])), (p - onehot).T @ X / n

    grad = np.empty((k, d), dtype)
    yield Case("softmax_loss_grad", name, f"n={n} d={d} k={k}",
               lambda: K.softmax_loss_grad(X, labels, W, out=grad), numpy_softmax,
               min_speedup=0.95)
    W1, b1 = (rng.standard_normal((h, d)) * 0.05).astype(dtype), np.zeros(h, dtype)
    act = np.empty((n, h), dtype)
    yield Case("dense_forward", name, f"n={n} {d}->{h} relu",
               lambda: K.dense_forward(X, W1, b1, True, out=act),
               lambda: np.maximum(X @ W1.T + b1, 0), min_speedup=0.95)
    A = K.dense_forward(X, W1, b1, True)
    delta = (rng.standard_normal((n, h)) * (A > 0)).astype(dtype)
    dW, db, d_in = np.empty((h, d), dtype), np.empty(h, dtype), np.empty((n, d), dtype)
    yield Case("dense_backward", name, f"n={n} {d}<-{h}",
               lambda: K.dense_backward(X, delta, W1, True, dW=dW, db=db, delta_in=d_in),
               lambda: (delta.T @ X, delta.sum(0), (delta @ W1) * (X > 0)), min_speedup=0.95)


def sparse_logreg_cases(rng: np.random.Generator, quick: bool) -> Iterator[Case]:
    n, d, per_row = 64, 1_000_000, 50
    indices = rng.integers(0, d, n * per_row).astype(np.int64)
    indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    data = rng.standard_normal(n * per_row)
    y = (rng.random(n) < 0.5).astype(np.float64)
    w = rng.standard_normal(d) * 0.01
    ws = K.SparseWorkspace(d)
    rows = np.repeat(np.arange(n), per_row)

    def numpy_sparse():
        z = np.bincount(rows, weights=data * w[indices], minlength=n)
        r = (_sigmoid(z) - y) / n
        touched, inverse = np.unique(indices, return_inverse=True)
        return touched, np.bincount(inverse, weights=r[rows] * data)

    yield Case("sparse_logreg_grad", "float64", f"n={n} d=1e6 nnz/row={per_row}",
               lambda: K.sparse_logreg_grad(indptr, indices, data, y, w, workspace=ws),
               numpy_sparse)


def vector_cases(rng: np.random.Generator, quick: bool) -> Iterator[Case]:
    n = 1 << (22 if quick else 24)
    item = 8
    x, y, w, v = (rng.standard_normal(n) for _ in range(4))
    bufs = [rng.standard_normal(n) for _ in range(4)]
    out = np.empty(n)
    size = f"n=2^{n.bit_length() - 1}"

    def numpy_sgd():
        v.__imul__(0.9)
        v.__iadd__(y)
        v.__iadd__(1e-4 * w)
        w.__isub__(1e-3 * v)

    def numpy_average():
        np.copyto(out, bufs[0])
        for b in bufs[1:]:
            out.__iadd__(b)
        out.__imul__(0.25)

    target = {"min_copy_fraction": 0.70}
    yield Case("sum_into", "float64", size, lambda: K.sum_into(out, x),
               lambda: np.add(out, x, out=out), 3 * n * item, **target)
    yield Case("axpy", "float64", size, lambda: K.axpy(1e-9, x, y),
               lambda: y.__iadd__(1e-9 * x), 3 * n * item, **target)
    yield Case("scale", "float64", size, lambda: K.scale(1.0, x),
               lambda: np.multiply(x, 1.0, out=x), 2 * n * item, **target)
    yield Case("copy", "float64", size, lambda: K.copy(out, x),
               lambda: np.copyto(out, x), 2 * n * item, **target)
    yield Case("sgd_update", "float64", size + " momentum",
               lambda: K.sgd_update(w, y, v, 1e-3, 0.9, 1e-4), numpy_sgd, 5 * n * item,
               **target)
    yield Case("average", "float64", size + " k=4", lambda: K.average(bufs, out=out),
               numpy_average, 5 * n * item, **target)


def compression_cases(rng: np.random.Generator, quick: bool) -> Iterator[Case]:
    n, k, s = 1_000_000, 10_000, 256
    g = rng.standard_normal(n)
    residual, residual_np = np.zeros(n), np.zeros(n)
    scratch = np.empty(n)

    def numpy_topk():
        acc = g + residual_np
        idx = np.sort(np.argpartition(np.abs(acc), n - k)[n - k:])
        vals = acc[idx]
        acc[idx] = 0
        residual_np[:] = acc
        return idx, vals

    yield Case("topk_ef", "float64", f"n=1e6 k={k}",
               lambda: K.topk_ef(g, residual, k, scratch=scratch), numpy_topk)
    levels = np.empty(n, np.int32)
    np_rng = np.random.default_rng(0)

    def numpy_qsgd():
        norm = np.linalg.norm(g)
        a = np.abs(g) * (s / norm)
        low = np.floor(a)
        lev = (low + (np_rng.random(n) < a - low)).astype(np.int32)
        return np.where(g < 0, -lev, lev), norm

    yield Case("qsgd_quantize", "float64", f"n=1e6 s={s}",
               lambda: K.qsgd_quantize(g, s, 7, out=levels), numpy_qsgd)
    lev, norm = K.qsgd_quantize(g, s, 7)
    deq = np.empty(n)
    yield Case("qsgd_dequantize", "float64", f"n=1e6 s={s}",
               lambda: K.qsgd_dequantize(lev, norm, s, out=deq),
               lambda: np.multiply(lev, norm / s, out=deq))
    idx = np.sort(rng.choice(n, k, replace=False)).astype(np.int64)
    val = rng.standard_normal(k)
    yield Case("scatter_add", "float64", f"nnz={k} into n=1e6",
               lambda: K.scatter_add(idx, val, deq), lambda: deq.__setitem__(idx, deq[idx] + val))


def random_csr(rng: np.random.Generator, m: int, n: int, density: float):
    per_row = max(1, round(density * n))
    indices = np.sort(np.stack([rng.choice(n, per_row, replace=False) for _ in range(m)]),
                      axis=1).ravel().astype(np.int64)
    indptr = np.arange(0, m * per_row + 1, per_row, dtype=np.int64)
    return indptr, indices, rng.standard_normal(m * per_row)


DENSITIES = (0.001, 0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
#: columns of the dense right-hand side: 1 is CSR x vector against gemv (memory-bound: each
#: entry of A is used once), 16 and 256 CSR x matrix against gemm (each entry used k times)
CROSSOVER_K = (1, 16, 256)


def crossover_cases(rng: np.random.Generator, quick: bool) -> Iterator[Case]:
    """CSR against BLAS (numpy's, one thread) on the same matrix, density by density."""
    m = n = 1000 if quick else 2000
    for k in CROSSOVER_K:
        B = rng.standard_normal(n) if k == 1 else rng.standard_normal((n, k))
        Y = np.empty(m) if k == 1 else np.empty((m, k))
        kernel, blas = ("csr_matvec", "gemv") if k == 1 else ("csr_matmat", "gemm")
        for density in DENSITIES:
            indptr, indices, data = random_csr(rng, m, n, density)
            A = np.zeros((m, n))
            A[np.repeat(np.arange(m), np.diff(indptr)), indices] = data
            csr = (partial(K.csr_matvec, indptr, indices, data, B, out=Y) if k == 1
                   else partial(K.csr_matmat, indptr, indices, data, B, out=Y))
            dense = partial(np.dot if k == 1 else np.matmul, A, B, out=Y)
            yield Case(kernel, "float64", f"{m}x{n} k={k} density={density:g}", csr, dense,
                       extra={"density": density, "k": k, "versus": blas})
    A, x, y = rng.standard_normal((m, n)), rng.standard_normal(n), np.empty(m)
    yield Case("dense_matvec", "float64", f"{m}x{n}", lambda: K.dense_matvec(A, x, out=y),
               lambda: np.dot(A, x, out=y))


FAMILIES = [logreg_cases, model_cases, vector_cases, compression_cases, crossover_cases]


def copy_bandwidth_Bps(quick: bool, rounds: int) -> float:
    """Bytes/s of np.copyto on arrays far larger than the last-level cache."""
    n = 1 << (22 if quick else 24)
    src, dst = np.ones(n), np.empty(n)
    t = compare({"copy": lambda: np.copyto(dst, src)}, rounds=rounds, budget_s=ROUND_S)["copy"]
    return 2 * n * 8 / t


#: each array of the copy a memory-bound row is compared with: past the last-level cache
COPY_MIN_ITEMS = 1 << 23
#: seconds of calls per candidate and round; with 11 rounds (best of), a burst of other work
#: on a shared machine rarely spoils every round of one side (fewer, shorter rounds left
#: BLAS-bound rows far off in single runs)
ROUND_S = 0.05


def measure_case(case: Case, rounds: int, copy_Bps: float) -> dict:
    candidates = {"c": case.c, "numpy": case.numpy, **case.others}
    if case.bytes_moved:  # a copy of comparable size, in the same alternating rounds
        items = max(case.bytes_moved // 24, COPY_MIN_ITEMS)
        src, dst = np.ones(items), np.empty(items)
        candidates["copy"] = lambda: np.copyto(dst, src)
    times = compare(candidates, rounds=rounds, budget_s=ROUND_S)
    if case.bytes_moved:
        copy_Bps = 2 * src.nbytes / times["copy"]
    row = {"kernel": case.kernel, "dtype": case.dtype, "size": case.size,
           "c_s": times["c"], "numpy_s": times["numpy"],
           "speedup": times["numpy"] / times["c"], **case.extra}
    for name in case.others:
        row[f"{name}_s"] = times[name]
        row[f"{name}_speedup"] = times["numpy"] / times[name]
    if case.bytes_moved:
        row["GBps"] = case.bytes_moved / times["c"] / 1e9
        row["copy_GBps"] = copy_Bps / 1e9
        row["copy_fraction"] = row["GBps"] * 1e9 / copy_Bps
    if case.min_copy_fraction is not None:
        row["target_copy_fraction"] = case.min_copy_fraction
        row["target_met"] = row["copy_fraction"] >= case.min_copy_fraction
    if case.min_speedup is not None:
        row["target_speedup"] = case.min_speedup
        row["target_met"] = row["speedup"] >= case.min_speedup
    return row


def crossover(densities: Sequence[float], speedups: Sequence[float]) -> float | None:
    """The density at which CSR stops being faster (speedup = dense time / CSR time falls
    to 1), log-linear between the last density where it was faster and the first where it
    was not; the lowest density measured if it never was faster, None if it always was."""
    for i, (density, speedup) in enumerate(zip(densities, speedups, strict=True)):
        if speedup <= 1.0:
            if i == 0:
                return float(density)
            d0, g0, g1 = densities[i - 1], math.log(speedups[i - 1]), math.log(speedup)
            return float(math.exp(math.log(d0) + g0 / (g0 - g1) * math.log(density / d0)))
    return None


def crossovers(rows: list[dict]) -> dict[str, float | None]:
    """{"gemv", "gemm k=16", ...: crossover density} from the CSR rows of one run."""
    found = {}
    for k in CROSSOVER_K:
        mine = [r for r in rows if r.get("k") == k and "density" in r]
        if mine:
            label = mine[0]["versus"] + ("" if k == 1 else f" k={k}")
            found[label] = crossover([r["density"] for r in mine], [r["speedup"] for r in mine])
    return found


def measure(args: argparse.Namespace) -> dict:
    rounds = 3 if args.quick else 11
    rng = np.random.default_rng(0)
    with threadpool_limits(limits=1, user_api="blas"):
        copy_Bps = copy_bandwidth_Bps(args.quick, rounds)
        rows = [measure_case(case, rounds, copy_Bps)
                for family in FAMILIES for case in family(rng, args.quick)]
        blas = [f"{i['filepath'].rsplit('/', 1)[-1]} {i.get('version')} "
                f"{i.get('architecture')} threads={i['num_threads']}" for i in threadpool_info()
                if i["user_api"] == "blas"]
    return {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "cpu": cpu_model(), "caches": str(K.cache_sizes()),
            "blas": blas, "copy_GBps": copy_Bps / 1e9, "rows": rows,  # copy_GBps: at the start
            "plans": K.kernel_plans(), "crossovers": crossovers(rows)}


def slower_than_numpy(rows: list[dict]) -> list[dict]:
    """Kernel rows slower than their numpy equivalent (the CSR crossover rows, whose numpy
    column is a dense product of another cost, excepted)."""
    return [r for r in rows if "density" not in r and r["speedup"] < 1.0]


def render(result: dict) -> str:
    head = (f"{'kernel':<19}{'dtype':<8}{'size':<30}{'C us':>10}{'numpy us':>10}"
            f"{'speedup':>9}{'GB/s':>7}{'%copy':>7}  target")
    lines = [f"CPU: {result['cpu']}; caches: {result['caches']}",
             f"BLAS (numpy's and the kernels'): {', '.join(result['blas']) or 'none found'}",
             f"copy bandwidth (np.copyto): {result['copy_GBps']:.1f} GB/s at the start; each "
             "memory-bound row's %copy uses a copy timed in its own alternating rounds", "",
             head,
             "-" * len(head)]
    for r in result["rows"]:
        gbps = f"{r['GBps']:7.1f}{100 * r['copy_fraction']:6.0f}%" if "GBps" in r else " " * 14
        target = ""
        if "target_met" in r:
            goal = (f">={r['target_speedup']}x" if "target_speedup" in r
                    else f">={100 * r['target_copy_fraction']:.0f}% copy")
            target = f"{goal} {'ok' if r['target_met'] else 'MISSED'}"
        lines.append(f"{r['kernel']:<19}{r['dtype']:<8}{r['size']:<30}{r['c_s'] * 1e6:10.1f}"
                     f"{r['numpy_s'] * 1e6:10.1f}{r['speedup']:8.2f}x{gbps}  {target}")
        if "path" in r:
            lines.append(f"{'':<19}{'':<8}  path: {r['path']:<25} other path "
                         f"({r['other_path']}): {r['other_speedup']:.2f}x numpy")
    slow = slower_than_numpy(result["rows"])
    lines += ["", "Slower than numpy: " + (", ".join(
        f"{r['kernel']} {r['dtype']} {r['size']} ({r['speedup']:.3f}x)" for r in slow)
        or "none (every kernel at least as fast as numpy)")]
    if result.get("plans"):
        lines += ["", f"logreg_loss_grad paths chosen (auto: BLAS only when "
                  f"{K.BLAS_MARGIN:.2f}x faster; fastest call of each, measured once per "
                  "shape class on its first shape):"]
        for p in result["plans"]:
            lines.append(f"  {p['shape_class']:<26} {p['path']:<6} fused "
                         f"{p['fused_s'] * 1e6:9.1f} us  blas {p['blas_s'] * 1e6:9.1f} us  "
                         f"on n={p['measured_on'][0]} d={p['measured_on'][1]}")
    lines += ["", "csr_matvec / csr_matmat rows: the numpy column is BLAS (gemv / gemm, one "
              "thread) on the same matrix stored densely. CSR stops beating it at density:"]
    for label, density in result["crossovers"].items():
        lines.append(f"  {label:<12} " + (f"{density:.3g}" if density is not None
                                          else f"> {DENSITIES[-1]:g} (faster at every density)"))
    return "\n".join(lines)
