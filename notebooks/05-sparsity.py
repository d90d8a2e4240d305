# %% [markdown]
# # 05 · Sparsity: sparse kernels and sparse parameter-server traffic
#
# Click-style models have millions of features but each example touches a few dozen. Two
# things then pay off: kernels that read only the non-zeros (CSR), and a parameter server
# that sends only the touched rows of the model (Li et al., *Scaling distributed machine
# learning with the parameter server*, OSDI 2014). Both stop paying off as density grows.

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "05-sparsity"
MATVEC_N = 500 if QUICK else 2000       # the m x n matrix of the CSR-vs-BLAS products
COLUMNS = [1, 16, 256]                  # right-hand sides: a vector (gemv), k-column matrices
DENSITY_POINTS = 7 if QUICK else 13     # densities from 1e-3 to 1, log-spaced
ROUNDS = 3 if QUICK else 7              # alternating timing rounds (best of)
GRAD_BATCH, GRAD_NNZ = 32, 20           # the gradient kernels: rows per batch, non-zeros per row
GRAD_FEATURES = [10**3, 10**4, 10**5] if QUICK else [10**3, 10**4, 10**5, 3 * 10**5]
PS_FEATURES = [10**4, 10**5] if QUICK else [10**4, 10**5, 10**6]   # sparse-vs-dense.toml
PS_ITERATIONS = 120 if QUICK else 400

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import cached_sweep, override, setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %% [markdown]
# ## 1. CSR against BLAS as density falls: where does sparse stop paying?
#
# A common rule of thumb says a sparse format pays only below 1-5% density. Here the C
# kernels `sim.kernels.csr_matvec` (y = A x) and `sim.kernels.csr_matmat` (Y = A B, B with
# k columns) run against BLAS (numpy's OpenBLAS, one thread: gemv and gemm) on the same
# random matrices stored densely (`sim.bench.kernel_bench.random_csr`), timed in alternating
# rounds of one run by `sim.bench.side_by_side.compare`, as `python -m sim bench kernels` does.
#
# The two ends differ in kind. A matrix-vector product uses each entry of A once: both
# kernels are **memory-bound**, and CSR moves 16 bytes per non-zero (value and int64 column
# index) against the dense kernel's 8 per entry, plus gathers of x. With k = 256 columns each
# entry of A is used 256 times: the product is **compute-bound**, and a BLAS gemm, which
# packs its operands into cache-sized panels and keeps a register tile of C busy, does far
# more multiply-adds per cycle than a sparse kernel that gathers rows of B. k = 16 lies
# between. The crossover (the density at which CSR is no longer faster, log-linear between
# the two densities measured around it) is computed from the timings below.

# %%
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
from threadpoolctl import threadpool_limits

from sim import kernels as K
from sim.bench.kernel_bench import crossover, random_csr
from sim.bench.side_by_side import compare

DENSITIES = np.geomspace(1e-3, 1.0, DENSITY_POINTS)
rng = np.random.default_rng(0)
csr_s = {k: [] for k in COLUMNS}
blas_s = {k: [] for k in COLUMNS}
with threadpool_limits(limits=1, user_api="blas"):
    for density in DENSITIES:
        indptr, indices, data = random_csr(rng, MATVEC_N, MATVEC_N, float(density))
        A = np.zeros((MATVEC_N, MATVEC_N))
        A[np.repeat(np.arange(MATVEC_N), np.diff(indptr)), indices] = data
        for k in COLUMNS:
            B = rng.standard_normal(MATVEC_N if k == 1 else (MATVEC_N, k))
            out = np.empty(MATVEC_N if k == 1 else (MATVEC_N, k))
            sparse = K.csr_matvec if k == 1 else K.csr_matmat
            best = compare({"csr": partial(sparse, indptr, indices, data, B, out=out),
                            "blas": partial(np.dot if k == 1 else np.matmul, A, B, out=out)},
                           rounds=ROUNDS)
            csr_s[k].append(best["csr"])
            blas_s[k].append(best["blas"])
