"""A split replica computes what the unsplit model does (sim/training/stage_numerics.py):
bit for bit with one microbatch and one shard per stage, within 1e-12 (float64) otherwise;
the gradient also against central finite differences of the unsplit loss."""

from __future__ import annotations

import numpy as np
import pytest

from sim.training.parallel_plan import build_plan
from sim.training.stage_numerics import ShardRunner, lockstep, replica_loss_grad
from sim.training.validator import validate
from sim.workloads.models import make_model

HIDDEN = [16, 12, 8, 6]  # 5 layers: 10 -> 16 -> 12 -> 8 -> 6 -> 3
FEATURES, CLASSES, BATCH = 10, 3, 24


def setup(tiny_config_data, p=1, t=1, m=1, schedule="1f1b", seed=0):
    config = validate(tiny_config_data({
        "workload.model": "mlp", "workload.hidden": HIDDEN, "workload.features": FEATURES,
        "workload.classes": CLASSES, "workload.batch": BATCH, "parallel.pipeline": p,
        "parallel.tensor": t, "parallel.microbatches": m, "parallel.schedule": schedule}))
    model = make_model("mlp", FEATURES, CLASSES, hidden=tuple(HIDDEN))
    rng = np.random.default_rng(seed)
    params = model.init(rng)
    params += 0.01 * rng.standard_normal(model.size)  # non-zero biases
    X = rng.standard_normal((BATCH, FEATURES))
    y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    return build_plan(config), model, params, X, y


def unsplit(model, params, X, y):
    out = np.empty(model.size)
    loss, _ = model.loss_grad(params, X, y, out=out)
    return loss, out


@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_stages_with_one_microbatch_are_bit_for_bit_the_unsplit_model(tiny_config_data, p):
    plan, model, params, X, y = setup(tiny_config_data, p=p)
    out = np.full(model.size, np.nan)
    loss = replica_loss_grad(model, plan, params, X, y, out)
    ref_loss, ref = unsplit(model, params, X, y)
    assert loss == ref_loss and out.tobytes() == ref.tobytes()


@pytest.mark.parametrize("p, t, m", [(1, 2, 1), (2, 2, 1), (1, 1, 4), (2, 1, 3), (3, 2, 4),
                                     (1, 2, 2), (2, 2, 8)])
def test_split_replicas_match_the_unsplit_model_within_1e12(tiny_config_data, p, t, m):
    """Every entry written once (the gradient starts as NaN), none twice (p = 3, t = 2 has
    column, row and whole layers; a second write would double a microbatch's share)."""
    plan, model, params, X, y = setup(tiny_config_data, p=p, t=t, m=m)
    out = np.full(model.size, np.nan)
    loss = replica_loss_grad(model, plan, params, X, y, out)
    ref_loss, ref = unsplit(model, params, X, y)
    assert np.isfinite(out).all()
    assert abs(loss - ref_loss) <= 1e-12 * abs(ref_loss)
    assert np.max(np.abs(out - ref)) <= 1e-12 * np.max(np.abs(ref))


def test_the_gradient_matches_finite_differences_of_the_unsplit_loss(tiny_config_data):
    plan, model, params, X, y = setup(tiny_config_data, p=2, t=2, m=4)
    out = np.empty(model.size)
    replica_loss_grad(model, plan, params, X, y, out)
    rng, h = np.random.default_rng(1), 1e-6
    for i in rng.choice(model.size, 40, replace=False):
        up, down = params.copy(), params.copy()
        up[i] += h
        down[i] -= h
        numeric = (unsplit(model, up, X, y)[0] - unsplit(model, down, X, y)[0]) / (2 * h)
        assert abs(numeric - out[i]) <= 1e-6 * max(1.0, abs(out[i])), i


def test_megatron_allreduces_one_forward_one_backward_per_pair(tiny_config_data):
    """The number of sums a tensor group takes equals the plan's tensor allreduces."""
    plan, model, params, X, y = setup(tiny_config_data, p=1, t=2)
    calls = []

    def counting(passes):
        gens = list(passes)
        summed = None
        while True:
            parts, done = [], []
            for g in gens:
                try:
                    parts.append(g.send(summed))
                except StopIteration as stop:
                    done.append(stop.value)
            if done:
                return done
            calls.append(parts[0].nbytes)
            summed = sum(parts)

    group = [ShardRunner(model, plan, 0, k) for k in range(2)]
    rows = plan.microbatch_rows
    x = counting(r.forward(params, 0, X[:rows]) for r in group)[0]
    _, delta = group[0].loss(0, x, y[:rows])
    counting(r.backward(params, np.empty(model.size), 0, delta) for r in group)
    assert calls == [a.nbytes for a in plan.stages[0].tensor_allreduces]


