# %% [markdown]
# # 08 · Embedding tables: parameter servers, allreduce or all-to-all?
#
# Recommendation models are where parameter servers live. A Wide & Deep model (Cheng et al.
# 2016) has one embedding table per categorical field; a batch touches a few thousand of
# their rows, so a worker can pull just those rows from the server shards that own them and
# push back their gradients (TensorFlow's sparse lookups on partitioned variables). Which
# rows a batch touches follows a power law, so a few hot rows load the shard that holds them.
# The alternatives: replicate the tables on every worker and allreduce their gradients
# (MultiWorkerMirroredStrategy; or allgather only the touched rows, as Horovod does with
# sparse gradients), or split the tables over the workers and exchange pooled embeddings
# with an all-to-all (DLRM, Naumov et al. 2019; TorchRec).
#
# `experiments/wide-deep.toml`: 4 workers, 8 tables of 20,000 x 16 (and a wide part of
# 16,384 crossed features), 4 server shards for the parameter servers; ten layouts x three
# power laws (row i of a field drawn with probability ~ i^-s, s = 0.6, 1.0, 1.2) x two
# fabrics, every run on the same samples. The numbers are real (C kernels, real Adagrad on
# the rows); the bytes follow the ids each batch really touches.
#
# Four questions:
#
# 1. When does a parameter server save network compared with allreduce?
# 2. What do hot keys do to a range-sharded table?
# 3. What does a cache of the hottest 1% of rows buy?
# 4. Where does the all-to-all win?

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "08-embeddings"
# each data set's exponent with its target loss (what bsp reaches after about half its
# samples: each exponent plants its own model)
DATA = [[0.6, 0.64], [1.2, 0.62]] if QUICK else [[0.6, 0.637], [1.0, 0.627], [1.2, 0.608]]
FABRICS = ["eth-10g"] if QUICK else ["eth-10g", "ib-hdr"]
SMALL = ([f"workload.{key}={value}" for key, value in
          (("vocab", 2000), ("samples", 4000), ("cross_buckets", 1024), ("batch", 64))]
         + ["run.samples=2560", "run.eval_every=5", "embeddings.cache_rows=160"]
         if QUICK else [])

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import cached_sweep, override, placements, setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %% [markdown]
# ## The sweep
#
# Ten layouts, each a coupled sweep value (placement, strategy, sharding, cache, allgather):
# parameter servers with rows placed by hash, by range, as whole tables or by columns, and
# with a cache of each worker's hottest 1% of rows (refreshed every `strategy.staleness` + 1
# = 4 steps); replicated tables, allreduced whole or with their touched rows allgathered;
# tables split over the workers (by row hash or row range) with an all-to-all.

# %%
from sim.plots import plot_placements

sweep_dir = cached_sweep(EXPERIMENTS / "wide-deep.toml", RUNS / "wide-deep",
                         [override("sweep.workload.zipf_exponent,run.target_loss", DATA),
                          override("sweep.cluster.fabric", FABRICS), *SMALL])
show(plot_placements(sweep_dir, RUNS / "plots"))
rows = placements(sweep_dir)
rows["MB_per_step"] = rows["bytes_per_step"] / 1e6
rows["step_ms"] = rows["step_s"] * 1e3

# %% [markdown]
# ## 1. When does a parameter server save network?
#
# Bytes one worker moves a step (pull plus push), by layout and power law (on the first
# fabric: bytes do not depend on the fabric):

# %%
first = rows[rows["fabric"] == FABRICS[0]]
first.pivot_table(index="layout", columns="zipf", values="MB_per_step").round(3)

# %%
touched = first.pivot_table(index="zipf", values="unique_ids_per_step", aggfunc="mean")
print("distinct rows a worker's batch touches (all tables):")
print(touched.round(0).to_string())
dense = first[first["layout"] == "replicated, allreduce"]["bytes_per_step"].mean()
ps = first[first["layout"] == "PS row-hash"]["bytes_per_step"]
print(f"\nreplicated allreduce moves {dense / 1e6:.2f} MB a step whatever the batch; the "
      f"parameter servers {ps.min() / 1e6:.2f}-{ps.max() / 1e6:.2f} MB "
      f"({dense / ps.max():.0f}-{dense / ps.min():.0f}x less)")

# %% [markdown]
# Reading it: a parameter server moves what the batch touches, the allreduce moves the whole
# tables. The saving is the tables' rows over the distinct rows a step touches: large for big
# tables and small batches, and it grows with the power law (hotter ids, fewer distinct rows).
# In the full run (`python -m sim sweep wide-deep`) a worker's 256 rows touch 5,577, 4,176 and
# 3,026 distinct rows at s = 0.6, 1.0 and 1.2 (all nine tables), so a row-hash parameter
# server moves 1.29, 0.92 and 0.65 MB a step against the allreduce's 20.7 MB (16 to 32x
# less), and its step takes 2.00, 1.68 and 1.46 ms on 10 GbE against 27.4 ms. On IB HDR the
# compute (0.8 ms a step here) dominates: 0.85-0.88 ms against 2.10 ms. Allgathering the
# touched rows (Horovod) moves 2.3 to 1.05 MB: every worker receives every other worker's
# rows, so it grows with the number of workers where a server pull does not.

