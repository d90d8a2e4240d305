"""Whole runs: every strategy on every model, determinism, divergence, the run directory."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from training_cases import MODELS, make, rows

from sim.cli import main as cli_main
from sim.result_schema import METRIC_COLUMNS, SUMMARY_KEYS
from sim.simulated.engine import simulate
from sim.training.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
LEARN = {"run.iterations": 60, "run.eval_every": 30, "workload.lr": 0.3}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", sorted(STRATEGIES))
def test_every_strategy_trains_every_model(kind, model):
    result = simulate(make(MODELS[model], LEARN, strategy__kind=kind, strategy__backup=1))
    s = result.summary
    evals = rows(result.metrics_csv, "eval")
    assert not s["diverged"] and s["iterations"] == 60
    assert evals[-1]["loss"] < 0.95 * evals[0]["loss"]
    assert s["final_loss"] == evals[-1]["loss"]
    assert 0 <= s["final_accuracy"] <= 1
    assert s["sim_time_s"] > 0 and s["samples_per_s"] > 0 and s["compute_s"] > 0


def test_digits_ships_with_the_package_and_trains():
    result = simulate(make(workload__dataset="digits", workload__model="softmax",
                           workload__lr=0.5, run__iterations=60, run__eval_every=60))
    evals = rows(result.metrics_csv, "eval")
    assert evals[-1]["loss"] < 0.6 * evals[0]["loss"]
    assert result.summary["final_accuracy"] > 0.5  # 10 classes: chance is 0.1


def _without_wall(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "wall_s"}


@pytest.mark.parametrize("kind", ["bsp", "backup", "ssp", "easgd"])
def test_same_config_and_seed_give_identical_results(kind):
    noisy = {"compute.distribution": "lognormal", "compute.straggler_fraction": 0.25,
             "compute.straggler_slowdown": 3.0, "strategy.compression": "qsgd",
             "strategy.backup": 1, "run.eval_every": 10}
    first, second = (simulate(make(noisy, strategy__kind=kind)) for _ in range(2))
    assert _without_wall(first.summary) == _without_wall(second.summary)
    assert first.metrics_csv == second.metrics_csv
    assert first.trace == second.trace
    other = simulate(make(noisy, strategy__kind=kind, run__seed=1))
    assert other.metrics_csv != first.metrics_csv
    assert _without_wall(other.summary) != _without_wall(first.summary)


def test_diverging_run_stops_with_diverged_true():
    result = simulate(make(workload__lr=1e300, strategy__kind="asp", run__iterations=50))
    s = result.summary
    assert s["diverged"] is True
    assert s["iterations"] < 50
    assert s["final_loss"] is None and s["final_accuracy"] is None  # no model to report
    json.dumps(s, allow_nan=False)  # valid JSON: no NaN


def test_time_to_target_is_the_first_evaluation_at_or_below_the_target():
    result = simulate(make(LEARN, run__target_loss=0.4, run__eval_every=5))
    evals = rows(result.metrics_csv, "eval")
    first = next(e for e in evals if e["loss"] <= 0.4)
    assert result.summary["time_to_target_s"] == first["time_s"] > 0
    missed = simulate(make(LEARN, run__target_loss=1e-9))
    assert missed.summary["time_to_target_s"] is None


def test_metrics_csv_is_tidy_numbers():
    result = simulate(make(LEARN, strategy__kind="ssp"))
    table = list(csv.reader(result.metrics_csv.splitlines()))
    assert tuple(table[0]) == METRIC_COLUMNS
    for row in table[1:]:
        assert row[0] in ("update", "eval")
        float(row[1])  # time_s is a plain number (never "np.float64(...)")
    updates = rows(result.metrics_csv)
    assert [u["iteration"] for u in updates] == list(range(1, 61))
    times = [u["time_s"] for u in updates]
    assert times == sorted(times)


def _write_config(path, **keys):
    lines = []
    for section, table in keys.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")


def test_run_command_writes_the_run_directory_and_its_config_reruns_identically(tmp_path):
    config = tmp_path / "exp.toml"
    _write_config(config, cluster={"workers": 3}, strategy={"kind": "ssp"},
                  workload={"features": 16, "samples": 512}, run={"target_loss": 0.5})
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "sim", "run", str(config), "--out", str(out),
                           "--set", "run.iterations=30", "--set", "run.eval_every=10"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "metrics.csv",
                                                     "summary.json", "trace.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["iterations"] == 30 and summary["seed"] == 0
    trace = json.loads((out / "trace.json").read_text())
    workers = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 0}
    assert workers == {0, 1, 2}  # one track per worker (links are pid 2)
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert header.split(",")[:2] == ["kind", "time_s"]
    # the written config is complete: run it again (in process) and get the same summary
    again = tmp_path / "again"
    assert cli_main(["run", str(out / "config.toml"), "--out", str(again)]) == 0
    rerun = json.loads((again / "summary.json").read_text())
    assert _without_wall(rerun) == _without_wall(summary)
    assert (again / "metrics.csv").read_text() == (out / "metrics.csv").read_text()


def test_run_command_reports_divergence_without_a_traceback(tmp_path, capsys):
    config = tmp_path / "exp.toml"
    _write_config(config, workload={"lr": 1e300}, run={"iterations": 20})
    assert cli_main(["run", str(config), "--out", str(tmp_path / "run")]) == 0
    assert "DIVERGED" in capsys.readouterr().out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["diverged"] is True


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps", "local-sgd", "asp", "ssp"])
def test_each_worker_time_is_split_into_compute_comm_and_wait(kind):
    result = simulate(make(LEARN, strategy__kind=kind, compute__distribution="exponential",
                           compute__time_s=1e-5))
    s = result.summary
    for w in s["workers"]:
        assert min(w.values()) >= 0
        accounted = sum(w.values())
        if kind in ("bsp", "bsp-ps", "local-sgd"):  # lockstep: every instant is accounted
            assert accounted == pytest.approx(s["sim_time_s"], rel=1e-9)
        else:  # the iteration in flight at the end is not
            assert 0.8 * s["sim_time_s"] < accounted <= s["sim_time_s"] * (1 + 1e-12)
    assert s["compute_s"] == pytest.approx(np.mean([w["compute"] for w in s["workers"]]))


@pytest.mark.parametrize("kind, pipelining", [(k, "none") for k in sorted(STRATEGIES)]
                         + [("bsp", "wfbp"), ("bsp-ps", "bucket")])
def test_strategy_extras_keep_the_common_summary_keys(kind, pipelining):
    """``comm_s`` is the measured message time (overhead + wire) for every strategy: a
    strategy's own keys never replace a common one (bsp and bsp-ps replaced it before)."""
    s = simulate(make(strategy__kind=kind, strategy__backup=1,
                      strategy__pipelining=pipelining)).summary
    assert s["comm_s"] == pytest.approx(s["overhead_s"] + s["wire_s"], rel=1e-12)
    assert s["compute_s"] == np.mean([w["compute"] for w in s["workers"]])


