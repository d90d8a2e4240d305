"""Real runs of bsp with a replica split over MPI ranks ([parallel]: pipeline stages, tensor
shards, microbatches; sim/real/executors/bsp_split.py): the losses are a real bsp run's on the
unsplit model (bit for bit with one microbatch and one shard per stage, within 1e-12
otherwise), the result files hold one track per rank, the pipeline's figures and an arrow
per stage message (as the simulated trace draws them), a NaN stops every rank at once, and
what real runs cannot split is refused with exit 2 naming the key.

Tiny runs (a 4-layer MLP, 4 updates); each mpiexec start costs seconds on this 2-core
machine, so every run is made once per module and shared by the tests that read it."""

from __future__ import annotations

import csv
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from trace_cases import holder

from sim.cli import main
from sim.recorder import KINDS
from sim.training.parallel_plan import build_plan
from sim.training.validator import load_config

pytest.importorskip("mpi4py")

# name -> (replicas, --set overrides, --allreduce)
RUNS = {
    "bsp-d1": (1, [], "schedule"),
    "bsp-d2": (2, [], "schedule"),
    "p2-d2": (2, ["parallel.pipeline=2"], "schedule"),
    "p3-d1": (1, ["parallel.pipeline=3"], "schedule"),
    "t2-m2-d2": (2, ["parallel.tensor=2", "parallel.microbatches=2"], "mpi"),
    "p2-t2-m4-gpipe-d1": (1, ["parallel.pipeline=2", "parallel.tensor=2",
                              "parallel.microbatches=4", 'parallel.schedule="gpipe"',
                              "parallel.stage_layers=[2, 2]"], "schedule"),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory, split_mlp_data, write_toml):
    """``run(name)``: the real run ``name`` of :data:`RUNS` (made on first use); its
    directory."""
    root = tmp_path_factory.mktemp("split")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            workers, sets, impl = RUNS[name]
            config = write_toml(root / f"{name}.toml", split_mlp_data(cluster__workers=workers))
            out = root / name
            args = [a for s in sets for a in ("--set", s)]
            assert main(["real", str(config), "--out", str(out), "--allreduce", impl,
                         *args]) == 0
            made[name] = out
        return made[name]

    return get


def losses(run_dir: Path) -> list[tuple[str, float]]:
    """(kind, loss) of every row of metrics.csv: mini-batch losses and evaluations."""
    with (run_dir / "metrics.csv").open() as f:
        return [(row["kind"], float(row["loss"])) for row in csv.DictReader(f)]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("split, unsplit", [("p2-d2", "bsp-d2"), ("p3-d1", "bsp-d1")])
def test_stages_with_one_microbatch_give_bsps_losses_bit_for_bit(run, split, unsplit):
    ours, theirs = losses(run(split)), losses(run(unsplit))
    assert len(ours) == 4 + 3  # 4 updates, evaluations at 0, 2 and 4
    assert ours == theirs


@pytest.mark.parametrize("split, unsplit", [("t2-m2-d2", "bsp-d2"),
                                            ("p2-t2-m4-gpipe-d1", "bsp-d1")])
def test_tensor_shards_and_microbatches_give_bsps_losses_within_1e12(run, split, unsplit):
    ours, theirs = losses(run(split)), losses(run(unsplit))
    assert [kind for kind, _ in ours] == [kind for kind, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs, strict=True):
        assert abs(a - b) <= 1e-12 * abs(b)


def test_a_split_run_writes_the_contract_with_a_track_per_rank(run):
    out = run("p2-t2-m4-gpipe-d1")
    s = summary(out)
    plan = build_plan(load_config(out / "config.toml"))
    assert s["kind"] == "real" and s["ranks"] == 4 and s["workers_n"] == 1
    assert len(s["workers"]) == 4  # a row per rank, each adding up to the run's time
    for worker in s["workers"]:
        assert sum(worker[k] for k in KINDS) == pytest.approx(s["sim_time_s"], rel=0.05)
        assert worker["compute"] > 0 and worker["update"] > 0
    assert s["peak_memory_bytes"] == plan.peak_memory_bytes
    assert s["memory_bytes_by_stage"] == plan.memory_bytes_by_stage
    assert s["activation_bytes_per_step"] == plan.activation_bytes_per_step
    assert s["stage_layers"] == [2, 2]
    assert 0 < s["bubble_fraction"] < 1
    assert len(s["stage_compute_s"]) == 2 and min(s["stage_compute_s"]) > 0
    assert s["tensor_allreduce_s"] > 0 and s["pipeline_p2p_s"] > 0
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 0}
    assert names[3] == "rank 3: replica 0, stage 1, shard 1"
    passes = {(e["tid"], e["name"]) for e in events if e["ph"] == "X" and e["pid"] == 0
              and e["name"][0] in "FB"}
    assert passes == {(r, f"{kind}{k}") for r in range(4) for kind in "FB" for k in range(4)}
    assert all(e["cat"] == "compute" for e in events
               if e["ph"] == "X" and e["pid"] == 0 and e["name"][0] in "FB")


