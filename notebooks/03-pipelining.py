# %% [markdown]
# # 03 · Pipelining: overlapping communication with backprop
#
# Backprop produces the last layer's gradient first. Instead of waiting for the whole
# gradient, a worker can start reducing each layer as soon as it is ready (wait-free
# backpropagation, WFBP: Zhang et al., *Poseidon*, USENIX ATC 2017), or fuse layers into
# buckets of a fixed size (PyTorch DDP: Li et al., *PyTorch Distributed*, VLDB 2020, 25 MB
# by default). With compute time C and communication time M per step, the best overlap can
# do is max(C, M) instead of C + M: a speedup of at most (C + M) / max(C, M) ≤ 2, reached
# only when M ≈ C.
#
# The runs are timing-only: ResNet-50's 54 layers (FLOPs and float32 gradient sizes of the
# real network, `sim.workloads.timing_profiles`) on 8 A100-class workers with ring allreduce; the
# batch sets C, the fabric sets M.

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "03-pipelining"
FABRICS = ["ib-hdr", "eth-10g"] if QUICK else ["ib-hdr", "roce-100g", "eth-100g", "eth-25g",
                                               "eth-10g"]
BATCHES = [4, 64] if QUICK else [1, 4, 16, 64, 256]     # per worker: sets C
MODES = ["none", "wfbp", "bucket"]
BUCKETS = [1e5, 4e6, 1e8] if QUICK else [1e4, 1e5, 1e6, 4e6, 25e6, 1e8, 2e8]   # bytes
BUCKET_FABRICS = ["ib-hdr", "eth-10g"] if QUICK else ["ib-hdr", "eth-100g", "eth-10g"]
GANTT = {"cluster.fabric": "ib-hdr", "workload.batch": 4}   # the run drawn as a timeline

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import cached_sweep, override, setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %% [markdown]
# ## 1. Speedup against the compute/communication ratio
#
# `experiments/pipelining.toml`, swept over mode × batch × fabric. Each point is one run;
# x is its M / C (the run's own messages: WFBP sends 54 smaller allreduces, each paying
# the ring's 2 (p−1) α), y its speedup over `none` at the same batch and fabric. The dashed
# curve is the ideal (C + M) / max(C, M).

# %%
import matplotlib.pyplot as plt
import numpy as np

from sim.plots import plot_buckets, plot_gantt, plot_pipelining

modes_dir = cached_sweep(EXPERIMENTS / "pipelining.toml", RUNS / "pipelining",
                         [override("sweep.strategy.pipelining", MODES),
                          override("sweep.workload.batch", BATCHES),
                          override("sweep.cluster.fabric", FABRICS)])
show(plot_pipelining(modes_dir, RUNS / "plots"))

# %% [markdown]
# Reading it: far left (M ≪ C, a big batch on Infiniband) there is little communication to
# hide; far right (M ≫ C, 10 GbE) there is little compute to hide it behind. The gain
# peaks near M / C ≈ 1. WFBP can even *lose* on a slow network: it pays α for each of the
# 54 layers, where one fused allreduce pays it once; buckets keep most of the overlap while
# sending a few large messages.
#
# ## 2. What overlap buys on each fabric
#
# The same results by fabric (rows, fastest network first) and batch (columns): left the
# ratio M / C without pipelining, right the speedup of DDP-style buckets over none.

# %%
from matplotlib.colors import LogNorm

from sim.analysis import load_results, table

rows = load_results(modes_dir)


def by_fabric_and_batch(mode: str, column: str) -> np.ndarray:
    """COLUMN of the MODE runs: a row per fabric (FABRICS), a column per batch (BATCHES)."""
    grid = table(rows, "cluster.fabric", "workload.batch", column,
                 where={"strategy.pipelining": mode})
    return grid.reindex(index=FABRICS, columns=BATCHES).to_numpy(dtype=float)


