"""The single source of the notebooks: ``python notebooks/build_notebooks.py`` writes them.

Each notebook is written here in the "percent" format (``# %%`` starts a code cell,
``# %% [markdown]`` a Markdown cell whose lines start with ``# ``) and saved with nbformat
without outputs, so the committed ``.ipynb`` files hold no results and diff cleanly.
Edit this file, not the notebooks; ``--check`` exits 1 when a notebook differs from it
(the test suite runs that check).

Every notebook starts with a parameter cell: ``SGD_LAB_QUICK=1`` shrinks it to seconds (the
tests), and results go to a temporary directory (quick) or ``runs/notebooks/`` (full size),
or wherever ``SGD_LAB_RUNS`` points.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

# ---- shared cells --------------------------------------------------------------------------

SETUP = '''
# %%
# Setup: find the repository, import the library, and say where results go.
%matplotlib inline
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display


def find_root() -> Path:
    """SGD_LAB_ROOT, else the nearest directory at or above the working one holding sim/."""
    if os.environ.get("SGD_LAB_ROOT"):
        return Path(os.environ["SGD_LAB_ROOT"]).resolve()
    for path in [Path.cwd(), *Path.cwd().parents]:
        if (path / "sim" / "__init__.py").is_file():
            return path
    raise RuntimeError("start the notebook inside the sgd-lab repository or set SGD_LAB_ROOT")


ROOT = find_root()
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `import sim` without installing the package

from sim.plots.style import STYLE  # noqa: E402
from sim.sweep import run_sweep  # noqa: E402

plt.rcParams.update({**STYLE, "figure.dpi": 100})
RUNS = Path(os.environ.get("SGD_LAB_RUNS") or
            (tempfile.mkdtemp(prefix="sgd-lab-") if QUICK else ROOT / "runs" / "notebooks"))
RUNS = RUNS / NOTEBOOK
print(f"results in {RUNS}" + ("  (quick form)" if QUICK else ""))


def sweep(name: str, experiment: str, overrides=()) -> Path:
    """Run (or resume) experiments/EXPERIMENT.toml's [sweep] with `--set` OVERRIDES.

    The sweep directory's name carries a hash of the overrides, so changed parameters get
    a fresh directory and unchanged ones reuse the finished runs.
    """
    tag = hashlib.sha256(json.dumps(list(overrides)).encode()).hexdigest()[:8]
    report = run_sweep(ROOT / "experiments" / f"{experiment}.toml", RUNS / f"{name}-{tag}",
                       list(overrides), plots=False, progress=False)
    if report.failed:
        raise RuntimeError(f"{experiment}: failed runs: {report.failed}")
    print(f"{experiment}: {len(report.ran)} runs, {len(report.skipped)} reused -> {report.out}")
    return report.out


def toml_list(values: list) -> str:
    """A Python list as a TOML array for `--set key=[...]`."""
    return json.dumps(list(values))


def show(paths: list[Path]) -> None:
    """Display the PNG among the files a plot function wrote."""
    for path in paths:
        if Path(path).suffix == ".png":
            display(Image(filename=str(path)))
'''


def parameters(name: str, body: str) -> str:
    return f'''
# %%
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "{name}"
{body.strip()}
'''


# ---- 01: networks --------------------------------------------------------------------------

NETWORKS = r'''
# %% [markdown]
# # 01 · Networks: Infiniband vs Ethernet, collectives, incast
#
# What a gradient exchange costs on each fabric, from the network simulator in `sim.network`
# (flow-level max-min sharing of links, SimPy time). Every number below is computed in this
# notebook from the library: the fabric presets (`python -m sim list fabrics`, each with its
# source), the collectives' schedules run on the flow model, and their closed forms.
#
# The cost model is the usual alpha-beta (Hockney) model: a message of *n* bytes costs
# *T(n) = α + n β*, where α (one small message end to end, what `osu_latency` reports) is
# about 1 µs on Infiniband and RoCE and 12-22 µs on TCP over Ethernet, and β = 1 / B is the
# inverse of the achievable link bandwidth.
'''

NETWORKS_PARAMS = '''
WORKERS = 16 if QUICK else 64            # p of the allreduce size sweeps
SIZE_POINTS = 10 if QUICK else 28        # message sizes from 1 B to MAX_BYTES (log-spaced)
MAX_BYTES = 1e8 if QUICK else 1e9
FABRICS_COMPARED = ["ib-hdr", "eth-10g"] if QUICK else ["ib-hdr", "eth-100g", "eth-10g"]
PS_FABRIC = "eth-25g"                    # the incast study: 25 GbE TCP
PS_BYTES = 10**6                         # a 1 MB model (250 k float32 parameters)
PS_WORKERS = [2, 4, 8, 16, 32] if QUICK else [2, 4, 8, 16, 32, 64, 128]
PS_SERVERS = [1, 4] if QUICK else [1, 2, 4, 8]
TRAIN_FABRICS = (["ib-hdr", "eth-10g"] if QUICK else
                 ["ib-edr", "ib-hdr", "roce-100g", "eth-100g", "eth-25g", "eth-10g"])
TRAIN_ITERATIONS = 30 if QUICK else 150
SCALING_WORKERS = [1, 4, 16] if QUICK else [1, 2, 4, 8, 16, 32]
SCALING_ITERATIONS = 20 if QUICK else 60
'''

NETWORKS_BODY = r'''
# %% [markdown]
# ## 1. The fabrics, and one message
#
# The presets. *n½ = α B* is Hockney's half-performance message size: below it a message is
# latency-bound (α dominates), above it bandwidth-bound. Ethernet has a bigger α but, at 100
# Gb/s, also a bigger B, so its n½ is the largest: a 100 GbE link needs messages of hundreds
# of kilobytes before its bandwidth shows.

# %%
from sim.network import FABRICS, get_collective, get_fabric, simulate

print(f"{'fabric':<10}{'bandwidth':>12}{'alpha':>10}{'n_1/2':>11}  source")
for name in FABRICS:
    f = get_fabric(name)
    print(f"{name:<10}{f.bandwidth_Bps / 1e9:>7.2f} GB/s{f.alpha_s() * 1e6:>7.1f} us"
          f"{f.alpha_s() * f.bandwidth_Bps / 1e3:>8.1f} KB  {f.source}")

# %% [markdown]
# One message from host 0 to host 1 through the switch, simulated (a broadcast over p = 2
# ranks is exactly one message). Left: its time; right: the bandwidth it achieves, n / T(n),
# as a share of the link. Every curve reaches half the link at its n½ (the dots).

# %%
sizes = np.unique(np.logspace(0, np.log10(MAX_BYTES), SIZE_POINTS).astype(int))
fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for name in FABRICS:
    f = get_fabric(name)
    t = np.array([simulate("broadcast", p=2, nbytes=int(n), fabric=name).time_s
                  for n in sizes])
    (line,) = ax_t.loglog(sizes, t * 1e6, label=name)
    ax_b.semilogx(sizes, sizes / t / f.bandwidth_Bps, color=line.get_color())
    n_half = f.alpha_s() * f.bandwidth_Bps
    ax_b.plot([n_half], [0.5], "o", color=line.get_color())
ax_t.set(xlabel="message size (bytes)", ylabel="time (µs)", title="Time of one message")
ax_b.set(xlabel="message size (bytes)", ylabel="achieved / link bandwidth",
         title="Latency-bound (left) vs bandwidth-bound (right)")
ax_t.legend()
plt.show()

# %% [markdown]
# ## 2. Allreduce algorithms as the message grows
#
# Four allreduce schedules, each run on the flow model with p = `WORKERS` ranks on one
# switch (solid, dots), against its closed form (dashed) from Thakur, Rabenseifner and
# Gropp, *Optimization of collective communication operations in MPICH* (IJHPCA 2005):
#
# | algorithm | time |
# |---|---|
# | ring | 2 (p−1) α + 2 (p−1)/p · n β |
# | Rabenseifner (halving-doubling) | 2 lg p · α + 2 (p−1)/p · n β |
# | recursive doubling | lg p · (α + n β) |
# | binomial tree (reduce + broadcast) | 2 ⌈lg p⌉ · (α + n β) |
#
# The black dotted line is the bandwidth lower bound 2 (p−1)/p · n / B (Patarasuk and Yuan,
# *Bandwidth optimal all-reduce algorithms for clusters of workstations*, JPDC 2009): every
# rank must send and receive that much whatever the schedule. Small messages favour the
# schedules with few rounds (lg p α), large ones the schedules that move each byte once
# (ring, Rabenseifner).

# %%
ALGOS = ["ring", "rabenseifner", "recursive-doubling", "tree"]
simulated = {(fab, algo): np.array([simulate(algo, p=WORKERS, nbytes=int(n), fabric=fab).time_s
                                    for n in sizes])
             for fab in FABRICS_COMPARED for algo in ALGOS}

fig, axes = plt.subplots(1, len(FABRICS_COMPARED), figsize=(5.2 * len(FABRICS_COMPARED), 4.2),
                         layout="constrained", sharey=True)
worst = 0.0
for ax, fab in zip(axes, FABRICS_COMPARED, strict=True):
    f = get_fabric(fab)
    for algo in ALGOS:
        closed = np.array([get_collective(algo).closed_form_s(WORKERS, n, f.alpha_s(),
                                                              f.beta_s_per_byte) for n in sizes])
        worst = max(worst, float(np.max(np.abs(simulated[fab, algo] / closed - 1))))
        (line,) = ax.loglog(sizes, simulated[fab, algo], "o-", markersize=3, label=algo)
        ax.loglog(sizes, closed, "--", color=line.get_color(), linewidth=1)
    bound = [get_collective("ring").lower_bound_s(WORKERS, n, f.bandwidth_Bps) for n in sizes]
    ax.loglog(sizes, bound, ":", color="black", label="bandwidth lower bound")
    ax.set(title=f"{fab}, p = {WORKERS}", xlabel="vector size (bytes)")
    ax.set_ylim(bottom=min(t.min() for t in simulated.values()) / 3)
axes[0].set_ylabel("allreduce time (s)")
axes[0].legend()
plt.show()
print(f"largest relative gap between simulation and closed form: {worst:.1e} "
      "(chunks of unequal size when p does not divide n)")

# %% [markdown]
# ### How close each schedule gets to the lower bound
#
# The bound divided by the simulated time: the share of the link each schedule turns into
# useful allreduce bandwidth (nccl-tests calls bound-over-time "bus bandwidth"). Only the
# bandwidth-optimal schedules approach 1, and only once the message is far above p · n½:
# the ring cuts the vector into p chunks, so each of its 2 (p−1) messages is n / p bytes.

# %%
fig, axes = plt.subplots(1, len(FABRICS_COMPARED), figsize=(5.2 * len(FABRICS_COMPARED), 3.8),
                         layout="constrained", sharey=True)
for ax, fab in zip(axes, FABRICS_COMPARED, strict=True):
    f = get_fabric(fab)
    bound = np.array([get_collective("ring").lower_bound_s(WORKERS, n, f.bandwidth_Bps)
                      for n in sizes])
    for algo in ALGOS:
        ax.semilogx(sizes, bound / simulated[fab, algo], label=algo)
    ax.set(title=f"{fab}, p = {WORKERS}", xlabel="vector size (bytes)", ylim=(0, 1.05))
axes[0].set_ylabel("lower bound / time")
axes[0].legend()
plt.show()

# %% [markdown]
# ## 3. Where the algorithms cross over, as p and n change
#
# The fastest schedule for every (workers, size) pair, from the closed forms (which the
# simulation matched above), for p a power of two (top) and p = 3 · 2^k (bottom).
#
# - Latency-bound (small vectors): recursive doubling, lg p messages.
# - Bandwidth-bound at a power of two: Rabenseifner, which has the ring's bandwidth term
#   with only 2 lg p messages, so on one switch it never loses to the ring.
# - Not a power of two: Rabenseifner folds the extra ranks in and out as MPICH does, two
#   more full-vector steps, so for large vectors the ring takes over; the more workers, the
#   later (the ring's 2 (p−1) α grows with p).
# - The binomial tree never wins here: it moves the whole vector 2 ⌈lg p⌉ times in sequence,
#   twice recursive doubling's lg p. (Pipelined trees, such as NCCL's double binary trees,
#   are a different algorithm.)
#
# The latency/bandwidth boundary sits at larger vectors on fabrics with a larger α B.

# %%
from matplotlib.colors import ListedColormap

P_FAMILIES = {"p a power of two": [2**k for k in range(1, 11)],
              "p = 3 · 2^k": [3 * 2**k for k in range(0, 9)]}
grid_n = np.logspace(0, 10, 121)
cmap = ListedColormap([f"C{i}" for i in range(len(ALGOS))])
fig, axes = plt.subplots(2, len(FABRICS_COMPARED), figsize=(5.2 * len(FABRICS_COMPARED), 7),
                         layout="constrained", sharex=True, squeeze=False)
for row, (family, grid_p) in enumerate(P_FAMILIES.items()):
    for ax, fab in zip(axes[row], FABRICS_COMPARED, strict=True):
        f = get_fabric(fab)
        cost = np.array([[[get_collective(a).closed_form_s(p, n, f.alpha_s(), f.beta_s_per_byte)
                           for n in grid_n] for p in grid_p] for a in ALGOS])
        best = cost.argmin(axis=0)
        ax.pcolormesh(grid_n, grid_p, best, cmap=cmap, vmin=-0.5, vmax=len(ALGOS) - 0.5,
                      shading="nearest")
        ax.set(xscale="log", yscale="log", title=f"{fab}, {family}")
        ax.set_yticks(grid_p[::2], [str(p) for p in grid_p[::2]])
        ax.minorticks_off()
        for p in (grid_p[5], grid_p[-1]):
            i = grid_p.index(p)
            steps = [f"{ALGOS[best[i, j]]} from {grid_n[j]:.2g} B" for j in range(len(grid_n))
                     if j == 0 or best[i, j] != best[i, j - 1]]
            print(f"{fab:>9}, p = {p:>4}: " + "; ".join(steps))
    axes[row, 0].set_ylabel("workers p")
for ax in axes[-1]:
    ax.set_xlabel("vector size (bytes)")
fig.colorbar(plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(-0.5, len(ALGOS) - 0.5)),
             ax=axes, ticks=range(len(ALGOS))).ax.set_yticklabels(ALGOS)
plt.show()

# %% [markdown]
# ## 4. Incast on a parameter server
#
# With a parameter server every worker pushes its gradient to the server and pulls the
# model back: the server's one NIC carries p · n bytes each way, so the exchange takes about
# 2 (α + (p / S) · n β) with S server shards (each owning a key range, as in Li et al.,
# *Scaling distributed machine learning with the parameter server*, OSDI 2014). Max-min
# sharing of the server's link gives every concurrent flow B / p. Ring allreduce instead
# keeps every NIC equally busy: its bandwidth term does not grow with p, only its 2 (p−1) α.
#
# The flow model captures this fan-in bottleneck, but not TCP incast *collapse* (switch
# buffer overflow and retransmission timeouts when many senders converge, Vasudevan et al.,
# SIGCOMM 2009), which would make the Ethernet parameter server slower still.

# %%
f = get_fabric(PS_FABRIC)
fig, ax = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
for servers in PS_SERVERS:
    ps = get_collective("ps", servers=servers)
    t = [simulate(ps, p=p, nbytes=PS_BYTES, fabric=PS_FABRIC).time_s for p in PS_WORKERS]
    closed = [ps.closed_form_s(p, PS_BYTES, f.alpha_s(), f.beta_s_per_byte) for p in PS_WORKERS]
    (line,) = ax.loglog(PS_WORKERS, np.array(t) * 1e3, "o-",
                        label=f"parameter server, S = {servers}")
    ax.loglog(PS_WORKERS, np.array(closed) * 1e3, "--", color=line.get_color(), linewidth=1)
ring = [simulate("ring", p=p, nbytes=PS_BYTES, fabric=PS_FABRIC).time_s for p in PS_WORKERS]
ax.loglog(PS_WORKERS, np.array(ring) * 1e3, "s-", color="black", label="ring allreduce")
ax.set(xlabel="workers p", ylabel="push + pull / allreduce time (ms)",
       title=f"{PS_BYTES / 1e6:g} MB per worker on {PS_FABRIC} "
             "(dashed: closed forms, under the simulated lines)")
ax.legend()
plt.show()

# %% [markdown]
# ## 5. What the fabric does to training
#
# `experiments/ib-vs-ethernet.toml`: synchronous SGD (ring allreduce) of an MLP on the
# digits data, 8 workers, on each fabric. The numerics are identical on every fabric (same
# seed, same batches), so the loss curves against *updates* coincide; against simulated
# time they separate by the allreduce cost per step, which the breakdown shows.

# %%
from sim.plots import plot_breakdown, plot_loss_time, plot_scaling

fabrics_dir = sweep("ib-vs-ethernet", "ib-vs-ethernet",
                    [f"sweep.cluster.fabric={toml_list(TRAIN_FABRICS)}",
                     f"run.iterations={TRAIN_ITERATIONS}"])
show(plot_loss_time([fabrics_dir], RUNS / "plots"))
show(plot_breakdown([fabrics_dir], RUNS / "plots"))

# %% [markdown]
# And the same model with a smaller hidden layer (`experiments/scaling.toml`, weak scaling:
# 32 rows per worker) as workers are added: on Infiniband throughput keeps growing; on
# 10 GbE the allreduce, whose latency term grows with 2 (p−1) α, soon dominates each step.

# %%
scaling_dir = sweep("scaling", "scaling", [f"sweep.cluster.workers={toml_list(SCALING_WORKERS)}",
                                           f"run.iterations={SCALING_ITERATIONS}"])
show(plot_scaling(scaling_dir, RUNS / "plots"))

# %% [markdown]
# **What to take away.** Below n½ (tens to hundreds of kilobytes) every fabric is
# latency-bound, and Infiniband's ~1 µs α against TCP's 12-22 µs is what matters; above it
# only bandwidth counts. The right allreduce depends on the regime: few rounds for small
# vectors, a bandwidth-optimal schedule for large ones (MPICH switches between such
# schedules by message size and process count, Thakur et al. 2005). A single parameter
# server's link is an incast bottleneck that grows linearly with the workers; sharding the
# keys over S servers divides it by S, and allreduce avoids it altogether.
'''

# ---- 02: sync / async / ssp ----------------------------------------------------------------

SYNC = r'''
# %% [markdown]
# # 02 · Synchronous, asynchronous and stale-synchronous SGD
#
# Loss against simulated time and against updates for the parameter-server strategies:
#
# - **bsp-ps**: synchronous; every step waits for all N gradients (push, barrier, pull).
# - **backup**: synchronous with b backup workers; each step uses the first N − b gradients
#   and drops the rest (Chen et al., *Revisiting distributed synchronous SGD*, 2016).
# - **asp**: asynchronous (Downpour, Dean et al., NIPS 2012); nobody waits, gradients are
#   computed on stale models.
# - **ssp**: stale synchronous parallel (Ho et al., *More effective distributed ML via a stale
#   synchronous parallel parameter server*, NIPS 2013); a worker may run at most s clocks
#   ahead of the slowest.
#
# All runs come from the experiment configs in `experiments/`, run as sweeps through
# `sim.sweep.run_sweep`; figures are drawn by `sim.plots` from the result files.
'''

SYNC_PARAMS = '''
ITERATIONS = 160 if QUICK else 800       # sync-async-ssp.toml: updates per run
EVAL_EVERY = 4                           # held-out loss every 4 updates: resolves the target
SEEDS = [1] if QUICK else [1, 2, 3]      # repeats of every point (same seeds for every kind)
KINDS = ["bsp-ps", "backup", "asp", "ssp"]
BACKUP = 2                               # backup workers of the 16 (no fixed stragglers)
STALENESS = [0, 2, 8] if QUICK else [0, 1, 2, 4, 8, 16]   # the ssp bounds s compared
STRAGGLER_ITERATIONS = 150 if QUICK else 600              # stragglers.toml
STRAGGLER_EVAL_EVERY = 3
TARGET_SLACK = 1.05      # target loss: 5% above the worst best-loss among a seed's runs
'''

SYNC_BODY = r'''
# %% [markdown]
# ## 1. Four strategies on one cluster
#
# `experiments/sync-async-ssp.toml`: softmax regression on a 10-class Gaussian mixture,
# 16 workers with lognormal compute-time noise, two parameter-server shards on 25 GbE.
# An *update* is what changes the model of record: one aggregated step of N (bsp-ps) or
# N − b (backup) gradients, or one gradient (asp, ssp). asp applies each gradient at lr / N,
# so per gradient every strategy takes the same step. Every strategy runs the same number
# of updates, so the synchronous runs process 16 times more data and last far longer.

# %%
from sim.plots import plot_breakdown, plot_loss_time, plot_loss_updates, plot_staleness
from sim.plots.results import Sweep

common = [f"run.iterations={ITERATIONS}", f"run.eval_every={EVAL_EVERY}",
          f"run.seeds={toml_list(SEEDS)}"]
kinds_dir = sweep("kinds", "sync-async-ssp",
                  [f"sweep.strategy.kind={toml_list(KINDS)}", f"strategy.backup={BACKUP}",
                   *common])
show(plot_loss_time([kinds_dir], RUNS / "plots"))
show(plot_loss_updates([kinds_dir], RUNS / "plots"))

# %% [markdown]
# Per update the synchronous strategies look far better, but each of their updates averages
# 16 (or 14) gradients. The same runs on logarithmic axes, against simulated time and against
# the *samples* processed (rows of data turned into gradients, the fair unit across
# strategies); each seed is one line.

# %%
COLOURS: dict[str, str] = {}


def colour(name: str) -> str:
    return COLOURS.setdefault(name, f"C{len(COLOURS) % 10}")


def label(run) -> str:
    s = run.config["strategy"]
    return s["kind"] + {"ssp": f" s={s['staleness']}", "backup": f" b={s['backup']}"}.get(
        s["kind"], "")


def samples_per_update(run) -> float:
    """Rows of data behind each update (constant within a run: N, N - b or 1 gradients)."""
    s = run.summary
    return s["samples_per_s"] * s["sim_time_s"] / s["iterations"]


def curves(ax, runs, x="time"):
    """Held-out loss of each run against simulated time or samples (log x)."""
    seen = set()
    for run in runs:
        name = label(run)
        t, it, loss = (np.array(run.column("eval", c)) for c in ("time_s", "iteration", "loss"))
        xs = t if x == "time" else it * samples_per_update(run)
        keep = xs > 0
        ax.semilogx(xs[keep], loss[keep], color=colour(name), alpha=0.75,
                    label=None if name in seen else name)
        seen.add(name)
    ax.set_xlabel("simulated time (s)" if x == "time" else "samples processed")


kinds_runs = Sweep(kinds_dir).runs()
fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained", sharey=True)
curves(axes[0], kinds_runs, "time")
curves(axes[1], kinds_runs, "samples")
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
ssp_dir = sweep("ssp", "sync-async-ssp",
                [f"sweep.strategy.kind={toml_list(['ssp'])}",
                 f"sweep.strategy.staleness={toml_list(STALENESS)}", *common])
show(plot_loss_time([ssp_dir], RUNS / "plots" / "ssp"))
show(plot_staleness([ssp_dir], RUNS / "plots" / "ssp"))
by_s: dict[int, list] = {}
for row in Sweep(ssp_dir).rows:
    by_s.setdefault(row["strategy.staleness"], []).append(row)
for s, rows in by_s.items():
    waiting = np.mean([r["wait_s"] / r["sim_time_s"] for r in rows])
    print(f"s = {s:>2}: staleness mean {np.mean([r['staleness_mean'] for r in rows]):5.1f}, "
          f"max {max(r['staleness_max'] for r in rows):3d}; workers wait {waiting:6.1%} "
          "of the time")

# %% [markdown]
# ## 3. Stragglers
#
# `experiments/stragglers.toml`: 16 workers, logistic regression, Infiniband, exponential
# compute-time noise; in the straggler runs a quarter of the workers (4) are also 4× slower
# on every gradient. Synchronous SGD runs at the pace of its slowest worker; 4 backup workers
# drop exactly the stragglers' gradients; ssp lets the fast workers run s clocks ahead; asp
# ignores the stragglers altogether.

# %%
straggler_dir = sweep("stragglers", "stragglers",
                      [f"sweep.compute.straggler_fraction={toml_list([0.0, 0.25])}",
                       f"run.iterations={STRAGGLER_ITERATIONS}",
                       f"run.eval_every={STRAGGLER_EVAL_EVERY}", f"run.seeds={toml_list(SEEDS)}"])
straggler_runs = Sweep(straggler_dir).runs()
with_stragglers = [r for r in straggler_runs if r.config["compute"]["straggler_fraction"] > 0]
without = [r for r in straggler_runs if r.config["compute"]["straggler_fraction"] == 0]
fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained", sharey=True, sharex=True)
for ax, runs, title in ((axes[0], without, "no fixed stragglers"),
                        (axes[1], with_stragglers, "4 of 16 workers 4× slower")):
    curves(ax, runs, "time")
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
MARKERS = "osD^vP*Xh<>p"


def samples_to(run, target: float) -> float:
    """Samples processed when the held-out loss first reached the target (interpolated
    linearly between the two evaluations around the crossing)."""
    x = np.array(run.column("eval", "iteration")) * samples_per_update(run)
    loss = np.array(run.column("eval", "loss"))
    k = np.flatnonzero(loss <= target)[0]
    if k == 0:
        return float(x[0])
    share = (loss[k - 1] - target) / (loss[k - 1] - loss[k])
    return float(x[k - 1] + share * (x[k] - x[k - 1]))


def efficiency(runs):
    """label -> (seconds per sample, samples to the target), averaged over seeds."""
    by_seed: dict[int, list] = {}
    for run in runs:
        by_seed.setdefault(run.config["run"]["seed"], []).append(run)
    points: dict[str, list] = {}
    for seed_runs in by_seed.values():
        target = TARGET_SLACK * max(np.nanmin(r.column("eval", "loss")) for r in seed_runs)
        for run in seed_runs:
            points.setdefault(label(run), []).append(
                (1 / run.summary["samples_per_s"], samples_to(run, target)))
    return {name: np.mean(v, axis=0) for name, v in points.items()}


def tradeoff(ax, points, title):
    for i, (name, (x, y)) in enumerate(points.items()):
        ax.scatter(x, y, s=55, marker=MARKERS[i % len(MARKERS)], facecolors="none",
                   edgecolors=colour(name), linewidths=1.6, label=name, zorder=3)
    xs, ys = np.array(list(points.values())).T
    lo, hi = xs.min() / 1.6, xs.max() * 1.6
    for total in np.geomspace((xs * ys).min() / 8, (xs * ys).max() * 8, 10):
        ax.plot([lo, hi], [total / lo, total / hi], color="0.85", linewidth=0.8, zorder=1)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(ys.min() / 1.6, ys.max() * 1.6),
           title=title, xlabel="simulated seconds per sample  (hardware efficiency)")
    ax.legend(fontsize=7.5, loc="upper left")


fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), layout="constrained")
tradeoff(axes[0], efficiency(kinds_runs + Sweep(ssp_dir).runs()),
         "sync-async-ssp.toml (lognormal noise)")
tradeoff(axes[1], efficiency(with_stragglers), "stragglers.toml (4 of 16 workers 4× slower)")
axes[0].set_ylabel("samples to the target loss  (statistical efficiency)")
plt.show()

# %% [markdown]
# **What to take away.** Synchronous SGD is never stale, asp never waits; the picture shows
# what each costs. On both problems here the statistical efficiencies are close (a convex
# model trained at lr / N per gradient loses little to ~N versions of staleness), so the
# time to target is decided by hardware efficiency: asp and ssp with s ≥ 2 are fastest,
# ssp with s = 0 waits almost as much as bsp-ps, and the synchronous strategies pay for
# every barrier and for the servers' incast. With persistent stragglers synchronous SGD
# loses most, and backup workers, which drop exactly the stragglers' gradients, recover
# much of it while staying synchronous. Staleness is reported to cost more on non-convex
# models and with larger steps (Zhang et al., *Staleness-aware async-SGD*, IJCAI 2016);
# the points then spread vertically, and the same picture tells which effect wins
# (try `workload.model="mlp"`, `workload.dataset="digits"` in the sweeps above).
'''

# ---- 03: pipelining ------------------------------------------------------------------------

PIPELINING = r'''
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
# real network, `sim.workloads.profiles`) on 8 A100-class workers with ring allreduce; the
# batch sets C, the fabric sets M.
'''

PIPELINING_PARAMS = '''
FABRICS = ["ib-hdr", "eth-10g"] if QUICK else ["ib-hdr", "roce-100g", "eth-100g", "eth-25g",
                                               "eth-10g"]
BATCHES = [4, 64] if QUICK else [1, 4, 16, 64, 256]     # per worker: sets C
MODES = ["none", "wfbp", "bucket"]
BUCKETS = [1e5, 4e6, 1e8] if QUICK else [1e4, 1e5, 1e6, 4e6, 25e6, 1e8, 2e8]   # bytes
BUCKET_FABRICS = ["ib-hdr", "eth-10g"] if QUICK else ["ib-hdr", "eth-100g", "eth-10g"]
GANTT = {"cluster.fabric": "ib-hdr", "workload.batch": 4}   # the run drawn as a timeline
'''

PIPELINING_BODY = r'''
# %% [markdown]
# ## 1. Speedup against the compute/communication ratio
#
# `experiments/pipelining.toml`, swept over mode × batch × fabric. Each point is one run;
# x is its M / C (the run's own messages: WFBP sends 54 smaller allreduces, each paying
# the ring's 2 (p−1) α), y its speedup over `none` at the same batch and fabric. The dashed
# curve is the ideal (C + M) / max(C, M).

# %%
from sim.plots import plot_buckets, plot_gantt, plot_pipelining
from sim.plots.results import Sweep

modes_dir = sweep("pipelining", "pipelining",
                  [f"sweep.strategy.pipelining={toml_list(MODES)}",
                   f"sweep.workload.batch={toml_list(BATCHES)}",
                   f"sweep.cluster.fabric={toml_list(FABRICS)}"])
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

rows = Sweep(modes_dir).rows


def table(mode, column):
    return np.array([[next(r[column] for r in rows if r["strategy.pipelining"] == mode
                           and r["cluster.fabric"] == f and r["workload.batch"] == b)
                      for b in BATCHES] for f in FABRICS], dtype=float)


ratio, speedup = table("none", "pipelining_ratio"), table("bucket", "speedup_vs_none")
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
picked = [r for r in rows if all(r[k] == v for k, v in GANTT.items())
          and r["strategy.pipelining"] in ("none", "wfbp")]
for row in picked:
    print(f"{row['strategy.pipelining']:>5}: {row['iter_s'] * 1e3:.2f} ms per step, "
          f"exposed communication {row['exposed_comm_s'] * 1e3:.2f} ms")
show(plot_gantt([modes_dir / "runs" / r["run"] for r in picked], RUNS / "plots",
                window_s=2.2 * max(r["iter_s"] for r in picked)))

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
buckets_dir = sweep("buckets", "pipelining-buckets",
                    [f"sweep.strategy.bucket_bytes={toml_list(BUCKETS)}",
                     f"sweep.cluster.fabric={toml_list(BUCKET_FABRICS)}"])
show(plot_buckets(buckets_dir, RUNS / "plots"))
for fab in BUCKET_FABRICS:
    runs = sorted((r for r in Sweep(buckets_dir).rows if r["cluster.fabric"] == fab),
                  key=lambda r: r["strategy.bucket_bytes"])
    best = min(r["iter_s"] for r in runs)
    near = [r["strategy.bucket_bytes"] for r in runs if r["iter_s"] <= 1.02 * best]
    print(f"{fab:>8}: {best * 1e3:6.2f} ms per step at best; buckets within 2% of it: "
          f"{min(near):.3g} to {max(near):.3g} B")

# %% [markdown]
# **What to take away.** Overlap is worth at most 2× and only when communication and
# compute are balanced: a fast fabric with large batches has nothing left to hide, a slow
# fabric with small batches cannot hide it. Bucketing is the robust choice: it keeps most of
# WFBP's overlap while paying the per-message latency a handful of times, and its size
# should grow with the fabric's α.
'''

# ---- 04: simulation vs real ----------------------------------------------------------------

REAL = r'''
# %% [markdown]
# # 04 · Simulation vs a real run, and the calibration behind it
#
# Every experiment config also runs for real: `python -m sim real` starts one MPI rank per
# worker (and per parameter server) on this machine, runs the strategy's real program with
# the simulator's own data, model, shards and batches, and writes the same result files as
# `python -m sim run`. `python -m sim calibrate` measures what the simulator needs to know
# about the machine: the gradient kernels' speed (a device profile) and the network's α, β
# and per-message overhead (a fabric profile, fitted to ping-pong, streaming and ring
# allreduce timings). `python -m sim compare` then reports how well the simulation predicted
# the real run.
#
# The network here is shared memory between ranks on one host (`--net shm`); as root,
# `--net emulate:RATE` puts every rank in its own network namespace behind a shaped link.
# The commands are run as a user would run them (this interpreter, `python -m sim ...`);
# the results are read back from their files.
'''

REAL_PARAMS = '''
CONFIG = "validation/base.toml"          # experiments/validation/base.toml: logreg, 2 workers
STRATEGIES = ["bsp"] if QUICK else ["bsp", "asp", "ssp", "backup"]
REPEAT = 2 if QUICK else 5               # real repeats of each run: their spread
ITERATIONS = 60 if QUICK else 100
TARGET_LOSS = 0.25                       # defines time to target in both kinds of run
NET = "shm"                              # the real network (emulate:RATE needs root)
'''

REAL_BODY = r'''
# %%
import subprocess

RUNS.mkdir(parents=True, exist_ok=True)


def cli(*args) -> str:
    """`python -m sim ARGS` with this interpreter and checkout, in RUNS; what it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-m", "sim", *map(str, args)], cwd=RUNS, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"python -m sim {' '.join(map(str, args))}: exit "
                           f"{done.returncode}\n{done.stderr}{done.stdout}")
    return done.stdout

