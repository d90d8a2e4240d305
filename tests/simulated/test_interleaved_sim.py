"""The simulated executor runs the interleaved 1F1B schedule (sim/training/stage_schedule.py;
Narayanan et al. 2021, Sec. 2.2.2) on a plan whose stages hold v chunks each: with free
communication the step is stage_schedule.evaluate's over the virtual stages, and
(m + (p - 1)/v)(t_f + t_b) for balanced ones; the losses are the unsplit model's; every
rank's activities add up; the plan's stash counts each chunk's microbatches in flight."""

from __future__ import annotations

import itertools

import pytest

from sim.errors import UserError
from sim.recorder import KINDS
from sim.simulated.engine import simulate
from sim.training.parallel_plan import PlanLayer, build_plan
from sim.training.stage_schedule import evaluate, peak_stash
from sim.training.validator import validate

FREE = {"name": "free", "bandwidth_Bps": 1e30, "latency_s": 0.0, "overhead_s": 0.0}
STEP_S = 1e-3  # compute.time_s: a whole replica's gradient
HIDDEN = [16] * 7  # 8 -> 16 x 7 -> 2: eight dense layers


def mlp(tiny_config_data, *layers, **keys):
    """The tiny config (2 replicas, 8 features, batch 8), an MLP of eight layers, a fixed
    gradient time and free communication, interleaved; ``layers`` of dotted keys and ``keys``
    (``__`` = ``.``) on top."""
    return validate(tiny_config_data(
        {"workload.model": "mlp", "workload.hidden": HIDDEN, "compute.time_s": STEP_S,
         "cluster.fabric": FREE, "run.iterations": 4, "run.eval_every": 2,
         "parallel.schedule": "interleaved"}, *layers, **keys))


def gradient_flops(config) -> float:
    """A replica's forward + backward FLOPs per sample, as the MLP counts them."""
    widths = [config.workload.features, *config.workload.hidden, 2]
    return sum((2 + (4 if i else 2)) * a * b for i, (a, b) in enumerate(itertools.pairwise(widths)))


def virtual_seconds(config, plan) -> tuple[list[float], list[float]]:
    """Each virtual stage's forward and backward seconds per microbatch (FLOP share)."""
    per_flop = STEP_S / gradient_flops(config) / plan.microbatches
    pieces = [plan.virtual_stage(u) for u in range(plan.pipeline * plan.chunks)]
    return ([per_flop * sum(x.forward_flops for x in c.layers) for c in pieces],
            [per_flop * sum(x.backward_flops for x in c.layers) for c in pieces])


def balanced_layers(n: int = 8) -> list[PlanLayer]:
    return [PlanLayer(f"d{i}", 16, 16, True, 2.0 * 256, 4.0 * 256) for i in range(n)]


