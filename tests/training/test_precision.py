"""A run's precision (compute.precision) and the op-class device model: which peak GEMM-class
FLOPs run at, the other ops' bytes at the memory bandwidth, each at its achieved efficiency,
and the bytes of every message a precision sets. Closed forms; unset, runs are unchanged."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sim.errors import UserError
from sim.simulated.stages import stage_works
from sim.training.compute_model import DEVICES, ComputeModel, Device, load_device, run_device
from sim.training.messages import OTHER_PASSES, LayerCosts
from sim.training.parallel_plan import PlanLayer, build_plan
from sim.training.validator import validate
from sim.training.workload import build_workload
from sim.workloads.precision import run_itemsize
from sim.workloads.timing_profiles import LayerProfile, Profile, get_profile

# two layers with GEMM FLOPs and other ops' elements, per sample
TINY = Profile("tiny", (LayerProfile("a", 1000, 4e9, other_elements=2e6),
                        LayerProfile("b", 3000, 6e9, other_elements=5e6)), "test")


def compute_cfg(**keys) -> SimpleNamespace:
    base = dict(device="v100", time_s=None, distribution="constant", straggler_fraction=0.0,
                straggler_slowdown=1.0, slowdowns=[], precision=None, gemm_efficiency=1.0,
                other_efficiency=1.0)
    return SimpleNamespace(**{**base, **keys})


def test_a_runs_itemsize_is_its_precision_or_its_workloads_own() -> None:
    assert run_itemsize(validate({})) == 8  # the lab's models: float64
    assert run_itemsize(validate({"workload": {"profile": "resnet50",
                                               "numerics": False}})) == 4  # a profile: fp32
    assert run_itemsize(validate({"compute": {"precision": "fp16", "device": "v100"},
                                  "workload": {"numerics": False}})) == 2
    assert run_itemsize(validate({"workload": {"profile": "resnet50", "numerics": False},
                                  "compute": {"precision": "bf16", "device": "a100"}})) == 2


@pytest.mark.parametrize("precision, size", [(None, 4), ("fp32", 4), ("fp16", 2)])
def test_a_profiles_gradients_take_the_runs_itemsize(precision, size) -> None:
    keys = {"workload": {"profile": "resnet50", "numerics": False}}
    if precision:
        keys["compute"] = {"precision": precision, "device": "v100"}
    layers = build_workload(validate(keys)).layers
    params = np.array([x.params for x in get_profile("resnet50").layers])
    assert layers.grad_bytes.tolist() == (params * size).tolist()


def test_a_plans_messages_and_memory_scale_with_the_itemsize(tiny_config_data) -> None:
    keys = {"workload.model": "mlp", "workload.hidden": [64, 32, 16],
            "workload.numerics": False, "parallel.pipeline": 2, "parallel.tensor": 2,
            "parallel.microbatches": 2, "workload.batch": 8}
    wide = build_plan(validate(tiny_config_data(keys)))
    half = build_plan(validate(tiny_config_data({**keys, "compute.precision": "fp32",
                                                 "compute.device": "v100"})))
    assert (wide.itemsize, half.itemsize) == (8, 4)
    for w, h in zip(wide.stages, half.stages, strict=True):
        assert (w.activation_bytes, w.gradient_bytes) == \
            (2 * h.activation_bytes, 2 * h.gradient_bytes)
        assert [a.nbytes for a in w.tensor_allreduces] == \
            [2 * a.nbytes for a in h.tensor_allreduces]
        assert w.memory.total_bytes == 2 * h.memory.total_bytes
    assert [w.grad_bytes for w in stage_works(wide)] == \
        [2 * w.grad_bytes for w in stage_works(half)]


def test_a_device_at_a_precision_runs_its_peak_times_the_gemm_efficiency() -> None:
    v100 = DEVICES["v100"]
    fast = v100.at("fp16", gemm_efficiency=0.4, other_efficiency=0.8)
    assert fast.flops_per_s == 125e12 * 0.4 and fast.other_Bps == 900e9 * 0.8
    assert fast.memory_Bps == 900e9  # weights still move at the full bandwidth
    assert v100.at("fp32").flops_per_s == v100.flops_per_s == 15.7e12
    with pytest.raises(ValueError, match="no bf16 peak"):
        v100.at("bf16")  # Volta has no BF16
    with pytest.raises(ValueError, match="has: none"):
        Device("d", 1e9, 0.0, "test").at("fp32")  # a device with no peaks at all
    with pytest.raises(ValueError, match="fp64_flops_per_s"):
        Device("d", 1e9, 0.0, "test", fp64_flops_per_s=-1.0)


def test_a_gradients_time_is_the_longer_of_gemm_flops_and_weights_plus_other_bytes() -> None:
    """On a roofline preset: overhead + per layer and pass max(FLOPs / (peak x gemm eff),
    weights / memory_Bps) + the other ops' forward and backward bytes (1 + 2 times the
    forward's) / (memory_Bps x other eff). TINY's layers are compute-bound at batch 32."""
    batch, item = 32, 2
    layers = LayerCosts.from_profile(TINY, item)
    cfg = compute_cfg(precision="fp16", gemm_efficiency=0.5, other_efficiency=0.8)
    model = ComputeModel.of_layers(cfg, layers, batch, 1, 0)
    flops = batch * (4e9 + 6e9) * 3 - batch * 4e9  # the first layer's backward: 1x
    other = batch * (2e6 + 5e6) * item * 3
    expected = 10e-6 + flops / (125e12 * 0.5) + other / (900e9 * 0.8)  # weights hidden
    assert DEVICES["v100"].roofline
    assert layers.flops(batch) == flops and layers.other(batch) == other
    assert model.base_s == pytest.approx(expected, rel=1e-12)
    # the layer shares split the same seconds: each pass its FLOPs and other bytes
    forward, backward = model.shares_of(layers, batch)
    assert forward.sum() + backward.sum() == pytest.approx(expected - 10e-6, rel=1e-12)
    assert forward[1] == pytest.approx(batch * 6e9 / 62.5e12 + batch * 5e6 * item / 720e9,
                                       rel=1e-12)
    assert backward[1] == pytest.approx(2 * batch * 6e9 / 62.5e12
                                        + 2 * batch * 5e6 * item / 720e9, rel=1e-12)
    assert OTHER_PASSES == (1, 2)


def test_a_memory_bound_layer_pays_its_weights_even_beside_a_compute_bound_one() -> None:
    """Per layer, not over the step's totals: a layer of many weights and few FLOPs
    (weights / memory_Bps > FLOPs / rate) costs its bytes, however many FLOPs the other
    layer has that the step's totals could hide them under."""
    wide = Profile("wide", (LayerProfile("fc", 50_000_000, 1e3),
                            LayerProfile("conv", 10, 4e9)), "test")
    batch, item = 4, 2
    layers = LayerCosts.from_profile(wide, item)
    model = ComputeModel.of_layers(compute_cfg(precision="fp16"), layers, batch, 1, 0)
    rate, bw = 125e12, 900e9
    fc = 3 * 50_000_000 * item / bw  # forward reads, backward reads and writes
    conv = max(batch * 4e9 * 2 / rate, 2 * 10 * item / bw) + max(batch * 4e9 / rate,
                                                                 10 * item / bw)
    assert model.base_s == pytest.approx(10e-6 + fc + conv, rel=1e-12)
    totals = ComputeModel(compute_cfg(precision="fp16"), layers.flops(batch), 1, 0,
                          layers.traffic())  # the totals' max would hide the weights
    assert totals.base_s < model.base_s