def test_summary_refuses_extras_that_replace_common_keys():
    from sim.recorder import Recorder

    recorder = Recorder(lambda: 1.0, 2, 10, lambda i: False, None)
    with pytest.raises(ValueError, match="comm_s"):
        recorder.summary(0, 0.0, 0, comm_s=1.0)


@pytest.mark.parametrize("kind, per_update", [("bsp", 4 * 8), ("bsp-ps", 4 * 8),
                                              ("backup", 3 * 8), ("asp", 8), ("ssp", 8)])
def test_a_sample_budget_gives_every_strategy_the_same_work(kind, per_update):
    """run.iterations counts steps for bsp and gradients for asp: a budget in samples
    stops every strategy after the same work (4 workers, batch 8)."""
    result = simulate(make(strategy__kind=kind, strategy__backup=1, run__iterations=10**6,
                           run__samples=960, workload__batch=8))
    s = result.summary
    assert s["iterations"] == -(-960 // per_update)  # the update that reaches the budget
    assert s["samples_per_s"] * s["sim_time_s"] == pytest.approx(s["iterations"] * per_update)
    evals = rows(result.metrics_csv, "eval")
    assert int(evals[-1]["iteration"]) == s["iterations"]  # evaluated where it stopped


def test_real_runs_refuse_a_sample_budget(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("[run]\nsamples = 100\n")
    assert cli_main(["real", str(config), "--out", str(tmp_path / "r")]) == 2
    assert "run.samples" in capsys.readouterr().err
