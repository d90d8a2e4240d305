"""``sim real CONFIG --twin``: the real run, its twin simulated on this machine's profiles,
and the comparison, with no key set by hand."""

from __future__ import annotations

import json
import os

import pytest

from sim.cli import main
from sim.results import iteration_s

pytest.importorskip("mpi4py")


@pytest.fixture
def config(tmp_path, two_rank_config_data, write_toml):
    """The shared two-rank workload under asp with real kernels, 30 updates."""
    path = tmp_path / "mine.toml"
    write_toml(path, two_rank_config_data({"strategy.kind": "asp", "run.iterations": 30,
                                           "run.eval_every": 10}))
    return path


def test_twin_calibrates_simulates_and_compares(tmp_path, config, capsys):
    out = tmp_path / "real"
    assert main(["real", str(config), "--out", str(out), "--twin", "--quick"]) == 0
    printed = capsys.readouterr().out
    assert "calibrating the host's CPU costs" in printed and "iteration time" in printed
    twin, profiles = out / "twin", out / "profiles"
    text = (twin / "config.toml").read_text()
    # the validation's twin: calibrated device, fabric and host, every rank on this machine
    assert f'fabric = "calibrated:{profiles / "shm" / "fabric.json"}"' in text
    assert f'device = "calibrated:{profiles / "device" / "device.json"}"' in text
    assert f'host = "calibrated:{profiles / "host" / "host.json"}"' in text
    assert f"cores = {os.cpu_count()}" in text and "ranks_per_host = 3" in text
    report = json.loads((twin / "comparison.json").read_text())
    assert (twin / "report.png").stat().st_size > 10_000  # the figure sim compare draws
    sim = iteration_s(json.loads((twin / "summary.json").read_text()))
    real = iteration_s(json.loads((out / "summary.json").read_text()))
    assert report["iteration_s"]["sim"] == pytest.approx(sim)
    assert report["iteration_s"]["error"] == pytest.approx(sim / real - 1)

    # an earlier twin's profiles, reused: nothing measured again
    again = tmp_path / "again"
    assert main(["real", str(config), "--out", str(again), "--twin", "--profiles",
                 str(profiles)]) == 0
    assert "calibrating" not in capsys.readouterr().out
    assert f'host = "calibrated:{profiles / "host" / "host.json"}"' in (
        again / "twin" / "config.toml").read_text()
    assert not (again / "profiles").exists()


def test_twin_options_are_checked(tmp_path, config, capsys):
    assert main(["real", str(config), "--profiles", str(tmp_path)]) == 2
    assert "--profiles goes with --twin" in capsys.readouterr().err
    out = tmp_path / "real"
    assert main(["real", str(config), "--out", str(out), "--twin", "--profiles",
                 str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "--profiles" in err and "device/device.json" in err
    assert not out.exists()  # checked before running anything