# %% [markdown]
# ## 2. Hot keys on a range-sharded table
#
# Rows served by the busiest shard over the mean shard's, over the run (all-to-all: ids each
# owner looked up), and the step time it costs on each fabric (ms):

# %%
first.pivot_table(index="layout", columns="zipf", values="shard_load_max_over_mean").round(2)

# %%
rows.pivot_table(index="layout", columns=["fabric", "zipf"], values="step_ms").round(3)

# %% [markdown]
# Reading it: ids are drawn by rank, and rank 1 is row 0, so a range-sharded table puts
# every hot row on its first shard. The hotter the ids, the more of a batch's distinct rows
# fall on that shard: in the full run it serves 1.83, 2.29 and 2.30x the mean shard's rows at
# s = 0.6, 1.0 and 1.2, its link and queue set the step, and the step takes 1.5 to 1.7x the
# row-hash one on 10 GbE (3.05, 2.91, 2.35 ms against 2.00, 1.68, 1.46); on IB HDR, where
# the wire is a small part of the step, 4-7% longer. Hashing spreads the hot rows (1.01: only
# sampling noise). Whole tables per shard (9 tables on 4 shards, the wide part unlike the
# others) load the busiest shard 1.9-2.5x; columns split every row, so every shard sees every
# id, and each id travels to every shard (1.3-1.6x, and 14% more bytes than row-hash).

# %% [markdown]
# ## 3. A cache of the hottest 1% of rows
#
# Each worker keeps the 1,600 rows (1% of the tables) that occur most often in its own
# training rows and pulls them only every fourth step. Hit rate (distinct ids of a batch
# found in the cache), bytes, step time and time to the target loss against the same
# sharding without a cache:

# %%
cached = rows[rows["layout"].str.startswith("PS row-")].copy()
cached["cache"] = cached["cache_rows"] > 0
cached["sharding"] = cached["sharding"].astype(str)
cached.pivot_table(index=["sharding", "cache"], columns=["fabric", "zipf"],
                   values=["cache_hit_rate", "MB_per_step", "step_ms", "time_to_target_s"]
                   ).round(4)

# %% [markdown]
# Reading it: the cache is hit by 6.5%, 15% and 22% of a batch's distinct ids at s = 0.6,
# 1.0 and 1.2 (full run): far more than its 1% of the rows, because the hottest rows are in
# almost every batch, and more so the hotter the law; but a batch's distinct rows are mostly
# in the tail, the wide part's crossed ids (30%, 40% and 48% of the distinct ids) are
# never hot, and every fourth pull refreshes the cache. So it saves 1-8% of the bytes and
# 1-7% of the step (row-range at s = 1.2 on 10 GbE: 2.35 to 2.19 ms), and takes little of
# the hot shard's load (2.29 to 2.13 at s = 1.0). The price is staleness: a cached row is
# read up to 3 updates old; here it moved the final loss by at most 3e-4 and the time to
# target by the step time's saving.

# %% [markdown]
# ## 4. Where does the all-to-all win?
#
# The fastest layout per fabric and power law, and the runner-up (step time, ms):

# %%
best = []
for (fabric, zipf), group in rows.groupby(["fabric", "zipf"]):
    ranked = group.sort_values("step_s")
    best.append({"fabric": fabric, "zipf": zipf, "fastest": ranked.iloc[0]["layout"],
                 "ms": round(ranked.iloc[0]["step_ms"], 3),
                 "runner_up": ranked.iloc[1]["layout"],
                 "runner_up_ms": round(ranked.iloc[1]["step_ms"], 3)})
import pandas as pd  # noqa: E402

pd.DataFrame(best)

# %% [markdown]
# Reading it: the all-to-all moves pooled vectors (a worker's batch x fields x dim), which do
# not depend on how many distinct rows the batch touches or on how hot they are, and no worker
# waits on a server: each step is two exchanges among the workers and an allreduce of the
# small dense part. With whole tables per worker (DLRM's) that is 0.49 MB a worker a step
# here, and it is the fastest layout at s = 0.6 and 1.0: on 10 GbE 1.55 ms against the
# parameter servers' 2.00 and 1.64-1.68, on IB HDR 0.856 ms against 0.861-0.88. At s = 1.2
# the batch touches so few distinct rows that the parameter servers pull less than the
# pooled vectors (0.60-0.65 MB) and win: 1.41-1.46 ms against 1.55 on 10 GbE, 0.850-0.852
# against 0.856 on IB HDR. Row-wise all-to-all (each owner sends partial sums of every
# field: TorchRec's row-wise sharding) moves 1.68 MB and is slower than both. Replicated
# tables lose by the tables' size on the slow fabric (27.4 ms a step).
