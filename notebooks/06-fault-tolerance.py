# %% [markdown]
# # 06 · Failures, checkpoints and recovery
#
# A long training job fails: a worker dies, a parameter-server shard dies, an instance is
# preempted. Three questions, answered with the simulator:
#
# 1. **How often to checkpoint.** Under exponential failures with mean M, a checkpoint that
#    takes delta to write and a restart (detect, reschedule, read the checkpoint) of R,
#    Young (1974) put the optimum work between checkpoints at sqrt(2 delta M); Daly (2006)
#    derived the expected wall time exactly and a higher-order optimum. The experiment
#    `experiments/fault-tolerance.toml` sweeps the interval; the simulated optimum is
#    compared with both.
# 2. **What a failure looks like** on the timeline of a synchronous job: it restarts from
#    its last checkpoint and recomputes the lost steps on the same batches, so its numbers
#    are exactly those of a run without failures; only time is lost.
# 3. **Allreduce against parameter servers.** bsp restarts the whole job; asp drops the
#    dead worker and carries on (elastic), and a dead shard restarts from its own
#    checkpoint while the workers wait for it.

# %% tags=["parameters"]
# Parameters. SGD_LAB_QUICK=1 (the test suite) shrinks everything to a few seconds.
import os

QUICK = os.environ.get("SGD_LAB_QUICK") == "1"
NOTEBOOK = "06-fault-tolerance"
INTERVALS = [8, 16, 34, 60, 100] if QUICK else [8, 12, 16, 20, 25, 30, 34, 40, 50, 60, 75,
                                                 100]  # checkpoint.every_steps (4 s steps)
SEEDS = [1, 2, 3] if QUICK else list(range(1, 25))    # the same failures at every interval
ITERATIONS = 2500 if QUICK else 5000                  # 4 s steps: 10,000 or 20,000 s of work
FAILED_AT = 25                                        # section 2: a worker dies after update
COMPARE_STEPS = 200 if QUICK else 1000               # section 3: bsp steps of equal work

# %%
# Setup: import this checkout's library (SGD_LAB_ROOT, else the folder above the notebook's),
# then sim.analysis.setup_notebook: the figure style, and where results go (printed).
# %matplotlib inline
import sys

sys.path.insert(0, os.environ.get("SGD_LAB_ROOT") or os.path.dirname(os.getcwd()))
from sim.analysis import cached_sweep, override, setup_notebook, show  # noqa: E402

ROOT, EXPERIMENTS, RUNS = setup_notebook(NOTEBOOK, QUICK)

# %% [markdown]
# ## 1. The checkpoint interval
#
# Eight workers, each failing on average every 8,000 s, so the job fails every M = 1,000 s
# (a superposition of 8 Poisson processes); 60 s to detect a failure and start again, then
# the checkpoint is read back; 4 s steps. The checkpoint is BERT-base's 880 MB of
# parameters and momentum written to an object store at 88 MB/s: delta = 10.15 s. Every
# interval sees the same failure times (the same seeds: common random numbers), so the
# differences between intervals are not noise between seeds.

# %%
from sim.faults.interval_study import interval_study
from sim.plots import plot_checkpoint_interval
from sim.results import Sweep

interval_dir = cached_sweep(EXPERIMENTS / "fault-tolerance.toml", RUNS / "interval",
                            [override("sweep.checkpoint.every_steps", INTERVALS),
                             override("run.seeds", SEEDS),
                             override("run.iterations", ITERATIONS)])
show(plot_checkpoint_interval(interval_dir, RUNS / "plots"))
study = interval_study(Sweep(interval_dir).rows)
print(f"simulated optimum {study.optimum_s:.1f} s, Daly {study.daly_optimum_s:.1f} s "
      f"({100 * study.optimum_error:+.1f}%), Young {study.young_optimum_s:.1f} s")

# %% [markdown]
# Daly's expectation is exact for this model (failures strike during work, checkpoints and
# restarts alike, each restarting from the last checkpoint written), so the simulated means
# lie on his curve within their confidence intervals. The curve is flat at its minimum:
# 10% away from the optimum the wall time changes by about 0.1%, so the optimum is read
# off a parabola fitted through the points around the best one. Young's first-order
# overhead, delta / tau + (tau + delta)(R + (tau + delta) / 2) / (tau M), holds where
# delta and R are small against tau and tau against M; at the long intervals, where
# several failures strike one segment, it underestimates.

# %%
import pandas as pd