@pytest.mark.parametrize("name", ["p3-d1", "p2-d2", "p2-t2-m4-gpipe-d1"])
def test_the_trace_draws_an_arrow_per_stage_message_forward_in_time(run, name):
    """As the simulated trace (test_model_parallel_sim): an arrow per activation and per
    gradient between stages, from the last compute slice of the pass that sent it, where it
    ends, to the first of the same pass on the rank of the next (forward) or previous
    (backward) stage that took it up, where it starts; never pointing back in time."""
    out = run(name)
    plan = build_plan(load_config(out / "config.toml"))
    steps = summary(out)["iterations"]
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    arrows = defaultdict(list)
    for e in events:
        if e["ph"] in ("s", "f") and e["cat"] == "handoff":
            arrows[e["id"]].append(e)
    # per step: every microbatch's activation and gradient across each stage boundary, on
    # every replica's every shard
    assert len(arrows) == (steps * plan.microbatches * (plan.pipeline - 1) * 2
                           * plan.replicas * plan.tensor)
    computes = defaultdict(list)  # a rank's compute slices in time order
    for e in sorted((e for e in events if e["ph"] == "X" and e["pid"] == 0
                     and e["cat"] == "compute"), key=lambda e: e["ts"]):
        computes[e["tid"]].append(e)

    def neighbour(e: dict, step: int) -> str:
        """The name of the compute slice before (-1) or after (+1) ``e`` on its rank."""
        mine = computes[e["tid"]]
        at = mine.index(e) + step
        return mine[at]["name"] if 0 <= at < len(mine) else ""

    seen: dict[tuple, int] = defaultdict(int)
    for start, end in arrows.values():
        assert (start["ph"], end["ph"], end["bp"]) == ("s", "f", "e")
        assert start["ts"] <= end["ts"]
        sent, taken = holder(events, start), holder(events, end)
        assert sent["cat"] == taken["cat"] == "compute"
        assert sent["name"] == taken["name"]  # the same pass of the same microbatch
        a, b = plan.ranks[sent["tid"]], plan.ranks[taken["tid"]]
        assert (a.replica, a.shard) == (b.replica, b.shard)
        assert b.stage - a.stage == (1 if sent["name"][0] == "F" else -1)
        # the sender's pass ends in this slice, the receiver's begins in that one
        assert neighbour(sent, 1) != sent["name"] and neighbour(taken, -1) != taken["name"]
        assert start["ts"] == pytest.approx(sent["ts"] + sent["dur"], abs=2e-3)
        assert end["ts"] == pytest.approx(taken["ts"], abs=2e-3)
        seen[sent["tid"], taken["tid"], sent["name"]] += 1
    assert set(seen.values()) == {steps}  # each message once a step


def test_a_data_parallel_real_run_reports_a_whole_model_and_one_batch(run):
    """bsp's worker rank holds the MLP's 12*8+8 + 8*8+8 + 8*6+6 + 6*4+4 = 258 parameters and
    their gradients (no momentum), and one batch's 16 rows of layer inputs and logits
    (12 + 8 + 8 + 6 + 4 floats), 8 bytes each: the same count as a split run's."""
    s = summary(run("bsp-d2"))
    expected = 2 * 258 * 8 + 16 * (12 + 8 + 8 + 6 + 4) * 8
    assert s["memory_bytes_by_stage"] == [expected] and s["peak_memory_bytes"] == expected
    assert s["device_memory_bytes"] is None and s["memory_fits"] is None


def test_gpipe_runs_every_forward_before_any_backward(run):
    """The trace shows the schedule: on stage 0, F0..F3 then B0..B3 each step."""
    events = json.loads((run("p2-t2-m4-gpipe-d1") / "trace.json").read_text())["traceEvents"]
    order = [e["name"] for e in sorted((e for e in events if e["ph"] == "X" and e["tid"] == 0
                                        and e["pid"] == 0 and e["name"][0] in "FB"),
                                       key=lambda e: e["ts"])]
    firsts = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert firsts[:8] == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]


