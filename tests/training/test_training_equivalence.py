"""Strategies that must agree on the parameters: exact identities between training schemes.

Every gradient is a real kernel call on the parameters a worker holds, so these pin down
the numerics of each strategy: which parameters a gradient is taken at, which batches
it sees, how gradients are combined and applied.
"""

from __future__ import annotations

import numpy as np
import pytest
from training_cases import MODELS, make, train, update_table

from sim import kernels as K
from sim.simulated.engine import build_simulation

DENSE = ["logreg", "softmax", "mlp"]
EXPONENTIAL = {"compute.distribution": "exponential", "compute.time_s": 1e-3}


@pytest.mark.parametrize("model", DENSE)
def test_ssp_with_staleness_0_matches_bsp_ps(model):
    # ssp counts one update per gradient, bsp-ps one per step of N gradients; exponential
    # compute times make the ssp gradients of a round arrive in a random order.
    workers, steps = 4, 10
    ssp_ctx, ssp = train(make(MODELS[model], EXPONENTIAL, strategy__kind="ssp",
                              strategy__staleness=0, run__iterations=workers * steps))
    ps_ctx, ps = train(make(MODELS[model], EXPONENTIAL, strategy__kind="bsp-ps",
                            run__iterations=steps))
    assert [w.clock for w in ssp_ctx.workers] == [steps] * workers
    # every round's gradients were taken at the same parameters: a round of N reads one
    # version, and it is the version after the previous round
    read = [row[5] for row in update_table(ssp_ctx)]
    assert read == [workers * (i // workers) for i in range(workers * steps)]
    np.testing.assert_allclose(ssp.model_of_record(), ps.model_of_record(), rtol=1e-12,
                               atol=1e-14)
    assert not np.array_equal(ps.model_of_record(), ps_ctx.params)  # it trained


@pytest.mark.parametrize("staleness", [0, 3])
def test_ssp_with_one_worker_is_bitwise_bsp_ps(staleness):
    one = {"cluster.workers": 1, "workload.momentum": 0.9, "workload.weight_decay": 1e-3}
    _, ssp = train(make(MODELS["mlp"], one, strategy__kind="ssp",
                        strategy__staleness=staleness))
    _, ps = train(make(MODELS["mlp"], one, strategy__kind="bsp-ps"))
    assert np.array_equal(ssp.model_of_record(), ps.model_of_record())


@pytest.mark.parametrize("model", ["logreg", "mlp"])
def test_asp_with_one_worker_is_bitwise_sequential_sgd(model):
    config = make(MODELS[model], EXPONENTIAL, cluster__workers=1, strategy__kind="asp",
                  workload__momentum=0.9, workload__weight_decay=1e-3)
    ctx, asp = train(config)
    # the same worker (same shard, same batch generator) driven by hand
    _, fresh, _ = build_simulation(config)
    worker, params = fresh.workers[0], fresh.params.copy()
    velocity = np.zeros_like(params)
    w = config.workload
    for _ in range(config.run.iterations):
        worker.gradient(params)
        K.sgd_update(params, worker.grad, velocity, w.lr, w.momentum, w.weight_decay)
    assert np.array_equal(asp.model_of_record(), params)
    assert all(row[6] == 0 for row in update_table(ctx))  # nothing was stale


def _recording_batches(workers) -> list[list]:
    """Make each worker log the batches it draws; returns the log, one list per worker."""
    log = [[] for _ in workers]
    for w, mine in zip(workers, log, strict=True):
        draw = w.next_batch

        def recorded(draw=draw, mine=mine):
            batch = draw()
            mine.append(batch)
            return batch

        w.next_batch = recorded
    return log


@pytest.mark.parametrize("model", ["logreg", "mlp"])
def test_bsp_with_p_workers_matches_one_worker_with_p_times_the_batch(model):
    p, batch, steps = 4, 8, 15
    many = make(MODELS[model], cluster__workers=p, workload__batch=batch,
                run__iterations=steps)
    # The P workers' batches, step by step: a worker's batches depend only on its own
    # generator, so a fresh build draws exactly the sequence the run will draw.
    _, fresh, _ = build_simulation(many)
    drawn = [[w.next_batch() for w in fresh.workers] for _ in range(steps)]
    env, ctx, bsp = build_simulation(many)
    used = _recording_batches(ctx.workers)
    bsp.start()
    env.run(until=ctx.done)
    for i, w_batches in enumerate(used):  # the run saw exactly those batches
        for step, (X, y) in enumerate(w_batches):
            assert np.array_equal(X, drawn[step][i][0]) and np.array_equal(y, drawn[step][i][1])
    # One worker whose step-k batch is the P workers' step-k batches stacked (P * B rows).
    big = iter([(np.concatenate([X for X, _ in step]), np.concatenate([y for _, y in step]))
                for step in drawn])
    env1, ctx1, single = build_simulation(make(MODELS[model], cluster__workers=1,
                                    workload__batch=p * batch, run__iterations=steps))
    ctx1.workers[0].next_batch = lambda: next(big)
    single.start()
    env1.run(until=ctx1.done)
    np.testing.assert_allclose(bsp.model_of_record(), single.model_of_record(), rtol=1e-12,
                               atol=1e-14)
    assert not np.array_equal(single.model_of_record(), ctx1.params)


@pytest.mark.parametrize("model", DENSE)
def test_local_sgd_with_h_1_matches_bsp(model):
    keys = {"workload.momentum": 0.5, "workload.weight_decay": 1e-3,
            "strategy.local_steps": 1}
    _, local = train(make(MODELS[model], keys, strategy__kind="local-sgd"))
    _, bsp = train(make(MODELS[model], keys, strategy__kind="bsp"))
    np.testing.assert_allclose(local.model_of_record(), bsp.model_of_record(), rtol=1e-12,
                               atol=1e-14)


def test_local_sgd_steps_take_time_from_the_start_and_the_record_is_the_mean():
    ctx, local = train(make(strategy__kind="local-sgd", strategy__local_steps=4,
                            compute__time_s=0.5, run__iterations=6))
    ends = [row[1] for row in update_table(ctx)]
    assert ends[:4] == [0.5, 1.0, 1.5, 2.0]  # (the first period once took no time at all)
    assert ends[4] > 2.5  # after the average
    assert not np.array_equal(local.replicas[0], local.replicas[1])  # 2 local steps since
    np.testing.assert_allclose(local.model_of_record(), np.mean(local.replicas, axis=0),
                               rtol=1e-12, atol=1e-15)


def test_sparse_asp_with_one_worker_matches_dense_sequential_sgd():
    """Pulling and pushing only the touched features changes nothing in the numbers."""
    config = make(MODELS["sparse-logreg"], cluster__workers=1, strategy__kind="asp")
    _, asp = train(config)
    _, fresh, _ = build_simulation(config)
    worker, params = fresh.workers[0], fresh.params.copy()
    for _ in range(config.run.iterations):
        worker.gradient(params)  # the dense gradient (zero off the batch's features)
        K.sgd_update(params, worker.grad, None, config.workload.lr)
    np.testing.assert_allclose(asp.model_of_record(), params, rtol=1e-13, atol=1e-15)
    assert np.count_nonzero(params) > 0


def test_easgd_with_one_worker_follows_the_elastic_update():
    """x <- x - lr g every step; every tau steps d = alpha (x - c), x <- x - d, c <- c + d."""
    tau, alpha, steps = 2, 0.3, 9  # the last exchange (after step 8) completes
    config = make(cluster__workers=1, strategy__kind="easgd", strategy__local_steps=tau,
                  strategy__elasticity=alpha, run__iterations=steps)
    _, easgd = train(config)
    _, fresh, _ = build_simulation(config)
    worker, x = fresh.workers[0], fresh.params.copy()
    center = x.copy()
    for t in range(1, steps + 1):
        worker.gradient(x)
        x -= config.workload.lr * worker.grad
        if t % tau == 0:
            d = alpha * (x - center)
            x -= d
            center += d
    np.testing.assert_allclose(easgd.replicas[0], x, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(easgd.model_of_record(), center, rtol=1e-13, atol=1e-15)
    assert not np.allclose(center, x)
