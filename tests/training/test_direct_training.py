"""Training modules that only end-to-end runs reached, driven directly against numpy: the
gradient codecs (sim/training/compression.py), the ranks' memory (rank_memory.py) and the
embedding tables' row optimizer (row_optimizer.py). All inputs are seeded."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from training_cases import make

from sim.training.compression import (
    CODECS,
    INDEX_BYTES,
    QSGD,
    VALUE_BYTES,
    Dense,
    TopK,
    make_codec,
)
from sim.training.parallel_plan import Memory
from sim.training.rank_memory import memory_summary, run_memory, server_memory
from sim.training.row_optimizer import TableOptimizer


def codec_config(**keys) -> SimpleNamespace:
    """The ``[strategy]`` keys the codecs read."""
    base = {"compression": "none", "topk_ratio": 0.1, "qsgd_levels": 4, "qsgd_bucket": 16}
    return SimpleNamespace(**{**base, **keys})


# ---- compression --------------------------------------------------------------------------

def test_make_codec_picks_the_named_codec():
    assert set(CODECS) == {"none", "topk", "qsgd"}
    for name, cls in [("none", Dense), ("topk", TopK), ("qsgd", QSGD)]:
        assert type(make_codec(codec_config(compression=name), 50, 0)) is cls


def test_dense_sends_the_gradient_itself():
    g = np.random.default_rng(0).normal(size=40)
    codec = Dense(40, codec_config(), 0)
    payload, nbytes = codec.encode(g)
    assert payload is g and nbytes == 40 * 8 == g.nbytes
    out = np.empty(40)
    codec.decode(payload, out)
    assert np.array_equal(out, g)
    assert codec.decode_bytes == 40 * VALUE_BYTES


@pytest.mark.parametrize(("ratio", "k"), [(0.1, 10), (0.101, 11), (1e-6, 1), (1.0, 100)])
def test_topk_sends_ceil_ratio_n_pairs_of_index_and_value(ratio, k):
    codec = TopK(100, codec_config(topk_ratio=ratio), 0)
    assert codec.k == k
    _, nbytes = codec.encode(np.random.default_rng(1).normal(size=100))
    assert nbytes == k * (INDEX_BYTES + VALUE_BYTES) and codec.decode_bytes == k * VALUE_BYTES


def test_topk_with_error_feedback_against_numpy():
    rng = np.random.default_rng(2)
    n, k = 64, 8
    codec = TopK(n, codec_config(topk_ratio=k / n), 0)
    residual = np.zeros(n)
    for _ in range(5):  # the residual carries what was not sent into the next message
        g = rng.normal(size=n)
        acc = g + residual
        top = np.sort(np.argsort(-np.abs(acc), kind="stable")[:k])
        (idx, val), _ = codec.encode(g)
        assert idx.tolist() == top.tolist()
        assert np.array_equal(val, acc[top])
        residual = acc.copy()
        residual[top] = 0.0
        assert np.array_equal(codec.residual, residual)
        decoded = np.full(n, np.nan)
        codec.decode((idx, val), decoded)
        assert np.array_equal(decoded + codec.residual, acc)  # nothing lost


@pytest.mark.parametrize(("levels", "bucket", "n"), [(4, 16, 100), (1, 8, 8), (127, 64, 10),
                                                     (7, 5, 23)])
def test_qsgd_bytes_are_a_norm_per_bucket_and_packed_levels(levels, bucket, n):
    codec = QSGD(n, codec_config(qsgd_levels=levels, qsgd_bucket=bucket), 3)
    bits = math.ceil(math.log2(2 * levels + 1))  # a sign and 0..s
    expected = math.ceil(n / bucket) * 4 + math.ceil(n * bits / 8)
    assert codec.message_bytes(n) == expected
    _, nbytes = codec.encode(np.random.default_rng(3).normal(size=n))
    assert nbytes == expected


def test_qsgd_levels_norms_and_decoding_against_numpy():
    s, bucket, n = 4, 16, 100
    rng = np.random.default_rng(4)
    g = rng.normal(size=n)
    codec = QSGD(n, codec_config(qsgd_levels=s, qsgd_bucket=bucket), 7)
    (lv, norms), _ = codec.encode(g)
    starts = range(0, n, bucket)
    np.testing.assert_allclose(norms, [np.linalg.norm(g[i:i + bucket]) for i in starts],
                               rtol=1e-14)
    # each level is s |g| / norm rounded down or up, with g's sign
    scaled = s * np.abs(g) / np.repeat(norms, bucket)[:n]
    assert np.all((np.abs(lv) == np.floor(scaled)) | (np.abs(lv) == np.ceil(scaled)))
    assert np.all((lv == 0) | (np.sign(lv) == np.sign(g)))
    out = np.empty(n)
    codec.decode((lv, norms), out)
    np.testing.assert_allclose(out, np.repeat(norms / s, bucket)[:n] * lv, rtol=1e-15)


def test_qsgd_is_unbiased_and_reproducible_per_seed():
    s, n, draws = 2, 12, 4000
    g = np.random.default_rng(5).normal(size=n)
    codec = QSGD(n, codec_config(qsgd_levels=s, qsgd_bucket=n), 11)
    out, mean = np.empty(n), np.zeros(n)
    first = None
    for i in range(draws):  # a fresh stream per message
        payload, _ = codec.encode(g)
        if i == 0:
            first = payload[0].copy()
        mean += codec.decode(payload, out) / draws
    norm = np.linalg.norm(g)
    # each entry's decoded value has variance below (norm / s)^2 / 4
    assert np.all(np.abs(mean - g) < 5 * norm / s / 2 / math.sqrt(draws))
    again = QSGD(n, codec_config(qsgd_levels=s, qsgd_bucket=n), 11)
    assert np.array_equal(again.encode(g)[0][0], first)


# ---- rank_memory --------------------------------------------------------------------------

@pytest.mark.parametrize(("params", "servers", "momentum", "itemsize", "largest"),
                         [(10, 3, True, 8, 4), (9, 3, False, 8, 3), (9, 3, True, 4, 3),
                          (7, 1, False, 8, 7), (2, 4, True, 8, 1)])
def test_a_servers_memory_is_its_largest_key_range(params, servers, momentum, itemsize,
                                                   largest):
    assert max(len(p) for p in np.array_split(np.arange(params), servers)) == largest
    assert server_memory(params, servers, momentum, itemsize) == Memory(
        largest * itemsize, 0, largest * itemsize if momentum else 0, 0)


MLP = {"workload.model": "mlp", "workload.features": 8, "workload.classes": 3,
       "workload.hidden": [16, 12], "workload.batch": 8}
PARAMS = 8 * 16 + 16 + 16 * 12 + 12 + 12 * 3 + 3  # 387
ACTIVATIONS = 8 * (8 + 16 + 12 + 3) * 8  # a batch of every layer's input, and the logits


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_parameter_server_run_counts_workers_and_servers_by_hand(momentum):
    config = make(MLP, strategy__kind="bsp-ps", cluster__servers=2,
                  workload__momentum=momentum)
    memory = run_memory(config)
    copies = 3 if momentum else 2  # parameters, gradients (, momentum)
    assert memory.memory_bytes_by_stage == [copies * PARAMS * 8 + ACTIVATIONS]
    largest = -(-PARAMS // 2)  # 194 of the 387
    assert memory.server.total_bytes == (2 if momentum else 1) * largest * 8
    assert memory.peak_memory_bytes == copies * PARAMS * 8 + ACTIVATIONS
    assert run_memory(make(MLP, strategy__kind="bsp")).server is None


def test_memory_summary_says_whether_the_peak_fits_the_device():
    config = make(MLP, strategy__kind="bsp")
    peak = 2 * PARAMS * 8 + ACTIVATIONS
    assert memory_summary(config, None) == {"peak_memory_bytes": peak,
                                            "memory_bytes_by_stage": [peak],
                                            "device_memory_bytes": None,
                                            "memory_fits": None}
    assert memory_summary(config, float(peak))["memory_fits"] is True
    assert memory_summary(config, float(peak - 1))["memory_fits"] is False
    sparse = make({"workload.model": "sparse-logreg", "workload.dataset": "sparse-powerlaw",
                   "workload.features": 100, "workload.nnz_per_row": 8})
    assert run_memory(sparse) is None and memory_summary(sparse, 1e9) == {}


# ---- row_optimizer ------------------------------------------------------------------------

def tables(*shapes: tuple[int, int]) -> list[SimpleNamespace]:
    """Tables of (rows, dim) laid out one after another from offset 3 of the flat vector."""
    out, start = [], 3
    for i, (rows, dim) in enumerate(shapes):
        out.append(SimpleNamespace(name=f"t{i}", rows=rows, dim=dim,
                                   params=slice(start, start + rows * dim)))
        start += rows * dim
    return out


def embeddings(optimizer: str, lr: float | None = None, initial: float = 0.1):
    return SimpleNamespace(optimizer=optimizer, lr=lr, initial_accumulator=initial)


def test_adagrad_rows_against_a_numpy_loop():
    rng = np.random.default_rng(6)
    layout = tables((5, 3), (4, 2))
    params = rng.normal(size=3 + 15 + 8 + 2)
    opt = TableOptimizer(layout, params, embeddings("adagrad", initial=0.1), base_lr=0.5)
    assert opt.state_bytes == (15 + 8) * 8
    weights = [params[t.params].reshape(t.rows, t.dim).copy() for t in layout]
    accum = [np.full((t.rows, t.dim), 0.1) for t in layout]
    before = params.copy()
    for _ in range(3):
        for i, t in enumerate(layout):
            rows = np.sort(rng.choice(t.rows, 2, replace=False))
            grads = rng.normal(size=(2, t.dim))
            opt.step_rows(i, rows, grads, 0.5)
            for r, g in zip(rows, grads, strict=True):  # TensorFlow's Adagrad, eps 0
                accum[i][r] += g * g
                weights[i][r] -= 0.5 * g / np.sqrt(accum[i][r])
    for i, t in enumerate(layout):
        np.testing.assert_allclose(params[t.params].reshape(t.rows, t.dim), weights[i],
                                   rtol=1e-14, atol=0)
    assert np.array_equal(params[:3], before[:3]) and np.array_equal(params[-2:], before[-2:])


def test_sgd_rows_with_the_tables_own_learning_rate():
    rng = np.random.default_rng(7)
    (t,) = layout = tables((6, 2))
    params = rng.normal(size=3 + 12)
    opt = TableOptimizer(layout, params, embeddings("sgd", lr=0.05), base_lr=0.5)
    assert opt.state is None and opt.state_bytes == 0
    expected = params[t.params].reshape(6, 2).copy()
    rows, grads = np.array([0, 4]), rng.normal(size=(2, 2))
    opt.step_rows(0, rows, grads, 0.5)  # a strategy's rate 0.5, scaled by 0.05 / 0.5
    expected[rows] -= 0.05 * grads
    np.testing.assert_allclose(params[t.params].reshape(6, 2), expected, rtol=1e-15)


@pytest.mark.parametrize("optimizer", ["adagrad", "sgd"])
def test_a_dense_step_changes_only_the_touched_rows_and_matches_every_row_stepped(optimizer):
    rng = np.random.default_rng(8)
    layout = tables((5, 3), (4, 3))
    size = 3 + 27
    grad = np.zeros(size)
    grad[3 + 3:3 + 6] = rng.normal(size=3)  # table 0, row 1
    grad[3 + 15 + 6:3 + 15 + 9] = rng.normal(size=3)  # table 1, row 2
    start = rng.normal(size=size)
    sparse, dense = start.copy(), start.copy()
    TableOptimizer(layout, sparse, embeddings(optimizer), 0.5).step_dense(grad, 0.5)
    every = TableOptimizer(layout, dense, embeddings(optimizer), 0.5)
    for i, t in enumerate(layout):  # every row, zero gradients included
        every.step_rows(i, np.arange(t.rows), grad[t.params].reshape(t.rows, t.dim), 0.5)
    assert np.array_equal(sparse, dense)  # a zero gradient leaves a row bit for bit
    assert np.flatnonzero(sparse != start).tolist() == [6, 7, 8, 24, 25, 26]


def test_a_dense_gradient_over_part_of_a_table_is_a_value_error():
    layout = tables((5, 3))
    opt = TableOptimizer(layout, np.zeros(18), embeddings("sgd"), 0.5)
    with pytest.raises(ValueError, match="covers part of table 't0'"):
        opt.step_dense(np.zeros(10), 0.5, start=3)
    opt.step_dense(np.ones(3), 0.5, start=0)  # the dense part before the table: no rows
