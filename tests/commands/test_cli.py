"""The command line end to end: run, list, --help, and the result contract."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sim.cli import COMMANDS, main
from sim.result_schema import SUMMARY_KEYS

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "experiments" / "quickstart.toml"
FAST = ["--set", "run.iterations=6", "--set", "run.eval_every=3"]


def test_run_writes_the_result_contract(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(TINY), "--out", str(out), *FAST]) == 0
    printed = capsys.readouterr().out
    assert str(out) in printed and "final_loss" in printed
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "metrics.csv",
                                                     "summary.json", "trace.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["iterations"] == 6
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "time_s" in header
    trace = json.loads((out / "trace.json").read_text())
    assert {e["ph"] for e in trace["traceEvents"]} >= {"M", "X"}
    resolved = tomllib.loads((out / "config.toml").read_text())
    assert resolved["run"]["iterations"] == 6 and resolved["cluster"]["workers"] == 8


def test_rerunning_the_resolved_config_gives_the_same_summary(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["run", str(TINY), "--out", str(first), *FAST]) == 0
    assert main(["run", str(first / "config.toml"), "--out", str(second)]) == 0
    a, b = (json.loads((d / "summary.json").read_text()) for d in (first, second))
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    assert (first / "metrics.csv").read_text() == (second / "metrics.csv").read_text()


def test_existing_results_are_never_replaced(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    assert main(["run", str(TINY), "--out", str(out), *FAST]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == "{}"


def test_list_names_every_registry(capsys):
    assert main(["list"]) == 0
    printed = capsys.readouterr().out
    for name in ("fabrics:", "strategies:", "ib-hdr", "ssp", "sparse-logreg", "quickstart",
                 "hosts:", "epyc-core", "wide-deep", "ctr-synthetic", "criteo:PATH",
                 "profiles:", "inception-v3"):
        assert name in printed


def test_list_profiles_prints_each_ones_parameters_flops_and_source(capsys):
    from sim.workloads.timing_profiles import PROFILES

    assert main(["list", "profiles"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert len(lines) == len(PROFILES)
    for line, (name, build) in zip(lines, PROFILES.items(), strict=True):
        p = build()
        step = p.forward_flops + sum(p.backward_flops(i) for i in range(len(p.layers)))
        assert line.split()[0] == name and p.source in line
        assert f"{p.params / 1e6:.2f} M params" in line
        assert f"{p.forward_flops / 1e9:.2f} GFLOP forward, {step / 1e9:.2f} forward+backward" \
            in " ".join(line.split())


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command):
    done = subprocess.run([sys.executable, "-m", "sim", command, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout


def test_bad_arguments_exit_2_without_traceback():
    done = subprocess.run([sys.executable, "-m", "sim", "run"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_time_limit_stops_every_strategy_at_the_same_simulated_time():
    from sim.simulated.engine import simulate
    from sim.training.validator import validate

    for kind in ("bsp", "asp"):
        result = simulate(validate({"cluster": {"workers": 4}, "strategy": {"kind": kind},
                                    "run": {"iterations": 10**6, "time_limit_s": 1e-3,
                                            "eval_every": 25}}))
        s = result.summary
        assert s["sim_time_s"] == pytest.approx(1e-3) and 0 < s["iterations"] < 10**6
        last_eval = [line for line in result.metrics_csv.splitlines()
                     if line.startswith("eval")][-1].split(",")
        assert float(last_eval[1]) == pytest.approx(1e-3)  # evaluated where it stopped
        assert s["final_loss"] == pytest.approx(float(last_eval[8]))