ratio = by_fabric_and_batch("none", "pipelining_ratio")
speedup = by_fabric_and_batch("bucket", "speedup_vs_none")
fig, axes = plt.subplots(1, 2, figsize=(11, 0.9 + 0.55 * len(FABRICS)), layout="constrained")
for ax, values, title, fmt, norm in (
        (axes[0], ratio, "M / C without pipelining", "{:.2g}", LogNorm()),
        (axes[1], speedup, "speedup of bucket over none (×)", "{:.2f}", None)):
    image = ax.imshow(values, cmap="viridis", aspect="auto", norm=norm)
    shade = image.norm(values)
    ax.set_xticks(range(len(BATCHES)), [str(b) for b in BATCHES])
    ax.set_yticks(range(len(FABRICS)), FABRICS)
    ax.set(xlabel="batch per worker", title=title)
    ax.grid(False)
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, fmt.format(v) if v < 100 else f"{v:.0f}", ha="center", va="center",
                color="white" if shade[i, j] < 0.7 else "black", fontsize=8)
    fig.colorbar(image, ax=ax)
plt.show()

# %% [markdown]
# ## 3. The overlap on a timeline
#
# Two steps without pipelining and with WFBP at the same batch and fabric (`GANTT`), drawn by
# `sim.plots.plot_gantt` from the runs' `trace.json` (open that file in Perfetto to zoom in;
# it also has a track per worker for the communication that overlaps compute, which these
# timelines leave out). Without pipelining the whole allreduce (orange) follows backprop;
# with WFBP the layers' allreduces run during backprop, and only the part that outlasts it
# is left, as waiting (grey). The subtitle's model and data set are the config's unused
# defaults: a timing-only run takes its costs from the ResNet-50 profile.

# %%
from sim.analysis import select

picked = select(rows, {**GANTT, "strategy.pipelining": ["none", "wfbp"]})
for _, row in picked.iterrows():
    print(f"{row['strategy.pipelining']:>5}: {row['iter_s'] * 1e3:.2f} ms per step, "
          f"exposed communication {row['exposed_comm_s'] * 1e3:.2f} ms")
show(plot_gantt(list(picked["path"]), RUNS / "plots", window_s=2.2 * picked["iter_s"].max()))

# %% [markdown]
# ## 4. Bucket size
#
# `experiments/pipelining-buckets.toml`: batch 32 with DDP-style buckets of several sizes.
# A bucket closes once it holds `bucket_bytes` and holds at least one layer, so buckets
# smaller than the layers are WFBP (one allreduce per layer, 54 per step, each paying the
# ring's 2 (p−1) α), and a bucket bigger than the model is no pipelining at all.
#
# - Fast fabrics (M ≪ C at this batch): everything but the last bucket hides behind
#   backprop, so small buckets are best and the curve stays flat until the buckets grow so
#   big that the last one takes long.
# - 10 GbE (M > C): the α of 54 allreduces counts, and fewer, larger buckets win; the
#   optimum moves to tens of megabytes, near DDP's 25 MB default.

# %%
buckets_dir = cached_sweep(EXPERIMENTS / "pipelining-buckets.toml", RUNS / "buckets",
                           [override("sweep.strategy.bucket_bytes", BUCKETS),
                            override("sweep.cluster.fabric", BUCKET_FABRICS)])
show(plot_buckets(buckets_dir, RUNS / "plots"))
bucket_rows = load_results(buckets_dir)
for fab in BUCKET_FABRICS:
    on_fabric = select(bucket_rows, {"cluster.fabric": fab})
    best = on_fabric["iter_s"].min()
    near = on_fabric.loc[on_fabric["iter_s"] <= 1.02 * best, "strategy.bucket_bytes"]
    print(f"{fab:>8}: {best * 1e3:6.2f} ms per step at best; buckets within 2% of it: "
          f"{near.min():.3g} to {near.max():.3g} B")

# %% [markdown]
# **What to take away.** Overlap is worth at most 2× and only when communication and
# compute are balanced: a fast fabric with large batches has nothing left to hide, a slow
# fabric with small batches cannot hide it. Bucketing is the robust choice: it keeps most of
# WFBP's overlap while paying the per-message latency a handful of times, and its size
# should grow with the fabric's α.
