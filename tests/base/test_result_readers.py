"""Readers that check what they read: a damaged run directory is named (exit 2), never drawn
from as if it were whole (issue 47, item 1), and the writers produce what the readers check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import cli
from sim.errors import UserError
from sim.result_schema import METRIC_COLUMNS, SUMMARY_KEYS, check_summary
from sim.results import Run, load_repeats, number


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory, write_tiny_run) -> Path:
    out = tmp_path_factory.mktemp("readers") / "run"
    write_tiny_run(out, **{"run.iterations": 40, "run.eval_every": 5})
    return out


def damaged(whole: Path, tmp_path: Path, name: str = "run") -> Path:
    out = tmp_path / name
    shutil.copytree(whole, out)
    return out


def test_a_whole_run_reads_and_holds_the_contract(whole: Path) -> None:
    run = Run(whole)
    assert set(SUMMARY_KEYS) <= set(run.summary)
    assert list(run.metrics[0]) == list(METRIC_COLUMNS)
    assert int(run.metrics[-1]["iteration"]) == run.summary["iterations"] == 40


def test_the_writer_checks_the_contract(whole: Path) -> None:
    """Every key the readers require is one the recorder writes, with its type."""
    summary = json.loads((whole / "summary.json").read_text())
    assert check_summary(summary, "x") is summary
    summary["iterations"] = "40"
    with pytest.raises(UserError, match="iterations"):
        check_summary(summary, "x")


def test_metrics_cut_and_appended_to_is_named(whole: Path, tmp_path: Path, capsys) -> None:
    """The issue's case: metrics.csv cut at row 25 with garbage appended; `sim plot` used to
    exit 0 with a curve that ended early."""
    run = damaged(whole, tmp_path)
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join(lines[:26]) + "\n3.1,x\x00zz,\n")
    assert cli.main(["plot", str(run), "--out", str(tmp_path / "plots")]) == 2
    err = capsys.readouterr().err
    assert "metrics.csv" in err and "line 27" in err and "Traceback" not in err


def test_metrics_cut_at_a_row_boundary_is_named(whole: Path, tmp_path: Path) -> None:
    run = damaged(whole, tmp_path)
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join(lines[:20]) + "\n")
    with pytest.raises(UserError, match="metrics.csv: its last update is .*records 40"):
        _ = Run(run).metrics


def test_metrics_without_its_final_evaluation_is_named(whole: Path, tmp_path: Path) -> None:
    run = damaged(whole, tmp_path)
    lines = (run / "metrics.csv").read_text().splitlines()
    assert lines[-1].startswith("eval,")
    (run / "metrics.csv").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(UserError, match="last evaluation's loss"):
        _ = Run(run).metrics


@pytest.mark.parametrize("summary", [{}, {"sim_time_s": 1.0}, []])
def test_a_summary_without_its_keys_is_named(whole: Path, tmp_path: Path, capsys,
                                             summary: object) -> None:
    """`summary.json` = {} used to plot an empty breakdown and make `sim compare` blame the
    run for applying no updates."""
    run = damaged(whole, tmp_path)
    (run / "summary.json").write_text(json.dumps(summary))
    assert cli.main(["plot", str(run), "--out", str(tmp_path / "plots")]) == 2
    err = capsys.readouterr().err
    assert "summary.json" in err and "Traceback" not in err
    assert ("lacks the required keys" in err) or ("expected a JSON object" in err)


def test_a_missing_repeat_is_said(whole: Path, tmp_path: Path, capsys) -> None:
    """A repeat whose summary.json was deleted used to vanish from "(2 repeats)"."""
    real = tmp_path / "real"
    for k in range(3):
        damaged(whole, real, f"r{k}")
    (real / "r1" / "summary.json").unlink()
    runs = load_repeats(real)
    assert [r.path.name for r in runs] == ["r0", "r2"]
    assert "r1 missing or incomplete" in capsys.readouterr().err


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0, 1), garbage=st.text(max_size=30))
def test_any_cut_metrics_file_is_refused_or_read_whole(whole: Path, tmp_path_factory,
                                                       cut: float, garbage: str) -> None:
    """Wherever metrics.csv is cut and whatever is appended, the reader either refuses it
    naming the file or returns the whole file's rows (every value the same: a digit 0
    appended to the last number changes nothing)."""
    text = (whole / "metrics.csv").read_text()
    run = damaged(whole, tmp_path_factory.mktemp("cut"))
    (run / "metrics.csv").write_text(text[:int(cut * len(text))] + garbage)
    try:
        rows = Run(run).metrics
    except UserError as exc:
        assert "metrics.csv" in str(exc)
    else:
        assert all(same_values(a, b) for a, b in zip(rows, Run(whole).metrics, strict=True))


def same_values(a: dict[str, str], b: dict[str, str]) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (number(a[k]) == number(b[k])) for k in a)


def test_a_cut_sweep_table_is_named(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "results.csv").write_text("run,strategy.kind,sim_time_s\na,bsp,1.0\nb,asp\n")
    from sim.results import Sweep
    with pytest.raises(UserError, match="results.csv: line 3"):
        Sweep(sweep)
