"""A transformer profile's parallelism plan and activation recomputation
(sim/training/parallel_plan.py with sim/workloads/transformer.py): stages of whole layers
with the embedding first and the head last, Megatron-LM's two allreduces per layer each
way, pipeline messages of microbatch x s x h, and each stage's stash and backward FLOPs
under no, selective and full recomputation (Korthikanti et al. 2022), each against a
closed form written out here; an MLP's plan with recomputation too."""

from __future__ import annotations

import pytest

from sim.errors import UserError
from sim.training.config_warnings import config_warnings
from sim.training.parallel_plan import build_plan, split_key
from sim.training.real_checks import check_split
from sim.training.strategies import row_of
from sim.training.validator import validate
from sim.workloads.precision import run_itemsize
from sim.workloads.transformer import get_transformer

NAME = "megatron-1.2b"  # h 1536, a 16, l 40, s 1024, V 51,200
FP32 = 4  # a profile's plan itemsize until compute.precision reaches it
MODES = ("none", "selective", "full")


def gpt(**keys):
    """2 replicas of megatron-1.2b, batch 8, timing only; ``keys`` (``__`` = ``.``)."""
    data = {"cluster": {"workers": 2},
            "workload": {"profile": NAME, "numerics": False, "batch": 8},
            "strategy": {"kind": "bsp"}, "run": {"iterations": 2}}
    for key, value in keys.items():
        table, name = key.split("__")
        data.setdefault(table, {})[name] = value
    return validate(data)


def per_layer(t: int, mode: str) -> int:
    """A layer's stash per sequence at 4-byte values, 1-byte masks, written out: values
    2 s h (LN, QKV inputs) + (4 s h + 2 a s^2)/t (Q, K, V, projection input; softmax and
    dropout outputs) + 2 s h (LN, FFN inputs) + 8 s h / t (GeLU, FFN2 inputs); masks
    s h + a s^2 / t + s h. Selective drops 2 a s^2 / t values and a s^2 / t masks; full
    keeps the layer's input, s h values."""
    spec = get_transformer(NAME)
    s, h, a = spec.seq, spec.hidden, spec.heads
    if mode == "full":
        return FP32 * s * h
    core = 0 if mode == "selective" else 1
    values = 2 * s * h + (4 * s * h + core * 2 * a * s * s) // t + 2 * s * h + 8 * s * h // t
    masks = s * h + core * a * s * s // t + s * h
    return FP32 * values + masks


def test_a_transformer_profile_is_planned_by_fp32_elements():
    assert run_itemsize(gpt()) == FP32


@pytest.mark.parametrize("p, stage_layers, counts", [
    (4, [], [21, 20, 20, 21]),  # 10 layers each; the embedding first, the head last
    (4, [12, 8, 8, 12], [25, 16, 16, 25]),
    (1, [], [82]),
])
def test_stages_are_whole_layers_with_the_embedding_first_and_the_head_last(p, stage_layers,
                                                                           counts):
    plan = build_plan(gpt(parallel__pipeline=p, parallel__stage_layers=stage_layers))
    assert [st.last - st.first + 1 for st in plan.stages] == counts
    assert plan.stages[0].layers[0].layer == 0
    names = [get_transformer(NAME).parts()[x.layer].name for st in plan.stages
             for x in st.layers]
    assert names[0] == "embedding" and names[-1] == "head"
    for st in plan.stages[1:]:  # a stage starts with an attention part
        assert names[st.first].endswith(".attention")


@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize("m", [1, 4])
def test_two_allreduces_per_layer_each_way_of_microbatch_s_h(t, m):
    """Shoeybi et al. 2019, Fig. 3: per layer and microbatch, 2 allreduces forward (after
    the attention's and the MLP's row layer) and 2 backward (their column layers' input
    gradients), rows x s x h elements each; the vocab-parallel embedding's forward and the
    head's backward one each; none with t = 1."""
    spec = get_transformer(NAME)
    plan = build_plan(gpt(parallel__pipeline=4, parallel__tensor=t, parallel__microbatches=m))
    rows = 8 // m
    nbytes = rows * spec.seq * spec.hidden * FP32
    for st in plan.stages:
        layers = 10
        forward = [a for a in st.tensor_allreduces if a.phase == "forward"]
        backward = [a for a in st.tensor_allreduces if a.phase == "backward"]
        extra_f, extra_b = int(st.index == 0), int(st.index == 3)
        assert len(forward) == (2 * layers + extra_f if t > 1 else 0)
        assert len(backward) == (2 * layers + extra_b if t > 1 else 0)
        assert {a.nbytes for a in st.tensor_allreduces} <= {nbytes}


