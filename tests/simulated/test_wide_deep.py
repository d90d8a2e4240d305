"""Wide & Deep with embedding tables: the model's gradient, the placements' numbers, and the
bytes and rows that pulls and pushes carry, each against an independent formula."""

from __future__ import annotations

import numpy as np
import pytest
from training_cases import FREE_NETWORK, make, rows, train, update_table

from sim.errors import UserError
from sim.network.message_cost import REQUEST_BYTES
from sim.simulated.engine import simulate
from sim.training.embedding_shards import ShardMap, TableSpec
from sim.training.embedding_traffic import ID_BYTES, EmbeddingTraffic
from sim.training.workload import build_workload
from sim.workloads.ctr import expected_unique, zipf_probabilities
from sim.workloads.wide_deep import WideDeep

WIDE_DEEP = {"workload.model": "wide-deep", "workload.dataset": "ctr-synthetic",
             "workload.features": 3, "workload.fields": 3, "workload.vocab": 200,
             "workload.embedding_dim": 4, "workload.cross_buckets": 64,
             "workload.hidden": [8], "workload.samples": 1200, "workload.batch": 16,
             "workload.lr": 0.2, "cluster.workers": 3, "run.iterations": 12,
             "run.eval_every": 4}
PS = {"strategy.kind": "bsp-ps", "cluster.servers": 2, "embeddings.placement": "ps"}


def losses(config) -> list[float]:
    ctx, _ = train(config)
    return [row[8] for row in update_table(ctx)]


# ---- the model ----------------------------------------------------------------------------

@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_gradient_matches_finite_differences(pooling):
    config = make(WIDE_DEEP, workload__pooling=pooling, workload__ids_per_field=2)
    workload = build_workload(config)
    model, worker = workload.model, workload.workers[0]
    params = workload.params + np.random.default_rng(1).normal(0, 0.1, model.size)
    X, y = worker.next_batch()
    _, grad = model.loss_grad(params, X, y)
    rng = np.random.default_rng(2)
    touched = np.flatnonzero(grad)
    probes = np.concatenate([rng.choice(touched, 30, replace=False),
                             rng.choice(model.size, 10, replace=False)])
    h = 1e-6
    for i in probes:
        up, down = params.copy(), params.copy()
        up[i] += h
        down[i] -= h
        numeric = (model.loss_grad(up, X, y)[0] - model.loss_grad(down, X, y)[0]) / (2 * h)
        assert abs(numeric - grad[i]) < 1e-7 + 1e-5 * abs(numeric)


def test_sparse_gradient_holds_exactly_the_touched_rows():
    config = make(WIDE_DEEP, workload__ids_per_field=3)
    workload = build_workload(config)
    model, worker = workload.model, workload.workers[0]
    X, y = worker.next_batch()
    sparse = model.sparse_loss_grad(workload.params, X, y)
    dense = np.zeros(model.size)
    _, full = model.loss_grad(workload.params, X, y, out=dense)
    for table, part, touched in zip(model.tables, sparse.tables, model.touched(X),
                                    strict=True):
        np.testing.assert_array_equal(part.rows, touched)
        np.testing.assert_array_equal(table.view(full)[part.rows], part.grads)
        untouched = np.setdiff1d(np.arange(table.rows), part.rows)
        assert not table.view(full)[untouched].any()
    np.testing.assert_array_equal(full[model.dense_params], sparse.dense)


# ---- placements give the same numbers -------------------------------------------------------

@pytest.mark.parametrize("optimizer", ["adagrad", "sgd"])
def test_ps_with_bsp_ps_equals_replicated_with_bsp(optimizer):
    replicated = losses(make(WIDE_DEEP, embeddings__placement="replicated",
                             embeddings__optimizer=optimizer))
    ps = losses(make(WIDE_DEEP, PS, embeddings__optimizer=optimizer))
    np.testing.assert_allclose(ps, replicated, rtol=0, atol=1e-12)
    assert replicated[-1] < replicated[0]


