# %% [markdown]
# # 07 · Model parallelism: pipeline stages and tensor shards
#
# Every other notebook replicates the model on each worker (data parallelism). Here the
# model itself is split: its layers over **pipeline stages** (GPipe, Huang et al. 2019;
# PipeDream-Flush or "1F1B", Narayanan et al. 2021), or each layer's matrices over **tensor
# shards** (Megatron-LM, Shoeybi et al. 2019: a column-parallel layer, then a row-parallel
# one, one allreduce of the activations forward and one of their gradients backward). The
# numerics are real (the stages run the C kernels on real microbatches); the time is the
# simulated cluster's.
#
# Two experiments:
#
# 1. `experiments/pipeline-bubble.toml`: p stages x m microbatches x schedule. With
#    balanced stages and free communication a step takes (m + p - 1) microbatch-times, so
#    the stages idle a fraction (p - 1)/(m + p - 1) of it: the bubble. GPipe stashes the
#    activations of all m microbatches; 1F1B stage i at most min(p - i, m).
# 2. `experiments/data-vs-model-parallel.toml`: one MLP on 8 ranks (2 hosts of 4) as data
#    parallel (DP 8), pipelined (PP 8, DP 2 x PP 4), tensor-split (TP 8, DP 2 x TP 4) and
#    Megatron's layout (TP 4 inside a host x PP 2 across hosts), over three fabrics and two
#    widths: time per sample and memory per rank.

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "07-model-parallel"
STAGES = [2, 4] if QUICK else [2, 4, 8]
MICROBATCHES = [1, 4, 16] if QUICK else [1, 2, 4, 8, 16, 32]
SCHEDULES = ["gpipe", "1f1b"]
WIDTH = 64 if QUICK else 512        # of every layer in the bubble experiment
FABRICS = ["eth-10g", "ib-hdr"] if QUICK else ["eth-10g", "eth-100g", "ib-hdr"]
WIDTHS = [256, 4096] if QUICK else [256, 1024, 4096, 16384]  # layout experiment (timing only)
GANTT = {"parallel.pipeline": 4, "parallel.microbatches": 4}   # the runs drawn as schedules

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import cached_sweep, override, setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %% [markdown]
# ## 1. The bubble against its closed form
#
# An 8-layer MLP whose layers all cost the same (input, hidden and output widths equal), so
# p stages of 8 / p layers each are balanced by construction; one slow core per stage and
# IB HDR between them, so a microbatch's compute dwarfs its activation message. Dotted: the
# closed form (p - 1)/(m + p - 1).

# %%
from sim.analysis import pipeline_bubble
from sim.plots import plot_bubble

layer = [WIDTH] * 7
bubble_dir = cached_sweep(EXPERIMENTS / "pipeline-bubble.toml", RUNS / "pipeline-bubble",
                          [override("workload.features", WIDTH),
                           override("workload.classes", WIDTH),
                           override("workload.hidden", layer),
                           override("sweep.parallel.pipeline", STAGES),
                           override("sweep.parallel.microbatches", MICROBATCHES),
                           override("sweep.parallel.schedule", SCHEDULES)])
show(plot_bubble(bubble_dir, RUNS / "plots"))
bubble = pipeline_bubble(bubble_dir)
bubble.pivot_table(index=["pipeline", "microbatches"], columns="schedule",
                   values=["bubble_fraction", "closed_form"]).round(3)

# %% [markdown]
# Reading it: the measured bubble follows (p - 1)/(m + p - 1) for both schedules: 1F1B
# reorders the passes but does not shorten the step (Narayanan et al. 2021). It sits a
# little above the closed form, more so for many microbatches. The first stage is lighter
# than the others (the first layer computes no input gradient), and the slowest stage sets
# the pace, so the others idle a little more; each microbatch also pays a per-pass overhead
# and an activation message. In the full run the excess is at most 0.04 (p = 2 and 4 at
# m = 32: 0.068 against 0.030, 0.125 against 0.086). The `reference` column is the schedule
# evaluated at each stage's own measured pass times with free messages
# (`sim.training.stage_schedule.evaluate`): it accounts for nearly all of the excess
# (0.0683 against a measured 0.0685 at p = 2, m = 32); the rest is the activation messages.
#
# The memory panel is the other half of the story: GPipe's stash (all m microbatches of
# batch / m rows) is the whole batch's activations at every m; 1F1B's stage i holds at most
# min(p - i, m) of them, so its peak shrinks as m grows. The parameters, gradients and
# momentum are the same for both and dominate this small model.

# %%
excess = bubble.groupby("schedule")["excess"].agg(["min", "max"])
print("measured minus closed form, by schedule:")
print(excess.round(4).to_string())
left = (bubble["bubble_fraction"] - bubble["reference"]).abs().max()
print(f"\nmeasured minus reference (stages' own pass times): at most {left:.4f}")
peak = bubble.pivot_table(index="pipeline", columns="schedule", values="peak_memory_bytes",
                          aggfunc="min") / 2**20
print("\nsmallest peak memory per rank over m (MiB):")
print(peak.round(2).to_string())

# %% [markdown]
# ## 2. The schedules, drawn
#
# One step of p = 4 stages and m = 4 microbatches from each run's `trace.json`: a row per
# rank, forward passes blue and backward orange, labelled by microbatch. GPipe runs every
# forward, then every backward; 1F1B starts backward passes as soon as the last stage can,
# which is why it stashes fewer microbatches, in the same step time.

# %%
from sim.analysis import load_runs, select
from sim.plots import plot_schedule

runs = load_runs(bubble_dir)
for schedule in SCHEDULES:
    picked = select(runs, {**GANTT, "parallel.schedule": schedule})
    show(plot_schedule(list(picked["path"]), RUNS / "plots" / schedule))

