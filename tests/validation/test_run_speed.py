"""A run's machine speed (:mod:`sim.validation.run_speed`): its spread measured on real
repeats, profiles made slower by a factor, and the predicted interval that draws one factor a
run."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from sim.results import iteration_s
from sim.simulated.engine import simulate
from sim.training.compute_model import load_device, save_device_profile
from sim.training.host_costs import HOSTS, load_host, save_host_profile
from sim.training.validator import validate
from sim.validation.resimulate import predicted_interval
from sim.validation.run_speed import draw, run_sigma, scaled_host, slower_profiles


def real_summary(path, cpu_s, ranks=2, iterations=10):
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "kind": "real", "ranks": ranks, "cpus": 2, "iterations": iterations,
        "data_s": cpu_s * iterations / 2, "compute_s": cpu_s * iterations / 4,
        "overhead_s": cpu_s * iterations / 4, "update_s": 0.0}))
    return path


def test_run_sigma_pools_each_case_s_spread_of_log_cpu_time_around_its_mean(tmp_path):
    runs = [real_summary(tmp_path / "a" / f"r{i}", t) for i, t in enumerate([1e-4, 2e-4])]
    runs += [real_summary(tmp_path / "b" / f"r{i}", t) for i, t in enumerate([1e-3, 1e-3,
                                                                               4e-3])]
    runs.append(real_summary(tmp_path / "b" / "r3", 1.0, ranks=3))  # waited for cores: out
    runs.append(real_summary(tmp_path / "c" / "r0", 5e-4))  # one repeat: no spread
    a, b = np.log([1e-4, 2e-4]), np.log([1e-3, 1e-3, 4e-3])
    pooled = ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()
    assert run_sigma(runs) == pytest.approx(math.sqrt(pooled / (1 + 2)))
    assert run_sigma(runs[-2:]) is None


def test_a_slower_host_scales_its_cpu_costs_and_rates_not_its_scheduler():
    data = json.loads(json.dumps(dataclasses.asdict(HOSTS["epyc-core"])))
    slow = scaled_host(data, 2.0)
    assert slow["message_s"] == 2 * data["message_s"]
    assert slow["serve_pull_s"] == 2 * data["serve_pull_s"]
    assert slow["copy_Bps"] == data["copy_Bps"] / 2
    assert slow["poll_s"] == data["poll_s"] and slow["slice_s"] == data["slice_s"]
    assert slow["reload_s"] == data["reload_s"]
    assert slow["table_call_s"] is None  # not measured stays not measured


@pytest.fixture
def one_worker(tmp_path, tiny_config_data):
    """A one-worker run (nothing on the wire) on a calibrated host without reloads and a
    calibrated device: all its time is CPU work."""
    host = dataclasses.replace(HOSTS["epyc-core"], reload_s=0.0, reload_base_s=0.0,
                               reload_spin_base_s=None)
    save_host_profile(tmp_path / "host.json", host)
    save_device_profile(tmp_path / "device.json", 20e9, 30e-6, "test", 10e9)
    return validate(tiny_config_data({
        "cluster.workers": 1, "strategy.kind": "bsp", "run.iterations": 20,
        "cluster.host": f"calibrated:{tmp_path / 'host.json'}",
        "compute.device": f"calibrated:{tmp_path / 'device.json'}"}))


def test_profiles_twice_slower_double_every_cpu_activity(one_worker, tmp_path):
    host, device = slower_profiles(tmp_path / "host.json", tmp_path / "device.json", 2.0,
                                   tmp_path / "slow")
    assert load_host(f"calibrated:{host}").step_s == 2 * HOSTS["epyc-core"].step_s
    assert load_device(f"calibrated:{device}").flops_per_s == 10e9
    cluster = one_worker.cluster.model_copy(update={"host": f"calibrated:{host}"})
    compute = one_worker.compute.model_copy(update={"device": f"calibrated:{device}"})
    base = simulate(one_worker).summary
    slow = simulate(one_worker.model_copy(update={"cluster": cluster,
                                                  "compute": compute})).summary
    for activity in ("data_s", "compute_s", "overhead_s"):
        assert base[activity] > 0
        assert slow[activity] == pytest.approx(2 * base[activity], rel=1e-9)


def test_the_interval_of_a_cpu_bound_run_is_the_quantiles_of_its_speed_draws(one_worker):
    base = iteration_s(simulate(one_worker).summary)
    got = predicted_interval(one_worker, 9, 1e-12, speed_sigma=0.3)
    factors = [draw(seed, 0.3) for seed in range(1, 10)]
    low, high = np.quantile(factors, [0.05, 0.95])
    assert got["low"] == pytest.approx(base * low, rel=1e-6)
    assert got["high"] == pytest.approx(base * high, rel=1e-6)
    assert got["speed_sigma"] == 0.3
