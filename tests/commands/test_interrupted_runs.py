"""Runs stopped early (Ctrl-C, SIGTERM), repeated runs (--force) and progress reports."""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main
from sim.plots.figures import labelled
from sim.progress import Progress, Stopped
from sim.results import Run
from sim.simulated.engine import simulate
from sim.training.validator import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "experiments" / "sync-async-ssp.toml"
LONG = ["--set", "run.iterations=10000000", "--set", "run.samples=10000000000",
        "--set", "strategy.kind=asp"]


def stop_at(updates: int, name: str = "SIGTERM"):
    """A progress callback that stops the run after ``updates`` updates, as a signal does."""
    def progress(done: int, now: float, samples: int) -> None:
        if done >= updates:
            raise Stopped(name)
    return progress


def test_a_stopped_simulation_keeps_what_it_reached():
    config = load_config(CONFIG, ["run.iterations=1000", "strategy.kind=asp"])
    result = simulate(config, stop_at(137))
    s = result.summary
    assert s["complete"] is False and s["stopped_by"] == "SIGTERM"
    assert s["iterations"] == 137 and s["sim_time_s"] > 0
    rows = list(csv.DictReader(io.StringIO(result.metrics_csv)))
    assert sum(r["kind"] == "update" for r in rows) == 137
    assert max(float(r["time_s"]) for r in rows) <= s["sim_time_s"]
    whole = simulate(config).summary
    assert whole["complete"] is True and "stopped_by" not in whole


def test_sigterm_during_sim_run_writes_an_incomplete_run(tmp_path):
    """A real signal to the command: it stops, writes the run and exits 128 + 15."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "sim", "run", str(CONFIG), "--out", str(out),
                             *LONG], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    line = proc.stderr.readline()  # the first progress line: the simulation is running
    while line and not line.startswith("progress:"):
        line = proc.stderr.readline()
    assert line.startswith("progress:"), line
    assert "updates" in line and "left" in line
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "INCOMPLETE: stopped by SIGTERM" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["stopped_by"] == "SIGTERM"
    assert 0 < summary["iterations"] < 10_000_000
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "metrics.csv",
                                                     "summary.json", "trace.json"]


def test_plots_and_comparisons_label_incomplete_runs(tmp_path):
    config = load_config(CONFIG, ["run.iterations=200", "strategy.kind=asp"])
    from sim.rundir import write_run

    write_run(tmp_path / "cut", simulate(config, stop_at(50, "SIGINT")).files())
    write_run(tmp_path / "whole", simulate(config).files())
    labels = list(labelled([Run(tmp_path / "cut"), Run(tmp_path / "whole")]))
    assert labels[0].endswith("(incomplete)") and not labels[1].endswith("(incomplete)")
    from sim.validation.sim_vs_real import compare, format_report

    files = simulate(config).files()  # stands in for a real run: same files, kind "real"
    files["summary.json"] = json.dumps({**json.loads(files["summary.json"]), "kind": "real"})
    write_run(tmp_path / "real", files)
    report = compare(tmp_path / "cut", tmp_path / "real")
    assert report["incomplete"] == [str(tmp_path / "cut")]
    assert f"note: {tmp_path / 'cut'} is incomplete" in format_report(report)


def test_force_replaces_a_run_and_nothing_else(tmp_path, capsys):
    out = tmp_path / "run"
    fast = ["--set", "run.iterations=6", "--set", "run.eval_every=3"]
    assert main(["run", str(CONFIG), "--out", str(out), *fast]) == 0
    assert main(["run", str(CONFIG), "--out", str(out), *fast]) == 2  # never replaced silently
    assert "--force" in capsys.readouterr().err
    assert main(["run", str(CONFIG), "--out", str(out), "--force",
                 "--set", "run.iterations=4"]) == 0
    assert json.loads((out / "summary.json").read_text())["iterations"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary left beside it
    other = tmp_path / "notes"
    other.mkdir()
    (other / "paper.tex").write_text("keep me")
    assert main(["run", str(CONFIG), "--out", str(other), "--force", *fast]) == 2
    assert "not one" in capsys.readouterr().err
    assert [p.name for p in other.iterdir()] == ["paper.tex"]


def test_progress_takes_the_time_limit_when_it_ends_the_run():
    stream = io.StringIO()
    progress = Progress(1_000_000, time_limit_s=0.5, stream=stream, every_s=0.0)
    assert progress.fraction(9190, 0.25) == pytest.approx(0.5)  # not 9190 / 1e6
    assert progress.fraction(900_000, 0.1) == pytest.approx(0.9)
    progress.started -= 10.0  # ten seconds in, half way: about ten left
    progress(9190, 0.25)
    progress(9200, 0.25)
    lines = stream.getvalue().splitlines()  # not a terminal: plain lines
    assert len(lines) == 2 and "\r" not in stream.getvalue()
    # the time limit ends it, so the line counts simulated seconds, not the update bound
    assert "simulated 0.25 of 0.5 s (9190 updates)" in lines[0]
    assert "1000000" not in lines[0] and "about 10 s left" in lines[0]
    samples = Progress(100, None, stream=io.StringIO(), samples=1000)
    assert "300/1000 samples (6 updates)" in samples.line(6, 0.1, samples.started, 300)
    plain = Progress(100, 2.0, stream=io.StringIO())
    assert "60/100 updates" in plain.line(60, 0.1, plain.started)


def test_progress_lines_are_throttled_in_logs():
    stream = io.StringIO()
    progress = Progress(100, None, stream=stream)  # a log: a line every 5 s
    for i in range(100):
        progress(i, i * 1e-3)
    assert stream.getvalue() == ""
    progress.last -= 5.0
    progress(50, 0.05)
    assert stream.getvalue().startswith("progress:  50.0%")


def test_a_signal_stops_the_run_between_updates_and_a_second_at_once():
    """The first SIGTERM only asks: the next progress call (after an update is recorded in
    full) raises, so no state is left half-updated by an exception from a signal handler."""
    import os

    from sim.progress import stop_on_signals

    progress = Progress(100, None, stream=io.StringIO())
    with stop_on_signals(progress):
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, between two bytecodes
        assert progress.stop_requested == "SIGTERM"
        with pytest.raises(Stopped, match="SIGTERM"):
            progress(1, 0.1)
        with pytest.raises(Stopped, match="SIGINT"):
            os.kill(os.getpid(), signal.SIGINT)
