"""The simulated executor runs parallelism plans (bsp; sim/simulated/strategies/model_parallel.py),
each check against a formula written out here or an independent reference: with free
communication the step is stage_schedule.evaluate's (and (m + p - 1)(t_f + t_b), bubble
(p - 1)/(m + p - 1), for balanced stages); one stage, one shard and one microbatch is bsp,
bit for bit and time for time; the split replica's losses are bsp's (bit for bit with one
microbatch and one shard, within 1e-12 otherwise); every rank's activities add up to the
run's time; the trace draws the schedule (a track per rank, passes named F3/B3, arrows from
each message's sender to its receiver)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import defaultdict

import pytest
from trace_cases import holder

from sim.cli import main
from sim.errors import UserError
from sim.recorder import KINDS
from sim.simulated.engine import simulate
from sim.simulated.strategies.model_parallel import MODEL_PARALLEL_KEYS
from sim.training.parallel_plan import PlanLayer, build_plan, rank_track
from sim.training.stage_schedule import SCHEDULES, evaluate
from sim.training.strategies import STRATEGIES
from sim.training.validator import validate, validate_real
from sim.workloads.models import make_model

# the strategies that take [parallel] (bsp allreduces a stage's gradients, bsp-ps pushes them
# to the servers and pulls them back)
MP_KINDS = sorted(name for name, row in STRATEGIES.items() if row.model_parallel)

# communication that costs nothing: no latency, no overhead, bytes at 1e30 B/s (1e-26 s for
# the largest message here), on the ideal host (no CPU costs)
FREE = {"name": "free", "bandwidth_Bps": 1e30, "latency_s": 0.0, "overhead_s": 0.0}
STEP_S = 1e-3  # compute.time_s: a whole replica's gradient
BATCH = 8
HIDDEN = [16, 16, 16]  # 8 -> 16 -> 16 -> 16 -> 2: four dense layers


def mlp(tiny_config_data, *layers, **keys):
    """The tiny config (2 replicas, 8 features, batch 8) with an MLP, a fixed gradient time
    and free communication; ``layers`` of dotted keys and ``keys`` (``__`` = ``.``) on top."""
    return validate(tiny_config_data(
        {"workload.model": "mlp", "workload.hidden": HIDDEN, "compute.time_s": STEP_S,
         "cluster.fabric": FREE, "run.iterations": 4, "run.eval_every": 2}, *layers, **keys))


def gradient_flops(config) -> float:
    """A replica's forward + backward FLOPs per sample, as the MLP counts them: 2 d_in d_out
    forward, 4 d_in d_out backward (2 for the first layer: no input gradient)."""
    widths = [config.workload.features, *config.workload.hidden, 2]
    return sum((2 + (4 if i else 2)) * a * b for i, (a, b) in enumerate(itertools.pairwise(widths)))


def stage_seconds(config, plan) -> tuple[list[float], list[float]]:
    """Each stage's forward and backward seconds per microbatch: the gradient's time by
    FLOP share, split over the microbatches."""
    per_flop = STEP_S / gradient_flops(config)
    m = plan.microbatches
    forward = [per_flop * sum(x.forward_flops for x in st.layers) / m for st in plan.stages]
    backward = [per_flop * sum(x.backward_flops for x in st.layers) / m for st in plan.stages]
    return forward, backward


# ---- step time and bubble with free communication -------------------------------------

def balanced_layers(n: int = 4) -> list[PlanLayer]:
    """n equal dense layers (16 x 16 with a bias, FLOPs as the MLP counts a middle layer):
    any split into equal counts gives equal stages, forward and backward."""
    return [PlanLayer(f"d{i}", 16, 16, True, 2.0 * 256, 4.0 * 256) for i in range(n)]


@pytest.mark.parametrize("kind", MP_KINDS)
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("p, m", [(2, 1), (2, 4), (2, 8), (4, 1), (4, 4), (4, 8)])
def test_balanced_stages_step_in_m_plus_p_minus_1_slots(tiny_config_data, kind, schedule, p, m):
    """(m + p - 1)(t_f + t_b) per step and a bubble of (p - 1)/(m + p - 1), for GPipe and
    1F1B (Huang et al. 2019, Sec. 2.3; Narayanan et al. 2021, Sec. 2.2.1)."""
    config = mlp(tiny_config_data, parallel__pipeline=p, parallel__microbatches=m,
                 parallel__schedule=schedule, workload__hidden=[16] * 7, strategy__kind=kind)
    plan = build_plan(config, layers=balanced_layers(8))
    summary = simulate(config, plan=plan).summary
    t_f = STEP_S * 2 * 256 * (8 // p) / gradient_flops(config) / m
    t_b = 2 * t_f
    assert summary["iter_s"] == pytest.approx((m + p - 1) * (t_f + t_b), rel=1e-9)
    assert summary["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
    assert summary["pipeline_p2p_s"] == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("p, m", [(2, 1), (2, 4), (4, 8)])
def test_every_microbatch_pass_moves_its_layers_weights(tiny_config_data, tmp_path, schedule,
                                                         p, m):
    """A device with a memory bandwidth B: a layer's forward pass of r rows takes
    r F_f / R + W / B and its backward r F_b / R + 2 W / B (reads W, writes its gradient;
    sim.training.compute_model), whatever r, and every microbatch after the first adds
    3 W / B to accumulate its gradient (read it and the sum, write the sum), spread over the
    backwards: the balanced step is (m + p - 1)(t_f + t_b) with t_f, t_b those sums over a
    stage's layers at r = batch / m."""
    rate, bandwidth = 1e9, 1e7
    device = tmp_path / "device.json"
    device.write_text(json.dumps({"format": "sgd-lab.device-profile/1", "flops_per_s": rate,
                                  "memory_Bps": bandwidth}))
    config = mlp(tiny_config_data, parallel__pipeline=p, parallel__microbatches=m,
                 parallel__schedule=schedule, workload__hidden=[16] * 7,
                 compute__time_s=None, compute__device=f"calibrated:{device}")
    layers = balanced_layers(8)
    summary = simulate(config, plan=build_plan(config, layers=layers)).summary
    rows, weights = config.workload.batch // m, layers[0].params * 8
    per_stage = 8 // p
    t_f = per_stage * (rows * layers[0].forward_flops / rate + weights / bandwidth)
    moves = 2 + 3 * (m - 1) / m
    t_b = per_stage * (rows * layers[0].backward_flops / rate + moves * weights / bandwidth)
    assert summary["iter_s"] == pytest.approx((m + p - 1) * (t_f + t_b), rel=1e-9)


