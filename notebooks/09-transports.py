# %% [markdown]
# # 09 · Transports: gRPC, MPI or RDMA for a parameter server?
#
# Parameter-server systems talk over RPC: TensorFlow's distributed runtime sends tensors over
# gRPC, and its RDMA transports existed because gRPC's serialisation and kernel copies cost
# more than the wire on fast fabrics (Jia et al. 2018). The lab models a transport apart from
# the fabric (`cluster.transport`, `python -m sim list transports`): gRPC pays a socket call
# and its own work per message at each end, a kernel copy of every byte, serialisation on
# the sender and deserialisation on the receiver, HTTP/2 frame headers on the wire and a
# flow-control window; MPI drives the fabric's own stack; RDMA verbs post a work request,
# copy nothing and read a pull's parameters without the server's CPU.
#
# `experiments/transports.toml`: 4 workers and a server, every rank paying this machine's
# measured CPU costs (`cluster.host = "epyc-core"`); four message sizes (logistic regression,
# two MLPs, Wide & Deep's sparse rows) x gRPC at its initial 64 KiB window and at 4 MiB x MPI
# x RDMA x four fabrics x bsp-ps and asp.
#
# Three questions:
#
# 1. Where does one message's time go?
# 2. What does each transport do to a step?
# 3. From which message size on does RDMA pay?

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "09-transports"
FABRICS = ["eth-25g", "ib-hdr"] if QUICK else ["eth-25g", "eth-100g", "roce-100g", "ib-hdr"]
ITERATIONS = 6 if QUICK else 60
PAYS = 0.10  # RDMA "pays" once it cuts a step by this share

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import cached_sweep, override, setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %% [markdown]
# ## 1. Where does one message's time go?
#
# The closed form of one message alone on idle links through one switch
# (`sim.plots.message_parts`), both ends summed, on this machine's measured host costs:
# the calls (socket, gRPC, the host's framework), the copies of every byte, serialisation,
# and the wire (alpha and the framed bytes at the link's rate or, when the window binds, at
# window / RTT). gRPC and MPI over 100 GbE, RDMA over RoCE at the same rate:

# %%
import pandas as pd  # noqa: E402

from sim.plots import message_parts, plot_message_parts  # noqa: E402

HOST = "epyc-core"
CASES = [("gRPC, 100 GbE", "grpc", "eth-100g"), ("MPI, 100 GbE", "mpi", "eth-100g"),
         ("RDMA, RoCE 100G", "rdma", "roce-100g")]
SIZES = [2.0 ** k for k in range(3, 25)]
show(plot_message_parts(CASES, SIZES, RUNS / "plots", host=HOST))
shares = []
for label, transport, fabric in CASES:
    for size in (1e3, 64e3, 1e6):
        parts = message_parts(transport, fabric, size, HOST)
        total = sum(parts.values())
        shares.append({"case": label, "bytes": int(size), "us": round(total * 1e6, 1),
                       **{part: round(value / total, 2) for part, value in parts.items()}})
pd.DataFrame(shares)

# %% [markdown]
# Reading it: a gRPC message costs tens of microseconds before it carries a byte (two socket
# calls and gRPC's own work at each end), and beyond a few tens of KB its copies and
# serialisation, not the wire, set its time: on this model gRPC spends about a nanosecond of
# CPU per byte (a kernel copy at each end and a protobuf copy on each side) where 100 GbE
# spends 0.09. MPI over TCP keeps the kernel copies and drops the rest; RDMA keeps only the
# wire. Where the parts cross (below) is the size from which the bytes, not the calls,
# matter:

# %%
for label, transport, fabric in CASES:
    small, large = (message_parts(transport, fabric, n, HOST) for n in (0.0, 1e7))
    fixed = sum(small.values())
    per_byte = (sum(large.values()) - fixed) / 1e7
    wire = (large["wire"] - small["wire"]) / 1e7
    print(f"{label:<16} {fixed * 1e6:6.1f} us a message + {per_byte * 1e9:5.2f} ns a byte "
          f"({wire / per_byte:.0%} of it the wire); bytes dominate from "
          f"{fixed / per_byte / 1e3:7.1f} KB")