pd.DataFrame({"tau_s": study.tau_s,
              "wall_h": [w.mean / 3600 for w in study.wall_s],
              "daly_h": study.daly_wall_s / 3600,
              "lost_%": 100 * study.sim_overhead,
              "young_%": 100 * study.young_overhead}).round(3)

# %% [markdown]
# ## 2. One failure on the timeline
#
# The same job for a few steps: a checkpoint every 10 steps, worker 3 killed right after
# update 25 (before any checkpoint of it). The job restarts (60 s), reads the checkpoint of
# update 20 (10.15 s), recomputes the 5 steps since it, and carries on. Compared with the
# same run without the failure, every loss is the same; the wall time is longer by exactly
# the restart, the read and the recomputation.

# %%
import json

from sim.plots import plot_gantt
from sim.rundir import write_run
from sim.simulated.engine import simulate
from sim.training.validator import load_config

timeline_overrides = ["run.iterations=40", "faults.mtbf_s=1e15", "checkpoint.every_steps=10",
                      "run.eval_every=5"]
runs = {}
for name, extra in (("no-failure", []),
                    ("failure", [f"faults.failures=[{{rank = 3, at_update = {FAILED_AT}}}]"])):
    config = load_config(EXPERIMENTS / "fault-tolerance.toml", timeline_overrides + extra)
    runs[name] = RUNS / "timeline" / name
    if not (runs[name] / "summary.json").exists():
        write_run(runs[name], simulate(config).files())
summaries = {n: json.loads((d / "summary.json").read_text()) for n, d in runs.items()}
for name, s in summaries.items():
    print(f"{name:>10}: {s['sim_time_s']:8.1f} s, final loss {s['final_loss']:.6f}, "
          f"failures {s['failures']}, lost work {s['lost_work_s']:.1f} s, "
          f"restart {s['restart_time_s']:.1f} s, checkpoints {s['checkpoint_time_s']:.1f} s")
show(plot_gantt([runs["failure"]], RUNS / "plots", window_s=summaries["failure"]["sim_time_s"]))

# %% [markdown]
# ## 3. Allreduce against a parameter server
#
# bsp over an allreduce against asp through one parameter-server shard, on the same
# workers with the same failures (M = 1,000 s for the job; the shard fails too, as a ninth
# rank), at equal work (`run.samples`). bsp loses the work since its last checkpoint at
# every failure and waits for the restart; asp loses only the dead worker's gradient in
# flight, and runs on with seven workers while the eighth restarts. A dead shard takes its
# key range back to its own last checkpoint (the updates since are lost) and the workers
# wait for it. Goodput counts the updates that were kept per second.

# %%
def summary_of(name: str, overrides: list[str]) -> dict:
    """The summary of the fault-tolerance experiment with ``overrides``, run once."""
    out = RUNS / "compare" / name
    if not (out / "summary.json").exists():
        config = load_config(EXPERIMENTS / "fault-tolerance.toml", overrides)
        write_run(out, simulate(config).files())
    return json.loads((out / "summary.json").read_text())


# both checkpoint every 136 s of work: every 34 bsp steps, every 8 x 34 asp gradients
samples = 8 * 32 * COMPARE_STEPS  # 8 workers x batch 32 per bsp step
rows = [{"kind": kind, "seed": seed, **summary_of(f"{kind}-{seed}", [
            f"strategy.kind={kind!r}", f"run.seed={seed}", "run.iterations=1000000000",
            f"run.samples={samples}", f"checkpoint.every_steps={every}"])}
        for kind, every in (("bsp", 34), ("asp", 8 * 34)) for seed in SEEDS]
table = pd.DataFrame(rows)
# an asp update is one gradient of 32 rows, a bsp update 8 of them: goodput in samples
table["goodput_samples_per_s"] = table["goodput_updates_per_s"] * table["kind"].map(
    {"bsp": 8 * 32, "asp": 32})
table[["kind", "sim_time_s", "failures", "lost_work_s", "restart_time_s",
       "checkpoint_time_s", "goodput_samples_per_s", "final_loss"]].groupby("kind").mean()

# %% [markdown]
# The asynchronous job finishes its work sooner: a failure costs it one worker's restart
# (the other seven carry on) and, when the shard fails, the updates since the shard's last
# checkpoint; the synchronous job stops entirely for every failure and recomputes. What
# asp pays instead is staleness and, at a shard failure, lost updates that change its
# numbers; bsp's numbers are those of a run without failures.
