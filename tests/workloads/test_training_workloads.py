"""The pieces under a run: data sets, shards, mini-batches and the compute-time model."""

from __future__ import annotations

import numpy as np
import pytest
from training_cases import make

from sim.simulated.engine import build_simulation
from sim.training.compute_model import ComputeModel
from sim.workloads.datasets import DatasetSpec, make_dataset, shard


def test_generated_data_sets_are_seeded_and_split():
    spec = DatasetSpec("gaussian", samples=500, features=7, classes=3, test_fraction=0.2)
    a, b = (make_dataset(spec, np.random.default_rng(5)) for _ in range(2))
    assert np.array_equal(a.X_train, b.X_train) and np.array_equal(a.y_test, b.y_test)
    other = make_dataset(spec, np.random.default_rng(6))
    assert not np.array_equal(a.X_train, other.X_train)
    assert a.X_train.shape == (400, 7) and a.X_test.shape == (100, 7)
    assert set(np.unique(a.y_train)) == {0, 1, 2} and a.y_train.dtype == np.int32
    # held-out rows are other rows than the training rows
    train_rows = {row.tobytes() for row in a.X_train}
    assert not any(row.tobytes() in train_rows for row in a.X_test)


def test_sparse_data_has_power_law_feature_frequencies():
    spec = DatasetSpec("sparse-powerlaw", samples=2000, features=1000, nnz_per_row=10)
    data = make_dataset(spec, np.random.default_rng(0))
    indptr, indices, values = data.X_train
    assert data.sparse and np.all(np.diff(indptr) == 10) and np.all(values == 1)
    counts = np.sort(np.bincount(indices, minlength=1000))[::-1]
    assert counts[0] > 20 * counts[100] > 0  # a few features are in most rows
    assert set(np.unique(data.y_train)) == {0.0, 1.0}


@pytest.mark.parametrize("mode", ["contiguous", "shuffled"])
def test_shards_partition_the_training_rows(mode):
    parts = shard(103, 4, mode, np.random.default_rng(0))
    assert sorted(np.concatenate(parts).tolist()) == list(range(103))
    assert sorted(map(len, parts)) == [25, 26, 26, 26]
    if mode == "contiguous":
        assert all(np.array_equal(p, np.arange(p[0], p[-1] + 1)) for p in parts)


def test_a_worker_draws_its_shard_without_replacement_each_epoch():
    _, ctx, _ = build_simulation(make(cluster__workers=2, workload__samples=100, workload__batch=8))
    data, worker = ctx.workers[0].data, ctx.workers[0]
    row_of = {row.tobytes(): i for i, row in enumerate(data.X_train)}
    per_epoch = len(worker.shard) // 8  # 40 rows: 5 batches, no remainder dropped

    def epoch():
        drawn = [row_of[x.tobytes()] for _ in range(per_epoch) for x in worker.next_batch()[0]]
        return drawn

    first, second = epoch(), epoch()
    assert sorted(first) == sorted(second) == sorted(worker.shard.tolist())
    assert first != second  # reshuffled
    other = set(ctx.workers[1].shard.tolist())
    assert not other & set(first)


@pytest.mark.parametrize("distribution", ["constant", "exponential", "shifted-exponential",
                                          "lognormal"])
def test_compute_noise_has_mean_one_and_is_per_worker_deterministic(distribution):
    cfg = make(compute__distribution=distribution, compute__time_s=2.0).compute
    model = ComputeModel(cfg, 1e6, workers=3, seed=11)
    draws = np.array([model.duration(1, 0.0) for _ in range(20000)])
    assert draws.mean() == pytest.approx(2.0, rel=0.03)  # about 4 standard errors
    again = ComputeModel(cfg, 1e6, workers=3, seed=11)
    assert [again.duration(1, 0.0) for _ in range(5)] == draws[:5].tolist()
    # another worker's draws do not depend on how often this one drew
    fresh = ComputeModel(cfg, 1e6, workers=3, seed=11)
    assert fresh.duration(2, 0.0) == model.duration(2, 0.0)


@pytest.mark.parametrize("shift", [0.0, 0.3, 0.8])
def test_shifted_exponential_never_beats_its_minimum_and_has_an_exponential_tail(shift):
    """Dutta et al. 2018: time = shift x mean + Exp(mean (1 - shift)); plain exponential
    noise (shift 0) lets a gradient take almost no time."""
    cfg = make(compute__distribution="shifted-exponential", compute__shift=shift,
               compute__time_s=2.0).compute
    model = ComputeModel(cfg, 1e6, workers=1, seed=3)
    draws = np.array([model.duration(0, 0.0) for _ in range(40000)])
    assert draws.min() >= 2.0 * shift
    tail = draws - 2.0 * shift  # exponential of mean 2 (1 - shift): sd = mean, median ln 2
    assert tail.mean() == pytest.approx(2.0 * (1 - shift), rel=0.02)
    assert tail.std() == pytest.approx(2.0 * (1 - shift), rel=0.03)
    assert np.median(tail) == pytest.approx(np.log(2) * 2.0 * (1 - shift), rel=0.03)


def test_compute_time_is_flops_over_the_device_rate():
    cfg = make(compute__device="cpu-core").compute
    model = ComputeModel(cfg, 21e9, workers=1, seed=0)  # one second of cpu-core work
    assert model.duration(0, 0.0) == pytest.approx(1.0 + model.device.overhead_s)
