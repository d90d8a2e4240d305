# %% [markdown]
# # 02 · Synchronous, asynchronous and stale-synchronous SGD
#
# Loss against simulated time and against updates for the parameter-server strategies:
#
# - **bsp-ps**: synchronous; every step waits for all N gradients (push, barrier, pull).
# - **backup**: synchronous with b backup workers; each step uses the first N − b gradients;
#   a late worker finishes its gradient, which is dropped on arrival as stale, then pulls
#   the new model (Chen et al., *Revisiting distributed synchronous SGD*, 2016).
# - **asp**: asynchronous (Downpour, Dean et al., NIPS 2012); nobody waits, gradients are
#   computed on stale models.
# - **ssp**: stale synchronous parallel (Ho et al., *More effective distributed ML via a stale
#   synchronous parallel parameter server*, NIPS 2013); a worker may run at most s clocks
#   ahead of the slowest, and reads its local cache while it is fresh enough for that bound
#   (pulling only when not: `pulls_per_update` in the summaries).
#
# All runs come from the experiment configs in `experiments/`, run as sweeps through
# `sim.sweep.run_sweep`; figures are drawn by `sim.plots` from the result files.

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "02-sync-async-ssp"
SAMPLES = 10240 if QUICK else 51200      # sync-async-ssp.toml: training samples per run
EVAL_EVERY = 4                           # held-out loss every 4 updates: resolves the target
SEEDS = [1] if QUICK else [1, 2, 3]      # repeats of every point (same seeds for every kind)
KINDS = ["bsp-ps", "backup", "asp", "ssp"]
BACKUP = 2                               # backup workers of the 16 (no fixed stragglers)
STALENESS = [0, 2, 8] if QUICK else [0, 1, 2, 4, 8, 16]   # the ssp bounds s compared
STRAGGLER_SAMPLES = 30720 if QUICK else 153600           # stragglers.toml
STRAGGLER_EVAL_EVERY = 3
TARGET_SLACK = 1.05      # target loss: 5% above the worst best-loss among a seed's runs

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import cached_sweep, override, setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %% [markdown]
# ## 1. Four strategies on one cluster
#
# `experiments/sync-async-ssp.toml`: softmax regression on a 10-class Gaussian mixture,
# 16 workers with shifted-exponential compute-time noise (a fixed minimum plus an
# exponential tail, Dutta et al. 2018), two parameter-server shards on 25 GbE. An *update*
# is what changes the model of record: one aggregated step of N (bsp-ps) or N − b (backup)
# gradients, or one gradient (asp, ssp). asp applies each gradient at lr / N, so per
# gradient every strategy takes the same step. Every run stops after the same number of
# training samples (`run.samples`): equal work, so a synchronous step counts N gradients.

# %%
import matplotlib.pyplot as plt
import numpy as np

from sim.plots import plot_breakdown, plot_loss_time, plot_loss_updates, plot_staleness

common = [override("run.samples", SAMPLES), override("run.eval_every", EVAL_EVERY),
          override("run.seeds", SEEDS)]
kinds_dir = cached_sweep(EXPERIMENTS / "sync-async-ssp.toml", RUNS / "kinds",
                         [override("sweep.strategy.kind", KINDS),
                          override("strategy.backup", BACKUP), *common])
show(plot_loss_time([kinds_dir], RUNS / "plots"))
show(plot_loss_updates([kinds_dir], RUNS / "plots"))

# %% [markdown]
# The same runs as numbers: each strategy's final held-out loss and simulated time to the
# target loss (`run.target_loss` = 1.2), as the mean over the seeds and the half-width of its
# 95% confidence interval (Student's t; `_n`: the seeds that reached the target). With one
# seed (the quick form) there is no interval.

# %%
from sim.analysis import by_config

by_config(kinds_dir, values=("final_loss", "time_to_target_s"))

# %% [markdown]
# Per update the synchronous strategies look far better, but each of their updates averages
# 16 (or 14) gradients. The same runs on logarithmic axes, against simulated time and against
# the *samples* processed (rows of data turned into gradients, the fair unit across
# strategies); each seed is one line.

# %%
import pandas as pd

from sim.analysis import curves, load_runs

COLOURS: dict[str, str] = {}