# %% [markdown]
# ## 1. Calibration
#
# `sim calibrate` times the gradient kernels of a few workloads (fitting FLOP rate and a
# fixed per-gradient overhead) and the network between ranks, and prints each measurement
# against the fitted model. The profiles it writes are used as
# `cluster.fabric = "calibrated:PATH"` and `compute.device = "calibrated:PATH"`.

# %%
from sim.network import get_fabric, simulate

calibration = RUNS / "calibration"
print(cli("calibrate", "--out", calibration, "--net", NET, *(["--quick"] if QUICK else [])))
FABRIC = f"calibrated:{calibration / 'fabric.json'}"
DEVICE = f"calibrated:{calibration / 'device.json'}"
device = json.loads((calibration / "device.json").read_text())
print(f"device: {device['flops_per_s'] / 1e9:.1f} GFLOP/s + {device['overhead_s'] * 1e6:.1f} µs "
      "per gradient")

# %% [markdown]
# Where this machine's "network" sits among the presets: the time of one message, simulated
# on the calibrated fabric and on three presets.

# %%
sizes = np.unique(np.logspace(0, 8, 25).astype(int))
fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
for name in (FABRIC, "ib-hdr", "eth-25g", "eth-10g"):
    f = get_fabric(name)
    t = [simulate("broadcast", p=2, nbytes=int(n), fabric=name).time_s for n in sizes]
    ax.loglog(sizes, np.array(t) * 1e6, label=f"{f.name}: α {f.alpha_s() * 1e6:.1f} µs, "
              f"{f.bandwidth_Bps / 1e9:.2f} GB/s", linewidth=2.5 if name == FABRIC else 1.5)