@pytest.mark.parametrize("p, v, m", [(2, 2, 2), (2, 2, 4), (2, 4, 4), (4, 2, 4), (4, 2, 8)])
def test_balanced_stages_step_in_m_plus_p_minus_1_over_v_slots(tiny_config_data, p, v, m):
    """t_f, t_b: a whole stage's (its v chunks') seconds per microbatch; the step is
    (m + (p - 1)/v)(t_f + t_b) and the bubble the reference timeline's."""
    config = mlp(tiny_config_data, parallel__pipeline=p, parallel__virtual_stages=v,
                 parallel__microbatches=m)
    plan = build_plan(config, layers=balanced_layers())
    summary = simulate(config, plan=plan).summary
    t_f = STEP_S * 2 * 256 * (8 // p) / gradient_flops(config) / m
    t_b = 2 * t_f
    assert summary["iter_s"] == pytest.approx((m + (p - 1) / v) * (t_f + t_b), rel=1e-9)
    f, b = [t_f / v] * (p * v), [t_b / v] * (p * v)
    reference = evaluate([st.ops for st in plan.stages], f, b)
    assert summary["bubble_fraction"] == pytest.approx(reference.bubble_fraction, abs=1e-9)
    assert summary["pipeline_p2p_s"] == pytest.approx(0.0, abs=1e-15)
    assert summary["stage_layers"] == [8 // (p * v)] * (p * v)


@pytest.mark.parametrize("keys", [
    {"parallel.pipeline": 2, "parallel.virtual_stages": 2, "parallel.microbatches": 4},
    {"parallel.pipeline": 2, "parallel.virtual_stages": 3, "parallel.microbatches": 2},
    {"parallel.pipeline": 3, "parallel.virtual_stages": 2, "parallel.microbatches": 6,
     "workload.batch": 12},
    {"parallel.pipeline": 2, "parallel.virtual_stages": 2, "parallel.microbatches": 2,
     "parallel.stage_layers": [1, 3, 2, 2]},
    {"parallel.pipeline": 2, "parallel.virtual_stages": 2, "parallel.tensor": 2,
     "parallel.microbatches": 2},
])
def test_unbalanced_virtual_stages_step_as_the_reference_timeline(tiny_config_data, keys):
    """The MLP's virtual stages are not balanced (the first layer has no input gradient):
    the step is evaluate's for the virtual stages' own times, and the bubble its
    timeline's."""
    config = mlp(tiny_config_data, keys)
    plan = build_plan(config)
    forward, backward = virtual_seconds(config, plan)
    reference = evaluate([st.ops for st in plan.stages], forward, backward)
    summary = simulate(config).summary
    assert summary["iter_s"] == pytest.approx(reference.step_s, rel=1e-9)
    assert summary["bubble_fraction"] == pytest.approx(reference.bubble_fraction, abs=1e-9)
    assert summary["stage_compute_s"] == pytest.approx(
        [summary["iterations"] * busy for busy in reference.busy_s], rel=1e-9)


def test_losses_are_the_unsplit_models(tiny_config_data):
    """The chunks' numerics go virtual stage by virtual stage: the unsplit model's losses
    within 1e-12 (sums over microbatches reassociated)."""
    base = {"workload.model": "mlp", "workload.dataset": "digits",
            "workload.hidden": [32, 16, 16], "cluster.workers": 4, "cluster.fabric": "eth-10g",
            "run.iterations": 8, "run.eval_every": 4}
    plain = simulate(validate(tiny_config_data(base)))
    split = simulate(validate(tiny_config_data(
        base, {"parallel.pipeline": 2, "parallel.schedule": "interleaved",
               "parallel.virtual_stages": 2, "parallel.microbatches": 2})))

    def losses(result) -> list[float]:
        return [float(line.split(",")[8]) for line in result.metrics_csv.splitlines()[1:]]

    assert losses(split) == pytest.approx(losses(plain), rel=1e-12)


def test_every_ranks_activities_add_up_to_the_run(tiny_config_data):
    config = mlp(tiny_config_data, parallel__pipeline=2, parallel__virtual_stages=2,
                 parallel__microbatches=4, parallel__tensor=2, cluster__fabric="eth-10g",
                 cluster__host="epyc-core")
    summary = simulate(config).summary
    for rank in summary["workers"]:
        assert set(rank) == set(KINDS)
        assert sum(rank.values()) == pytest.approx(summary["sim_time_s"], rel=1e-9)
    assert summary["pipeline_p2p_s"] > 0 and 0 < summary["bubble_fraction"] < 1


def test_the_stash_counts_each_chunks_microbatches_at_their_size(tiny_config_data):
    """A rank's activations: the peak along its passes of each live (microbatch, chunk)'s
    stash (its layers' inputs, the last virtual stage's logits too); every boundary between
    virtual stages carries a message, p - 1 -> 0 included."""
    config = mlp(tiny_config_data, parallel__pipeline=2, parallel__virtual_stages=2,
                 parallel__microbatches=4)
    plan = build_plan(config)
    rows = config.workload.batch // 4
    widths = [config.workload.features, *HIDDEN]
    for st in plan.stages:
        size = [rows * 8 * (sum(widths[x.layer] for x in c.layers)
                            + (2 if c.index == 3 else 0)) for c in st.pieces]
        assert st.memory.activations_bytes == peak_stash(st.ops, lambda c, size=size: size[c])
        assert st.peak_in_flight == {0: 5, 1: 3}[st.index]  # 2 (p - s - 1) + (v - 1) p + 1
    # 3 boundaries x 4 microbatches x 2 replicas, each 16 floats x rows both ways
    assert plan.activation_bytes_per_step == 3 * 4 * 2 * 2 * rows * 16 * 8
    assert plan.next_rank(1, 0) == 0 and plan.prev_rank(0, 1) == 1
    assert plan.next_rank(1, 1) is None and plan.prev_rank(0, 0) is None


@pytest.mark.parametrize("keys, message", [
    ({"parallel.virtual_stages": 2, "parallel.schedule": "1f1b"}, "parallel.virtual_stages"),
    ({"parallel.virtual_stages": 2, "parallel.pipeline": 1}, "parallel.virtual_stages"),
    ({"parallel.virtual_stages": 2, "parallel.microbatches": 3, "workload.batch": 6},
     "parallel.microbatches"),
    ({"parallel.virtual_stages": 8}, "parallel.virtual_stages"),
    ({"parallel.virtual_stages": 2, "parallel.stage_layers": [4, 4]},
     "parallel.stage_layers"),
])
def test_a_bad_interleaving_is_refused_naming_the_key(tiny_config_data, keys, message):
    base = {"parallel.pipeline": 2, "parallel.microbatches": 2}
    with pytest.raises(UserError, match=message):
        mlp(tiny_config_data, base, keys)
