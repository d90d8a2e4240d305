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


def test_each_case_takes_the_calibration_nearest_its_real_runs_and_drift_is_reported(tmp_path):
    """Issue 48, item 4: calibrations at 0, 100 and 200 s; a case run at 140 s is simulated
    on the one of 100 s; the kernels' change between calibrations is reported."""
    from sim.validation import drift

    places = []
    for i, seconds in enumerate([(1.0, 2.0), (1.1, 2.0), (0.99, 1.8)]):
        place = tmp_path / f"c{i}"
        place.mkdir()
        (place / "device.json").write_text(json.dumps({"points": [
            {"workload": "a", "seconds": seconds[0]}, {"workload": "b", "seconds": seconds[1]}]}))
        places.append((100.0 * i, place))
    assert drift.nearest(places, 140.0) == places[1][1]
    assert drift.nearest(places, 160.0) == places[2][1]
    found = drift.drift(places)
    assert [round(d["minutes"], 3) for d in found] == [1.667, 1.667]
    assert found[0]["low"] == pytest.approx(0.0) and found[0]["high"] == pytest.approx(0.1)
    assert found[1]["median"] == pytest.approx(-0.1)
    (line,) = drift.lines(found)
    assert "after 1.7 min +5% (+0% .. +10%); after 1.7 min -10% (-10% .. -10%)" in line
    assert drift.lines([]) == []


def test_a_negative_recalibration_interval_exits_2(capsys):
    from sim.cli import main

    assert main(["validate", "--recalibrate-every", "-1"]) == 2
    assert "--recalibrate-every must be >= 0" in capsys.readouterr().err


def test_real_times_from_another_cpu_are_not_taken_as_reproducibility():
    from sim.validation import reproducibility

    rows = [{"case": "a", "report": {"iteration_s": {"real": {"mean": 1.0}}}}]
    other = {"date": "2026-11-27T09:55", "cpu": "AMD EPYC", "real_s": {"a": 1.5}}
    text = "\n".join(reproducibility.lines(rows, other))
    assert "on another CPU (AMD EPYC" in text and "not judged" in text
    same = {**other, "cpu": reproducibility.cpu_model()}
    assert "median |difference| **33.3%**" in "\n".join(reproducibility.lines(rows, same))
