"""``SGD_LAB_QUICK=1`` (sim.quick): the command line's reduced form caps runs and seeds, says
so in one line and in every cut run's files, is off unless the variable is exactly 1, and
never reaches the library's own loaders."""

from __future__ import annotations

import argparse
import csv
import json
import tomllib
from pathlib import Path

import pytest

from sim import quick
from sim.cli import announce_quick, main
from sim.errors import UserError
from sim.training.validator import load_config

CUT = "SGD_LAB_QUICK=1: run.iterations 60 -> 20, run.eval_every 30 -> 10"


@pytest.fixture
def long_config(tmp_path: Path, tiny_config_data, write_toml) -> Path:
    """The tiny config, 60 updates long, evaluated every 30."""
    return write_toml(tmp_path / "long.toml",
                      tiny_config_data({"run.iterations": 60, "run.eval_every": 30}))


@pytest.fixture
def quick_on(monkeypatch):
    monkeypatch.setenv(quick.VARIABLE, "1")


def read_run(out: Path) -> tuple[dict, dict]:
    """(config.toml, summary.json) of a run directory."""
    return (tomllib.loads((out / "config.toml").read_text()),
            json.loads((out / "summary.json").read_text()))


@pytest.mark.parametrize("value", [None, "", "0", "true", "yes", "2"])
def test_off_unless_exactly_1(value):
    environ = {} if value is None else {quick.VARIABLE: value}
    assert not quick.enabled(environ)
    assert quick.enabled({quick.VARIABLE: "1"})


def test_off_by_default_a_run_is_as_configured(tmp_path, long_config, monkeypatch, capsys):
    monkeypatch.delenv(quick.VARIABLE, raising=False)
    assert main(["run", str(long_config), "--out", str(tmp_path / "out")]) == 0
    config, summary = read_run(tmp_path / "out")
    assert summary["iterations"] == 60 and "reduced" not in summary
    assert config["run"]["iterations"] == 60 and "reduced" not in config["run"]
    printed = capsys.readouterr()
    assert quick.VARIABLE not in printed.err and "REDUCED" not in printed.out


def test_a_long_run_is_cut_and_says_so(tmp_path, long_config, quick_on, capsys):
    assert main(["run", str(long_config), "--out", str(tmp_path / "out")]) == 0
    config, summary = read_run(tmp_path / "out")
    assert summary["iterations"] == 20 and summary["reduced"] == CUT
    assert [config["run"][k] for k in ("iterations", "eval_every", "reduced")] == [20, 10, CUT]
    printed = capsys.readouterr()
    (line,) = [x for x in printed.err.splitlines() if quick.VARIABLE in x]
    assert line.startswith("SGD_LAB_QUICK=1: reduced form for testing (the run stops after "
                           "at most 20 updates)")
    assert f"  REDUCED: {CUT}" in printed.out
    # the written config reruns as it ran, reduced and saying so, with the variable or not
    assert load_config(tmp_path / "out" / "config.toml").run.reduced == CUT


def test_a_run_short_enough_is_left_alone(tmp_path, tiny_config_data, write_toml, quick_on):
    path = write_toml(tmp_path / "short.toml",
                      tiny_config_data({"run.iterations": 20, "run.eval_every": 20}))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    config, summary = read_run(tmp_path / "out")
    assert summary["iterations"] == 20 and "reduced" not in summary
    assert config["run"]["eval_every"] == 20 and "reduced" not in config["run"]


def test_the_library_is_never_reduced(long_config, quick_on):
    assert load_config(long_config).run.iterations == 60
    assert load_config(long_config, quick=True).run.iterations == 20


def test_a_cut_that_breaks_the_config_says_what_cut_it(tmp_path, tiny_config_data, write_toml,
                                                       quick_on, capsys):
    path = write_toml(tmp_path / "fail.toml", tiny_config_data(
        {"run.iterations": 60, "faults.failures": [{"rank": 1, "at_update": 40}]}))
    with pytest.raises(UserError, match=r"at_update = 40 is past the run .*"
                                        r"\(SGD_LAB_QUICK=1: run.iterations 60 -> 20.*; unset "
                                        r"SGD_LAB_QUICK to run it as configured\)"):
        load_config(path, quick=True)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_a_sweep_takes_two_seeds_cuts_its_runs_and_is_never_reused_in_full(
        tmp_path, write_tiny_sweep, monkeypatch, capsys):
    config = write_tiny_sweep(tmp_path / "exp.toml", '[sweep]\n"strategy.kind" = ["bsp", "asp"]\n',
                              iterations=40)
    out = tmp_path / "sweep"
    command = ["sweep", str(config), "--out", str(out), "--seeds", "3", "--jobs", "1",
               "--no-plots"]
    monkeypatch.setenv(quick.VARIABLE, "1")
    assert main(command) == 0
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["strategy.kind"], r["run.seed"]) for r in rows] == [
        ("bsp", "0"), ("bsp", "1"), ("asp", "0"), ("asp", "1")]
    assert {r["iterations"] for r in rows} == {"20"}
    # (evaluated every 5 updates: often enough as it is)
    assert {r["reduced"] for r in rows} == {"SGD_LAB_QUICK=1: run.iterations 40 -> 20"}
    assert "at most 2 seeds" in capsys.readouterr().err
    # the full sweep into the same directory: other configs, refused (nothing reused)
    monkeypatch.delenv(quick.VARIABLE)
    assert main(command) == 2
    assert "SGD_LAB_QUICK" in capsys.readouterr().err


@pytest.mark.ranks
def test_a_real_run_is_cut_and_says_so(tmp_path, tiny_real_config_data, write_toml, quick_on):
    pytest.importorskip("mpi4py")
    path = write_toml(tmp_path / "real.toml", tiny_real_config_data({"run.iterations": 30}))
    assert main(["real", str(path), "--out", str(tmp_path / "real")]) == 0
    config, summary = read_run(tmp_path / "real")
    assert summary["iterations"] == 20 and summary["clock"] == "wall"
    assert summary["reduced"] == config["run"]["reduced"] == (
        "SGD_LAB_QUICK=1: run.iterations 30 -> 20")


@pytest.mark.parametrize("command", ["calibrate", "validate", "bench"])
def test_the_commands_with_quick_run_quick(command, quick_on, capsys):
    args = argparse.Namespace(command=command, quick=False)
    announce_quick(args)
    assert args.quick is True
    assert "as with --quick" in capsys.readouterr().err


def test_a_command_it_does_not_change_prints_nothing(quick_on, capsys):
    args = argparse.Namespace(command="list")
    announce_quick(args)
    assert capsys.readouterr().err == "" and not hasattr(args, "quick")
    assert quick.banner("plot") is None and set(quick.COMMANDS) >= {"run", "sweep", "real"}
