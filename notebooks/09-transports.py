# %% [markdown]
# # 09 · Transports: gRPC, MPI or RDMA for a parameter server?
#
# Parameter-server systems talk over RPC: TensorFlow's distributed runtime sends tensors over
# gRPC, and its RDMA transports existed because gRPC's serialisation and kernel copies cost
# more than the wire on fast fabrics (Jia et al. 2018). The lab models a transport apart from
# the fabric (`cluster.transport`, `python -m sim list transports`): gRPC pays a socket call
# and its own work per message at each end, a kernel copy of every byte, serialisation on
# the sender and deserialisation on the receiver, HTTP/2 frame headers on the wire and a
# flow-control window, and a push is a call that waits for its response; MPI drives the
# fabric's own stack; RDMA verbs post a work request, copy nothing and read a pull's
# parameters without the server's CPU.
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
# (`sim.training.host_costs.message_parts`), both ends summed, on this machine's measured
# host costs: the calls (socket, gRPC, the host's framework), the copies of every byte,
# serialisation, and the wire (alpha and the framed bytes at the link's rate or, when the
# window binds, at window / RTT). gRPC and MPI over 100 GbE, RDMA over RoCE at the same rate:

# %%
import pandas as pd  # noqa: E402

from sim.plots import plot_message_parts  # noqa: E402
from sim.training.host_costs import message_parts  # noqa: E402

HOST = "epyc-core"
CASES = [("gRPC, 100 GbE", "grpc", "eth-100g"), ("MPI, 100 GbE", "mpi", "eth-100g"),
         ("RDMA, RoCE 100G", "rdma", "roce-100g")]
SIZES = [2.0 ** k for k in range(3, 25)]
show(plot_message_parts({label: [message_parts(transport, fabric, n, HOST) for n in SIZES]
                         for label, transport, fabric in CASES}, SIZES, RUNS / "plots"))
shares = []
for label, transport, fabric in CASES:
    for size in (1e3, 64e3, 1e6):
        parts = message_parts(transport, fabric, size, HOST)
        total = sum(parts.values())
        shares.append({"case": label, "bytes": int(size), "us": round(total * 1e6, 1),
                       **{part: round(value / total, 2) for part, value in parts.items()}})
pd.DataFrame(shares)

# %% [markdown]
# Reading it: a gRPC message costs 60 us before it carries a byte (a socket call and gRPC's
# own work at each end, and the host's per-message code), and then 1.7 ns a byte: a kernel
# copy at each end, serialisation and deserialisation, and the wire, of which 100 GbE would
# take 0.09 ns but the 64 KiB window (one window per 33 us round trip: 2 GB/s) takes 0.5.
# So from a few tens of KB on its copies and serialisation, not the wire, set its time. MPI
# over TCP keeps the socket call and the kernel copies (16 us and 0.61 ns a byte: copies
# are 83% of a 1 MB message); RDMA keeps the host's own buffer copies and the wire (5 us and
# 0.21 ns a byte). Where a transport's bytes start to cost more than its calls:

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
from sim.plots import plot_transports, transport_rows  # noqa: E402

sweep_dir = cached_sweep(EXPERIMENTS / "transports.toml", RUNS / "transports",
                         [override("sweep.cluster.fabric", FABRICS),
                          f"run.iterations={ITERATIONS}", f"run.eval_every={ITERATIONS}"])
show(plot_transports(sweep_dir, RUNS / "plots"))  # a figure per strategy
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
# Reading it (the full run, `QUICK = False`): over gRPC the step hardly depends on the
# fabric. bsp-ps on the 2.1 MB MLP takes 15.6 ms a step on 100 GbE, RoCE and InfiniBand HDR
# alike and 16.4 ms on 25 GbE; MPI takes 8.9 (25 GbE), 6.7 (100 GbE) and 3.5 ms (IB HDR);
# RDMA 3.9 ms on RoCE 100G. A 4 MiB window (what gRPC's BDP probing grows it to) takes gRPC
# from 15.6 to 14.0 ms only: the server's core, receiving four pushes and answering four
# pulls of 2.1 MB a step at 1.1 ns a byte of copies and serialisation, sets the rest. The
# workers' overhead share is the same on every fabric over gRPC (16-26%) and falls with the
# fabric's stack under MPI (21% on 100 GbE to 9% on IB HDR for asp's large messages). RDMA's
# one-sided pulls also take the server's core out of every asp pull: 0.69 ms against MPI's
# 0.76 on IB HDR.

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
# Reading it (the full run): against gRPC, RDMA saves 90-92% of the step at 520 bytes and
# 51-78% at 2.1 MB: gRPC's 60 us a message is most of a small step. Against MPI over TCP at
# the same rate it saves 53-70% at 520 B, 20-53% at 137 KB and 8-46% at 2.1 MB: the saving
# falls with size on 25 GbE, where the wire takes over (asp: 70%, 33%, 22%), and stays near
# half on 100 GbE, where the kernel copies (0.4 ns a byte) stay larger than the wire (0.09).
# Against MPI on the RDMA fabric's own stack (RoCE, InfiniBand) bsp-ps gains nothing and asp
# 10-26% (its one-sided pulls free the server's core). So by this model RDMA pays from the
# smallest message on against a TCP transport, most in proportion where messages are small
# and calls dominate, and its absolute saving per step grows with the bytes. Set
# `cluster.transport = "calibrated:PATH"` (`python -m sim calibrate --only transport`) to put
# this machine's measured grpcio in place of the preset.
