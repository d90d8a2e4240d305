"""Calibration from real runs (``sim calibrate --from-runs``) and the cross-validation of
``sim validate --resimulate --fit-on``: on run directories the tests write, whose in-run
gradient times follow a known device."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.calibration.from_runs import device_points, real_run_dirs, write_device_from_runs
from sim.cli import main
from sim.config import dump_config
from sim.errors import UserError
from sim.training.compute_model import load_device
from sim.training.validator import validate
from sim.training.workload import build_workload
from sim.validation import cross_validation

RATE, OVERHEAD = 20e9, 30e-6  # the device the fake runs saw: FLOP/s, s a gradient
SHAPES = [{"model": "logreg", "features": 64, "batch": 16},
          {"model": "logreg", "features": 2000, "batch": 64},
          {"model": "mlp", "features": 32, "hidden": [64], "batch": 32}]


def fake_run(path, workload: dict, **extra) -> float:
    """A real run directory of ``workload`` whose median kernel took what the device
    above takes (or ``extra["seconds"]``); the seconds written."""
    config = validate({"cluster": {"workers": 2},
                       "workload": {"samples": 256, **workload}, **extra.get("config", {})})
    flops = build_workload(config).layers.flops(config.workload.batch)
    seconds = extra.get("seconds", OVERHEAD + flops / RATE)
    path.mkdir(parents=True)
    (path / "config.toml").write_text(dump_config(config))
    (path / "summary.json").write_text(json.dumps({"kind": "real",
                                                   "compute_time_s": seconds}))
    return seconds


def test_the_device_fitted_to_runs_recovers_their_rate_and_overhead(tmp_path):
    for i, shape in enumerate(SHAPES):
        fake_run(tmp_path / f"run{i}", shape)
    # a modelled gradient says nothing of the device: left out whatever its time
    fake_run(tmp_path / "modelled", SHAPES[0], seconds=1.0,
             config={"compute": {"time_s": 1e-3}})
    dirs = real_run_dirs([tmp_path / f"run{i}" for i in range(3)] + [tmp_path / "modelled"])
    assert len(device_points(dirs)) == 3
    fit = write_device_from_runs(tmp_path / "device.json", dirs)
    assert fit["flops_per_s"] == pytest.approx(RATE, rel=1e-6)
    assert fit["overhead_s"] == pytest.approx(OVERHEAD, rel=1e-6)
    assert max(abs(p["error"]) for p in fit["points"]) < 1e-6
    device = load_device(f"calibrated:{tmp_path / 'device.json'}")
    assert device.flops_per_s == pytest.approx(RATE, rel=1e-6)
    assert "--from-runs" in device.source


def test_runs_of_one_workload_give_one_point_at_their_median(tmp_path):
    times = [fake_run(tmp_path / f"r{i}", SHAPES[1], seconds=s)
             for i, s in enumerate([1e-4, 3e-4, 2e-4])]
    (point,) = device_points(real_run_dirs([tmp_path / f"r{i}" for i in range(3)]))
    assert point["runs"] == 3 and point["seconds"] == sorted(times)[1]


def test_no_run_with_real_kernels_is_a_clear_error(tmp_path, capsys):
    fake_run(tmp_path / "modelled", SHAPES[0], config={"compute": {"time_s": 1e-3}})
    with pytest.raises(UserError, match="nothing to fit the device to"):
        write_device_from_runs(tmp_path / "device.json", [tmp_path / "modelled"])
    assert main(["calibrate", "--from-runs", str(tmp_path / "modelled"), "--out",
                 str(tmp_path / "out")]) == 2
    assert "nothing to fit" in capsys.readouterr().err


def test_sim_calibrate_from_runs_writes_the_device(tmp_path, capsys):
    for i, shape in enumerate(SHAPES):
        fake_run(tmp_path / "runs" / f"run{i}", shape)
    assert main(["calibrate", "--from-runs", *(str(tmp_path / "runs" / f"run{i}")
                                               for i in range(3)),
                 "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "in-run gradient times" in text and "logreg 2000 x2 batch 64" in text
    device = load_device(f"calibrated:{tmp_path / 'out' / 'device.json'}")
    assert device.overhead_s == pytest.approx(OVERHEAD, rel=1e-6)


def row(case: str, error: float) -> dict:
    return {"case": case, "report": {"iteration_s": {"error": error}}}


def test_cross_validation_splits_in_sample_from_held_out():
    runs = {"microbenchmarks": [row("a", -0.2), row("b", -0.1), row("c", 0.3)],
            "from runs": [row("a", -0.05), row("b", 0.05), row("c", 0.2)]}
    stats = cross_validation.error_stats(runs["microbenchmarks"][:2])
    assert stats == {"cases": 2, "median": pytest.approx(0.15), "worst": 0.2,
                     "mean": pytest.approx(-0.15), "within_15": 1}
    device = {"flops_per_s": 2e10, "overhead_s": 3e-5, "memory_Bps": None,
              "points": [{"workload": "w", "error": 0.01}]}
    text = "\n".join(cross_validation.lines(runs, {"a", "b"}, ["workers=2"], device))
    assert "| microbenchmarks | 15.0% | 20.0% | -15.0% | 1/2 | 30.0% | 30.0% | +30.0% | 0/1 |" \
        in text
    assert "| from runs | 5.0% | 5.0% | +0.0% | 2/2 | 20.0% | 20.0% | +20.0% | 0/1 |" in text
    assert "20.0 GFLOP/s + 30.0 us per gradient" in text and "w +1.0%" in text


def test_in_run_sigma_is_the_spread_of_log_gradient_times_around_each_run_median(tmp_path):
    from sim.calibration.from_runs import in_run_sigma

    spans = {"a": [100.0, 100.0 * 2.0, 100.0 / 2.0], "b": [10.0, 10.0, 10.0 * 4.0]}
    for name, durations in spans.items():
        fake_run(tmp_path / name, SHAPES[0])
        events = [{"ph": "X", "name": "compute", "pid": 0, "tid": 0, "dur": d}
                  for d in durations]
        events.append({"ph": "X", "name": "wire", "pid": 0, "tid": 0, "dur": 1e6})
        (tmp_path / name / "trace.json").write_text(json.dumps({"traceEvents": events}))
    logs = np.log([1, 2, 0.5, 1, 1, 4])  # each span over its run's median
    assert in_run_sigma([tmp_path / "a", tmp_path / "b"]) == pytest.approx(np.std(logs))
    assert in_run_sigma([tmp_path / "none"]) is None


def test_the_predicted_interval_closes_on_the_constant_run_without_spread(
        two_rank_config_data):
    from sim.results import iteration_s
    from sim.simulated.engine import simulate
    from sim.validation.resimulate import predicted_interval

    config = validate(two_rank_config_data({"strategy.kind": "bsp", "run.iterations": 20}))
    constant = iteration_s(simulate(config).summary)
    still = predicted_interval(config, 3, 1e-9)
    assert still["low"] == pytest.approx(constant, rel=1e-6)
    assert still["high"] == pytest.approx(constant, rel=1e-6)
    wide = predicted_interval(config, 5, 0.5)
    assert wide["low"] < wide["high"] and wide["seeds"] == 5 and wide["sigma"] == 0.5
    rows = [{"case": "a", "spread": {"inside": True}}, {"case": "b", "spread": {"inside": False}},
            {"case": "c"}]
    assert cross_validation.coverage(rows) == (1, 2)


def test_golden_section_finds_the_minimum_of_a_unimodal_cost():
    from sim.calibration.fit_rendezvous import golden_section

    x, cost = golden_section(lambda v: (v - 1.3) ** 2 + 2.0, -5.0, 5.0, steps=40)
    assert x == pytest.approx(1.3, abs=1e-6) and cost == pytest.approx(2.0)


def test_with_rendezvous_sets_the_base_and_keeps_the_rest(tmp_path):
    from sim.calibration.fit_rendezvous import with_rendezvous
    from sim.training.host_costs import HOSTS, load_host, save_host_profile

    save_host_profile(tmp_path / "host.json", HOSTS["epyc-core"])
    with_rendezvous(tmp_path / "host.json", 2.5e-4, tmp_path / "fitted.json")
    host = load_host(f"calibrated:{tmp_path / 'fitted.json'}")
    assert host.rendezvous_base_s == 2.5e-4 and host.copy_Bps == HOSTS["epyc-core"].copy_Bps
    assert "fitted to real runs" in host.source


def test_a_fit_near_a_prior_keeps_what_the_runs_leave_free_and_takes_what_they_fix(tmp_path):
    """One workload's runs fix one number: the fit passes through it, and the terms it
    cannot tell apart stay near the prior (a plain fit of one point is degenerate)."""
    from sim.calibration.fit_device import fit_device_near

    save = {"flops_per_s": 10e9, "overhead_s": 10e-6, "memory_Bps": None}
    (tmp_path / "prior.json").write_text(json.dumps(save))
    seconds = fake_run(tmp_path / "one", SHAPES[1])
    fit = write_device_from_runs(tmp_path / "device.json", [tmp_path / "one"],
                                 tmp_path / "prior.json")
    assert abs(fit["points"][0]["error"]) < 1e-3  # through the point
    assert fit["overhead_s"] == pytest.approx(10e-6, rel=0.5)  # near the prior's
    assert "near" in load_device(f"calibrated:{tmp_path / 'device.json'}").source
    # every term fixed by the points: the prior hardly moves the fit
    points = [{"flops": f, "traffic": 0.0, "seconds": OVERHEAD + f / RATE}
              for f in (1e5, 1e6, 1e7, 1e8)]
    fit = fit_device_near(points, {"flops_per_s": 10e9, "overhead_s": 10e-6})
    assert fit.flops_per_s == pytest.approx(RATE, rel=1e-3)
    assert fit.overhead_s == pytest.approx(OVERHEAD, rel=1e-2)
    assert seconds > 0


def test_the_prior_is_the_calibrated_device_the_runs_name(tmp_path):
    from sim.calibration.from_runs import runs_device
    from sim.training.compute_model import save_device_profile

    save_device_profile(tmp_path / "device.json", 10e9, 10e-6, "test")
    named = {"compute": {"device": f"calibrated:{tmp_path / 'device.json'}"}}
    fake_run(tmp_path / "a", SHAPES[0], config=named)
    fake_run(tmp_path / "b", SHAPES[1], config=named)
    fake_run(tmp_path / "preset", SHAPES[1])
    assert runs_device([tmp_path / "a", tmp_path / "b"]) == tmp_path / "device.json"
    assert runs_device([tmp_path / "a", tmp_path / "preset"]) is None  # two devices
