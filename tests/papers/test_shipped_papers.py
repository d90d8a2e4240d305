"""The shipped paper files: each loads, each of its rows is in the docs table, and the
cheapest paper runs end to end (the whole suite is `python -m sim papers`, minutes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.network.fabrics import get_fabric
from sim.papers.paper_file import load_paper
from sim.papers.reproduce import EXPLAIN_OVER, reproduce
from sim.papers.row_run import row_config
from sim.simulated.server import least_loaded
from sim.workloads.precision import run_itemsize
from sim.workloads.timing_profiles import get_profile

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


def test_the_parameter_server_rows_bound_is_the_hottest_shards_traffic():
    """Horovod's rows against TensorFlow's servers explain their miss by a closed form: the
    shard holding most bytes (whole layers on the least-loaded shard) takes them from every
    remote worker and sends them back each step over its host's NIC. Recomputed here from
    the rows' own config, so the note stays true of the profiles and the fabric."""
    paper = load_paper(ROOT / "experiments" / "papers" / "horovod-2018.toml")
    rows = [f for f in paper.figures if f.id.startswith("ps-vs-horovod-")]
    assert len(rows) == 2
    for figure in rows:
        config = row_config(paper.base, figure.overrides, figure.id)
        sizes = [layer.params * run_itemsize(config)
                 for layer in get_profile(config.workload.profile).layers]
        shards = config.cluster.servers
        hottest = max(np.bincount(least_loaded(np.array(sizes, float), shards), sizes, shards))
        hosts = config.cluster.rank_hosts
        remote = sum(h != hosts[config.cluster.workers] for h in hosts[:config.cluster.workers])
        bound = 2 * remote * hottest / get_fabric(config.cluster.fabric).bandwidth_Bps
        assert f"holds {hottest / 1e6:.2f} MB" in figure.note
        assert f"{remote} remote workers" in figure.note
        assert f"at least {bound:.2f} s a step" in figure.note
