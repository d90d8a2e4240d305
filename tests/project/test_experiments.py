"""Every curated experiment runs, in a reduced form, as the sweep users run."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim.cli import main
from sim.training.validator import load_config

EXPERIMENTS = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*.toml"))
REDUCED = ["--set", "run.iterations=3", "--set", "run.eval_every=3", "--set", "run.seeds=[1]",
           "--jobs", "1", "--no-plots"]


def test_the_curated_set_is_there():
    names = {p.stem for p in EXPERIMENTS}
    assert {"quickstart", "ib-vs-ethernet", "sync-async-ssp", "stragglers", "compression",
            "scaling", "sparse-vs-dense", "pipelining", "pipelining-buckets",
            "fault-tolerance"} <= names


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[p.stem for p in EXPERIMENTS])
def test_experiment_runs_reduced(path, tmp_path):
    config = load_config(path)
    assert config.sweep, "a curated experiment compares runs"
    for line in path.read_text().splitlines():  # every value says why it is set
        if "=" in line and not line.lstrip().startswith(("#", "[", '"')):
            assert "#" in line, line
    out = tmp_path / path.stem
    assert main(["sweep", str(path), "--out", str(out), *REDUCED]) == 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    points = 1
    for values in config.sweep.values():
        points *= len(values)
    assert len(rows) == points  # one seed each
    assert all(int(row["iterations"]) == 3 for row in rows)
