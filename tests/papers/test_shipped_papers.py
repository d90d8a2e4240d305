"""The shipped paper files: each loads, each of its rows is in the docs table, and the
cheapest paper runs end to end (the whole suite is `python -m sim papers`, minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.papers.paper_file import load_paper
from sim.papers.reproduce import EXPLAIN_OVER, reproduce

ROOT = Path(__file__).resolve().parents[2]
PAPERS = sorted((ROOT / "experiments" / "papers").glob("*.toml"))


@pytest.mark.parametrize("path", PAPERS, ids=lambda p: p.stem)
def test_each_paper_file_loads_and_its_rows_are_in_the_docs_table(path):
    paper = load_paper(path)
    table = (ROOT / "docs" / "measurements" / "papers.md").read_text()
    for figure in paper.figures:
        assert f"| {paper.name} | {figure.id} |" in table, figure.id


def test_gpipe_runs_end_to_end_and_every_row_beyond_15_percent_is_explained():
    result = reproduce(load_paper(ROOT / "experiments" / "papers" / "gpipe-2019.toml"))
    assert not any(row.failure for row in result.rows)
    for row in result.rows:
        if row.error is not None and abs(row.error) > EXPLAIN_OVER:
            assert row.explained.startswith("beyond the schedule")