ax.set(xlabel="message size (bytes)", ylabel="time (µs)", title="One message")
ax.legend()
plt.show()

# %% [markdown]
# ## 2. One config: simulated twice, run for real, compared
#
# For each strategy the same config (`experiments/validation/base.toml` with
# `cluster.workers = 2`) is
#
# 1. simulated on the presets the config names (a 10 GbE fabric, the `cpu-core` device
#    measured once by `sim bench`): what the simulator predicts knowing nothing about this
#    machine;
# 2. simulated on the calibrated profiles;
# 3. run for real `REPEAT` times (`sim real --repeat`);
#
# and each simulation is compared with the real repeats (`sim compare`). Both kinds of run
# use the same seed, data, shards and batches, so for bsp the loss after each update is the
# same in both (the loss distance over updates is zero): only time differs. Where the
# updates depend on timing (asp and ssp, whose order of updates does, and backup, which
# drops whichever gradient comes last) the curves differ a little.

# %%
from sim.config import load_config
from sim.record import write_run
from sim.training.engine import simulate as simulate_run

config_path = ROOT / "experiments" / CONFIG
reports = {}
for kind in STRATEGIES:
    base = [f"strategy.kind={kind}", "cluster.workers=2", f"run.iterations={ITERATIONS}",
            f"run.target_loss={TARGET_LOSS}"]
    calibrated = [*base, f"cluster.fabric={FABRIC}", f"compute.device={DEVICE}"]
    for name, overrides in (("preset", base), ("calibrated", calibrated)):
        out = RUNS / kind / f"sim-{name}"
        if not (out / "summary.json").exists():
            write_run(out, simulate_run(load_config(config_path, overrides)).files())
    real = RUNS / kind / "real"
    if not real.exists():
        cli("real", config_path, "--out", real, "--net", NET, "--repeat", REPEAT,
            *[arg for o in calibrated for arg in ("--set", o)])
    for name in ("preset", "calibrated"):
        compared = RUNS / kind / f"compare-{name}"
        text = cli("compare", RUNS / kind / f"sim-{name}", real, "--out", compared)
        reports[kind, name] = json.loads((compared / "report.json").read_text())
    print(text)