csr_s = {k: np.array(v) for k, v in csr_s.items()}
blas_s = {k: np.array(v) for k, v in blas_s.items()}
crossovers = {k: crossover(DENSITIES, blas_s[k] / csr_s[k]) for k in COLUMNS}


def label(k):
    return "CSR x vector vs gemv" if k == 1 else f"CSR x {k} columns vs gemm"


fig, axes = plt.subplots(1, len(COLUMNS) + 1, figsize=(4.2 * (len(COLUMNS) + 1), 4),
                         layout="constrained")
for ax, k in zip(axes, COLUMNS, strict=False):
    ax.loglog(DENSITIES, csr_s[k] * 1e6, "o-", label="CSR (C kernel)")
    ax.loglog(DENSITIES, blas_s[k] * 1e6, "s-", label="dense (BLAS)")
    ax.set(xlabel="density (non-zeros / entries)", ylabel="time per product (µs)",
           title=f"{MATVEC_N} × {MATVEC_N}, k = {k}, float64")
    if crossovers[k] is not None:
        ax.axvline(crossovers[k], color="0.5", linestyle="--", linewidth=0.8)
    ax.legend()
ratio_ax = axes[-1]
for k in COLUMNS:
    ratio_ax.loglog(DENSITIES, blas_s[k] / csr_s[k], "o-", label=label(k))
ratio_ax.axhline(1, color="0.5", linewidth=0.8)
ratio_ax.axvspan(0.01, 0.05, color="C3", alpha=0.12, label="rule of thumb: 1-5%")
ratio_ax.set(xlabel="density", ylabel="BLAS time / CSR time (×)", title="CSR's advantage")
ratio_ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# What the measurements say about the rule of thumb, for the memory-bound product (k = 1)
# and the compute-bound one (k = 256), with k = 16 between them:

# %%


def verdict(k, density):
    kind = {1: "memory-bound", COLUMNS[-1]: "compute-bound"}.get(k, "in between")
    if density is None:
        return (f"{label(k)} ({kind}): CSR was faster at every density measured, up to "
                f"{DENSITIES[-1]:g}: the rule of thumb is far too pessimistic here")
    where = f"CSR stops beating BLAS at density {density:.3g} ({100 * density:.2g}%)"
    if density < 0.01:
        judged = "sparse pays off only below the rule's range: the rule is optimistic here"
    elif density <= 0.05:
        judged = "within the rule's 1-5%: the rule of thumb holds"
    else:
        judged = (f"{density / 0.05:.1f}x past the rule's upper end: the rule is too "
                  "pessimistic here")
    return f"{label(k)} ({kind}): {where}; {judged}"


for k in COLUMNS:
    print(verdict(k, crossovers[k]))

# %% [markdown]
# ## 2. A sparse gradient does not grow with the model
#
# Logistic regression on a batch of `GRAD_BATCH` rows with `GRAD_NNZ` non-zeros each, as the
# number of features d grows: `sparse_logreg_grad` (CSR rows in; the gradient over the
# touched features only) against the fused dense kernel `logreg_loss_grad` on the same rows
# stored densely. The sparse cost depends on the non-zeros alone, the dense one on n × d.

# %%
sparse_s, dense_grad_s = [], []
with threadpool_limits(limits=1, user_api="blas"):
    for d in GRAD_FEATURES:
        indptr, indices, data = random_csr(rng, GRAD_BATCH, d, GRAD_NNZ / d)
        X = np.zeros((GRAD_BATCH, d))
        X[np.repeat(np.arange(GRAD_BATCH), np.diff(indptr)), indices] = data
        labels = (rng.random(GRAD_BATCH) < 0.5).astype(np.float64)
        w, out = rng.standard_normal(d) * 0.01, np.empty(d)
        workspace = K.SparseWorkspace(d)
        best = compare({
            "sparse": partial(K.sparse_logreg_grad, indptr, indices, data, labels, w,
                              workspace=workspace),
            "dense": partial(K.logreg_loss_grad, X, labels, w, out=out)}, rounds=ROUNDS)
        sparse_s.append(best["sparse"])
        dense_grad_s.append(best["dense"])

fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
ax.loglog(GRAD_FEATURES, np.array(sparse_s) * 1e6, "o-", label="sparse_logreg_grad (CSR)")
ax.loglog(GRAD_FEATURES, np.array(dense_grad_s) * 1e6, "s-", label="logreg_loss_grad (dense)")
ax.set(xlabel="features d", ylabel="time per gradient (µs)",
       title=f"batch {GRAD_BATCH}, {GRAD_NNZ} non-zeros per row")
ax.legend()
plt.show()

# %% [markdown]
# ## 3. Sparse parameter-server pulls and pushes
#
# `experiments/sparse-vs-dense.toml`: asynchronous SGD through two server shards on 25 GbE,
# 8 workers, click-style data (feature frequencies follow a power law, 20 features per row).
# With `strategy.sparse_comm = true` a worker pulls only the model rows its batch touches
# (at most 32 × 20 = 640) and pushes only their gradient (ids and values); with `false` it
# pulls and pushes whole vectors of d float64s. Each gradient is the same function of the
# model it read (the dense gradient is zero outside the touched rows); only the bytes on
# the wire differ, and with them the timing, hence which model version each worker reads.

# %%
from sim.analysis import load_results, select
from sim.plots import plot_breakdown

ps_dir = cached_sweep(EXPERIMENTS / "sparse-vs-dense.toml", RUNS / "sparse-vs-dense",
                      [override("sweep.workload.features", PS_FEATURES),
                       override("run.iterations", PS_ITERATIONS)])
rows = load_results(ps_dir)
fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
for sparse, marker in ((True, "o"), (False, "s")):
    chosen = select(rows, {"strategy.sparse_comm": sparse}).sort_values("workload.features")
    # comm_s is per worker; each worker computed iterations / workers of the gradients
    ax.loglog(chosen["workload.features"],
              chosen["comm_s"] / chosen["iterations"] * chosen["workers_n"] * 1e6,
              marker + "-", label="sparse pulls and pushes" if sparse else "whole vectors")
ax.set(xlabel="features d", ylabel="communication per gradient (µs)",
       title="Time a worker spends communicating per gradient")
ax.legend()
plt.show()

# %% [markdown]
# The sparse traffic stays flat as the table grows a hundredfold, while whole-vector traffic
# grows with d: at a million features each dense pull and push moves 8 MB per gradient and
# the run is entirely communication-bound. The held-out loss of the same runs against
# simulated time, one panel per table size (log time axis): the same descent, shifted right
# by the dense transfers.

# %%
from sim.analysis import curves, load_runs

runs = load_runs(ps_dir)
fig, axes = plt.subplots(1, len(PS_FEATURES), figsize=(4 * len(PS_FEATURES), 3.8),
                         layout="constrained", sharex=True, squeeze=False)
for ax, d in zip(axes[0], PS_FEATURES, strict=True):
    evals = curves(select(runs, {"workload.features": d}), columns=["strategy.sparse_comm"])
    for _, curve in evals.groupby("path", sort=False):
        sparse = curve["strategy.sparse_comm"].iloc[0]
        shown = curve[curve["time_s"] > 0]
        ax.semilogx(shown["time_s"], shown["loss"], "o-" if sparse else "s--", markersize=3,
                    label="sparse" if sparse else "whole vectors")
    ax.set(title=f"d = {d:,}", xlabel="simulated time (s)")
axes[0, 0].set_ylabel("held-out loss")
axes[0, 0].legend()
plt.show()
show(plot_breakdown([ps_dir], RUNS / "plots"))

# %% [markdown]
# **What to take away.** Sparsity pays twice, in the kernels and on the wire, but only while
# the data really is sparse: CSR loses to BLAS once a share of the entries is non-zero (the
# verdicts printed in section 1 give that share on this machine for memory-bound and
# compute-bound products; the more work each entry of A carries, the earlier BLAS wins),
# and sparse pulls lose their advantage once a batch touches a sizeable share of the model.
