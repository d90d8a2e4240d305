"""Real runs of Wide & Deep: tables on 2 server shards (bsp-ps, asp) with sparse pulls and
pushes over MPI, and tables split over the workers (bsp, placement alltoall) with
MPI_Alltoallv; their numbers and traffic against the simulator's and against the shard
map's formulas. Tiny configs: each real run takes a few seconds (mpiexec's start-up)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from training_cases import rows

from sim.cli import main
from sim.real.executors.table_shards import ShardLayout
from sim.simulated.engine import simulate
from sim.training.embedding_shards import ShardMap, TableSpec
from sim.training.validator import load_config
from sim.training.workload import build_workload

pytest.importorskip("mpi4py")

# tests/simulated/test_wide_deep.py's small model, on 2 workers
WIDE_DEEP = {
    "cluster": {"workers": 2},
    "workload": {"model": "wide-deep", "dataset": "ctr-synthetic", "features": 3,
                 "fields": 3, "vocab": 200, "embedding_dim": 4, "cross_buckets": 64,
                 "hidden": [8], "samples": 1200, "batch": 16, "lr": 0.2},
    "run": {"iterations": 12, "eval_every": 4},
}
PS = {"strategy": {"kind": "bsp-ps"}, "embeddings": {"placement": "ps"}}
ALLTOALL = {"strategy": {"kind": "bsp"}, "embeddings": {"placement": "alltoall"}}
TRAFFIC = ("unique_ids_per_step", "pull_bytes_per_step", "push_bytes_per_step",
           "shard_load_max_over_mean", "cache_hit_rate")


def config_file(tmp_path: Path, *layers: dict, **sections: dict) -> Path:
    data: dict = {}
    for layer in (WIDE_DEEP, *layers, sections):
        for section, keys in layer.items():
            data.setdefault(section, {}).update(keys)
    path = tmp_path / "wide-deep.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def real(path: Path, out: Path) -> tuple[dict, list[dict]]:
    assert main(["real", str(path), "--out", str(out)]) == 0
    with (out / "metrics.csv").open() as f:
        metrics = list(csv.DictReader(f))
    return json.loads((out / "summary.json").read_text()), metrics


def losses(metrics: list[dict], kind: str) -> list[float]:
    return [float(row["loss"]) for row in metrics if row["kind"] == kind]


def test_real_bsp_ps_on_two_shards_is_the_simulated_run(tmp_path):
    path = config_file(tmp_path, PS, cluster={"servers": 2})
    summary, metrics = real(path, tmp_path / "real")
    sim = simulate(load_config(path))
    # the shards step the rows their pushes carry by the mean in worker order: the bits of
    # the simulated servers' flat mean
    assert losses(metrics, "update") == [row["loss"] for row in rows(sim.metrics_csv)]
    assert losses(metrics, "eval") == [row["loss"] for row in rows(sim.metrics_csv, "eval")]
    # the bytes really sent per pull and push, and the rows each shard really served, are
    # what the simulator counts for the same batches
    for key in TRAFFIC:
        assert summary[key] == pytest.approx(sim.summary[key], rel=1e-12), key
    assert summary["pull_bytes_per_step"] > 0 and summary["cache_hit_rate"] == 0.0
    assert summary["server_breakdown"]["update"] > 0
    assert all(worker["update"] == 0 and worker["wire"] > 0 for worker in summary["workers"])


def test_real_alltoall_on_two_ranks_is_the_simulated_run(tmp_path):
    path = config_file(tmp_path, ALLTOALL)
    summary, metrics = real(path, tmp_path / "real")
    config = load_config(path)
    sim = simulate(config)
    np.testing.assert_allclose(losses(metrics, "eval"),
                               [row["loss"] for row in rows(sim.metrics_csv, "eval")],
                               rtol=0, atol=1e-12)
    for key in TRAFFIC:
        assert summary[key] == pytest.approx(sim.summary[key], rel=1e-12), key
    # a rank receives each other owner's pooled columns for its batch (row-hash: every
    # owner a partial sum of every table), and sends their gradients back with its dense
    # gradient: the shard map's all-to-all bytes, measured on the ranks
    model = build_workload(config).model
    shard_map = ShardMap([TableSpec(t.rows, t.dim) for t in model.tables], 2, "row-hash")
    received = shard_map.alltoall_bytes([16, 16]).sum() / 2
    assert summary["pull_bytes_per_step"] == received
    assert summary["push_bytes_per_step"] == received + 8 * (model.size - model.dense_start)


def test_real_asp_on_two_shards_trains(tmp_path):
    path = config_file(tmp_path, PS, cluster={"servers": 2}, strategy={"kind": "asp"},
                       run={"iterations": 40, "eval_every": 20})
    summary, metrics = real(path, tmp_path / "real")
    evals = losses(metrics, "eval")
    assert len(losses(metrics, "update")) == 40 and evals[-1] < evals[0]
    assert summary["pull_bytes_per_step"] > 0 and summary["pulls_per_update"] == 1.0


def test_real_alltoall_with_one_column_tables_in_one_block_with_the_wide_part(tmp_path):
    # embedding_dim 1: the wide part and the tables are one block of rows on every rank
    path = config_file(tmp_path, ALLTOALL, workload={"embedding_dim": 1},
                       run={"iterations": 6, "eval_every": 3})
    _, metrics = real(path, tmp_path / "real")
    sim = simulate(load_config(path))
    np.testing.assert_allclose(losses(metrics, "eval"),
                               [row["loss"] for row in rows(sim.metrics_csv, "eval")],
                               rtol=0, atol=1e-12)


@pytest.mark.full
def test_real_alltoall_on_three_ranks_with_whole_tables(tmp_path):
    path = config_file(tmp_path, ALLTOALL, cluster={"workers": 3},
                       embeddings={"sharding": "table"},
                       workload={"ids_per_field": 2, "pooling": "mean"})
    _, metrics = real(path, tmp_path / "real")
    sim = simulate(load_config(path))
    np.testing.assert_allclose(losses(metrics, "eval"),
                               [row["loss"] for row in rows(sim.metrics_csv, "eval")],
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("layers, key", [
    ({**PS, "strategy": {"kind": "ssp"}}, "strategy.kind"),
    ({"strategy": {"kind": "bsp"}, "embeddings": {"placement": "replicated"}},
     "embeddings.placement"),
    ({**PS, "embeddings": {"placement": "ps", "sharding": "column"}}, "embeddings.sharding"),
    ({**PS, "embeddings": {"placement": "ps", "cache_rows": 8}}, "embeddings.cache_rows"),
])
def test_unsupported_real_wide_deep_exits_2_naming_the_key(tmp_path, capsys, layers, key):
    out = tmp_path / "real"
    assert main(["real", str(config_file(tmp_path, layers)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert key in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("sharding, split", [("row-hash", True), ("table", False)])
def test_shard_parts_put_together_are_the_model(tmp_path, sharding, split):
    model = build_workload(load_config(config_file(tmp_path, PS))).model
    layout = ShardLayout(model, 3, sharding, split_dense=split)
    params = np.random.default_rng(0).standard_normal(model.size)
    parts = [layout.own(params, s) for s in range(3)]
    np.testing.assert_array_equal(layout.merge(parts), params)
    # each shard holds its rows only; a batch's rows split over the shards and back
    rows = [np.array([0, 5, table.rows - 1]) for table in model.tables]
    ids = layout.split(rows)
    assert sum(len(i) for i in ids) == 3 * len(model.tables)
    for s, part in enumerate(parts):
        out = np.empty(layout.values(ids[s]))
        layout.read(part, ids[s], out)
        assert np.isfinite(out).all()
        back = np.full(model.size, np.nan)
        layout.write(back, ids[s], out)
        blocks = layout.blocks_in(ids[s])
        assert sum(len(block_rows) for _, block_rows, _ in blocks) == len(ids[s])
        for b, block_rows, _ in blocks:
            view = layout.blocks[b].view
            np.testing.assert_array_equal(view(back)[block_rows], view(params)[block_rows])


def test_consecutive_tables_of_one_width_are_one_block():
    from sim.real.executors.table_shards import blocks_of
    from sim.workloads.wide_deep import WideDeep

    model = WideDeep(features=2, fields=3, vocab=(5, 7, 4), embedding_dim=3, cross_buckets=6)
    wide, tables = blocks_of(model.tables)  # the wide part (width 1), then the 3 tables
    assert (wide.start, wide.stop, wide.dim, wide.first, wide.rows) == (0, 7, 1, 0, 7)
    assert (tables.start, tables.stop, tables.dim, tables.first, tables.rows) == \
        (7, 7 + 16 * 3, 3, 7, 16)
    flat = np.arange(model.size, dtype=float)
    # row 2 of the second table is row 5 + 2 of the block
    np.testing.assert_array_equal(tables.view(flat)[7], model.tables[2].view(flat)[2])