# %% [markdown]
# The comparison report of the calibrated simulation of the first strategy, as
# `sim compare` draws it: loss over time, iteration time against the real repeats,
# staleness, and each worker's compute / communication / wait.

# %%
display(Image(filename=str(RUNS / STRATEGIES[0] / "compare-calibrated" / "report.png")))

# %% [markdown]
# ## 3. How far off, per strategy
#
# Mean time per update: the two simulations against the real repeats (bars span the real
# runs' min to max). The relative error is (simulated − real mean) / real mean.

# %%
from matplotlib.ticker import FormatStrFormatter

fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
xs = np.arange(len(STRATEGIES))
for offset, name, marker in ((-0.15, "preset", "s"), (0.15, "calibrated", "D")):
    ax.scatter(xs + offset, [reports[k, name]["iteration_s"]["sim"] * 1e3 for k in STRATEGIES],
               marker=marker, s=50, zorder=3, label=f"simulated, {name} profiles")
real = [reports[k, "calibrated"]["iteration_s"]["real"] for k in STRATEGIES]
mean = np.array([r["mean"] for r in real]) * 1e3
ax.errorbar(xs, mean, yerr=[mean - np.array([r["min"] for r in real]) * 1e3,
                            np.array([r["max"] for r in real]) * 1e3 - mean],
            fmt="o", color="black", capsize=4, label=f"real ({REPEAT} repeats)")