@pytest.mark.parametrize("placement", [{"embeddings.sparse_allreduce": True},
                                       {"embeddings.placement": "alltoall"}])
def test_every_bsp_placement_gives_the_replicated_numbers(placement):
    base = losses(make(WIDE_DEEP, embeddings__placement="replicated"))
    other = losses(make(WIDE_DEEP, {"embeddings.placement": "replicated", **placement}))
    np.testing.assert_array_equal(other, base)


def test_rows_untouched_by_a_step_stay_bit_for_bit():
    ctx, strategy = train(make(WIDE_DEEP, PS, run__iterations=1))
    model = ctx.model
    after = strategy.model_of_record()
    touched = [np.unique(np.concatenate(ids)) for ids in
               zip(*(model.touched(w.last_batch[0]) for w in ctx.workers), strict=True)]
    for table, touched_rows in zip(model.tables, touched, strict=True):
        still = np.setdiff1d(np.arange(table.rows), touched_rows)
        np.testing.assert_array_equal(table.view(after)[still],
                                      table.view(ctx.params)[still])


@pytest.mark.parametrize("kind", ["asp", "ssp", "backup"])
def test_asynchronous_and_backup_strategies_train_wide_deep(kind):
    config = make(WIDE_DEEP, PS, strategy__kind=kind, strategy__backup=1,
                  run__iterations=90, run__eval_every=90)
    result = simulate(config)
    first = rows(result.metrics_csv, "eval")[0]["loss"]
    assert result.summary["final_loss"] < first - 0.1
    assert result.summary["pull_bytes_per_step"] > 0


# ---- what pulls and pushes carry ------------------------------------------------------------

def test_unique_ids_per_batch_match_the_zipf_expectation():
    """The mean distinct rows of a field in a batch of B rows x k ids: sum over rows of
    1 - (1 - p_i)^(B k), within 3 standard errors."""
    V, B, k, s = 500, 32, 2, 1.0
    config = make(WIDE_DEEP, workload__vocab=V, workload__batch=B, workload__ids_per_field=k,
                  workload__zipf_exponent=s, workload__samples=20000, cluster__workers=1)
    worker = build_workload(config).workers[0]
    counts = np.array([[len(np.unique(X.ids[:, f, :])) for f in range(3)]
                       for X, _ in (worker.next_batch() for _ in range(400))], float)
    expected = expected_unique(zipf_probabilities(V, s), B * k)
    for f in range(3):
        mean, se = counts[:, f].mean(), counts[:, f].std(ddof=1) / np.sqrt(len(counts))
        assert abs(mean - expected) < 3 * se + 1e-9, (f, mean, expected, se)


@pytest.mark.parametrize("sharding", ["row-hash", "row-range", "table", "column"])
def test_pull_and_push_bytes_follow_the_ids_touched(sharding):
    config = make(WIDE_DEEP, PS, embeddings__sharding=sharding)
    workload = build_workload(config)
    model = workload.model
    traffic = EmbeddingTraffic(model, config, 2)
    X, _ = workload.workers[0].next_batch()
    pull, push = traffic.pull(0, X), traffic.push(X)
    touched = model.touched(X)
    # every touched row once over the shards, its id to each shard holding some of its
    # columns (one, but for column sharding); the dense part split evenly
    holders = (lambda t: min(t.dim, 2)) if sharding == "column" else (lambda t: 1)
    rows_bytes = sum(len(ids) * (t.dim * 8 + ID_BYTES * holders(t))
                     for ids, t in zip(touched, model.tables, strict=True))
    dense = (model.size - model.dense_start) * 8
    assert push.request.sum() == pytest.approx(rows_bytes + dense)
    owners = np.count_nonzero(pull.request)
    assert pull.nbytes == pytest.approx(rows_bytes + dense + REQUEST_BYTES * owners)
    assert owners == 2
    # per shard: the shard map's own count
    shards = ShardMap([TableSpec(t.rows, t.dim) for t in model.tables], 2, sharding)
    split = np.array_split(np.arange(model.size - model.dense_start), 2)
    np.testing.assert_allclose(push.request, shards.push_bytes(touched)
                               + np.array([len(p) * 8 for p in split]))


