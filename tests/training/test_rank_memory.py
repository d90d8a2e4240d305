"""Every run of a dense model reports its ranks' memory (sim/training/rank_memory.py), data
parallel as split: checked against the bytes counted by hand here (a float64 per parameter,
gradient and momentum entry; one batch's layer inputs and logits stashed), and a config
that does not fit its device is refused (exit 2) unless run.memory = "report"."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.errors import UserError
from sim.simulated.engine import simulate
from sim.training.parallel_plan import build_plan
from sim.training.validator import validate

FEATURES, HIDDEN, CLASSES, BATCH = 8, [16, 12], 3, 8
WIDTHS = [FEATURES, *HIDDEN, CLASSES]
# weights and a bias per layer: 8*16+16 + 16*12+12 + 12*3+3 = 144 + 204 + 39
PARAMS = 387
ACTIVATIONS = BATCH * sum(WIDTHS) * 8  # every layer's input, and the logits, of one batch


def worker_bytes(momentum: bool) -> int:
    """A data-parallel worker: parameters, gradients (and momentum) and one batch."""
    return (3 if momentum else 2) * PARAMS * 8 + ACTIVATIONS


def config(tiny_config_data, **keys):
    return validate(tiny_config_data(
        {"workload.model": "mlp", "workload.hidden": HIDDEN, "workload.classes": CLASSES,
         "workload.features": FEATURES, "workload.batch": BATCH, "compute.time_s": 1e-3,
         "run.iterations": 2, "run.eval_every": 2}, **keys))


def small_device(tmp_path, nbytes: int) -> str:
    path = tmp_path / f"device-{nbytes}.json"
    path.write_text(json.dumps({"format": "sgd-lab.device-profile/1", "flops_per_s": 1e12,
                                "memory_bytes": nbytes}))
    return f"calibrated:{path}"


def test_the_hand_count_is_the_models():
    from sim.workloads.models import make_model
    assert make_model("mlp", FEATURES, CLASSES, hidden=tuple(HIDDEN)).size == PARAMS


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps", "asp", "local-sgd"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_data_parallel_run_reports_a_whole_model_and_one_batch(tiny_config_data, kind,
                                                                 momentum):
    summary = simulate(config(tiny_config_data, strategy__kind=kind,
                              workload__momentum=momentum)).summary
    assert summary["memory_bytes_by_stage"] == [worker_bytes(momentum > 0)]
    # a server holds the parameters (and momentum) alone: never more than a worker
    assert summary["peak_memory_bytes"] == worker_bytes(momentum > 0)
    assert summary["device_memory_bytes"] is None and summary["memory_fits"] is None


def test_a_server_larger_than_every_stage_is_the_peak(tiny_config_data):
    """Three stages each hold a layer; the one server all of them (x2 with momentum),
    here more than any stage."""
    c = config(tiny_config_data, strategy__kind="bsp-ps", workload__momentum=0.9,
               parallel__pipeline=3)
    summary = simulate(c).summary
    assert summary["memory_bytes_by_stage"] == build_plan(c).memory_bytes_by_stage
    server = 2 * PARAMS * 8
    assert server > max(summary["memory_bytes_by_stage"])
    assert summary["peak_memory_bytes"] == server
    # two server shards hold ceil(387 / 2) = 194 parameters each at most
    two = simulate(config(tiny_config_data, strategy__kind="bsp-ps", workload__momentum=0.9,
                          parallel__pipeline=3, cluster__servers=2)).summary
    assert two["peak_memory_bytes"] == max(max(two["memory_bytes_by_stage"]), 2 * 194 * 8)


def test_a_data_parallel_config_too_large_for_its_device_is_refused(tiny_config_data,
                                                                    tmp_path, write_toml):
    need = worker_bytes(False)
    device = small_device(tmp_path, need - 1)
    with pytest.raises(UserError, match=r"compute.device: each rank needs .*activations of 1 "
                                        r"microbatch.* holds"):
        config(tiny_config_data, compute__device=device)
    summary = simulate(config(tiny_config_data, compute__device=device,
                              run__memory="report")).summary
    assert summary["device_memory_bytes"] == need - 1 and summary["memory_fits"] is False
    fits = simulate(config(tiny_config_data, compute__device=small_device(tmp_path, need)))
    assert fits.summary["memory_fits"] is True
    path = write_toml(tmp_path / "x.toml", tiny_config_data(
        {"workload.model": "mlp", "workload.hidden": HIDDEN, "workload.classes": CLASSES,
         "compute.device": device}))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_a_server_too_large_for_its_device_is_refused_naming_it(tiny_config_data, tmp_path):
    c = dict(strategy__kind="bsp-ps", workload__momentum=0.9, parallel__pipeline=3)
    stages = build_plan(config(tiny_config_data, **c)).memory_bytes_by_stage
    device = small_device(tmp_path, max(stages))  # every stage fits, the server does not
    with pytest.raises(UserError, match="a parameter-server rank needs"):
        config(tiny_config_data, compute__device=device, **c)


def test_a_model_without_layers_reports_no_memory(tiny_config_data):
    summary = simulate(validate(tiny_config_data(
        {"workload.model": "sparse-logreg", "workload.dataset": "sparse-powerlaw",
         "run.iterations": 2, "run.eval_every": 2, "compute.time_s": 1e-3}))).summary
    assert "peak_memory_bytes" not in summary and "memory_fits" not in summary