ax.set(xticks=xs, xticklabels=STRATEGIES, ylabel="ms per update", yscale="log",
       title=f"{NET}, 2 workers")
ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
ax.legend()
plt.show()
print("time per update: relative error of the simulation; loss: mean distance of the loss "
      "curves, relative to the real loss")
print(f"{'strategy':<9}{'preset':>9}{'calibrated':>12}{'loss over time':>16}"
      f"{'loss over updates':>19}")
for kind in STRATEGIES:
    preset, cal = reports[kind, "preset"], reports[kind, "calibrated"]
    print(f"{kind:<9}{preset['iteration_s']['error']:>+9.0%}"
          f"{cal['iteration_s']['error']:>+12.0%}"
          f"{cal['loss_distance']['over_time']:>16.1%}"
          f"{cal['loss_distance']['over_updates']:>19.1%}")

# %% [markdown]
# **What to take away.** A real run's numerics are the simulator's own (bsp gives the same
# loss per update, so its loss distance over updates is zero), so a comparison tests the
# timing model alone; read each error together with the breakdown, which says whether
# compute, communication or waiting is off. Calibration ties the device and fabric models to
# measurements of this machine, but it measures the kernels and the network in isolation:
# what a real step adds around them (the interpreter's and MPI's work around each message,
# the operating system sharing two cores among more ranks, since the parameter-server
# strategies also run a server rank) is not in the model. A preset can land closer only by
# accident (a slower preset network standing in for overheads the model lacks). The full
# validation matrix (strategies × workers × network × model size × stragglers) is
# `python -m sim validate`, which writes `experiments/validation/README.md`.
'''

# ---- 05: sparsity --------------------------------------------------------------------------

SPARSITY = r'''
# %% [markdown]
# # 05 · Sparsity: sparse kernels and sparse parameter-server traffic
#
# Click-style models have millions of features but each example touches a few dozen. Two
# things then pay off: kernels that read only the non-zeros (CSR), and a parameter server
# that sends only the touched rows of the model (Li et al., *Scaling distributed machine
# learning with the parameter server*, OSDI 2014). Both stop paying off as density grows.
'''

SPARSITY_PARAMS = '''
MATVEC_N = 500 if QUICK else 2000       # the m x n matrix of the CSR-vs-dense matvec
DENSITY_POINTS = 7 if QUICK else 13     # densities from 1e-3 to 1, log-spaced
ROUNDS = 3 if QUICK else 7              # alternating timing rounds (best of)
GRAD_BATCH, GRAD_NNZ = 32, 20           # the gradient kernels: rows per batch, non-zeros per row
GRAD_FEATURES = [10**3, 10**4, 10**5] if QUICK else [10**3, 10**4, 10**5, 3 * 10**5]
PS_FEATURES = [10**4, 10**5] if QUICK else [10**4, 10**5, 10**6]   # sparse-vs-dense.toml
PS_ITERATIONS = 120 if QUICK else 400
'''

SPARSITY_BODY = r'''
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
from sim.plots import plot_breakdown
from sim.plots.results import Sweep