def test_hot_rows_overload_a_range_sharded_table_not_a_hashed_one():
    hot = dict(WIDE_DEEP, **{"workload.zipf_exponent": 1.2, "workload.vocab": 4000,
                             "workload.samples": 4000, "cluster.servers": 4,
                             "run.iterations": 20, "run.eval_every": 20})
    load = {sharding: simulate(make(hot, PS, cluster__servers=4,
                                    embeddings__sharding=sharding)).summary
            for sharding in ("row-range", "row-hash")}
    assert load["row-range"]["shard_load_max_over_mean"] > 2.0
    assert load["row-hash"]["shard_load_max_over_mean"] < 1.3


def test_a_cache_of_hot_rows_is_hit_and_pulls_fewer_bytes():
    hot = dict(WIDE_DEEP, **{"workload.zipf_exponent": 1.2, "run.iterations": 20,
                             "run.eval_every": 20})
    cold = simulate(make(hot, PS)).summary
    cached = simulate(make(hot, PS, embeddings__cache_rows=60, strategy__staleness=3)).summary
    assert cold["cache_hit_rate"] == 0
    assert cached["cache_hit_rate"] > 0.2
    assert cached["pull_bytes_per_step"] < cold["pull_bytes_per_step"]
    assert cached["unique_ids_per_step"] == cold["unique_ids_per_step"]  # same batches


# ---- bad configs ------------------------------------------------------------------------------

@pytest.mark.parametrize("keys, named", [
    ({"strategy.kind": "local-sgd"}, "embeddings.placement"),
    ({"embeddings.placement": "ps", "strategy.kind": "bsp"}, "embeddings.placement"),
    ({"embeddings.placement": "alltoall", "strategy.kind": "asp"}, "embeddings.placement"),
    ({"workload.dataset": "gaussian"}, "workload.model"),
    ({"workload.vocab": [10, 20]}, "workload.vocab"),
    ({"workload.l2": 0.1}, "workload.l2"),
    ({"strategy.compression": "topk"}, "strategy.compression"),
    ({"embeddings.cache_rows": 5, "embeddings.placement": "replicated"}, "embeddings.cache_rows"),
    ({"workload.numerics": False}, "workload.numerics"),
    ({"strategy.pipelining": "wfbp"}, "strategy.pipelining"),
])
def test_bad_wide_deep_configs_name_the_key(keys, named):
    with pytest.raises(UserError, match=named):
        make(WIDE_DEEP, {"embeddings.placement": "replicated", **keys})


def test_free_network_placements_all_take_the_compute_time():
    times = {p: simulate(make(WIDE_DEEP, FREE_NETWORK, embeddings__placement=p)).summary
             ["sim_time_s"] for p in ("replicated", "alltoall")}
    assert times["replicated"] == pytest.approx(times["alltoall"], rel=1e-9)


def test_widedeep_layout_is_tables_then_dense():
    model = WideDeep(features=2, fields=2, vocab=(5, 7), embedding_dim=3, cross_buckets=4,
                     hidden=(4,))
    assert [t.params for t in model.tables] == [slice(0, 5), slice(5, 20), slice(20, 41)]
    assert model.dense_params == slice(41, model.size)
    assert model.size == 41 + (4 * 8 + 4) + (1 * 4 + 1)


def test_embeddings_keys_without_tables_are_a_warning():
    from sim.training.config_warnings import config_warnings

    warned = config_warnings(make(embeddings__sharding="column"))
    assert any("embeddings.sharding" in line and "no effect" in line for line in warned)
    assert not config_warnings(make(WIDE_DEEP, PS, embeddings__sharding="column"))


