"""What a user reads in the first hour (issue 33, part 6): sweep tables without columns that
are empty in every row, values without spread printed bare, whole descriptions in
``sim list``, and a "did you mean" for a misspelled config file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.cli import main
from sim.errors import UserError
from sim.seeds import format_ci
from sim.stats import MeanCI, mean_ci
from sim.sweep import SweepReport, load_sweep

GRID = '[sweep]\n"strategy.kind" = ["bsp", "asp"]\n'


@pytest.fixture
def config(tmp_path: Path, write_tiny_sweep) -> Path:
    return write_tiny_sweep(tmp_path / "exp.toml", GRID)


def _report(tmp_path: Path, config: Path, seeds: int | None, rows: list[dict],
            overrides: tuple[str, ...] = ()) -> SweepReport:
    sweep = load_sweep(config, list(overrides), seeds=seeds)
    report = SweepReport(tmp_path, sweep)
    report.rows = [{"run": p.name, **row} for p, row in zip(sweep.points, rows, strict=True)]
    return report


# ---- columns empty in every row ----------------------------------------------------------

def test_the_run_table_leaves_out_a_column_empty_in_every_row(tmp_path, config):
    from sim.commands.sweep import format_table

    rows = [{"final_loss": None, "time_to_target_s": None, "sim_time_s": 1.5,
             "samples_per_s": 10.0}] * 2
    lines = format_table(_report(tmp_path, config, None, rows)).splitlines()
    assert lines[0].split() == ["run", "sim_time_s", "samples_per_s"]
    assert [line.split() for line in lines[1:]] == [["kind=bsp", "1.5", "10"],
                                                    ["kind=asp", "1.5", "10"]]
    # a column with a value in some row stays, "-" where a row has none
    rows[1] = {**rows[1], "final_loss": 0.25}
    lines = format_table(_report(tmp_path, config, None, rows)).splitlines()
    assert lines[0].split() == ["run", "final_loss", "sim_time_s", "samples_per_s"]
    assert lines[1].split() == ["kind=bsp", "-", "1.5", "10"]
    # with a target, "never" is a value: the column stays
    lines = format_table(_report(tmp_path, config, None, rows,
                                 ("run.target_loss=0.1",))).splitlines()
    assert lines[0].split()[2] == "time_to_target_s"
    assert lines[1].split()[2] == "never"


def test_a_real_sweep_without_target_prints_no_time_to_target_column(tmp_path, config,
                                                                      capsys):
    assert main(["sweep", str(config), "--out", str(tmp_path / "out"), "--no-plots",
                 "--jobs", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].split() == ["run", "final_loss", "sim_time_s", "samples_per_s"]
    assert all(" - " not in f" {line} " for line in printed[2:4])


def test_the_seed_table_leaves_out_columns_empty_in_every_row(tmp_path, config):
    from sim.commands.sweep import format_table

    rows = [{"final_loss": None, "time_to_target_s": None, "sim_time_s": 1.0 + i,
             "samples_per_s": 10.0} for i in range(4)]
    text = format_table(_report(tmp_path, config, 2, rows))
    lines = text.splitlines()
    assert lines[0].split() == ["configuration", "seeds", "sim_time_s", "samples_per_s"]
    assert "time_to_target_s" not in text and "reached" not in text


# ---- values without spread ---------------------------------------------------------------

def test_a_value_without_spread_prints_without_an_interval():
    assert format_ci(mean_ci([910700.0] * 3)) == "9.107e+05"
    # the spread of rounding alone (relative half-width ~4e-16) is no spread
    assert format_ci(MeanCI(910700.0, 3.5e-10, 3)) == "9.107e+05"
    assert format_ci(MeanCI(0.0, 0.0, 3)) == "0"
    # a real spread, however small, keeps its interval
    assert format_ci(mean_ci([1.0, 1.001, 1.002])) == "1.001 ± 0.0025"
    assert format_ci(mean_ci([2.0])) == "2"
    assert format_ci(mean_ci([])) == "-"


def test_a_seeded_sweep_of_a_deterministic_metric_prints_no_interval(tmp_path, config):
    from sim.commands.sweep import format_table

    rows = [{"final_loss": loss, "time_to_target_s": None, "sim_time_s": 910700.0,
             "samples_per_s": 0.1 + 0.2} for loss in (1.0, 2.0, 3.0, 4.0)]
    rows[1]["samples_per_s"] = 0.3  # 0.30000000000000004 vs 0.3: rounding, not spread
    lines = format_table(_report(tmp_path, config, 2, rows)).splitlines()
    assert lines[0].split() == ["configuration", "seeds", "final_loss", "sim_time_s",
                                "samples_per_s"]
    loss = mean_ci([1.0, 2.0])
    assert lines[1].split() == ["kind=bsp", "2", "1.5", "±", f"{loss.half_width:.2g}",
                                "9.107e+05", "0.3"]
    # no interval anywhere: no "±" at all, and the note says why
    for row in rows:
        row["final_loss"] = 0.5
    text = format_table(_report(tmp_path, config, 2, rows))
    assert "±" not in text and "+-" not in text
    assert text.splitlines()[1].split() == ["kind=bsp", "2", "0.5", "9.107e+05", "0.3"]
    assert "same for every seed" in text


# ---- sim list ------------------------------------------------------------------------------

SECTIONS = ("models", "datasets", "collectives", "topologies")


def _descriptions(section: str) -> dict[str, str]:
    from sim.commands import list as listing
    from sim.network.collectives import REGISTRY
    from sim.network.topology import TOPOLOGIES
    from sim.workloads.datasets import DATASET_FAMILIES, DATASETS
    from sim.workloads.models import MODELS

    # data sets: the named ones, then the families (criteo:PATH)
    named = [*DATASETS, *(family.usage for family in DATASET_FAMILIES.values())]
    registry = {"models": MODELS, "datasets": named, "collectives": REGISTRY,
                "topologies": TOPOLOGIES}[section]
    return dict(zip(registry, getattr(listing, section)(), strict=True))


@pytest.mark.parametrize("section", SECTIONS)
def test_sim_list_descriptions_end_at_a_sentence_end(section):
    for name, line in _descriptions(section).items():
        assert re.search(r"[.?!)]$", line), f"{section} {name}: {line!r} stops mid-sentence"


def test_sim_list_prints_a_docstring_whose_first_sentence_spans_lines(monkeypatch):
    from sim.commands import list as listing
    from sim.network import topology

    class Wrapped:
        """A topology whose first sentence is longer than
        one line of its docstring.

        Details the list leaves out."""

    monkeypatch.setitem(topology.TOPOLOGIES, "wrapped", Wrapped)
    line = dict(zip(topology.TOPOLOGIES, listing.topologies(), strict=True))["wrapped"]
    assert line.split(None, 1)[1] == ("A topology whose first sentence is longer than one "
                                      "line of its docstring.")


def test_sim_list_prints_whole_descriptions(capsys):
    assert main(["list"]) == 0
    printed = capsys.readouterr().out
    for section in SECTIONS:
        for line in _descriptions(section).values():
            assert f"  {line}\n" in printed


# ---- a misspelled config file ------------------------------------------------------------

def test_a_misspelled_config_path_names_the_file_beside_it(tmp_path, capsys, monkeypatch,
                                                           tiny_config_data, write_toml):
    from sim.config import read_toml

    folder = tmp_path / "experiments"
    folder.mkdir()
    write_toml(folder / "quickstart.toml", tiny_config_data())
    (folder / "notes.txt").write_text("not a config\n")
    with pytest.raises(UserError, match=re.escape(
            f"{folder / 'quickstrat.toml'}: no such config file (did you mean "
            f"{folder / 'quickstart.toml'}?)")):
        read_toml(folder / "quickstrat.toml")
    with pytest.raises(UserError) as error:  # nothing close: no guess
        read_toml(folder / "zzzzzz.toml")
    assert str(error.value).endswith("no such config file")
    with pytest.raises(UserError) as error:  # no such directory either
        read_toml(tmp_path / "nowhere" / "quickstart.toml")
    assert str(error.value).endswith("no such config file")
    # on the command line, with the path as typed
    monkeypatch.chdir(tmp_path)
    assert main(["run", "experiments/quickstrat.toml"]) == 2
    assert ("experiments/quickstrat.toml: no such config file (did you mean "
            "experiments/quickstart.toml?)") in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps", "asp", "ssp"])
def test_every_quickstart_run_reaches_its_target(kind):
    """The README's tour points at time_to_target_s: quickstart sets a target every one of
    its strategies reaches, so the figure has a value in every run (issue 47)."""
    from sim.simulated.engine import simulate
    from sim.training.validator import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "experiments" /
                         "quickstart.toml", [f"strategy.kind={kind}"])
    assert simulate(config).summary["time_to_target_s"] is not None


def test_a_sweep_table_shows_the_figures_of_what_it_sweeps(tmp_path, config):
    """A [parallel] sweep's table shows the bubble and memory, an [embeddings] one the pull
    bytes (issue 47: pipeline-bubble's showed neither)."""
    from types import SimpleNamespace

    from sim.commands.sweep import SHOWN, run_table, shown

    def report(keys, rows=()):
        sweep = SimpleNamespace(keys=keys, points=[SimpleNamespace(name=r["run"], values={},
                                                                   data={})
                                                   for r in rows])
        return SimpleNamespace(sweep=sweep, rows=list(rows), failed={})

    assert shown(report(["strategy.kind"])) == SHOWN
    assert shown(report(["parallel.microbatches"]))[len(SHOWN):] == (
        "bubble_fraction", "peak_memory_bytes")
    assert "pull_bytes_per_step" in shown(report(["embeddings.placement"]))
    assert "bubble_fraction" in shown(report(["cluster.workers,parallel.pipeline"]))
    rows = [{"run": "a", "sim_time_s": 1.0, "bubble_fraction": 0.25}]
    table = run_table(report(["parallel.microbatches"], rows))
    assert "bubble_fraction" in table.splitlines()[0] and "0.25" in table


def test_a_run_summary_prints_no_dash_for_a_figure_it_cannot_have():
    """`sim run`'s summary follows the sweep table (issue 47, tutorial walk): a figure with
    no value in this run (no run.target_loss; no device memory to fit in) is left out,
    and a target not reached reads ``never``, not ``-``."""
    from sim.commands.run import format_summary

    summary = {"sim_time_s": 0.005, "iterations": 100, "time_to_target_s": None,
               "peak_memory_bytes": 135680, "memory_fits": None}
    keys = [line.split()[0] for line in format_summary(summary).splitlines()]
    assert "time_to_target_s" not in keys and "memory_fits" not in keys
    assert keys[:2] == ["sim_time_s", "iterations"] and "peak_memory_bytes" in keys
    assert not [line for line in format_summary(summary).splitlines()
                if line.split()[1] == "-"]
    lines = format_summary(summary, target_loss=0.1).splitlines()
    assert next(x for x in lines if x.split()[0] == "time_to_target_s").split()[1:] == [
        "never"]


def test_sim_list_profiles_line_up_however_long_a_name_or_count():
    """gpipe-transformer-48's name and gpt-1t's FLOPs overflowed fixed column widths, so
    their lines' figures stood out of line with the others' (issue 47, tutorial walk)."""
    from sim.commands import list as listing

    lines = listing.profiles()
    for word in (" M params", " GFLOP forward", " forward+backward"):
        assert len({line.index(word) for line in lines}) == 1, word