def test_pipeline_messages_are_microbatch_x_s_x_h():
    spec = get_transformer(NAME)
    plan = build_plan(gpt(parallel__pipeline=4, parallel__microbatches=4, parallel__tensor=2))
    nbytes = 2 * spec.seq * spec.hidden * FP32
    assert [st.activation_bytes for st in plan.stages] == [nbytes] * 3 + [0]
    assert [st.gradient_bytes for st in plan.stages] == [0] + [nbytes] * 3


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("t", [1, 2])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_stages_peak_stash_is_its_layers_for_each_microbatch_in_flight(mode, t, schedule):
    """Stage i of 4 (1F1B: min(4 - i, m) microbatches in flight; GPipe: m) keeps rows x its
    10 layers' stash per microbatch, stage 0 the embedding's dropout mask (s h bytes) too
    and the last stage the head's final-LN and logits inputs and its logits (2 s h +
    s V / t values), whatever the recomputation (neither is recomputed)."""
    spec = get_transformer(NAME)
    s, h, v = spec.seq, spec.hidden, spec.vocab
    m, rows = 4, 2
    plan = build_plan(gpt(parallel__pipeline=4, parallel__tensor=t, parallel__microbatches=m,
                          parallel__recompute=mode, parallel__schedule=schedule))
    for st in plan.stages:
        in_flight = m if schedule == "gpipe" else min(4 - st.index, m)
        extra = (s * h if st.index == 0 else 0) + \
            (FP32 * (2 * s * h + s * v // t) if st.index == 3 else 0)
        assert st.peak_in_flight == in_flight
        assert st.memory.activations_bytes == in_flight * rows * (10 * per_layer(t, mode)
                                                                  + extra)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("t", [1, 4])
def test_a_stages_backward_recomputes_as_its_mode_says(mode, t):
    """Per sample on one shard: forward 10 (24 s h^2 + 4 s^2 h) / t (+ the head's
    2 s h V / t on the last stage); backward twice that, plus the layers' forward (full) or
    their attention cores' 4 s^2 h / t (selective) recomputed first."""
    spec = get_transformer(NAME)
    s, h, v = spec.seq, spec.hidden, spec.vocab
    plan = build_plan(gpt(parallel__pipeline=4, parallel__tensor=t, parallel__recompute=mode))
    layers = 10 * (24 * s * h * h + 4 * s * s * h) / t
    again = {"none": 0.0, "selective": 10 * 4 * s * s * h / t, "full": layers}[mode]
    for st in plan.stages:
        head = 2 * s * h * v / t if st.index == 3 else 0.0
        assert st.forward_flops == pytest.approx(layers + head, rel=1e-12)
        assert st.backward_flops == pytest.approx(2 * (layers + head) + again, rel=1e-12)
        assert sum(x.recompute_flops for x in st.layers) == pytest.approx(again, rel=1e-12)


def test_a_tensor_count_that_does_not_divide_the_heads_exits_naming_the_key():
    with pytest.raises(UserError, match="parallel.tensor: 3 does not divide the 16 heads"):
        gpt(parallel__tensor=3)


def test_stage_layers_count_transformer_layers():
    with pytest.raises(UserError, match="places 41 layers, workload.profile 'megatron-1.2b' "
                                        "has 40"):
        gpt(parallel__pipeline=2, parallel__stage_layers=[20, 21])


def test_a_split_transformer_plan_is_timing_only():
    with pytest.raises(UserError, match="workload.numerics: a plan of transformer"):
        gpt(parallel__pipeline=2, workload__numerics=True)


def test_a_profile_without_shapes_still_has_no_plan():
    with pytest.raises(UserError, match="workload.profile: 'resnet50' has no layer widths"):
        gpt(parallel__pipeline=2, workload__profile="resnet50")


# ---- an MLP's plan with recomputation -------------------------------------------------

def mlp(tiny_config_data, **keys):
    """The tiny config with an MLP 8 -> 64 -> 32 -> 16 -> 2, batch 8."""
    return validate(tiny_config_data({"workload.model": "mlp", "workload.hidden": [64, 32, 16]},
                                     **keys))


def test_recomputation_runs_a_plan_and_the_default_plan_is_unchanged(tiny_config_data):
    assert split_key(mlp(tiny_config_data)) is None
    assert split_key(mlp(tiny_config_data, parallel__recompute="full")) == "recompute"
    plain = build_plan(mlp(tiny_config_data, parallel__pipeline=2, parallel__microbatches=2))
    selective = build_plan(mlp(tiny_config_data, parallel__pipeline=2,
                               parallel__microbatches=2, parallel__recompute="selective"))
    assert selective == plain  # an MLP has no attention: selective is none


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_full_recomputation_of_an_mlp_stashes_the_stages_input_and_redoes_its_forward(
        tiny_config_data, schedule):
    """Stage 0 (8 -> 64 -> 32) and stage 1 (32 -> 16 -> 2) of 4 microbatches of 2 rows:
    each keeps only its input (8 or 32 float64s per row) per microbatch in flight, and its
    backward FLOPs are its backward's plus its forward's."""
    keys = {"parallel__pipeline": 2, "parallel__microbatches": 4, "parallel__schedule": schedule}
    plain = build_plan(mlp(tiny_config_data, **keys))
    full = build_plan(mlp(tiny_config_data, parallel__recompute="full", **keys))
    for st, before, width in zip(full.stages, plain.stages, (8, 32), strict=True):
        assert st.memory.activations_bytes == st.peak_in_flight * 2 * width * 8
        assert st.forward_flops == before.forward_flops
        assert st.backward_flops == before.backward_flops + before.forward_flops
        assert st.memory.params_bytes == before.memory.params_bytes


def test_real_ranks_refuse_recomputation(tiny_config_data):
    config = mlp(tiny_config_data, parallel__pipeline=2, parallel__recompute="full")
    with pytest.raises(UserError, match="parallel.recompute 'full': real ranks keep every"):
        check_split(config, row_of(config))


def test_selective_recomputation_of_an_mlp_is_worded_as_doing_nothing(tiny_config_data):
    warnings = config_warnings(mlp(tiny_config_data, parallel__recompute="selective"))
    assert any(w.startswith("parallel.recompute = \"selective\" has no effect") for w in warnings)
    assert not config_warnings(gpt(parallel__recompute="selective"))


def test_interleaved_chunks_are_whole_layers_with_the_embedding_and_head_at_the_ends():
    """p = 2 stages of v = 2 chunks: virtual stages of 10 layers each, virtual stage 0
    (stage 0's chunk 0) with the embedding and virtual stage 3 (stage 1's chunk 1) with
    the head (Narayanan et al. 2021, Sec. 2.2.2)."""
    plan = build_plan(gpt(parallel__pipeline=2, parallel__schedule="interleaved",
                          parallel__virtual_stages=2, parallel__microbatches=4))
    spans = [[(c.index, c.last - c.first + 1) for c in st.pieces] for st in plan.stages]
    assert spans == [[(0, 21), (2, 20)], [(1, 20), (3, 21)]]
    assert plan.virtual_stage(3).last == len(get_transformer(NAME).parts()) - 1


@pytest.mark.parametrize("mode", MODES)
def test_full_recomputation_repeats_the_forwards_allreduces_in_the_backward(mode):
    """A recomputed forward is the forward, its tensor allreduces included (Korthikanti et
    al. 2022, Sec. 5: full recomputation repeats the forward's communication; selective
    recomputes the attention core only, which needs none): per layer the backward then has
    the 2 recomputed forward allreduces before its own 2, each of rows x s x h."""
    spec = get_transformer(NAME)
    t, layers = 4, 10
    plan = build_plan(gpt(parallel__pipeline=4, parallel__tensor=t, parallel__recompute=mode))
    nbytes = 8 * spec.seq * spec.hidden * FP32
    middle = plan.stages[1]  # no embedding, no head
    backward = [a for a in middle.tensor_allreduces if a.phase == "backward"]
    again = 2 * layers if mode == "full" else 0
    assert len(backward) == 2 * layers + again
    assert {a.nbytes for a in backward} == {nbytes}
    if mode == "full":  # each part: its recomputed forward's sum, then its backward's
        by_layer = [a.layer for a in backward]
        assert all(by_layer[i] == by_layer[i + 1] for i in range(0, len(by_layer), 2))
