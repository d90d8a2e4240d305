"""Warnings where figures may mislead: a busy machine under real runs and calibrations,
and calibration fits that miss what they fit by more than 10%."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from sim.calibration.report import warn_fit, warn_load
from sim.commands.real import load_warnings
from sim.real.launch.other_load import OtherLoad


def test_real_runs_warn_when_other_processes_took_the_cpu():
    assert load_warnings([{"other_load": 0.04}]) == []
    (line,) = load_warnings([{"other_load": 0.35}])
    assert line.startswith("warning: other processes used 35% of the CPUs during the run")
    lines = load_warnings([{"other_load": 0.0}, {"other_load": 0.2}, {}])
    assert len(lines) == 1 and "repeat 1" in lines[0]


def test_other_load_counts_a_busy_process_that_is_not_ours():
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with OtherLoad() as load:
            time.sleep(1.0)
    finally:
        burner.kill()
        burner.wait()
    assert load.fraction > 0.2  # one spinning process on this machine's cores


@pytest.mark.parametrize("errors, warned", [([("a", 0.03), ("b", -0.08)], False),
                                            ([("a", 0.03), ("b", -0.68)], True),
                                            ([("16 B", 2.68)], True)])
def test_calibration_warns_about_fits_worse_than_ten_percent(capsys, errors, warned):
    warn_fit("network", errors)
    err = capsys.readouterr().err
    assert bool(err) == warned
    if warned:
        worst = max(errors, key=lambda e: abs(e[1]))
        assert f"the network fit is off by {worst[1]:+.0%} at {worst[0]}" in err


def test_calibration_warns_about_other_load(capsys):
    warn_load("compute", 0.05)
    assert capsys.readouterr().err == ""
    warn_load("compute", 0.5)
    assert "other processes used 50% of the CPUs while the compute" in capsys.readouterr().err


@pytest.mark.ranks
def test_a_real_run_records_the_other_load(tmp_path, capsys, two_rank_config_data,
                                           write_toml):
    pytest.importorskip("mpi4py")
    from sim.cli import main

    # the shared two-rank workload with 300 samples and the default batch
    config = write_toml(tmp_path / "tiny.toml", two_rank_config_data(
        {"workload.samples": 300, "workload.batch": None, "strategy.kind": "asp",
         "run.iterations": 10, "run.eval_every": 5}))
    assert main(["real", str(config), "--out", str(tmp_path / "real")]) == 0
    summary = json.loads((tmp_path / "real" / "summary.json").read_text())
    assert 0.0 <= summary["other_load"] <= 1.0
