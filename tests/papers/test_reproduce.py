"""Calibration uses the baseline row alone and reproduces it; the suite end to end on the
tiny paper file; a row with a key this build lacks fails in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main
from sim.papers.paper_calibration import fit_baseline
from sim.papers.paper_file import load_paper
from sim.papers.reproduce import END, START, reproduce
from sim.papers.row_run import row_config, run_row

TINY = Path(__file__).parent / "data" / "tiny-2024.toml"


def test_calibration_reproduces_the_baseline_from_its_row_alone():
    paper = load_paper(TINY)
    seen = []

    def run(config):
        seen.append(config.cluster.workers)
        return run_row(config)

    fitted = fit_baseline(paper, run)
    assert fitted.parameter == "compute.time_s"
    assert fitted.row == "one-gpu"
    assert fitted.lab == pytest.approx(0.05, rel=1e-6)
    assert fitted.runs == len(seen) >= 3
    assert set(seen) == {1}  # only the baseline row's config (1 worker) was ever run
    # one GPU, no messages: a step is its gradient's compute.time_s, the closed form
    assert fitted.value == pytest.approx(0.05, rel=1e-6)


def test_a_published_baseline_out_of_reach_is_a_user_error(tmp_path):
    path = tmp_path / "far-2024.toml"
    path.write_text(TINY.read_text().replace("published = 0.05", "published = 50.0", 1))
    result = reproduce(load_paper(path))
    assert result.calibrated is None
    assert all(r.error is None and "outside what compute.time_s" in r.failure
               for r in result.rows)


def test_the_suite_end_to_end(tmp_path, capsys):
    page = tmp_path / "papers.md"
    page.write_text(f"# Page\n\nbefore\n{START}\nold table\n{END}\nafter\n")
    assert main(["papers", str(TINY), "--out", str(tmp_path / "out"),
                 "--markdown", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "calibrated compute.time_s = " in printed
    assert "3 predicted figures" in printed  # the calibration row is not one
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = {row["id"]: row for row in data["rows"]}
    assert rows["one-gpu"]["calibration"] and rows["one-gpu"]["error"] == pytest.approx(0, abs=1e-6)
    for row in data["rows"]:
        assert row["error"] == pytest.approx(row["lab"] / row["published"] - 1)
        assert row["wall_s"] > 0
    # 4 GPUs do the 1-GPU work per GPU, plus an allreduce: below 100%
    assert 0 < rows["four-gpus-efficiency"]["lab"] < 1
    assert data["papers"][0]["calibrated"]["value"] > 0
    assert (tmp_path / "out" / "results.csv").read_text().startswith("paper,id,quantity")
    text = page.read_text()
    assert text.startswith("# Page\n\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert "old table" not in text and "| tiny-2024 | four-gpus-efficiency |" in text


def test_a_row_with_an_unknown_key_fails_in_one_line(tmp_path, capsys):
    path = tmp_path / "future-2024.toml"
    path.write_text(TINY.read_text().replace(
        'published = 0.06', 'published = 0.06\nset = { "compute.warp_factor" = 9 }', 1))
    assert main(["papers", str(path)]) == 1  # a row did not run
    printed = capsys.readouterr().out
    failure = next(line for line in printed.splitlines() if "not run:" in line)
    assert "compute.warp_factor: unknown key" in failure
    assert "figure two-gpus" in failure
    assert "predicted figures" in printed  # the other rows still ran


def test_list_runs_nothing(capsys):
    assert main(["papers", str(TINY), "--list"]) == 0
    printed = capsys.readouterr().out
    assert "four-gpus-efficiency" in printed and "vs one-gpu" in printed


def test_an_unknown_paper_name_exits_2(capsys):
    assert main(["papers", "no-such-paper-1999"]) == 2
    assert "no such paper file" in capsys.readouterr().err


def test_a_reference_row_has_a_value_but_no_error(tmp_path):
    path = tmp_path / "ref-2024.toml"
    path.write_text(TINY.read_text().replace("published = 0.06\n", "", 1))
    rows = {r.id: r for r in reproduce(load_paper(path)).rows}
    assert rows["two-gpus"].lab > 0
    assert rows["two-gpus"].error is None and rows["two-gpus"].failure == ""


def test_rows_with_the_same_keys_share_one_run():
    paper = load_paper(TINY)
    calls = []

    def run(config):
        calls.append(config.cluster.workers)
        return run_row(config)

    result = reproduce(paper, run)
    fitted_runs = result.calibrated.runs
    assert calls[fitted_runs:] == [1, 2, 4]  # one-gpu, two-gpus (and two-vs-one), four-gpus
    rows = {r.id: r for r in result.rows}
    assert rows["two-vs-one"].lab == pytest.approx(rows["two-gpus"].lab / rows["one-gpu"].lab)


def test_only_runs_the_chosen_rows_and_their_references(capsys):
    assert main(["papers", str(TINY), "--only", "four-*"]) == 0
    printed = capsys.readouterr().out
    assert "four-gpus-efficiency" in printed and "two-gpus" not in printed
    assert "calibrated compute.time_s" in printed  # the fit runs as always


def test_a_row_beyond_15_percent_gets_its_mechanism_measured(tmp_path):
    """A row the lab misses by more than 15% is explained by the value of its explanation
    parameter at which it would match; running the row with that value gives the published
    figure (the explanation is a measurement, and it leaves the row's result alone)."""
    path = tmp_path / "far-2024.toml"
    path.write_text(TINY.read_text().replace(
        'published = 0.06\nsource = "Table 0"',
        'published = 0.09\nsource = "Table 0"\nexplain = { parameter = "compute.time_s", '
        'bracket = [0.001, 1.0], mechanism = "slower GPUs" }', 1))
    result = reproduce(load_paper(path))
    row = next(r for r in result.rows if r.id == "two-gpus")
    assert row.error < -0.15 and "slower GPUs" in row.explained
    value = float(row.explained.split("compute.time_s = ")[1].split(" ")[0])
    assert value > result.calibrated.value  # it would take slower compute than fitted
    paper = load_paper(path)
    done = run_row(row_config(paper.base, {"compute.time_s": value}, "test"))
    assert done.measure.step_s == pytest.approx(0.09, rel=5e-3)  # 3 digits printed
    within = next(r for r in result.rows if r.id == "one-gpu")
    assert within.explained == ""
