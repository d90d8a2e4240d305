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

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "01-networks"
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

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import cached_sweep, override, setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %% [markdown]
# ## 1. The fabrics, and one message
#
# The presets. *n½ = α B* is Hockney's half-performance message size: below it a message is
# latency-bound (α dominates), above it bandwidth-bound. Ethernet has a bigger α but, at 100
# Gb/s, also a bigger B, so its n½ is the largest: a 100 GbE link needs messages of hundreds
# of kilobytes before its bandwidth shows.

# %%
import matplotlib.pyplot as plt
import numpy as np

from sim.network import FABRICS, get_collective, get_fabric, simulate
from sim.network.message_cost import alpha_s, beta_s, half_bytes

print(f"{'fabric':<10}{'bandwidth':>12}{'alpha':>10}{'n_1/2':>11}  source")
for name in FABRICS:
    f = get_fabric(name)
    print(f"{name:<10}{f.bandwidth_Bps / 1e9:>7.2f} GB/s{alpha_s(f) * 1e6:>7.1f} us"
          f"{half_bytes(f) / 1e3:>8.1f} KB  {f.source}")

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
    n_half = half_bytes(f)
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
        closed = np.array([get_collective(algo).closed_form_s(WORKERS, n, alpha_s(f),
                                                              beta_s(f)) for n in sizes])
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
        cost = np.array([[[get_collective(a).closed_form_s(p, n, alpha_s(f), beta_s(f))
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
    closed = [ps.closed_form_s(p, PS_BYTES, alpha_s(f), beta_s(f)) for p in PS_WORKERS]
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

fabrics_dir = cached_sweep(EXPERIMENTS / "ib-vs-ethernet.toml", RUNS / "ib-vs-ethernet",
                           [override("sweep.cluster.fabric", TRAIN_FABRICS),
                            override("run.iterations", TRAIN_ITERATIONS)])
show(plot_loss_time([fabrics_dir], RUNS / "plots"))
show(plot_breakdown([fabrics_dir], RUNS / "plots"))

# %% [markdown]
# And the same model with a smaller hidden layer (`experiments/scaling.toml`, weak scaling:
# 32 rows per worker) as workers are added: on Infiniband throughput keeps growing; on
# 10 GbE the allreduce, whose latency term grows with 2 (p−1) α, soon dominates each step.

# %%
scaling_dir = cached_sweep(EXPERIMENTS / "scaling.toml", RUNS / "scaling",
                           [override("sweep.cluster.workers", SCALING_WORKERS),
                            override("run.iterations", SCALING_ITERATIONS)])
show(plot_scaling(scaling_dir, RUNS / "plots"))

# %% [markdown]
# **What to take away.** Below n½ (tens to hundreds of kilobytes) every fabric is
# latency-bound, and Infiniband's ~1 µs α against TCP's 12-22 µs is what matters; above it
# only bandwidth counts. The right allreduce depends on the regime: few rounds for small
# vectors, a bandwidth-optimal schedule for large ones (MPICH switches between such
# schedules by message size and process count, Thakur et al. 2005). A single parameter
# server's link is an incast bottleneck that grows linearly with the workers; sharding the
# keys over S servers divides it by S, and allreduce avoids it altogether.