def test_a_whole_gradient_moves_every_weight_three_times(tiny_config_data, tmp_path):
    """Unsplit: overhead + FLOPs / R + 3 x parameter bytes / B, parameters counted here
    from the MLP's widths (weights and biases)."""
    from sim.training.workload import build_workload

    device = tmp_path / "device.json"
    device.write_text(json.dumps({"format": "sgd-lab.device-profile/1", "flops_per_s": 2e9,
                                  "overhead_s": 3e-6, "memory_Bps": 5e8}))
    config = mlp(tiny_config_data, compute__time_s=None,
                 compute__device=f"calibrated:{device}")
    widths = [config.workload.features, *HIDDEN, 2]
    params = sum(a * b + b for a, b in itertools.pairwise(widths))
    expected = 3e-6 + BATCH * gradient_flops(config) / 2e9 + 3 * params * 8 / 5e8
    assert build_workload(config).compute.base_s == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("kind", MP_KINDS)
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("keys", [
    {"parallel.pipeline": 2, "parallel.microbatches": 4},
    {"parallel.pipeline": 3, "parallel.microbatches": 2},
    {"parallel.pipeline": 2, "parallel.stage_layers": [1, 3], "parallel.microbatches": 8},
    {"parallel.pipeline": 4, "parallel.microbatches": 4, "cluster.workers": 1},
    {"parallel.pipeline": 2, "parallel.tensor": 2, "parallel.microbatches": 2},
])
def test_unbalanced_stages_step_as_the_reference_timeline(tiny_config_data, kind, schedule,
                                                          keys):
    """The MLP's stages are not balanced (the first layer has no input gradient; widths
    differ): the step is stage_schedule.evaluate's for the stages' own times, and the
    bubble its timeline's. With tensor shards, each shard computes 1/t of a split layer."""
    config = mlp(tiny_config_data, keys, parallel__schedule=schedule, strategy__kind=kind)
    plan = build_plan(config)
    forward, backward = stage_seconds(config, plan)
    reference = evaluate([st.ops for st in plan.stages], forward, backward)
    summary = simulate(config).summary
    assert summary["iter_s"] == pytest.approx(reference.step_s, rel=1e-9)
    assert summary["bubble_fraction"] == pytest.approx(reference.bubble_fraction, abs=1e-9)
    assert summary["stage_compute_s"] == pytest.approx(
        [summary["iterations"] * busy for busy in reference.busy_s], rel=1e-9)