ps_dir = sweep("sparse-vs-dense", "sparse-vs-dense",
               [f"sweep.workload.features={toml_list(PS_FEATURES)}",
                f"run.iterations={PS_ITERATIONS}"])
rows = Sweep(ps_dir).rows
fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
for sparse, marker in ((True, "o"), (False, "s")):
    chosen = sorted((r for r in rows if r["strategy.sparse_comm"] is sparse),
                    key=lambda r: r["workload.features"])
    # comm_s is per worker; each worker computed iterations / workers of the gradients
    ax.loglog([r["workload.features"] for r in chosen],
              [r["comm_s"] / r["iterations"] * r["workers_n"] * 1e6 for r in chosen],
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
runs = Sweep(ps_dir).runs()
fig, axes = plt.subplots(1, len(PS_FEATURES), figsize=(4 * len(PS_FEATURES), 3.8),
                         layout="constrained", sharex=True, squeeze=False)
for ax, d in zip(axes[0], PS_FEATURES, strict=True):
    for run in runs:
        if run.config["workload"]["features"] != d:
            continue
        sparse = run.config["strategy"]["sparse_comm"]
        t, loss = np.array(run.column("eval", "time_s")), np.array(run.column("eval", "loss"))
        ax.semilogx(t[t > 0], loss[t > 0], "o-" if sparse else "s--", markersize=3,
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
'''

NOTEBOOKS: dict[str, tuple[str, str, str]] = {
    "01-networks": (NETWORKS, NETWORKS_PARAMS, NETWORKS_BODY),
    "02-sync-async-ssp": (SYNC, SYNC_PARAMS, SYNC_BODY),
    "03-pipelining": (PIPELINING, PIPELINING_PARAMS, PIPELINING_BODY),
    "04-sim-vs-real": (REAL, REAL_PARAMS, REAL_BODY),
    "05-sparsity": (SPARSITY, SPARSITY_PARAMS, SPARSITY_BODY),
}


# ---- percent format -> nbformat --------------------------------------------------------------

def cells(text: str) -> list[tuple[str, str]]:
    """``# %%`` / ``# %% [markdown]`` blocks -> (kind, source) pairs."""
    out: list[tuple[str, list[str]]] = []
    for line in text.strip("\n").splitlines():
        if line.startswith("# %%"):
            out.append(("markdown" if "[markdown]" in line else "code", []))
        elif out:
            out[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"text before the first cell marker: {line!r}")
    result = []
    for kind, lines in out:
        if kind == "markdown":
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in lines]
        source = "\n".join(lines).strip("\n")
        if source:
            result.append((kind, source))
    return result


def notebook(name: str) -> nbformat.NotebookNode:
    intro, params, body = NOTEBOOKS[name]
    parts = cells(intro) + cells(parameters(name, params)) + cells(SETUP) + cells(body)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                  "name": "python3"},
                   "language_info": {"name": "python"}}
    first_code = True
    for i, (kind, source) in enumerate(parts):
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(source)
        else:
            cell = nbformat.v4.new_code_cell(source)
            if first_code:  # papermill's convention for the cell that holds the parameters
                cell.metadata["tags"] = ["parameters"]
                first_code = False
        cell.id = f"{name[:2]}-{i:02d}"  # stable ids: the files diff cleanly
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(notebook(name)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a notebook differs from this file; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = HERE / f"{name}.ipynb"
        text = render(name)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run python notebooks/build_notebooks.py): {', '.join(stale)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
