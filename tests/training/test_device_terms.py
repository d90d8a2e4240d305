"""The device's terms beyond FLOPs and weights: the activation traffic of the layers'
inputs and outputs, and the cost per id read by index (an embedding bag's lookups). What a
model declares, the closed-form time, how a step divides over layers, and the fits that find
them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from sim.calibration.fit_device import fit_device, fit_device_near
from sim.training.compute_model import ComputeModel, Device, describe_rates, load_device
from sim.training.messages import LayerCosts
from sim.workloads.wide_deep import WideDeep


def wide_deep(ids_per_field: int = 2) -> WideDeep:
    return WideDeep(features=13, fields=8, vocab=500, embedding_dim=16,
                    ids_per_field=ids_per_field, cross_buckets=256, hidden=(32,))


@pytest.mark.parametrize("ids_per_field", [1, 3])
def test_wide_deep_declares_the_ids_its_batch_reads(ids_per_field):
    """Per sample: every field's bag (ids_per_field each), the crossed ids of the wide
    part (fields - 1) and its bias; a dense model reads none."""
    from sim.workloads.models import MLP

    model = wide_deep(ids_per_field)
    layers = LayerCosts.from_model(model)
    assert layers.lookups(64) == 64 * (8 * ids_per_field + 7 + 1)
    assert LayerCosts.from_model(MLP(20, 3, hidden=(8,))).lookups(64) == 0.0


def test_the_ids_a_batch_reads_are_counted_from_the_batch_itself():
    """The declared count equals the ids of an actual batch: its bags and crossed ids,
    plus the bias row each sample reads."""
    from sim.training.validator import validate
    from sim.training.workload import build_workload

    config = validate({"workload": {"model": "wide-deep", "dataset": "ctr-synthetic",
                                    "features": 13, "fields": 8, "vocab": 500,
                                    "embedding_dim": 16, "ids_per_field": 2,
                                    "cross_buckets": 256, "hidden": [32], "batch": 40}})
    workload = build_workload(config)
    X, _ = workload.workers[0].next_batch()
    read = X.ids.size + X.wide.size + len(X)
    assert workload.layers.lookups(40) == read
    assert workload.compute.device.lookup_s is None  # the preset charges nothing per id


def test_a_gradient_pays_each_id_at_the_device_cost_per_id(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"flops_per_s": 1e9, "overhead_s": 1e-5,
                                "lookup_s": 2e-7}))
    device = load_device(f"calibrated:{path}")
    assert device.seconds(1e6, 0.0, 3000) == pytest.approx(1e-3 + 6e-4, rel=1e-12)
    cfg = SimpleNamespace(device=f"calibrated:{path}", time_s=None, distribution="constant",
                          straggler_fraction=0.0, straggler_slowdown=1.0, slowdowns=[])
    compute = ComputeModel(cfg, 1e6, 1, 0, 0.0, 3000)
    assert compute.base_s == pytest.approx(1e-5 + 1e-3 + 6e-4, rel=1e-12)
    assert "200 ns per id" in describe_rates(1e9, 1e-5, None, 2e-7)


@pytest.mark.parametrize("bad", [-1e-9, float("inf"), float("nan")])
def test_a_device_refuses_a_cost_per_id_that_is_not_a_finite_non_negative_number(bad):
    with pytest.raises(ValueError, match="lookup_s"):
        Device("d", 1e9, 0.0, "test", lookup_s=bad)


def test_a_step_divides_its_lookups_half_to_each_pass():
    """Wait-free backprop's per-layer seconds: FLOPs / rate plus half the layer's ids
    at the cost per id in the forward (the gather), half in the backward (the scatter)."""
    layers = LayerCosts(np.array([100.0, 300.0]), np.array([200.0, 600.0]),
                        np.array([80, 8], np.int64), "model", None, np.array([10.0, 0.0]))
    cfg = SimpleNamespace(device="cpu-core", time_s=None, distribution="constant",
                          straggler_fraction=0.0, straggler_slowdown=1.0, slowdowns=[])
    compute = ComputeModel(cfg, layers.flops(1), 1, 0, 0.0, layers.lookups(1))
    compute.device = Device("d", 1e3, 0.0, "test", lookup_s=1e-2)
    shares = compute.layer_shares((layers.forward_flops, layers.backward_flops), None,
                                  lookups=layers.lookups_per_sample)
    np.testing.assert_allclose(shares[0], [0.1 + 0.05, 0.3], rtol=1e-12)
    np.testing.assert_allclose(shares[1], [0.2 + 0.05, 0.6], rtol=1e-12)
    compute.device = Device("d", 1e3, 0.0, "test")  # no cost per id: FLOPs divide it
    assert compute.layer_shares((layers.forward_flops, layers.backward_flops), None,
                                lookups=layers.lookups_per_sample) is None


RATE, OVERHEAD, BANDWIDTH, PER_ID = 30e9, 5e-6, 12e9, 2.5e-7
# dense workloads at a batch and a quarter of it, and an embedding model likewise
SHAPES = [(4e7, 3e6, 0.0), (1e7, 3e6, 0.0), (2e6, 2e4, 0.0), (5e5, 2e4, 0.0),
          (7e6, 2e5, 3072.0), (1.75e6, 2e5, 768.0)]


def points(per_id: float = PER_ID) -> list[dict]:
    return [{"flops": f, "traffic": t, "lookups": ids,
             "seconds": OVERHEAD + f / RATE + t / BANDWIDTH + ids * per_id}
            for f, t, ids in SHAPES]


def test_the_device_fit_recovers_the_cost_per_id():
    fit = fit_device(points())
    assert fit.lookup_s == pytest.approx(PER_ID, rel=1e-6)
    assert fit.flops_per_s == pytest.approx(RATE, rel=1e-6)
    assert fit.memory_Bps == pytest.approx(BANDWIDTH, rel=1e-6)
    assert max(map(abs, fit.errors)) < 1e-6


def test_without_ids_the_device_fit_has_no_lookup_term():
    fit = fit_device([p for p in points() if p["lookups"] == 0])
    assert fit.lookup_s is None and fit.flops_per_s == pytest.approx(RATE, rel=1e-6)


def test_the_fit_near_a_prior_finds_the_cost_per_id_or_keeps_the_priors():
    prior = {"flops_per_s": RATE, "overhead_s": OVERHEAD, "memory_Bps": BANDWIDTH}
    fit = fit_device_near(points(), prior)
    assert fit.lookup_s == pytest.approx(PER_ID, rel=1e-3)
    dense = [p for p in points() if p["lookups"] == 0]
    assert fit_device_near(dense, prior | {"lookup_s": 4e-7}).lookup_s == 4e-7


# ---- activation traffic ------------------------------------------------------------------

def test_a_dense_layer_moves_its_inputs_and_outputs_once_per_matrix_product():
    """An MLP 20-8-3 on 8-byte values: the first layer (no input gradient: two products)
    moves 2 x (20 + 8) values a sample, the second (three products) 3 x (8 + 3); logistic
    regression on 3,000 features 2 x 3,001; embedding tables none."""
    from sim.workloads.models import MLP, LogReg

    mlp = LayerCosts.from_model(MLP(20, 3, hidden=(8,)))
    np.testing.assert_allclose(mlp.activations_per_sample, [2 * 28 * 8, 3 * 11 * 8])
    assert mlp.activations(16) == 16 * (2 * 28 + 3 * 11) * 8
    assert LayerCosts.from_model(LogReg(3000)).activations(48) == 48 * 2 * 3001 * 8
    wd = LayerCosts.from_model(wide_deep())
    assert (wd.activations_per_sample[:9] == 0).all()  # the wide part and the 8 tables


def test_a_gradient_pays_its_activations_at_the_activation_bandwidth(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"flops_per_s": 1e9, "activation_Bps": 1e10,
                                "memory_Bps": 1e9}))
    device = load_device(f"calibrated:{path}")
    assert device.seconds(1e6, 1e6, 0.0, 2e6) == pytest.approx(1e-3 + 1e-3 + 2e-4,
                                                                 rel=1e-12)
    assert "activations at 10.0 GB/s" in describe_rates(1e9, 0.0, 1e9, None, 1e10)
    with pytest.raises(ValueError, match="activation_Bps"):
        Device("d", 1e9, 0.0, "test", activation_Bps=0.0)


def test_a_steps_activations_divide_over_passes_as_its_flops():
    """A layer with a forward product and two backward ones: a third of its activation
    bytes in the forward, two thirds in the backward."""
    layers = LayerCosts(np.array([100.0]), np.array([200.0]), np.array([8], np.int64),
                        "model", None, None, np.array([30.0]))
    cfg = SimpleNamespace(device="cpu-core", time_s=None, distribution="constant",
                          straggler_fraction=0.0, straggler_slowdown=1.0, slowdowns=[])
    compute = ComputeModel(cfg, layers.flops(1), 1, 0, 0.0, 0.0, layers.activations(1))
    compute.device = Device("d", 1e3, 0.0, "test", activation_Bps=10.0)
    forward, backward = compute.layer_shares((layers.forward_flops, layers.backward_flops),
                                             None, activations=layers.activations_per_sample)
    np.testing.assert_allclose(forward, [0.1 + 1.0], rtol=1e-12)
    np.testing.assert_allclose(backward, [0.2 + 2.0], rtol=1e-12)


ACT_BANDWIDTH = 150e9


def test_the_device_fit_recovers_the_activation_bandwidth_beside_the_weights():
    """Dense workloads at a batch and a quarter of it: weights the same, activations a
    quarter; time = 5 us + F / 30 GFLOP/s + W / 12 GB/s + A / 150 GB/s is recovered."""
    shapes = [(4e7, 3e6, 4e6), (1e7, 3e6, 1e6), (5.8e5, 7.2e4, 2.3e6), (1.4e5, 7.2e4, 5.8e5),
              (8e7, 1.2e7, 5e6), (2e7, 1.2e7, 1.25e6)]
    points = [{"flops": f, "traffic": w, "activations": a,
               "seconds": OVERHEAD + f / RATE + w / BANDWIDTH + a / ACT_BANDWIDTH}
              for f, w, a in shapes]
    fit = fit_device(points)
    assert fit.activation_Bps == pytest.approx(ACT_BANDWIDTH, rel=1e-6)
    assert fit.memory_Bps == pytest.approx(BANDWIDTH, rel=1e-6)
    assert fit.flops_per_s == pytest.approx(RATE, rel=1e-6)
    near = fit_device_near(points, {"flops_per_s": RATE, "overhead_s": OVERHEAD})
    assert near.activation_Bps == pytest.approx(ACT_BANDWIDTH, rel=1e-2)


def test_model_parallel_shards_move_their_own_inputs_and_outputs(tiny_config_data):
    """Tensor parallelism over 2: a column shard moves its whole input and half the
    output, a row shard half the input and the whole (partial) output."""
    from sim.simulated.stages import stage_works
    from sim.training.parallel_plan import build_plan
    from sim.training.validator import validate

    data = tiny_config_data({"workload.model": "mlp", "workload.hidden": [8, 6],
                             "parallel.tensor": 2})
    config = validate(data)
    plan = build_plan(config)
    work = stage_works(plan)[0]
    widths = [x.stash_width + x.output_width for x in plan.stages[0].layers]
    roles = [x.role for x in plan.stages[0].layers]
    assert roles[:2] == ["column", "row"]
    features = config.workload.features
    assert widths[:2] == [features + 4, 4 + 6]
    assert work.activations[1] == 3 * (4 + 6) * 8


def test_two_points_of_one_workload_are_fitted_with_a_flop_rate():
    """`sim calibrate --workload X`: one workload at its batch and a quarter of it; the fit
    goes through both points and keeps a FLOP rate (the terms it cannot tell apart are
    left out, not made negative)."""
    points = [{"flops": f, "traffic": 3e5, "activations": a,
               "seconds": OVERHEAD + f / RATE + 3e5 / BANDWIDTH + a / ACT_BANDWIDTH}
              for f, a in [(4e7, 4e6), (1e7, 1e6)]]
    fit = fit_device(points)
    assert 0 < fit.flops_per_s < float("inf") and fit.overhead_s >= 0
    assert max(map(abs, fit.errors)) < 1e-9


def test_the_fit_is_non_negative_least_squares_on_relative_errors():
    """Noisy points of several shapes: no term negative, and no non-negative choice of the
    terms, all of them or one left out, has smaller squared relative errors."""
    from scipy.optimize import nnls

    rng = np.random.default_rng(5)
    noisy = [dict(p, seconds=p["seconds"] * rng.lognormal(0, 0.1)) for p in points()]
    fit = fit_device(noisy)
    assert all(v is None or v >= 0 for v in fit.rates().values())
    cost = float(np.sum(np.square(fit.errors)))
    terms = ("overhead", "flops", "traffic", "lookups")
    A = np.array([[1.0, p["flops"], p["traffic"], p["lookups"]] for p in noisy]) \
        / np.array([p["seconds"] for p in noisy])[:, None]
    for drop in (None, "overhead", "traffic", "lookups"):
        cols = [i for i, t in enumerate(terms) if t != drop]
        x, _ = nnls(A[:, cols], np.ones(len(noisy)))
        assert cost <= float(np.sum(np.square(A[:, cols] @ x - 1))) + 1e-12


def test_calibrate_warns_when_the_fit_has_as_many_terms_as_points(capsys):
    from sim.calibration.report import warn_undetermined

    device = {"overhead_s": 1e-6, "memory_Bps": 1e9, "activation_Bps": None, "lookup_s": 1e-7}
    warn_undetermined(device, 4)
    assert "4 terms for 4 points" in capsys.readouterr().err
    warn_undetermined(device, 10)
    assert capsys.readouterr().err == ""