# ---- one stage, one shard, one microbatch: bsp ----------------------------------------

PLAIN = {"workload.model": "mlp", "workload.dataset": "digits", "workload.hidden": [32, 16],
         "cluster.workers": 4, "cluster.fabric": "eth-10g", "run.iterations": 12,
         "run.eval_every": 4}


@pytest.mark.parametrize("kind", MP_KINDS)
@pytest.mark.parametrize("keys", [
    {},
    {"cluster.host": "epyc-core"},
    {"cluster.host": "epyc-core", "cluster.ranks_per_host": 2},
    {"cluster.host": "epyc-core", "cluster.ranks_per_host": 4, "cluster.wait": "sleep"},
    {"compute.distribution": "exponential", "compute.straggler_fraction": 0.25,
     "compute.straggler_slowdown": 3.0,
     "compute.slowdowns": [{"worker": 1, "factor": 2.0, "start_s": 1e-4, "end_s": 4e-4}]},
    {"strategy.compression": "topk", "strategy.topk_ratio": 0.1},
    {"cluster.network": "analytical", "workload.momentum": 0.9},
    {"run.time_limit_s": 3e-4, "run.iterations": 1000},
])
def test_one_stage_one_shard_one_microbatch_is_the_plain_strategy(tiny_config_data, kind, keys):
    """The plan's executor on a plan that splits nothing gives the plain strategy's summary
    and metrics, bit for bit (where ranks share cores too: it hands cores out in the same
    order): every key bsp (bsp-ps) writes but ``events`` (SimPy's count of the events it
    processed, which the executor's code decides, as ``wall_s``)."""
    config = validate(tiny_config_data(PLAIN, keys, strategy__kind=kind))
    plain = simulate(config)
    planned = simulate(config, plan=build_plan(config))
    assert planned.metrics_csv == plain.metrics_csv
    left_out = {"wall_s", "events"}
    assert {k: v for k, v in planned.summary.items() if k not in MODEL_PARALLEL_KEYS
            and k not in left_out} == {k: v for k, v in plain.summary.items()
                                       if k not in left_out}
    assert set(planned.summary) - set(plain.summary) == set(MODEL_PARALLEL_KEYS)
    assert planned.summary["bubble_fraction"] == 0.0


@pytest.mark.parametrize("kind", MP_KINDS)
@pytest.mark.parametrize("parallel, exact", [
    ({"parallel.pipeline": 2}, True),
    ({"parallel.pipeline": 3}, True),
    ({"parallel.microbatches": 4}, False),
    ({"parallel.tensor": 2}, False),
    ({"parallel.pipeline": 2, "parallel.tensor": 2, "parallel.microbatches": 4}, False),
])
def test_losses_are_the_unsplit_models_whatever_the_split(tiny_config_data, kind, parallel,
                                                          exact):
    """The split replica's numerics (sim.training.stage_numerics): with the same batches,
    seed and data order, the losses (updates' and evaluations') are bsp's, bit for bit
    with one microbatch and one shard (the same kernel calls, stage by stage), within 1e-12
    relative otherwise (sums reassociated over microbatches and shards); the times are the
    plan's."""
    base = {**PLAIN, "run.iterations": 12, "strategy.kind": kind}
    plain = simulate(validate(tiny_config_data(base)))
    split = simulate(validate(tiny_config_data(base, parallel)))

    def losses(result) -> list[tuple[str, float]]:
        rows = [line.split(",") for line in result.metrics_csv.splitlines()[1:]]
        return [(row[0], float(row[8])) for row in rows]

    got, want = losses(split), losses(plain)
    assert [kind for kind, _ in got] == [kind for kind, _ in want]
    if exact:
        assert got == want
    else:
        assert [x for _, x in got] == pytest.approx([x for _, x in want], rel=1e-12)
    assert split.summary["sim_time_s"] != plain.summary["sim_time_s"]


