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
MATVEC_N = 500 if QUICK else 2000       # the m x n matrix of the CSR-vs-dense matvec
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
# ## 1. CSR vs dense matrix-vector product as density falls
#
# `sim.kernels.csr_matvec` against `sim.kernels.dense_matvec` (both C99, vectorised) on the
# same random matrices (`sim.bench.kernels.random_csr`), timed in alternating rounds of one
# run by `sim.bench.timing.compare`, as `python -m sim bench kernels` does. A dense row
# streams 8 bytes per entry; CSR reads 16 bytes per non-zero (value and int64 column index)
# plus a gathered x entry. By memory traffic alone CSR should stop paying off near density
# 1/2; the random gathers of x cost extra, the dense kernel's streaming is cheap. The
# notebook prints where the crossover falls on this machine (interpolated between the
# densities measured).

# %%
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
from threadpoolctl import threadpool_limits

from sim import kernels as K
from sim.bench.kernels import random_csr
from sim.bench.timing import compare

DENSITIES = np.geomspace(1e-3, 1.0, DENSITY_POINTS)
rng = np.random.default_rng(0)
x = rng.standard_normal(MATVEC_N)
y = np.empty(MATVEC_N)
csr_s, dense_s = [], []
with threadpool_limits(limits=1, user_api="blas"):
    for density in DENSITIES:
        indptr, indices, data = random_csr(rng, MATVEC_N, MATVEC_N, float(density))
        A = np.zeros((MATVEC_N, MATVEC_N))
        A[np.repeat(np.arange(MATVEC_N), np.diff(indptr)), indices] = data
        best = compare({"csr": partial(K.csr_matvec, indptr, indices, data, x, out=y),
                        "dense": partial(K.dense_matvec, A, x, out=y)}, rounds=ROUNDS)
        csr_s.append(best["csr"])
        dense_s.append(best["dense"])
csr_s, dense_s = np.array(csr_s), np.array(dense_s)
gain = np.log(dense_s / csr_s)  # > 0 where CSR is faster
slower = np.flatnonzero(gain <= 0)
crossover = None
if slower.size and slower[0] > 0:  # log-linear between the last faster and first slower point
    k = slower[0]
    share = gain[k - 1] / (gain[k - 1] - gain[k])
    crossover = float(np.exp(np.log(DENSITIES[k - 1])
                             + share * np.log(DENSITIES[k] / DENSITIES[k - 1])))
elif slower.size:
    crossover = float(DENSITIES[0])

fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
ax_t.loglog(DENSITIES, csr_s * 1e6, "o-", label="csr_matvec")
ax_t.loglog(DENSITIES, dense_s * 1e6, "s-", label="dense_matvec")
ax_t.set(xlabel="density (non-zeros / entries)", ylabel="time per product (µs)",
         title=f"{MATVEC_N} × {MATVEC_N}, float64")
ax_t.legend()
ax_r.semilogx(DENSITIES, dense_s / csr_s, "o-", color="C2")
ax_r.axhline(1, color="0.5", linewidth=0.8)
ax_r.set(xlabel="density", ylabel="dense time / CSR time (×)", yscale="log",
         title="CSR's advantage")
if crossover is not None:
    for ax in (ax_t, ax_r):
        ax.axvline(crossover, color="0.5", linestyle="--", linewidth=0.8)
plt.show()
print(f"CSR is no longer faster from density ~{crossover:.3g}" if crossover is not None
      else "CSR stayed faster at every density measured")

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
# the data really is sparse: CSR loses to a dense kernel once a sizeable share of the
# entries is non-zero, and sparse pulls lose their advantage once a batch touches a sizeable
# share of the model.