# %% [markdown]
# ## 2. What each transport does to a step
#
# The sweep: time per update (simulated) by message size, a bar per transport, a panel per
# fabric, for the synchronous and the asynchronous parameter server:

# %%
from sim.plots import plot_transport_steps, transport_rows  # noqa: E402

sweep_dir = cached_sweep(EXPERIMENTS / "transports.toml", RUNS / "transports",
                         [override("sweep.cluster.fabric", FABRICS),
                          f"run.iterations={ITERATIONS}", f"run.eval_every={ITERATIONS}"])
for strategy in ("bsp-ps", "asp"):
    show(plot_transport_steps(sweep_dir, RUNS / "plots", strategy))
rows = pd.DataFrame(transport_rows(sweep_dir))
rows["step_ms"] = rows["step_s"] * 1e3
rows.pivot_table(index=["strategy", "model"], columns=["fabric", "transport"],
                 values="step_ms").round(3)

# %% [markdown]
# Where the workers' time goes (share of it in message overhead on the CPU, and on the
# wire, which includes waiting for the server's answer):

# %%
rows.pivot_table(index=["strategy", "model", "transport"], columns="fabric",
                 values=["overhead_share", "wire_share"]).round(2)

# %% [markdown]
# Reading it: over gRPC the step hardly depends on the fabric: the same model takes about the
# same time on 25 GbE and on InfiniBand HDR, because the calls, copies and serialisation on
# the workers' and the server's cores, and at 64 KiB the window (65,535 bytes per round trip
# of two socket calls each way: about 2 GB/s), set it. Growing the window to 4 MiB (what
# gRPC's BDP probing does on a long-lived connection) helps the large messages only. MPI and
# RDMA follow the fabric; RDMA's one-sided pulls also take the server's CPU out of every
# pull, which matters most where many workers share one server (asp).

# %% [markdown]
# ## 3. From which message size on does RDMA pay?
#
# For each strategy and link rate, the share of the step RDMA saves against gRPC and against
# MPI over TCP at the same rate (RoCE against 100 GbE; InfiniBand against itself under MPI),
# and the smallest message size at which it saves at least `PAYS` of the step:

# %%
SIZE = {"logreg": 65 * 8, "mlp [256]": 17154 * 8, "mlp [2048,64]": 264386 * 8}  # bytes
pairs = {"eth-25g": "eth-25g", "eth-100g": "roce-100g", "roce-100g": "roce-100g",
         "ib-hdr": "ib-hdr"}
found = []
for strategy, group in rows[rows["model"].isin(SIZE)].groupby("strategy"):
    for fabric in FABRICS:
        rdma_on = pairs[fabric]
        for other in ("grpc", "mpi"):
            saved = []
            for model, size in SIZE.items():
                base = group[(group["model"] == model) & (group["fabric"] == fabric)
                             & (group["transport"] == other)]["step_s"].mean()
                rdma = group[(group["model"] == model) & (group["fabric"] == rdma_on)
                             & (group["transport"] == "rdma")]["step_s"].mean()
                saved.append((size, 1 - rdma / base))
            first = next((size for size, share in saved if share >= PAYS), None)
            found.append({"strategy": strategy, "against": f"{other} on {fabric}",
                          "rdma on": rdma_on,
                          **{f"saves @ {s / 1e3:.1f} KB": round(v, 2) for s, v in saved},
                          "pays from (bytes)": first})
pd.DataFrame(found)

# %% [markdown]
# Reading it: against gRPC, RDMA pays at every size here, most of all for small messages,
# where gRPC's per-call cost is most of the step; against MPI over TCP it pays once the
# kernel copies are a noticeable part of the step, and not at all where MPI already runs on
# the RDMA fabric's own stack (InfiniBand), apart from the server's CPU its one-sided pulls
# save. Change `cluster.transport` to `calibrated:PATH` (`python -m sim calibrate --only
# transport`) to put this machine's measured gRPC in place of the preset.