# %% [markdown]
# ## 3. Data or model parallel?
#
# The same 8-layer MLP on 8 V100-class ranks, 4 to a host. Each layout is a coupled sweep
# value `[D, p, t, m]` (`cluster.workers`, `parallel.pipeline`, `parallel.tensor`,
# `parallel.microbatches`), crossed with fabric and width. The figure puts each run's peak
# memory per rank against its time per sample (the dashed line is the device's 32 GiB).

# %%
from sim.analysis import fastest_layouts, layouts
from sim.plots import plot_memory_time

iterations = ["run.iterations=2", "run.eval_every=2"] if QUICK else []
layout_dir = cached_sweep(EXPERIMENTS / "data-vs-model-parallel.toml",
                          RUNS / "data-vs-model-parallel",
                          [override("sweep.cluster.fabric", FABRICS),
                           override("sweep.workload.hidden", [[w] * 7 for w in WIDTHS]),
                           *iterations])
show(plot_memory_time(layout_dir, RUNS / "plots"))
table = layouts(layout_dir)
(table.pivot_table(index=["width", "layout"], columns="fabric", values="time_per_sample_s")
 * 1e6).round(2)

# %% [markdown]
# Time per sample in µs (lower is better). Memory per rank, and whether it fits:

# %%
table.pivot_table(index=["width", "layout"], values=["peak_memory_bytes", "memory_fits"],
                  aggfunc={"peak_memory_bytes": "max", "memory_fits": "all"})

# %% [markdown]
# Widths too large to train here in float64 on a laptop: their memory per rank from the
# parallelism plan alone (`sim.training.parallel_plan.build_plan`, what `run.memory =
# "refuse"` checks), in GiB, against the V100's 32 GiB.

# %%
import pandas as pd

from sim.training.parallel_plan import build_plan
from sim.training.validator import load_config

LAYOUTS = {"DP 8": (8, 1, 1, 1), "PP 8": (1, 8, 1, 8), "DP 2 x PP 4": (2, 4, 1, 8),
           "TP 8": (1, 1, 8, 1), "DP 2 x TP 4": (2, 1, 4, 1), "TP 4 x PP 2": (1, 2, 4, 8)}
planned = {}
for width in [1024, 4096, 16384, 32768]:
    for name, (d, p, t, m) in LAYOUTS.items():
        config = load_config(EXPERIMENTS / "data-vs-model-parallel.toml", [
            override("workload.hidden", [width] * 7), override("cluster.workers", d),
            override("parallel.pipeline", p), override("parallel.tensor", t),
            override("parallel.microbatches", m)])
        planned[(width, name)] = build_plan(config).peak_memory_bytes / 2**30
planned = pd.Series(planned).unstack()
marks = planned.le(32).map(lambda fits: "" if fits else " (does not fit)")
print((planned.round(2).astype(str) + marks).to_string())

# %% [markdown]
# ## 4. The crossover
#
# For each width and fabric, the fastest layout that fits in memory and the runner-up:

# %%
best = fastest_layouts(table)
print(best.to_string(index=False))
for width, group in best.groupby("width"):
    winners = sorted(set(group["fastest"]))
    print(f"width {width}: fastest {' / '.join(winners)} on "
          f"{', '.join(group['fabric'])}")

# %% [markdown]
# What the full run finds (`python -m sim sweep data-vs-model-parallel`: widths 256 to
# 16384, 1,024 rows a replica per step, pipelines in 8 microbatches of 128, timing only,
# each host's 4 GPUs joined by NVLink 2), in µs per sample:
#
# | width | 10 GbE | 100 GbE | IB HDR |
# |---|---|---|---|
# | 256 | DP 2 x TP 4, 0.51 | DP 8, 0.095 | DP 8, 0.055 |
# | 1024 | DP 2 x TP 4, 6.1 | DP 2 x TP 4, 1.17 | DP 8, 0.77 |
# | 4096 | TP 4 x PP 2, 57 | TP 4 x PP 2, 10.8 | TP 4 x PP 2, 9.1 |
# | 16384 | TP 4 x PP 2, 243 | TP 4 x PP 2, 118 | TP 4 x PP 2, 112 |
#
# - **Data parallelism wins while its allreduce is cheap**: small models on fast fabrics
#   (width 256 on 100 GbE and IB HDR, 1024 on IB HDR).
# - **Then tensor parallelism inside a host**: the winners keep a tensor group of 4 on one
#   host's NVLink and replicate it (DP 2 x TP 4, up to width 1024) or, from 4096 on every
#   fabric, pipeline two of them across the hosts (TP 4 x PP 2, Megatron's layout: the rule
#   of thumb of Narayanan et al. 2021, tensor parallelism inside a node, pipelining across).
# - **Microbatches of 128 rows are compute-bound** on a V100: re-reading a rank's weights in
#   each is mostly hidden under its FLOPs (the GPU presets take the roofline's max of the
#   two), so pipelining costs little beyond its bubble; PP 8 alone never wins (its bubble of
#   0.47 at m = 8).
# - **Memory**: a DP rank holds the whole model's weights, gradients and momentum, so it is
#   the first to run out: at width 16384 it needs 37 GiB and no longer fits the V100's 32,
#   where a TP 4 x PP 2 rank needs 4.6 GiB (the plan's bytes above extrapolate it further).
#
# The microbatch size matters as much as the fabric: with 8-row microbatches
# (`--set workload.batch=64`) every pass over a wide layer is memory-bound, pipelines pay
# for re-reading their weights 8 times a step, and TP 8 wins at the largest widths; see
# [Model parallelism](../docs/explanation/model-parallelism.md).
