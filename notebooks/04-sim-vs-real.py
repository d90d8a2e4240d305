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

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "04-sim-vs-real"
CONFIG = "validation/base.toml"          # experiments/validation/base.toml: logreg, 2 workers
STRATEGIES = ["bsp"] if QUICK else ["bsp", "asp", "ssp", "backup"]
REPEAT = 2 if QUICK else 5               # real repeats of each run: their spread
ITERATIONS = 60 if QUICK else 100
TARGET_LOSS = 0.25                       # defines time to target in both kinds of run
NET = "shm"                              # the real network (emulate:RATE needs root)

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %%
import json
import subprocess


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
# `cluster.fabric = "calibrated:PATH"` and `compute.device = "calibrated:PATH"`. It also
# measures the hosts' CPU costs around them (gathering batches, updates, the code around each
# message, how a waiting rank polls) for `cluster.host = "calibrated:PATH"`.

# %%
import matplotlib.pyplot as plt
import numpy as np

from sim.network import get_fabric, simulate
from sim.network.message_cost import alpha_s

calibration = RUNS / "calibration"
print(cli("calibrate", "--out", calibration, "--net", NET, *(["--quick"] if QUICK else [])))
FABRIC = f"calibrated:{calibration / 'fabric.json'}"
DEVICE = f"calibrated:{calibration / 'device.json'}"
HOST = f"calibrated:{calibration / 'host.json'}"
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
    ax.loglog(sizes, np.array(t) * 1e6, label=f"{f.name}: α {alpha_s(f) * 1e6:.1f} µs, "
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
# 2. simulated on the calibrated profiles, with every rank on this machine's cores (the
#    calibrated host, `cluster.cores` = its cores, all ranks on one host), as the real run;
# 3. run for real `REPEAT` times (`sim real --repeat`);
#
# and each simulation is compared with the real repeats (`sim compare`). Both kinds of run
# use the same seed, data, shards and batches, so for bsp the loss after each update is the
# same in both (the loss distance over updates is zero): only time differs. Where the
# updates depend on timing (asp and ssp, whose order of updates does, and backup, which
# drops whichever gradient comes last) the curves differ a little.

# %%
from sim.rundir import write_run
from sim.simulated.engine import simulate as simulate_run
from sim.training.strategies import row_of
from sim.training.validator import load_config

config_path = EXPERIMENTS / CONFIG
reports = {}
for kind in STRATEGIES:
    base = [f"strategy.kind={kind}", "cluster.workers=2", f"run.iterations={ITERATIONS}",
            f"run.target_loss={TARGET_LOSS}"]
    calibrated = [*base, f"cluster.fabric={FABRIC}", f"compute.device={DEVICE}"]
    job = load_config(config_path, calibrated)
    ranks = row_of(job).ranks(job)  # the workers, and a server rank for the PS strategies
    on_this_machine = [*calibrated, f"cluster.host={HOST}", f"cluster.cores={os.cpu_count()}",
                       f"cluster.ranks_per_host={ranks}"]
    for name, overrides in (("preset", base), ("calibrated", on_this_machine)):
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
show([RUNS / STRATEGIES[0] / "compare-calibrated" / "report.png"])

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
# timing model alone; read each error together with the breakdown by activity, which says
# whether the gradient, the batch, the updates, the code around messages, the wire or waiting
# is off. Calibration ties the device, fabric and host models to measurements of this
# machine. What is left is mostly how ranks that outnumber the cores (the parameter-server
# strategies add a server rank) wake each other up, which the model approximates. A preset
# can land closer only by accident. The full
# validation matrix (strategies × workers × network × model size × stragglers) is
# `python -m sim validate`, which writes `experiments/validation/README.md`.
