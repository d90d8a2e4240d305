"""The server's own code fitted to real runs through the simulator (``sim validate
--resimulate --fit-on``'s second profile): on run directories whose servers' times are the
simulator's own on a known host, the fit recovers that host's constants."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from sim.calibration.fit_serving import (
    ACTIVITIES,
    SERVE,
    fit_constants,
    fit_serving,
    runs_host,
    serving_points,
    simulated_server_s,
    with_serving,
)
from sim.cli import main
from sim.config import dump_config
from sim.errors import UserError
from sim.training.host_costs import HOSTS, load_host, save_host_profile
from sim.training.validator import validate

TRUTH = {"serve_apply_s": 17e-6, "serve_push_s": 30e-6, "serve_step_s": 45e-6,
         "serve_pull_s": 20e-6}  # what the "real" servers' code took
PRIOR = {"serve_apply_s": 4e-6, "serve_push_s": 3e-6, "serve_step_s": 15e-6,
         "serve_pull_s": 4e-6}  # what a warm loop measured


def host_file(path, values):
    save_host_profile(path, dataclasses.replace(HOSTS["epyc-core"], name=path.stem, **values))
    return path


def fake_real_run(path, kind, host, **summary):
    """A real run of a one-worker ``kind`` parameter server, both ranks on a 2-core host,
    whose servers' time is the simulation's on ``host``."""
    config = validate({"cluster": {"workers": 1, "host": f"calibrated:{host}", "cores": 2,
                                   "ranks_per_host": 2},
                       "workload": {"features": 16, "samples": 400, "batch": 8},
                       "strategy": {"kind": kind}, "run": {"iterations": 30, "seed": 1}})
    path.mkdir(parents=True)
    (path / "config.toml").write_text(dump_config(config))
    server = simulated_server_s(path / "config.toml", host)
    (path / "summary.json").write_text(json.dumps({
        "kind": "real", "transport": "mpi", "ranks": 2, "cpus": 2, "restart_s": 0.0,
        "iterations": 30, "server_breakdown": {a: s * 30 for a, s in server.items()},
        "compute_time_s": 50e-6, **summary}))
    return server


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    where = tmp_path_factory.mktemp("serving")
    truth = host_file(where / "truth.json", TRUTH)
    for kind in ("asp", "bsp-ps"):
        fake_real_run(where / kind / "r0", kind, truth)
    # not CPU time, or not the protocol's alone: left out whatever their times
    fake_real_run(where / "shared" / "r0", "asp", truth, ranks=3)
    fake_real_run(where / "grpc" / "r0", "asp", truth, transport="grpc")
    return where


def test_only_runs_whose_servers_had_a_core_each_over_mpi_are_points(runs):
    points = serving_points([runs / d / "r0" for d in ("asp", "bsp-ps", "shared", "grpc")])
    assert sorted(p["runs"].name for p in points) == ["asp", "bsp-ps"]
    assert all(set(p["real_s"]) == set(ACTIVITIES) for p in points)


def test_the_fit_recovers_the_constants_that_the_runs_determine(runs, tmp_path):
    fit = fit_serving([runs / "asp", runs / "bsp-ps"], host_file(tmp_path / "p.json", PRIOR))
    got = fit["values"]
    # asp's pushes give apply, both servers' pulls give pull (a weak prior biases ~0.1%)
    assert got["serve_apply_s"] == pytest.approx(TRUTH["serve_apply_s"], rel=1e-2)
    assert got["serve_pull_s"] == pytest.approx(TRUTH["serve_pull_s"], rel=1e-2)
    # one worker keeps a push for every step it closes: only their sum is determined, and
    # the excess over the prior is shared evenly
    assert got["serve_push_s"] + got["serve_step_s"] == pytest.approx(
        TRUTH["serve_push_s"] + TRUTH["serve_step_s"], rel=1e-2)
    assert got["serve_push_s"] - PRIOR["serve_push_s"] == pytest.approx(
        got["serve_step_s"] - PRIOR["serve_step_s"], rel=1e-2)
    assert max(abs(p["error"]) for p in fit["points"]) < 1e-2


def test_with_serving_writes_a_loadable_profile_with_its_points(runs, tmp_path):
    prior = host_file(tmp_path / "p.json", PRIOR)
    fit = fit_serving([runs / "asp"], prior)
    out = with_serving(prior, fit, tmp_path / "fitted" / "host.json")
    host = load_host(f"calibrated:{out}")
    assert host.serve_apply_s == pytest.approx(fit["values"]["serve_apply_s"])
    assert host.serve_push_s == PRIOR["serve_push_s"]  # no run kept a push: the prior's
    assert json.loads(out.read_text())["serving_from_runs"][0]["runs"].endswith("asp")


def test_no_qualifying_run_fits_nothing(runs, tmp_path):
    assert fit_serving([runs / "shared"], host_file(tmp_path / "p.json", PRIOR)) == \
        {"values": None, "points": []}


def test_fit_constants_keeps_an_unexercised_constant_and_solves_a_determined_one():
    S = np.array([[1.0, 0, 0, 0], [0, 0, 0, 2.0]])  # two rows: apply once, pull twice
    y0, real = np.array([10e-6, 5e-6]), np.array([40e-6, 45e-6])
    got = fit_constants(y0, S, real, np.array([85e-6, 85e-6]), PRIOR)
    assert got["serve_apply_s"] == pytest.approx(30e-6, rel=1e-3)
    assert got["serve_pull_s"] == pytest.approx(20e-6, rel=1e-3)
    assert got["serve_push_s"] == pytest.approx(PRIOR["serve_push_s"])
    assert list(got) == list(SERVE)


def test_sim_calibrate_from_runs_writes_the_host_with_the_servers_code(runs, tmp_path,
                                                                        capsys):
    assert main(["calibrate", "--from-runs", str(runs / "asp"), str(runs / "bsp-ps"),
                 "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "serve_apply_s" in text and f'cluster.host = "calibrated:{tmp_path}' in text
    host = load_host(f"calibrated:{tmp_path / 'out' / 'host.json'}")
    assert host.serve_pull_s == pytest.approx(TRUTH["serve_pull_s"], rel=1e-2)
    assert host.copy_Bps == HOSTS["epyc-core"].copy_Bps  # the rest: the runs' own host


def test_the_prior_is_the_one_calibrated_host_the_runs_name(runs, tmp_path):
    points = serving_points([runs / "asp" / "r0"])
    assert runs_host(points) == runs / "truth.json"
    other = tmp_path / "other"
    fake_real_run(other / "r0", "asp", host_file(tmp_path / "elsewhere.json", PRIOR))
    with pytest.raises(UserError, match="one calibrated host profile"):
        runs_host(points + serving_points([other / "r0"]))