def test_an_additive_device_adds_weights_to_flops() -> None:
    """A device that is no roofline (a calibrated CPU's fit): overhead + FLOPs / rate +
    weights / memory_Bps, the same from totals and from layers."""
    layers = LayerCosts.from_profile(TINY, 4)
    cfg = compute_cfg()
    cpu = Device("cpu", 50e9, 5e-6, "test", memory_Bps=20e9)
    model = ComputeModel.of_layers(cfg, layers, 8, 1, 0)
    model.device = cpu
    flops = 8 * (4e9 + 6e9) * 3 - 8 * 4e9
    weights = (1000 + 3000) * 4 * 3
    assert cpu.seconds(flops, weights) == flops / 50e9 + weights / 20e9
    assert model.roofline_base(model.shares_of(layers, 8)) is None
    forward, backward = model.shares_of(layers, 8)
    assert forward.sum() + backward.sum() == pytest.approx(flops / 50e9 + weights / 20e9,
                                                           rel=1e-12)


def test_without_a_precision_the_device_and_its_times_are_unchanged() -> None:
    assert run_device(compute_cfg()) == load_device("v100")
    layers = LayerCosts.from_profile(TINY)
    before = ComputeModel(compute_cfg(), layers.flops(8), 1, 0, layers.traffic())
    after = ComputeModel(compute_cfg(), layers.flops(8), 1, 0, layers.traffic(), 0.0, 0.0,
                         layers.other(8))
    assert after.base_s == before.base_s == 10e-6 + max(layers.flops(8) / 15.7e12,
                                                        layers.traffic() / 900e9)


def test_a_plans_stages_charge_their_layers_other_bytes(tiny_config_data) -> None:
    layers = [PlanLayer(f"l{i}", 16, 16, True, 512.0, 1024.0, i > 0, other_elements=100.0)
              for i in range(4)]
    c = validate(tiny_config_data({"workload.model": "mlp", "workload.hidden": [16, 16, 16],
                                   "workload.numerics": False, "parallel.tensor": 2,
                                   "compute.precision": "fp16", "compute.device": "v100"}))
    work = stage_works(build_plan(c, layers))[0]
    # column layers split their outputs' ops over the 2 shards, row layers keep them whole
    assert work.other.tolist() == [100.0 * 2 / 2, 100.0 * 2] * 2
    assert work.other_bytes == sum(work.other) * 3


@pytest.mark.parametrize("keys, message", [
    ({"precision": "fp16", "device": "v100", "numerics": True},
     "compute.precision: a run with numerics trains in its kernels' fp64"),
    ({"precision": "fp8"}, "compute.precision: unknown precision 'fp8'"),
    ({"precision": "bf16", "device": "v100"}, "compute.precision: device 'v100' has no bf16"),
    ({"precision": "fp16"}, "compute.precision: device 'cpu-core' has no fp16"),
    ({"gemm_efficiency": 0.5}, "compute.gemm_efficiency: .* set compute.precision"),
    ({"other_efficiency": 0.5}, "compute.other_efficiency: .* set compute.precision"),
    ({"precision": "fp16", "device": "v100", "gemm_efficiency": 0.0},
     "compute.gemm_efficiency"),
    ({"precision": "fp16", "device": "v100", "other_efficiency": 1.5},
     "compute.other_efficiency"),
])
def test_the_validator_names_the_precision_keys(keys, message) -> None:
    numerics = keys.pop("numerics", False)
    with pytest.raises(UserError, match=message):
        validate({"compute": keys, "workload": {"numerics": numerics}})


def test_a_run_with_numerics_may_name_its_own_precision() -> None:
    c = validate({"compute": {"precision": "fp64", "device": "v100"}})
    assert run_itemsize(c) == 8 and run_device(c.compute).flops_per_s == 7.8e12