def test_sim_compare_reads_a_split_run(run, tmp_path, capsys):
    """The comparison takes a split run's figures from its summary (here against a copy of
    itself posing as the simulation, so the errors are known exactly;
    test_a_split_run_compares_with_its_simulation compares with a real simulation)."""
    real = run("p2-d2")
    capsys.readouterr()  # what `sim real` printed, if this test made the run
    sim = tmp_path / "sim"
    shutil.copytree(real, sim)
    s = summary(sim)
    s.update(kind="simulated", clock="simulated", bubble_fraction=s["bubble_fraction"] * 2)
    (sim / "summary.json").write_text(json.dumps(s))
    assert main(["compare", str(sim), str(real), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "bubble_fraction" in out
    # the header names the layout, not "on 2 workers"
    assert out.splitlines()[0].startswith(
        "bsp, 2 replicas x 2 stages x 1 shard (4 ranks), 1f1b, 1 microbatch, real ")
    report = json.loads((tmp_path / "cmp" / "report.json").read_text())
    figures = report["model_parallel"]
    assert figures["bubble_fraction"]["error"] == pytest.approx(1.0)
    assert figures["stage_compute_s"]["error"] == [0.0, 0.0]


def test_a_split_run_compares_with_its_simulation(run, tmp_path, capsys, split_mlp_data,
                                                  write_toml):
    """`sim run` of the same config writes the same split keys and rank track names, and
    `sim compare` reads the pair."""
    real = run("p2-d2")
    config = write_toml(tmp_path / "p2-d2.toml", split_mlp_data(cluster__workers=2))
    assert main(["run", str(config), "--out", str(tmp_path / "sim"),
                 "--set", "parallel.pipeline=2"]) == 0
    sim = tmp_path / "sim"
    keys = ("ranks", "bubble_fraction", "stage_compute_s", "pipeline_p2p_s",
            "tensor_allreduce_s", "peak_memory_bytes", "memory_bytes_by_stage",
            "device_memory_bytes", "memory_fits", "activation_bytes_per_step", "stage_layers")
    s, r = summary(sim), summary(real)
    assert set(keys) <= set(s) & set(r)
    for key in ("ranks", "peak_memory_bytes", "memory_bytes_by_stage",
                "activation_bytes_per_step", "stage_layers"):
        assert s[key] == r[key], key  # the plan's: the same config, the same plan

    def tracks(run_dir: Path) -> list[str]:
        events = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
        return sorted(e["args"]["name"] for e in events if e.get("ph") == "M"
                      and e.get("name") == "thread_name" and e.get("pid") == 0)

    assert tracks(sim) == tracks(real)
    capsys.readouterr()
    assert main(["compare", str(sim), str(real), "--out", str(tmp_path / "cmp")]) == 0
    assert "bubble_fraction" in capsys.readouterr().out
    figures = json.loads((tmp_path / "cmp" / "report.json").read_text())["model_parallel"]
    assert set(figures) >= {"bubble_fraction", "stage_compute_s", "pipeline_p2p_s"}


def test_a_diverging_split_run_stops_every_rank_and_says_so(tmp_path, split_mlp_data,
                                                            write_toml):
    config = write_toml(tmp_path / "diverge.toml", split_mlp_data(workload__lr=1e200))
    for name, sets in (("bsp", []), ("split", ["--set", "parallel.pipeline=2", "--set",
                                               "parallel.tensor=2", "--set",
                                               "parallel.stage_layers=[2, 2]"])):
        out = tmp_path / name
        assert main(["real", str(config), "--out", str(out), *sets]) == 0
        s = summary(out)
        assert s["diverged"] is True and s["final_loss"] is None
    ours, theirs = losses(tmp_path / "split"), losses(tmp_path / "bsp")
    assert [kind for kind, _ in ours] == [kind for kind, _ in theirs]  # the same updates
    for (_, a), (_, b) in zip(ours, theirs, strict=True):
        assert a == pytest.approx(b, rel=1e-12, nan_ok=True)


@pytest.mark.parametrize("sets, message", [
    (["parallel.tensor=3"], "parallel.tensor: 3 does not divide"),
    (["parallel.pipeline=5"], "parallel.pipeline: 5 stages"),
    (["parallel.microbatches=3"], "parallel.microbatches: 3 does not divide"),
    (['strategy.kind="bsp-ps"', "parallel.pipeline=2"],
     "parallel.pipeline: real runs split a replica with bsp only"),
    (['workload.model="softmax"', "parallel.microbatches=2"], "workload.model 'softmax'"),
    (['strategy.pipelining="wfbp"', "parallel.pipeline=2"], "strategy.pipelining: 'wfbp'"),
    (["compute.time_s=0.001", "parallel.pipeline=2"], "compute.time_s"),
    (["checkpoint.every_steps=2", "parallel.microbatches=2"], "checkpoint.every_steps"),
    (['parallel.schedule="interleaved"', "parallel.virtual_stages=2", "parallel.pipeline=2",
      "parallel.microbatches=2"], "parallel.virtual_stages: real ranks run one chunk"),
])
def test_what_real_runs_do_not_split_exits_2_naming_the_key(tmp_path, capsys, sets, message,
                                                           split_mlp_data, write_toml):
    config = write_toml(tmp_path / "bad.toml", split_mlp_data())
    out = tmp_path / "out"
    assert main(["real", str(config), "--out", str(out),
                 *[a for s in sets for a in ("--set", s)]]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