@pytest.mark.parametrize("override, named", [
    ("embeddings.placement=disk", "embeddings.placement"),
    ("embeddings.sharding=random", "embeddings.sharding"),
    ("embeddings.cache_rows=-1", "embeddings.cache_rows"),
    ("workload.zipf_exponent=-0.5", "workload.zipf_exponent"),
    ("workload.dataset=criteo:/nonexistent.tsv", "workload.dataset"),
])
def test_bad_embeddings_values_exit_2_from_the_command_line(tmp_path, override, named):
    import subprocess
    import sys
    from pathlib import Path

    config = tmp_path / "wd.toml"
    config.write_text('[workload]\nmodel = "wide-deep"\ndataset = "ctr-synthetic"\n')
    done = subprocess.run([sys.executable, "-m", "sim", "run", str(config), "--set", override,
                           "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_shards_and_workers_pay_for_the_rows_they_gather_and_scatter(tmp_path):
    """With a host whose only cost is per row gathered or scattered by index (copy_row_s,
    what batch gathers measure), a bsp-ps step of one worker and one shard takes c x (rows
    the worker packs into its push + rows the shard scatters into the step's sum + rows the
    step gathers and writes back + rows the shard packs into the pull's reply + rows the
    worker scatters out of it) longer: 3 x the rows pushed + 2 x the rows pulled, besides
    the batch's own rows gathered each step."""
    import dataclasses

    from sim.training.host_costs import HOSTS, save_host_profile

    free = dataclasses.replace(HOSTS["ideal"], name="rows")
    costly = dataclasses.replace(free, copy_row_s=1e-6)
    hosts = {}
    for profile in (free, costly):
        path = tmp_path / f"{profile.copy_row_s}.json"
        save_host_profile(path, profile)
        hosts[profile.copy_row_s] = f"calibrated:{path}"
    base = {**WIDE_DEEP, **FREE_NETWORK, **PS, "cluster.workers": 1, "cluster.servers": 1,
            "cluster.cores": 2, "compute.time_s": 1e-3}
    runs = {c: train(make(base, cluster__host=host)) for c, host in hosts.items()}
    times = {c: ctx.env.now for c, (ctx, _) in runs.items()}
    traffic = runs[1e-6][0].traffic
    pulled = traffic.served.sum()  # rows the shard put into replies
    pushed = traffic.rows_pushed
    batches = 12 * 16  # run.iterations x workload.batch rows gathered as data
    assert times[1e-6] - times[0.0] == pytest.approx(
        1e-6 * (3 * pushed + 2 * pulled + batches), rel=1e-9)


def test_a_worker_pays_for_finding_its_batch_s_distinct_ids_before_each_pull(tmp_path):
    """With a host whose only cost is per id deduplicated, a bsp-ps run takes c x (the ids
    of every batch pulled for: batch x (fields x ids_per_field + crossed features)) longer."""
    import dataclasses

    from sim.training.host_costs import HOSTS, save_host_profile

    hosts = {}
    for c in (0.0, 1e-6):
        path = tmp_path / f"{c}.json"
        save_host_profile(path, dataclasses.replace(HOSTS["ideal"], name="ids",
                                                    unique_call_s=0.0, unique_id_s=c))
        hosts[c] = f"calibrated:{path}"
    base = {**WIDE_DEEP, **FREE_NETWORK, **PS, "cluster.workers": 1, "cluster.servers": 1,
            "cluster.cores": 2, "compute.time_s": 1e-3}
    runs = {c: train(make(base, cluster__host=host)) for c, host in hosts.items()}
    pulls = runs[1e-6][0].traffic.pulls
    ids = 16 * (3 * 1 + 2)  # batch x (fields x ids_per_field + fields - 1 crossed)
    assert runs[1e-6][0].env.now - runs[0.0][0].env.now == pytest.approx(1e-6 * pulls * ids,
                                                                         rel=1e-9)