def test_shards_that_reach_different_allreduces_are_refused(tiny_config_data):
    plan, model, params, X, y = setup(tiny_config_data, p=1, t=2)

    def no_sums():
        return "done"
        yield  # a generator that never yields

    runner = ShardRunner(model, plan, 0, 0)
    with pytest.raises(RuntimeError, match="different allreduces"):
        lockstep([runner.forward(params, 0, X[:plan.microbatch_rows]), no_sums()])


def test_a_model_without_dense_layers_to_split_is_refused(tiny_config_data):
    plan, *_ = setup(tiny_config_data, p=2)
    with pytest.raises(TypeError, match="needs an MLP"):
        ShardRunner(make_model("logreg", FEATURES, 2), plan, 0, 0)


@pytest.mark.parametrize("p, t", [(1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (3, 2)])
def test_each_shard_holds_the_plans_parameters_and_together_they_cover_the_model(
        tiny_config_data, p, t):
    """held(): as many entries as the plan's Stage.params; the stages' shards cover every
    parameter, and shards overlap only in the entries every shard holds alike."""
    plan, model, *_ = setup(tiny_config_data, p=p, t=t)
    seen = np.zeros(model.size, int)
    for s in range(p):
        for k in range(t):
            held = ShardRunner(model, plan, s, k).held()
            assert len(held) == plan.stages[s].params and np.all(np.diff(held) > 0)
            seen[held] += 1
    assert seen.min() >= 1
    shared = sum(x.params for st in plan.stages for x in st.layers if x.role == "whole") + \
        sum(model.shapes[x.layer][0] for st in plan.stages for x in st.layers
            if x.role == "row")
    assert int((seen - 1).sum()) == (t - 1) * shared


def test_own_copies_give_every_shard_the_gradient_of_all_it_holds(tiny_config_data):
    """A real rank's runner (own_copies) writes every entry it holds, and the entries held
    by several shards get the same gradient on each (the sum of a microbatch's parts)."""
    plan, model, params, X, y = setup(tiny_config_data, p=1, t=2, m=2)
    ref = np.full(model.size, np.nan)
    replica_loss_grad(model, plan, params, X, y, ref)
    rows = plan.microbatch_rows
    group = [ShardRunner(model, plan, 0, k, own_copies=True) for k in range(2)]
    grads = [np.full(model.size, np.nan) for _ in group]
    for mb in range(2):
        x = X[mb * rows:(mb + 1) * rows]
        logits = lockstep([r.forward(params, mb, x) for r in group])[0]
        _, delta = group[0].loss(mb, logits, y[mb * rows:(mb + 1) * rows])
        lockstep([r.backward(params, g, mb, delta) for r, g in zip(group, grads, strict=True)])
    for runner, grad in zip(group, grads, strict=True):
        held = runner.held()
        assert np.isfinite(grad[held]).all()
        assert grad[held].tobytes() == ref[held].tobytes()


@pytest.mark.parametrize("p, t, m", [(1, 2, 2), (2, 2, 3), (3, 1, 2)])
def test_a_packed_runner_computes_the_same_bits_on_its_own_vector(tiny_config_data, p, t, m):
    """A packed runner (a real rank's) takes its shard's entries packed, flat[held()], and
    gives the unpacked runner's outputs and gradient bit for bit, every entry written."""
    plan, model, params, X, y = setup(tiny_config_data, p=p, t=t, m=m)
    rows = plan.microbatch_rows
    for stage in range(p):
        group = [ShardRunner(model, plan, stage, k, own_copies=True) for k in range(t)]
        packed = [ShardRunner(model, plan, stage, k, packed=True) for k in range(t)]
        held = [r.held() for r in group]
        grads = [np.full(model.size, np.nan) for _ in group]
        own = [np.full(h.size, np.nan) for h in held]
        width = model.shapes[plan.stages[stage].first][1]
        for mb in range(m):
            x = X[mb * rows:(mb + 1) * rows] if stage == 0 else np.cos(
                np.arange(rows * width, dtype=float) + mb).reshape(rows, width)
            out = lockstep([r.forward(params, mb, x) for r in group])[0]
            out_packed = lockstep([r.forward(params[h], mb, x)
                                   for r, h in zip(packed, held, strict=True)])[0]
            assert out_packed.tobytes() == out.tobytes()
            delta = np.sin(np.arange(out.size, dtype=float) + mb).reshape(out.shape) / 7
            lockstep([r.backward(params, g, mb, delta) for r, g in zip(group, grads,
                                                                         strict=True)])
            lockstep([r.backward(params[h], g, mb, delta) for r, g, h in zip(
                packed, own, held, strict=True)])
        for grad, mine, h in zip(grads, own, held, strict=True):
            assert np.isfinite(mine).all() and mine.tobytes() == grad[h].tobytes()
