"""The real runs' run-to-run spread (sim.validation.reproducibility)."""

from __future__ import annotations

import json

import pytest

from sim.validation import reproducibility as R


def row(case: str, real_s: float) -> dict:
    return {"case": case, "report": {"iteration_s": {"real": {"mean": real_s}}}}


def test_the_spread_is_each_case_s_relative_difference():
    rows = [row("a", 1.10), row("b", 0.90), row("c", 2.0), row("new", 1.0)]
    spread = R.compare(R.real_means(rows), {"a": 1.0, "b": 1.0, "c": 2.0, "gone": 3.0})
    assert spread["cases"] == 3  # only the cases both ran
    assert spread["median"] == pytest.approx(0.10)
    assert spread["worst"] == pytest.approx(0.10) and spread["worst_case"] in {"a", "b"}
    assert spread["close"] == 1  # c, exactly equal


def test_failed_cases_are_left_out():
    rows = [row("a", 1.0), {"case": "b", "error": "mpiexec failed"}]
    assert R.real_means(rows) == {"a": 1.0}


def test_save_then_load_round_trips_and_the_section_names_the_earlier_run(tmp_path):
    path = tmp_path / "real.json"
    R.save(path, [row("a", 1.0), row("b", 2.0)])
    before = R.load(path)
    assert before["real_s"] == {"a": 1.0, "b": 2.0}
    text = "\n".join(R.lines([row("a", 1.2), row("b", 2.0)], before))
    assert "## Reproducibility of the real runs" in text and before["date"] in text
    assert "median |difference| **10.0%**" in text and "worst **20.0%** (a)" in text


@pytest.mark.parametrize("content", ["", "not json", "[]", json.dumps({"format": "other"}),
                                     json.dumps({"format": R.FORMAT, "real_s": [1, 2]})])
def test_an_unreadable_earlier_file_means_no_section(tmp_path, content):
    path = tmp_path / "real.json"
    path.write_text(content)
    assert R.load(path) is None
    assert R.lines([row("a", 1.0)], R.load(path)) == []


def test_no_earlier_file_means_no_section(tmp_path):
    assert R.load(tmp_path / "absent.json") is None
    assert R.lines([row("a", 1.0)], None) == []