def colour(name: str) -> str:
    """One colour per strategy label, the same in every figure of this notebook."""
    return COLOURS.setdefault(name, f"C{len(COLOURS) % 10}")


def draw_curves(ax, runs: pd.DataFrame, x: str = "time_s") -> None:
    """Held-out loss of each run (a table from load_runs) against X, `time_s` (simulated
    seconds) or `samples` (processed), on a log axis: one line per run, one colour per
    strategy label."""
    seen = set()
    for _, curve in curves(runs).groupby("path", sort=False):
        name = curve["label"].iloc[0]
        shown = curve[curve[x] > 0]
        ax.semilogx(shown[x], shown["loss"], color=colour(name), alpha=0.75,
                    label=None if name in seen else name)
        seen.add(name)
    ax.set_xlabel("simulated time (s)" if x == "time_s" else "samples processed")


kinds_runs = load_runs(kinds_dir)
fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained", sharey=True)
draw_curves(axes[0], kinds_runs, "time_s")
draw_curves(axes[1], kinds_runs, "samples")
axes[0].set_ylabel("held-out loss")
axes[1].legend()
plt.show()

# %% [markdown]
# Per sample the curves nearly coincide: with lr / N per gradient, staleness costs this
# convex problem little. Per second of simulated time the asynchronous strategies are far
# ahead, because their workers never wait for a barrier and the two servers' links are never
# hit by all 16 workers at once. Where each worker's time goes:

# %%
show(plot_breakdown([kinds_dir], RUNS / "plots"))

# %% [markdown]
# ## 2. Staleness
#
# The staleness of an applied update is how many model versions the server applied between
# the worker's pull and its push. Under asp it centres near N − 1 (the other workers' pushes
# land in between); the synchronous strategies are never stale. ssp bounds the *clock*
# difference, not the version difference, so with 16 workers even s = 0 lets a gradient be
# up to N − 1 versions stale.

# %%
show(plot_staleness([kinds_dir], RUNS / "plots"))

# %% [markdown]
# ### The ssp bound s
#
# The same cluster under ssp for several s. s = 0 makes every worker wait for the slowest
# each clock (but, unlike bsp-ps, updates are still applied one gradient at a time); a
# large s is asp.

# %%
from sim.analysis import load_results

ssp_dir = cached_sweep(EXPERIMENTS / "sync-async-ssp.toml", RUNS / "ssp",
                       [override("sweep.strategy.kind", ["ssp"]),
                        override("sweep.strategy.staleness", STALENESS), *common])
show(plot_loss_time([ssp_dir], RUNS / "plots" / "ssp"))
show(plot_staleness([ssp_dir], RUNS / "plots" / "ssp"))
for s, rows in load_results(ssp_dir).groupby("strategy.staleness", sort=False):
    waiting = (rows["wait_s"] / rows["sim_time_s"]).mean()
    print(f"s = {s:>2}: staleness mean {rows['staleness_mean'].mean():5.1f}, "
          f"max {rows['staleness_max'].max():3d}; workers wait {waiting:6.1%} "
          "of the time")

# %% [markdown]
# ## 3. Stragglers
#
# `experiments/stragglers.toml`: 16 workers, logistic regression, Infiniband,
# shifted-exponential compute-time noise; in the straggler runs a quarter of the workers (4)
# are also 4× slower on every gradient. Synchronous SGD runs at the pace of its slowest
# worker; with 4 backup workers a step closes without the stragglers, whose late gradients
# are dropped when they arrive; ssp lets the fast workers run s clocks ahead; asp ignores
# the stragglers altogether.

# %%
straggler_dir = cached_sweep(EXPERIMENTS / "stragglers.toml", RUNS / "stragglers",
                             [override("sweep.compute.straggler_fraction", [0.0, 0.25]),
                              override("run.samples", STRAGGLER_SAMPLES),
                              override("run.eval_every", STRAGGLER_EVAL_EVERY),
                              override("run.seeds", SEEDS)])
straggler_runs = load_runs(straggler_dir)
with_stragglers = straggler_runs[straggler_runs["compute.straggler_fraction"] > 0]
without = straggler_runs[straggler_runs["compute.straggler_fraction"] == 0]
fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained", sharey=True, sharex=True)
for ax, runs, title in ((axes[0], without, "no fixed stragglers"),
                        (axes[1], with_stragglers, "4 of 16 workers 4× slower")):
    draw_curves(ax, runs, "time_s")
    ax.set_title(title)