# ---- time accounting ------------------------------------------------------------------

SPLIT = {"parallel.pipeline": 2, "parallel.tensor": 2, "parallel.microbatches": 4,
         "cluster.fabric": "eth-10g"}


@pytest.mark.parametrize("kind", MP_KINDS)
@pytest.mark.parametrize("keys", [
    {},
    {"parallel.schedule": "gpipe", "cluster.host": "epyc-core"},
    {"cluster.host": "epyc-core", "cluster.ranks_per_host": 4, "cluster.cores": 2},
    {"cluster.network": "analytical", "compute.distribution": "lognormal"},
    {"compute.time_s": None, "compute.device": "v100", "cluster.topology": "leaf-spine",
     "cluster.hosts_per_leaf": 2},
])
def test_every_ranks_activities_add_up_to_the_run(tiny_config_data, kind, keys):
    config = mlp(tiny_config_data, SPLIT, keys, strategy__kind=kind)
    summary = simulate(config).summary
    assert len(summary["workers"]) == summary["ranks"] == 2 * 2 * 2
    for rank in summary["workers"]:
        assert set(rank) == set(KINDS)
        assert sum(rank.values()) == pytest.approx(summary["sim_time_s"], rel=1e-9)
    assert summary["pipeline_p2p_s"] > 0 and summary["tensor_allreduce_s"] > 0
    assert 0 < summary["bubble_fraction"] < 1


@pytest.mark.parametrize("kind", MP_KINDS)
def test_runs_are_deterministic(tiny_config_data, kind):
    config = mlp(tiny_config_data, SPLIT, compute__distribution="exponential",
                 cluster__host="epyc-core", strategy__kind=kind)
    first, again = simulate(config), simulate(config)
    assert first.metrics_csv == again.metrics_csv
    assert {k: v for k, v in first.summary.items() if k != "wall_s"} == \
        {k: v for k, v in again.summary.items() if k != "wall_s"}


# ---- the plan's figures ---------------------------------------------------------------

