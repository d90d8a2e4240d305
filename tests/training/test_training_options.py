"""Options on strategies: compression on the wire, staleness-aware lr, sparse push and pull."""

from __future__ import annotations

import math

import numpy as np
import pytest
from training_cases import BASE, MODELS, count_pushes, make, rows, update_table

from sim.errors import UserError
from sim.simulated.engine import build_simulation, simulate

WIDE = {"workload.features": 1000, "workload.samples": 2048, "workload.batch": 16}
EASY = {"workload.separation": 4.0, "workload.lr": 0.5, "run.iterations": 200,
        "run.eval_every": 200}


def message_bytes(compression: str, d: int) -> int:
    """One worker's gradient message for a d-entry model, as the codecs size it."""
    if compression == "topk":  # k = 1% of d (index, value) pairs: 4 + 8 bytes each
        return math.ceil(0.01 * d) * 12
    if compression == "qsgd":  # a float32 norm per bucket of 512 entries (the default) and
        # ceil(log2(2 * 16 + 1)) = 6 bits an entry (a sign bit + 5 bits for levels 0..16)
        return 4 * math.ceil(d / 512) + math.ceil(d * 6 / 8)
    return 8 * d


@pytest.mark.parametrize("compression", ["none", "topk", "qsgd"])
def test_compression_sets_the_pushed_message_size(compression):
    env, ctx, asp = build_simulation(make(WIDE, strategy__kind="asp",
                                          strategy__compression=compression,
                                          run__iterations=20))
    pushed = count_pushes(ctx)
    asp.start()
    env.run(until=ctx.done)
    assert len(pushed) >= 20
    assert set(pushed) == {message_bytes(compression, 1000)}


@pytest.mark.parametrize("bucket, norms", [(1, 1000), (100, 10), (512, 2), (999, 2), (1000, 1),
                                           (10**9, 1)])
def test_qsgd_message_carries_a_float32_norm_per_bucket(bucket, norms):
    config = make(WIDE, strategy__kind="asp", strategy__compression="qsgd",
                  strategy__qsgd_bucket=bucket, run__iterations=5)
    env, ctx, asp = build_simulation(config)
    pushed = count_pushes(ctx)
    asp.start()
    env.run(until=ctx.done)
    assert set(pushed) == {4 * norms + 1000 * 6 // 8}  # the levels: 6 bits for each entry
    with pytest.raises(UserError, match="strategy.qsgd_bucket"):
        make(WIDE, strategy__compression="qsgd", strategy__qsgd_bucket=0)


def test_compression_shrinks_communication_in_proportion_to_the_bytes():
    # no latency or overheads: a ring allreduce of the dense gradient N takes
    # 2 (p - 1) / p * N / bandwidth, the ring allgather of compressed messages n that replaces
    # it (p - 1) * n / bandwidth
    bandwidth_only = {"cluster.fabric": {"base": "eth-10g", "latency_s": 0.0,
                                         "overhead_s": 0.0}}
    p = BASE["cluster.workers"]
    comm = {c: simulate(make(WIDE, bandwidth_only, strategy__compression=c,
                             run__iterations=5)).summary["comm_s"]
            for c in ("none", "topk", "qsgd")}
    for c in ("topk", "qsgd"):
        ratio = message_bytes(c, 1000) / message_bytes("none", 1000) * p / 2
        assert comm[c] / comm["none"] == pytest.approx(ratio, rel=0.01)


@pytest.mark.parametrize("kind", ["bsp", "asp"])
@pytest.mark.parametrize("compression", ["topk", "qsgd"])
def test_compressed_training_still_converges(kind, compression):
    config = make(EASY, strategy__kind=kind, strategy__compression=compression,
                  strategy__topk_ratio=0.1)
    result = simulate(config)
    evals = rows(result.metrics_csv, "eval")
    assert evals[-1]["loss"] < 0.5 * evals[0]["loss"]
    uncompressed = simulate(make(EASY, strategy__kind=kind)).summary["final_loss"]
    assert result.summary["final_loss"] < 2 * uncompressed


def test_topk_error_feedback_keeps_what_was_not_sent():
    env, ctx, asp = build_simulation(make(WIDE, strategy__kind="asp", strategy__compression="topk",
                               cluster__workers=1, run__iterations=10))
    asp.start()
    env.run(until=ctx.done)
    codec = ctx.workers[0].codec
    assert np.count_nonzero(codec.residual) > 0.9 * 1000  # the other 99% wait their turn


@pytest.mark.parametrize("kind", ["asp", "ssp"])
def test_staleness_aware_lr_divides_by_the_staleness(kind):
    workers, lr = 4, 0.1
    env, ctx, strategy = build_simulation(make(strategy__kind=kind, strategy__staleness_lr=True,
                                    strategy__staleness=3, compute__distribution="exponential",
                                    compute__time_s=1e-3, workload__lr=lr))
    applied = []
    apply = ctx.server.store.apply
    ctx.server.store.apply = lambda grad, lr, rows=None: (applied.append(lr), apply(grad, lr))
    strategy.start()
    env.run(until=ctx.done)
    staleness = [row[6] for row in update_table(ctx)]
    assert max(staleness) > 1
    expected = [lr / workers / max(1, s) for s in staleness]  # asp scales lr by 1 / N
    assert applied == pytest.approx(expected, rel=1e-15)


def test_staleness_lr_off_applies_the_same_rate_to_every_gradient():
    env, ctx, asp = build_simulation(make(strategy__kind="asp", compute__distribution="exponential",
                               compute__time_s=1e-3))
    applied = []
    apply = ctx.server.store.apply
    ctx.server.store.apply = lambda grad, lr, rows=None: (applied.append(lr), apply(grad, lr))
    asp.start()
    env.run(until=ctx.done)
    assert set(applied) == {0.1 / 4}


def test_sparse_asp_pulls_and_pushes_only_the_touched_features():
    config = make(MODELS["sparse-logreg"], strategy__kind="asp", workload__features=5000)
    env, ctx, asp = build_simulation(config)
    hosts = {w.host: w.index for w in ctx.workers}
    # per worker, in order: features of each batch drawn, rows pulled, bytes pushed
    touched, pulled, pushed = ([[] for _ in ctx.workers] for _ in range(3))
    pull, push = ctx.server.pull, ctx.server.push

    def pulling(host, out, rows=None, serve_s=None, wait=None, **trace):
        pulled[hosts[host]].append(rows)
        return pull(host, out, rows, serve_s, wait, **trace)

    def pushing(host, nbytes, keys=(0.0, 1.0)):
        pushed[hosts[host]].append(nbytes)
        return push(host, nbytes, keys)

    def drawing(w, draw):
        def batch():
            X, y = draw()
            touched[w.index].append(np.unique(X[1]))  # CSR column ids
            return X, y
        return batch

    ctx.server.pull, ctx.server.push = pulling, pushing
    for w in ctx.workers:
        w.next_batch = drawing(w, w.next_batch)
    asp.start()
    env.run(until=ctx.done)
    assert sum(map(len, pushed)) >= config.run.iterations
    for features, rows_pulled, nbytes in zip(touched, pulled, pushed, strict=True):
        for f, r, b in zip(features, rows_pulled, nbytes, strict=False):  # last may be cut
            assert np.array_equal(r, f)
            assert b == 16 * len(f)  # an int64 id and a float64 value each
            assert b < 8 * 5000 / 10  # under a tenth of a dense message