axes[0].set_ylabel("held-out loss")
axes[1].legend()
plt.show()
show(plot_breakdown([straggler_dir], RUNS / "plots" / "stragglers"))

# %% [markdown]
# ## 4. Hardware vs statistical efficiency, in one picture
#
# Time to reach a loss = (time per sample) × (samples needed). The first factor is
# *hardware efficiency* (how fast the cluster turns through data: waiting, communication),
# the second *statistical efficiency* (how much each sample helps, which staleness erodes):
# the decomposition of Zhang and Ré (*DimmWitted*, VLDB 2014) and Hadjis et al. (*Omnivore*,
# 2016). Each point is a strategy, averaged over seeds: x is simulated seconds per sample
# (1 / `samples_per_s`), y the samples processed until the held-out loss first reached the
# target (interpolated between evaluations). The grey diagonals are constant time to target
# (the product of the two): lower-left is faster, and sliding along a diagonal trades one
# efficiency for the other.
#
# The target is set per seed: `TARGET_SLACK` × the worst best-loss among that seed's runs,
# so that every run reaches it.

# %%
from sim.analysis import efficiency, tradeoff

MARKERS = "osD^vP*Xh<>p"


def draw_tradeoff(ax, points: pd.DataFrame, title: str) -> None:
    """One marker per strategy label (a table from tradeoff) and grey diagonals of
    constant time to target."""
    for i, point in enumerate(points.itertuples()):
        ax.scatter(point.s_per_sample, point.samples_to_target, s=55,
                   marker=MARKERS[i % len(MARKERS)], facecolors="none",
                   edgecolors=colour(point.label), linewidths=1.6, label=point.label, zorder=3)
    xs, ys = points["s_per_sample"].to_numpy(), points["samples_to_target"].to_numpy()
    lo, hi = xs.min() / 1.6, xs.max() * 1.6
    for total in np.geomspace((xs * ys).min() / 8, (xs * ys).max() * 8, 10):
        ax.plot([lo, hi], [total / lo, total / hi], color="0.85", linewidth=0.8, zorder=1)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(ys.min() / 1.6, ys.max() * 1.6),
           title=title, xlabel="simulated seconds per sample  (hardware efficiency)")
    ax.legend(fontsize=7.5, loc="upper left")


fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), layout="constrained")
draw_tradeoff(axes[0], tradeoff(efficiency(load_runs(kinds_dir, ssp_dir), slack=TARGET_SLACK)),
              "sync-async-ssp.toml (shifted-exponential noise)")
draw_tradeoff(axes[1], tradeoff(efficiency(with_stragglers, slack=TARGET_SLACK)),
              "stragglers.toml (4 of 16 workers 4× slower)")
axes[0].set_ylabel("samples to the target loss  (statistical efficiency)")
plt.show()

# %% [markdown]
# **What to take away.** Synchronous SGD is never stale, asp never waits; the picture shows
# what each costs. On both problems here the statistical efficiencies are close (a convex
# model trained at lr / N per gradient loses little to ~N versions of staleness), so the
# time to target is decided by hardware efficiency: asp and ssp with s ≥ 2 are fastest,
# ssp with s = 0 waits almost as much as bsp-ps, and the synchronous strategies pay for
# every barrier and for the servers' incast. With persistent stragglers synchronous SGD
# loses most, and backup workers, which close each step without the stragglers, recover
# much of it while staying synchronous. Without fixed stragglers backup workers do not pay
# off here: a late worker still finishes its stale gradient (dropped on arrival) before it
# joins the next step, as in Chen et al. 2016, so each step uses fewer gradients without
# being shorter. ssp is faster than asp on the first problem because its workers read their
# caches instead of pulling every time (`pulls_per_update` about 0.6 at s = 2). Staleness
# is reported to cost more on non-convex models and with larger steps (Zhang et al.,
# *Staleness-aware async-SGD*, IJCAI 2016); the points then spread vertically, and the same
# picture tells which effect wins (try `workload.model="mlp"`, `workload.dataset="digits"`
# in the sweeps above).
