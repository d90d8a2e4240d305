"""Parallelism plans (sim/training/parallel_plan.py): placement, stage balance, Megatron-LM's
tensor-parallel allreduces, messages between stages and each rank's memory, each against a
formula written out here."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import UserError
from sim.training.parallel_plan import (
    PlanLayer,
    balance,
    build_plan,
    layout_words,
    plan_layers,
    plannable,
    split_key,
)
from sim.training.validator import validate
from sim.workloads.models import make_model

B = 8  # bytes of a float64


def config(tiny_config_data, **keys):
    """The tiny config with an MLP (8 -> 64 -> 32 -> 16 -> 2) and ``keys`` (``__`` = ``.``)."""
    return validate(tiny_config_data({"workload.model": "mlp", "workload.hidden": [64, 32, 16]},
                                     **keys))


def dense(widths: list[int]) -> list[PlanLayer]:
    """A chain of dense layers with biases, FLOPs as the MLP counts them."""
    return [PlanLayer(f"d{i}", din, dout, True, 2.0 * din * dout,
                      (4.0 if i else 2.0) * din * dout, input_grad=i > 0)
            for i, (din, dout) in enumerate(itertools.pairwise(widths))]


# ---- placement ------------------------------------------------------------------------

@pytest.mark.parametrize("d, p, t, per_host", [(1, 1, 1, 1), (2, 2, 2, 4), (2, 3, 2, 2),
                                                (3, 2, 4, 8), (2, 4, 1, 4), (4, 2, 2, 16)])
def test_ranks_are_replica_stage_shard_with_shards_then_stages_sharing_a_host(
        tiny_config_data, d, p, t, per_host):
    plan = build_plan(config(tiny_config_data, cluster__workers=d, parallel__pipeline=p,
                             parallel__tensor=t, cluster__ranks_per_host=per_host,
                             workload__hidden=[64, 32, 16, 8]))
    assert len(plan.ranks) == d * p * t
    coords = {(r.replica, r.stage, r.shard) for r in plan.ranks}
    assert coords == set(itertools.product(range(d), range(p), range(t)))
    for r in plan.ranks:
        assert plan.rank_of(r.replica, r.stage, r.shard) == r.rank
        assert r.host == r.rank // per_host
        group = plan.tensor_group(r.rank)
        assert len(group) == t and {plan.ranks[g].stage for g in group} == {r.stage}
        if per_host % t == 0:  # Megatron: a tensor group inside a node
            assert {plan.ranks[g].host for g in group} == {r.host}
        if per_host % (p * t) == 0:  # then a replica's stages on the same host
            stages = [plan.rank_of(r.replica, s, r.shard) for s in range(p)]
            assert {plan.ranks[x].host for x in stages} == {r.host}
        peers = plan.data_group(r.rank)
        assert len(peers) == d and {(plan.ranks[x].stage, plan.ranks[x].shard)
                                    for x in peers} == {(r.stage, r.shard)}
        nxt, prev = plan.next_rank(r.rank), plan.prev_rank(r.rank)
        assert (nxt is None) == (r.stage == p - 1) and (prev is None) == (r.stage == 0)
        if nxt is not None:
            assert plan.prev_rank(nxt) == r.rank
            assert (plan.ranks[nxt].replica, plan.ranks[nxt].shard) == (r.replica, r.shard)


def test_rank_hosts_place_the_ranks_when_given(tiny_config_data):
    plan = build_plan(config(tiny_config_data, parallel__pipeline=2,
                             cluster__rank_hosts=[0, 1, 1, 0]))
    assert [r.host for r in plan.ranks] == [0, 1, 1, 0]


# ---- stages ---------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0.1, 100.0), min_size=1, max_size=9), st.data())
def test_balance_finds_the_smallest_largest_stage(weights, data):
    """Against brute force over every contiguous cut into p non-empty parts."""
    p = data.draw(st.integers(1, len(weights)))
    counts = balance(weights, p)
    assert len(counts) == p and sum(counts) == len(weights) and min(counts) >= 1

    def largest(cut):
        edges = [0, *itertools.accumulate(cut)]
        return max(sum(weights[a:b]) for a, b in itertools.pairwise(edges))

    best = min(largest([b - a for a, b in itertools.pairwise([0, *cuts, len(weights)])])
               for cuts in itertools.combinations(range(1, len(weights)), p - 1))
    assert largest(counts) == pytest.approx(best, rel=1e-12)


def test_stages_are_balanced_by_flops_unless_stage_layers_says(tiny_config_data):
    # the MLP's layers, forward + backward FLOPs per sample: 2048, 12288, 3072, 192
    plan = build_plan(config(tiny_config_data, parallel__pipeline=2))
    assert [(s.first, s.last) for s in plan.stages] == [(0, 1), (2, 3)]
    plan = build_plan(config(tiny_config_data, parallel__pipeline=2,
                             parallel__stage_layers=[1, 3]))
    assert [(s.first, s.last) for s in plan.stages] == [(0, 0), (1, 3)]


def test_model_layers_carry_their_widths():
    layers = plan_layers(make_model("mlp", 8, 2, hidden=(64, 32)))
    assert [(x.inputs, x.outputs, x.bias, x.input_grad) for x in layers] == [
        (8, 64, True, False), (64, 32, True, True), (32, 2, True, True)]
    assert [x.params for x in layers] == [8 * 64 + 64, 64 * 32 + 32, 32 * 2 + 2]
    assert plan_layers(make_model("softmax", 8, 3))[0].outputs == 3


# ---- tensor parallelism: Megatron-LM's allreduces ---------------------------------------

@pytest.mark.parametrize("t", [2, 4])
@pytest.mark.parametrize("m", [1, 3])
def test_tensor_allreduces_are_megatrons_two_per_pair_per_microbatch(tiny_config_data, t, m):
    """Shoeybi et al. 2019, Sec. 3: a column/row pair (h -> 4h -> h) allreduces b x h
    activations once in forward and b x h gradients once in backward, per microbatch. Here
    stage 1 holds two pairs; stage 0's pair starts at the model's input, whose gradient
    nobody needs, so it has the forward allreduce only."""
    h, rows = 16, 6
    layers = dense([h, 4 * h, h, 4 * h, h, 4 * h, h])  # three pairs
    c = config(tiny_config_data, parallel__pipeline=2, parallel__tensor=t,
               parallel__microbatches=m, workload__batch=rows * m)
    c = c.model_copy(update={"parallel": c.parallel.model_copy(update={"stage_layers": [2, 4]})})
    plan = build_plan(c, layers)
    first, second = plan.stages
    assert [(a.phase, a.nbytes) for a in second.tensor_allreduces] == \
        [("forward", rows * h * B)] * 2 + [("backward", rows * h * B)] * 2
    assert [(a.phase, a.nbytes) for a in first.tensor_allreduces] == [("forward", rows * h * B)]
    assert [a.layer for a in second.tensor_allreduces] == [3, 5, 4, 2]  # row layers, then
    # column layers in backward order
    per_step = m * sum(len(s.tensor_allreduces) for s in plan.stages)
    assert per_step == m * (2 * 3 - 1)


def test_shards_split_the_pairs_and_keep_the_rest_whole(tiny_config_data):
    """A column layer's weights and bias are split; a row layer's weights are split and its
    bias stays on every shard (added once after the allreduce); FLOPs are split t ways."""
    layers = dense([8, 64, 32, 2])  # a pair and a whole last layer in one stage
    t = 4
    plan = build_plan(config(tiny_config_data, parallel__tensor=t), layers)
    (stage,) = plan.stages
    assert [x.role for x in stage.layers] == ["column", "row", "whole"]
    col, row, whole = stage.layers
    assert col.params == 64 // t * 8 + 64 // t
    assert row.params == 32 * (64 // t) + 32
    assert whole.params == layers[2].params
    assert t * stage.params == sum(x.params for x in layers) + (t - 1) * (32 + 2 + 32 * 2)
    assert (col.forward_flops, row.backward_flops) == (layers[0].forward_flops / t,
                                                       layers[1].backward_flops / t)
    assert (col.stash_width, row.stash_width, whole.stash_width) == (8, 64 // t, 32)


# ---- messages and memory --------------------------------------------------------------

def test_activations_go_forward_and_their_gradients_back(tiny_config_data):
    d, p, t, m, batch = 2, 2, 2, 4, 8
    plan = build_plan(config(tiny_config_data, cluster__workers=d, parallel__pipeline=p,
                             parallel__tensor=t, parallel__microbatches=m,
                             workload__batch=batch))
    rows = batch // m
    first, last = plan.stages
    assert (first.activation_bytes, first.gradient_bytes) == (rows * 32 * B, 0)
    assert (last.activation_bytes, last.gradient_bytes) == (0, rows * 32 * B)
    assert plan.activation_bytes_per_step == d * t * m * 2 * rows * 32 * B


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_memory_per_rank_is_parameters_gradients_momentum_and_stash(tiny_config_data,
                                                                     schedule, momentum):
    """Per rank: (2 + [momentum]) x its parameters x 8 bytes, plus the stashed inputs of its
    layers (and the last stage's logits) for each microbatch in flight: GPipe m, 1F1B
    min(p - i, m)."""
    p, m, batch = 4, 6, 12
    plan = build_plan(config(tiny_config_data, parallel__pipeline=p, parallel__microbatches=m,
                             parallel__schedule=schedule, workload__batch=batch,
                             workload__momentum=momentum))
    rows = batch // m
    params = [8 * 64 + 64, 64 * 32 + 32, 32 * 16 + 16, 16 * 2 + 2]  # one layer per stage
    stash = [8, 64, 32, 16 + 2]
    for i, stage in enumerate(plan.stages):
        flight = m if schedule == "gpipe" else min(p - i, m)
        expected = (2 + (momentum > 0)) * params[i] * B + flight * rows * stash[i] * B
        assert stage.memory.total_bytes == expected
    assert plan.peak_memory_bytes == max(plan.memory_bytes_by_stage)


def test_a_plan_needs_a_dense_model(tiny_config_data):
    """A sparse model has no layers to plan; the validator refuses splitting it."""
    data = tiny_config_data(workload__model="sparse-logreg", workload__dataset="sparse-powerlaw")
    assert not plannable(validate(data))
    with pytest.raises(UserError, match="workload.model: 'sparse-logreg' has no dense layers"):
        validate({**data, "parallel": {"tensor": 2}})
    assert split_key(config(tiny_config_data)) is None
    assert split_key(config(tiny_config_data, parallel__tensor=2)) == "tensor"


# ---- the layout in words --------------------------------------------------------------

@pytest.mark.parametrize("keys, words", [
    ({"cluster.workers": 4}, "4 workers"),
    ({"cluster.workers": 1}, "1 worker"),
    ({"cluster.workers": 1, "parallel.pipeline": 3, "parallel.microbatches": 4},
     "1 replica x 3 stages x 1 shard (3 ranks), 1f1b, 4 microbatches"),
    ({"cluster.workers": 2, "parallel.tensor": 2, "parallel.schedule": "gpipe"},
     "2 replicas x 1 stage x 2 shards (4 ranks), gpipe, 1 microbatch"),
])
def test_a_layout_in_words_counts_replicas_stages_shards_and_ranks(tiny_config_data, keys,
                                                                    words):
    assert layout_words(config(tiny_config_data, **{k.replace(".", "__"): v
                                                     for k, v in keys.items()})) == words
