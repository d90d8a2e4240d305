"""Adding a strategy is one row: a copy of asp under another name, added to the table in the
test alone, runs through `sim run`, `sim sweep` (with its plots), `sim list` and the analysis
without any other module knowing its name; and every row is complete."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sim.analysis import load_runs, strategy_label
from sim.cli import main
from sim.plots.legends import run_labels
from sim.results import Sweep
from sim.training.strategies import PIPELINING, STRATEGIES, StrategyName, make_rules, row_of
from sim.training.validator import validate


@pytest.fixture
def copied_asp(monkeypatch):
    """`asp-copy`: asp's row under another name, in the table for this test only."""
    row = replace(STRATEGIES["asp"], name="asp-copy", label=StrategyName("ASP copy"),
                  short=StrategyName("asp-copy"), summary="asp again, under another name")
    monkeypatch.setitem(STRATEGIES, row.name, row)
    return row


def summary_of(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("wall_s")
    return summary


def test_a_new_row_runs_as_the_strategy_it_copies(copied_asp, tmp_path, tiny_config_data,
                                                   write_toml):
    config = write_toml(tmp_path / "tiny.toml", tiny_config_data(run__iterations=12,
                                                                 run__eval_every=4))
    for kind in ("asp", "asp-copy"):
        assert main(["run", str(config), "--out", str(tmp_path / kind),
                     "--set", f"strategy.kind={kind}"]) == 0
    assert summary_of(tmp_path / "asp-copy") == {**summary_of(tmp_path / "asp"),
                                                 "strategy": "asp-copy"}
    assert (tmp_path / "asp-copy" / "metrics.csv").read_bytes() == \
        (tmp_path / "asp" / "metrics.csv").read_bytes()


def test_a_new_row_sweeps_plots_lists_and_is_analysed(copied_asp, tmp_path, capsys,
                                                      write_tiny_sweep):
    config = write_tiny_sweep(tmp_path / "exp.toml",
                              '[sweep]\n"strategy.kind" = ["asp", "asp-copy"]\n')
    out = tmp_path / "sweep"
    assert main(["sweep", str(config), "--out", str(out), "--jobs", "1"]) == 0
    runs = Sweep(out).runs()
    assert sorted(run_labels([run.config for run in runs])) == ["ASP", "ASP copy"]
    assert any((out / "plots").glob("loss-*.png"))
    rows = load_runs(out)
    assert sorted(rows["label"]) == ["asp", "asp-copy"]
    assert strategy_label({"strategy": {"kind": "asp-copy"}}) == "asp-copy"
    capsys.readouterr()
    assert main(["list", "strategies"]) == 0
    assert "asp-copy   asp again, under another name" in capsys.readouterr().out


def test_a_new_row_is_checked_like_its_original(copied_asp):
    data = {"cluster": {"workers": 2}, "strategy": {"kind": "asp-copy", "pipelining": "wfbp"}}
    with pytest.raises(Exception, match="layer-wise pipelining applies to bsp and bsp-ps"):
        validate(data)
    config = validate({"cluster": {"workers": 3, "servers": 2},
                       "strategy": {"kind": "asp-copy"}})
    assert row_of(config).ranks(config) == 5
    assert type(make_rules(config)) is STRATEGIES["asp"].rules_class()


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_row_is_complete(name):
    row = STRATEGIES[name]
    assert row.name == name and row.summary and row.label.text and row.short.text
    assert set(row.pipelining) <= set(PIPELINING) and "none" in row.pipelining
    assert row.recovery in ("restart", "elastic")
    assert row.real is not None or row.no_real  # a real run runs it or says why not
    row.simulated_class()  # importable