def test_summary_reports_the_plans_memory_and_messages(tiny_config_data):
    config = mlp(tiny_config_data, SPLIT, workload__momentum=0.9)
    plan = build_plan(config)
    summary = simulate(config).summary
    assert summary["peak_memory_bytes"] == plan.peak_memory_bytes == max(
        summary["memory_bytes_by_stage"])
    assert summary["memory_bytes_by_stage"] == plan.memory_bytes_by_stage
    assert summary["activation_bytes_per_step"] == plan.activation_bytes_per_step
    assert summary["device_memory_bytes"] is None and summary["memory_fits"] is None
    # 2 replicas x 2 shards x 4 microbatches x (activations 8 x 16 floats forward and as
    # many gradients back) between the two stages (a stage holds two layers)
    assert summary["activation_bytes_per_step"] == 2 * 2 * 4 * 2 * (BATCH // 4) * 16 * 8


def test_a_rank_too_large_for_its_device_runs_with_report_and_is_flagged(
        tiny_config_data, tmp_path):
    device = tmp_path / "small.json"
    device.write_text(json.dumps({"format": "sgd-lab.device-profile/1", "flops_per_s": 1e12,
                                  "memory_bytes": 2048}))
    keys = {**SPLIT, "compute.device": f"calibrated:{device}"}
    with pytest.raises(UserError, match="compute.device"):
        mlp(tiny_config_data, keys)
    summary = simulate(mlp(tiny_config_data, keys, run__memory="report")).summary
    assert summary["device_memory_bytes"] == 2048
    assert summary["memory_fits"] is False and summary["peak_memory_bytes"] > 2048


# ---- the trace ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", MP_KINDS)
@pytest.mark.parametrize("host", ["ideal", "epyc-core"])
def test_the_trace_draws_the_schedule_with_an_arrow_per_message(tiny_config_data, kind, host):
    config = mlp(tiny_config_data, SPLIT, cluster__host=host, run__iterations=2,
                 strategy__kind=kind)
    plan = build_plan(config)
    events = simulate(config).trace["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 0}
    assert threads == {r: rank_track(place) for r, place in enumerate(plan.ranks)}
    m = plan.microbatches
    for rank in range(len(plan.ranks)):
        names = {e["name"] for e in events if e["ph"] == "X" and e["pid"] == 0
                 and e["tid"] == rank and e["cat"] == "compute"}
        assert names == {f"{kind}{k}" for kind in "FB" for k in range(m)}
    arrows = defaultdict(list)
    for e in events:
        if e["ph"] in ("s", "f") and e["cat"] == "handoff":
            arrows[e["id"]].append(e)
    # every message between stages: replicas x shards x microbatches x 2 (F and B), per step
    assert len(arrows) == 2 * 2 * m * 2 * 2
    for start, end in arrows.values():
        assert (start["ph"], end["ph"], end["bp"]) == ("s", "f", "e")
        assert start["ts"] <= end["ts"]
        sent, taken = holder(events, start), holder(events, end)
        assert sent["name"] == taken["name"]  # the same pass of the same microbatch
        stages = {plan.ranks[e["tid"]].stage for e in (sent, taken)}
        assert stages == {0, 1}
        assert start["ts"] == pytest.approx(sent["ts"] + sent["dur"], abs=2e-3)
        assert end["ts"] == pytest.approx(taken["ts"], abs=2e-3)


# ---- commands -------------------------------------------------------------------------

def test_sim_run_runs_a_config_with_parallel_and_sim_real_accepts_it(
        tmp_path, capsys, tiny_config_data, write_toml):
    data = tiny_config_data({"workload.model": "mlp", "workload.hidden": HIDDEN,
                             "parallel.pipeline": 2, "parallel.microbatches": 2,
                             "run.iterations": 3})
    path = write_toml(tmp_path / "exp.toml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["iterations"] == 3 and set(MODEL_PARALLEL_KEYS) <= set(summary)
    validate_real(validate(data))  # real ranks run it too (tests/real/test_real_split.py)


def test_a_model_parallel_strategy_without_a_simulated_class_exits_2(
        tmp_path, capsys, tiny_config_data, write_toml, monkeypatch):
    """A row that takes [parallel] but names no model-parallel class: `sim run` exits 2
    naming the strategy, and writes nothing."""
    row = dataclasses.replace(STRATEGIES["bsp"], simulated_model_parallel=None)
    monkeypatch.setitem(STRATEGIES, "bsp", row)
    data = tiny_config_data({"workload.model": "mlp", "workload.hidden": HIDDEN,
                             "parallel.pipeline": 2, "run.iterations": 3})
    path = write_toml(tmp_path / "exp.toml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "'bsp' takes [parallel], but the simulator" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_microbatches_of_a_model_without_a_plan_exit_2_naming_the_key(
        tmp_path, capsys, tiny_config_data, write_toml):
    data = tiny_config_data({"workload.profile": "resnet50", "workload.numerics": False,
                             "parallel.microbatches": 2, "run.iterations": 3})
    path = write_toml(tmp_path / "exp.toml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "workload.profile" in capsys.readouterr().err


def test_the_model_has_the_layers_the_helpers_count():
    """gradient_flops above counts what the model's layers charge."""
    model = make_model("mlp", 8, 2, hidden=tuple(HIDDEN))
    total = sum(layer.forward_flops + layer.backward_flops for layer in model.layers)
    assert total == gradient_flops(validate({"workload": {"model": "mlp", "hidden": HIDDEN,
                                                          "features": 8}}))


@pytest.mark.parametrize("keys", [
    {"parallel.pipeline": 2, "parallel.microbatches": 4},
    {"parallel.pipeline": 2, "parallel.tensor": 2, "parallel.microbatches": 2},
    {},
])
def test_a_timing_only_run_takes_the_time_of_the_run_with_numbers(tiny_config_data, keys):
    """workload.numerics = false times the model's layers from the data set's shape: on the
    ideal host (no data to gather) every figure of time is the numeric run's, bit for bit,
    and there is no loss."""
    timed = {"compute.time_s": None, "compute.device": "v100", "cluster.fabric": "ib-hdr"}
    full = simulate(mlp(tiny_config_data, keys, timed)).summary
    only = simulate(mlp(tiny_config_data, keys, timed, workload__numerics=False)).summary
    for key in ("iter_s", "compute_s", "wire_s", "wait_s", "peak_memory_bytes"):
        assert only[key] == full[key], key
    assert full["final_loss"] > 0 and only["final_loss"] is None
