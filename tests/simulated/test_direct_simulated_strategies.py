"""Each simulated strategy's processes, driven directly on the smallest simulation the
engine's own builder makes (:func:`sim.simulated.engine.build_simulation`): who sends what
to whom and when, in a run of two or three workers on a network where every message costs
exactly alpha; the closed forms a collective's time must equal; and the numbers a strategy
must produce, against a loop written out by hand on a fresh copy of the same workers.

The network for the event logs is the analytical one with latency 1 ms a hop (alpha = 2 ms
on one switch) and no overhead, at 1e18 B/s: a 128-byte message costs alpha + 1.3e-16 s,
so times are compared to 1e-12 s. A gradient takes ``C`` s (``compute.time_s``) on the
ideal host (no CPU costs), so every instant is a sum of C and alpha.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import simpy
from training_cases import MODELS, make, update_table

from sim import kernels as K
from sim.network.alltoall import alltoallv
from sim.network.collectives import ParameterServer as PSCollective
from sim.network.collectives import get_collective
from sim.network.message_cost import REQUEST_BYTES, alpha_s, beta_s
from sim.network.network_builder import build_network
from sim.recorder import KINDS
from sim.simulated.engine import build_simulation
from sim.simulated.strategies.allreduce import BSP, LocalSGD, RankStep
from sim.simulated.strategies.easgd import EASGD
from sim.simulated.strategies.pipelined import PipelinedStrategy
from sim.simulated.strategies.ps_async import ASP, SSP
from sim.simulated.strategies.ps_sync import BSPPS, Backup
from sim.simulated.strategies.table_exchange import AllToAll, Replicated
from sim.training.embedding_traffic import ID_BYTES, VALUE_BYTES

C = 0.01  # s per gradient
ALPHA = 2e-3  # s per message: 2 hops of 1 ms
LATENCY_ONLY = {"cluster.network": "analytical",
                "cluster.fabric": {"base": "ib-hdr", "latency_s": 1e-3, "overhead_s": 0.0,
                                   "bandwidth_Bps": 1e18}}
FIXED = {"compute.time_s": C}
# real bandwidth, for closed forms with a beta term
HDR = {"cluster.network": "analytical", "cluster.fabric": "ib-hdr"}
TOL = 1e-12


def sends_logged(ctx: Any) -> list[tuple[float, int, int, float]]:
    """From now on, every message the strategy puts on the network: (time s, source host,
    destination host, bytes), in the order sent."""
    log: list[tuple[float, int, int, float]] = []
    net = ctx.network
    send, send_all = net.send, net.send_all

    def one(src: int, dst: int, nbytes: float) -> simpy.Event:
        log.append((float(net.env.now), int(src), int(dst), float(nbytes)))
        return send(src, dst, nbytes)

    def many(src: Any, dst: Any, nbytes: Any) -> simpy.Event:
        log.extend((float(net.env.now), int(a), int(b), float(n))
                   for a, b, n in zip(src, dst, nbytes, strict=True))
        return send_all(src, dst, nbytes)

    net.send, net.send_all = one, many
    return log


def run(config: Any, slow: dict[int, float] | None = None,
        ) -> tuple[Any, Any, list[tuple[float, int, int, float]]]:
    """Build, log the sends, start and run ``config`` to its end; ``slow``: worker ->
    factor on its compute time. (context, strategy, sends)."""
    env, ctx, strategy = build_simulation(config)
    if slow:
        base = ctx.compute.duration
        ctx.compute.duration = lambda w, now: base(w, now) * slow.get(w, 1.0)
    log = sends_logged(ctx)
    strategy.start()
    env.run(until=ctx.done)
    return ctx, strategy, log


def same_log(got: list[tuple[float, int, int, float]],
             expected: list[tuple[float, int, int, float]]) -> None:
    """The two logs hold the same messages at the same instants (to TOL; order within an
    instant is SimPy's, so both are sorted by time, then hosts)."""
    def key(m: tuple[float, int, int, float]) -> tuple[float, int, int]:
        return (round(m[0] / TOL), m[1], m[2])

    got, expected = sorted(got, key=key), sorted(expected, key=key)
    assert [m[1:] for m in got] == [m[1:] for m in expected]
    np.testing.assert_allclose([m[0] for m in got], [m[0] for m in expected], rtol=0,
                               atol=TOL)


# ---- ps_async: asp and ssp ----------------------------------------------------------------

def test_asp_two_workers_pull_compute_push_in_lockstep_on_an_alpha_network():
    rounds = 3
    ctx, strategy, log = run(make(LATENCY_ONLY, FIXED, cluster__workers=2,
                                  strategy__kind="asp", run__iterations=2 * rounds))
    assert type(strategy) is ASP
    server, params = int(ctx.server.hosts[0]), float(ctx.params.nbytes)
    expected = []
    for k in range(rounds):
        t0 = k * (C + 3 * ALPHA)  # a round: request, reply, compute, push
        for w in ctx.workers:
            expected += [(t0, w.host, server, float(REQUEST_BYTES)),
                         (t0 + ALPHA, server, w.host, params),
                         (t0 + 2 * ALPHA + C, w.host, server, params)]
    # worker 0's push was not the run's last update: it asks for the next round's
    # parameters at the instant the run ends
    expected.append((rounds * (C + 3 * ALPHA), ctx.workers[0].host, server,
                     float(REQUEST_BYTES)))
    same_log(log, expected)
    table = update_table(ctx)
    np.testing.assert_allclose([r[1] for r in table],
                               [(k + 1) * (C + 3 * ALPHA) for k in range(rounds)
                                for _ in range(2)], atol=TOL)
    # both read the version of the round's start; the second push of a round is 1 stale
    assert [(r[3], r[5], r[6]) for r in table] == [
        (w, 2 * k, w) for k in range(rounds) for w in range(2)]
    assert ctx.server.store.version == 2 * rounds


@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_ssp_holds_the_fast_worker_within_staleness_of_the_slow_one(staleness):
    ctx, strategy, _ = run(make(LATENCY_ONLY, FIXED, cluster__workers=2, strategy__kind="ssp",
                                strategy__staleness=staleness, run__iterations=16),
                           slow={1: 3.0})
    assert type(strategy) is SSP
    clocks, ahead = [0, 0], []
    for row in update_table(ctx):
        clocks[row[3]] = row[4]
        ahead.append(clocks[0] - clocks[1])
        assert row[7] <= staleness  # the clock gap at the pull that read its parameters
    # the fast worker (3x faster) is held: never more than staleness + 1 clocks ahead (its
    # push after the last admitted read), and it gets there
    assert max(ahead) == staleness + 1


def test_asp_lets_the_fast_worker_run_ahead_unbounded():
    ctx, _, _ = run(make(LATENCY_ONLY, FIXED, cluster__workers=2, strategy__kind="asp",
                         run__iterations=16), slow={1: 3.0})
    clocks = [0, 0]
    for row in update_table(ctx):
        clocks[row[3]] = row[4]
    assert clocks[0] - clocks[1] > 3


# ---- ps_sync: bsp-ps and backup -----------------------------------------------------------

def test_bsp_ps_two_workers_push_then_the_server_answers_each():
    steps = 3
    ctx, strategy, log = run(make(LATENCY_ONLY, FIXED, cluster__workers=2,
                                  strategy__kind="bsp-ps", run__iterations=steps))
    assert type(strategy) is BSPPS
    server, params = int(ctx.server.hosts[0]), float(ctx.params.nbytes)
    expected = []
    for k in range(steps):  # the first step's parameters are known: no pull before it
        t0 = k * (C + 2 * ALPHA)
        for w in ctx.workers:
            expected += [(t0 + C, w.host, server, params),
                         (t0 + C + ALPHA, server, w.host, params)]
    same_log(log, expected)
    table = update_table(ctx)
    np.testing.assert_allclose([r[1] for r in table],
                               [(k + 1) * (C + 2 * ALPHA) for k in range(steps)], atol=TOL)
    assert [(r[3], r[5]) for r in table] == [(-1, k) for k in range(steps)]


@pytest.mark.parametrize("servers", [1, 2, 3])
@pytest.mark.parametrize("workers", [2, 3])
def test_bsp_ps_message_alone_is_the_parameter_server_closed_form(servers, workers):
    # every worker pushes its whole gradient at once, then each gets it back: on the
    # analytical network the incast closed form, alpha + max(p, S) n / S beta each way
    # 12 parameters (logreg on 12 features): equal key ranges on 1, 2 or 3 shards
    env, ctx, strategy = build_simulation(make(HDR, cluster__workers=workers,
                                               cluster__servers=servers, workload__features=12,
                                               strategy__kind="bsp-ps"))
    strategy.start()
    fabric = ctx.network.fabric
    (msg,) = strategy.messages
    expected = PSCollective(servers).closed_form_s(workers, msg.nbytes, alpha_s(fabric),
                                                   beta_s(fabric))
    assert strategy.alone_s(msg) == pytest.approx(expected, rel=1e-12)


def test_bsp_ps_keys_are_the_layers_share_of_the_gradient_bytes():
    env, ctx, strategy = build_simulation(make(MODELS["mlp"], strategy__kind="bsp-ps",
                                               strategy__pipelining="wfbp"))
    strategy.start()
    grad = np.asarray(ctx.layers.grad_bytes, float)
    ends = np.cumsum(grad) / grad.sum()
    for msg in strategy.messages:
        lo, hi = strategy.keys(msg)
        assert lo == pytest.approx(0.0 if msg.lo == 0 else ends[msg.lo - 1], abs=1e-15)
        assert hi == pytest.approx(ends[msg.hi], abs=1e-15)
    assert sorted(strategy.keys(m) for m in strategy.messages)[-1][1] == 1.0


def test_backup_steps_on_the_first_n_minus_b_gradients_only():
    # 3 workers, 1 backup; worker 2 computes 3x slower, so its gradient is always late
    # (dropped): each step is the mean of workers 0 and 1 at the step's parameters
    steps = 4
    config = make(LATENCY_ONLY, FIXED, cluster__workers=3, strategy__kind="backup",
                  strategy__backup=1, run__iterations=steps)
    ctx, strategy, _ = run(config, slow={2: 3.0})
    assert type(strategy) is Backup
    assert [r[5] for r in update_table(ctx)] == list(range(steps))  # each read the last
    _, fresh, _ = build_simulation(config)
    params, rules = fresh.params.copy(), fresh.rules
    mean = np.empty_like(params)
    for _ in range(steps):
        grads = []
        for w in fresh.workers[:2]:
            w.gradient(params)
            grads.append(w.grad.copy())
        K.sgd_update(params, rules.mean(grads, mean), None, rules.lr(0), 0.0,
                     config.workload.weight_decay)
    assert np.array_equal(strategy.model_of_record(), params)


# ---- allreduce: bsp and local-sgd ---------------------------------------------------------

@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("workers", [2, 3, 4])
def test_bsp_allreduce_time_is_the_ring_closed_form(model, workers):
    # ring: 2 (p - 1) alpha + 2 (p - 1) / p n beta (Thakur et al. 2005), on idle links
    env, ctx, strategy = build_simulation(make(HDR, cluster__network=model,
                                               cluster__workers=workers,
                                               strategy__kind="bsp",
                                               strategy__collective="ring"))
    strategy.setup_replicas()
    fabric, nbytes = ctx.network.fabric, 1_200_000
    alpha, beta = alpha_s(fabric), beta_s(fabric)
    closed = 2 * (workers - 1) * alpha + 2 * (workers - 1) / workers * nbytes * beta
    assert closed == get_collective("ring").closed_form_s(workers, nbytes, alpha, beta)
    took = env.process(strategy.allreduce_time(nbytes))
    env.run(took)
    assert took.value == pytest.approx(closed, rel=1e-9)
    assert env.now == pytest.approx(closed, rel=1e-9)
    # the second of that size replays the first's duration
    again = env.process(strategy.allreduce_time(nbytes))
    env.run(again)
    assert again.value == took.value and env.now == pytest.approx(2 * closed, rel=1e-9)


def test_bsp_steps_are_compute_then_the_allreduce_alone():
    steps, workers = 3, 3
    ctx, strategy, _ = run(make(HDR, FIXED, cluster__workers=workers, strategy__kind="bsp",
                                strategy__collective="ring", run__iterations=steps))
    assert type(strategy) is BSP
    fabric, nbytes = ctx.network.fabric, ctx.params.nbytes
    ring = get_collective("ring").closed_form_s(workers, nbytes, alpha_s(fabric),
                                                beta_s(fabric))
    times = [r[1] for r in update_table(ctx)]
    np.testing.assert_allclose(times, [(k + 1) * (C + ring) for k in range(steps)],
                               rtol=1e-12)
    # pipelined.py's summary: C, M = steps x the message alone, T; nothing overlaps
    summary = strategy.summary_extra()
    assert summary["comm_alone_s"] == pytest.approx(steps * ring, rel=1e-12)
    assert summary["iter_s"] == pytest.approx(C + ring, rel=1e-12)
    assert summary["exposed_comm_s"] == pytest.approx(ring, rel=1e-9)
    assert summary["speedup_vs_none"] == 1.0
    assert summary["overlap_efficiency"] == pytest.approx(0.0, abs=1e-9)
    assert summary["straggler_wait_s"] == 0.0 and summary["messages_per_step"] == 1


@pytest.mark.parametrize("collective", ["ring", "recursive-doubling", "rabenseifner", "tree"])
@pytest.mark.parametrize("workers", [2, 3, 4, 5])
def test_bsp_rank_plans_send_every_transfer_once_and_receive_it_once(collective, workers):
    env, ctx, strategy = build_simulation(make(HDR, cluster__workers=workers,
                                               strategy__kind="bsp",
                                               strategy__collective=collective))
    strategy.setup_replicas()
    nbytes = 8 * 600  # whole 8-byte entries in every ring chunk for p = 2..5
    plans, sizes = strategy.rank_plans(nbytes)
    schedule = strategy.collective.schedule(workers, nbytes)
    sent = [[0] * n for n in sizes]
    received = [[0] * n for n in sizes]
    sent_bytes = received_bytes = 0.0
    hosts = strategy.hosts
    for rank, plan in enumerate(plans):
        for step in plan:
            assert isinstance(step, RankStep)
            rnd = schedule.round(step.index)
            for t, src, dst, count in step.sends:
                sent[step.index][t] += 1
                assert src == hosts[rank] and dst == hosts[int(rnd.dst[t])]
                sent_bytes += count
            for t in step.recvs:
                received[step.index][t] += 1
                assert hosts[int(rnd.dst[t])] == hosts[rank]
                received_bytes += float(rnd.count[t])
    assert all(c == 1 for row in sent + received for c in row)
    assert sent_bytes == received_bytes  # conservation: every byte sent is received
    if collective == "ring":  # each rank sends 2 (p - 1) / p of the vector
        for plan in plans:
            assert sum(c for step in plan for *_, c in step.sends) == pytest.approx(
                2 * (workers - 1) / workers * nbytes)


def test_bsp_gradient_sum_is_the_workers_sum_in_rank_order_bitwise():
    env, ctx, strategy = build_simulation(make(MODELS["mlp"], cluster__workers=3,
                                               strategy__kind="bsp"))
    strategy.setup_replicas()
    for w in ctx.workers:
        w.gradient(ctx.params)
    nbytes = strategy.sum_gradients()
    expected = ctx.workers[0].grad.copy()
    for w in ctx.workers[1:]:
        expected += w.grad
    assert np.array_equal(strategy.total, expected)
    assert nbytes == ctx.params.nbytes


def test_bsp_matches_synchronous_sgd_written_out():
    steps = 4
    config = make(MODELS["mlp"], FIXED, cluster__workers=3, strategy__kind="bsp",
                  workload__momentum=0.9, run__iterations=steps)
    _, strategy, _ = run(config)
    _, fresh, _ = build_simulation(config)
    params, velocity = fresh.params.copy(), np.zeros_like(fresh.params)
    mean = np.empty_like(params)
    for _ in range(steps):
        grads = []
        for w in fresh.workers:
            w.gradient(params)
            grads.append(w.grad.copy())
        K.sgd_update(params, fresh.rules.mean(grads, mean), velocity, fresh.rules.lr(0),
                     config.workload.momentum, config.workload.weight_decay)
    assert np.array_equal(strategy.model_of_record(), params)


def test_bsp_compressed_gathers_the_top_k_messages_and_sums_them_decoded():
    env, ctx, strategy = build_simulation(make(cluster__workers=4, strategy__kind="bsp",
                                               strategy__compression="topk",
                                               strategy__topk_ratio=0.25))
    strategy.setup_replicas()
    assert strategy.collective.name == ctx.config.strategy.allgather
    strategy.compute_gradients()  # every worker's gradient, encoded, decoded and summed
    k = ctx.workers[0].codec.k
    assert k == -(-ctx.params.size // 4)
    assert strategy.compressed_bytes == k * (4 + 8)  # (32-bit index, float64 value) pairs
    # the sum holds at most p k entries, each the sum of what the workers sent for it
    _, fresh, _ = build_simulation(ctx.config)
    expected = np.zeros(ctx.params.size)
    for w in fresh.workers:
        w.gradient(fresh.params)
        (idx, val), _ = w.codec.encode(w.grad)
        expected[idx] += val
    np.testing.assert_allclose(strategy.total, expected, rtol=1e-15, atol=0)
    assert np.count_nonzero(strategy.total) <= 4 * k


def test_local_sgd_matches_local_steps_then_averages_written_out():
    period, steps = 3, 6  # an average after the first period; the run ends with the second
    config = make(MODELS["logreg"], FIXED, cluster__workers=2, strategy__kind="local-sgd",
                  strategy__local_steps=period, run__iterations=steps)
    ctx, strategy, _ = run(config)
    assert type(strategy) is LocalSGD
    assert [r[2] for r in update_table(ctx)] == list(range(1, steps + 1))
    _, fresh, _ = build_simulation(config)
    replicas = [fresh.params.copy() for _ in fresh.workers]
    average = fresh.params.copy()
    lr = fresh.rules.lr(0)
    for step in range(steps):
        for w, x in zip(fresh.workers, replicas, strict=True):
            w.gradient(x)
            K.sgd_update(x, w.grad, None, lr, 0.0, config.workload.weight_decay)
        if (step + 1) % period == 0:
            K.average(replicas, out=average)
            for x in replicas:
                x[:] = average
    assert np.array_equal(strategy.model_of_record(), K.average(replicas, out=average))


def test_local_sgd_ended_mid_period_holds_only_the_recorded_local_steps():
    period, steps = 3, 7  # the run ends after the first local step of the third period
    config = make(MODELS["logreg"], FIXED, cluster__workers=2, strategy__kind="local-sgd",
                  strategy__local_steps=period, run__iterations=steps)
    _, strategy, _ = run(config)
    _, fresh, _ = build_simulation(config)
    replicas = [fresh.params.copy() for _ in fresh.workers]
    average = fresh.params.copy()
    for step in range(steps):
        for w, x in zip(fresh.workers, replicas, strict=True):
            w.gradient(x)
            K.sgd_update(x, w.grad, None, fresh.rules.lr(0), 0.0, 0.0)
        if (step + 1) % period == 0:
            K.average(replicas, out=average)
            for x in replicas:
                x[:] = average
    assert np.array_equal(strategy.model_of_record(), K.average(replicas, out=average))


# ---- easgd --------------------------------------------------------------------------------

def test_easgd_exchange_moves_replica_and_center_by_alpha_times_their_difference():
    config = make(LATENCY_ONLY, FIXED, cluster__workers=2, strategy__kind="easgd",
                  strategy__elasticity=0.25)
    env, ctx, strategy = build_simulation(config)
    assert type(strategy) is EASGD
    log = sends_logged(ctx)
    rng = np.random.default_rng(0)
    store = ctx.server.store
    x = rng.normal(size=ctx.model.size)
    store.params[:] = rng.normal(size=ctx.model.size)
    x0, c0, version = x.copy(), store.params.copy(), store.version
    worker = ctx.workers[1]
    env.run(env.process(strategy.exchange(worker, x, np.zeros(ctx.model.size))))
    diff = 0.25 * (x0 - c0)
    assert np.array_equal(x, x0 - diff)
    assert np.array_equal(store.params, c0 + diff)
    assert store.version == version + 1
    server, nbytes = int(ctx.server.hosts[0]), float(x.nbytes)
    same_log(log, [(0.0, worker.host, server, float(REQUEST_BYTES)),  # pull the center
                   (ALPHA, server, worker.host, nbytes),
                   (2 * ALPHA, worker.host, server, nbytes)])  # push the elastic step
    assert env.now == pytest.approx(3 * ALPHA, abs=TOL)


def test_easgd_run_exchanges_every_tau_local_steps():
    tau, steps = 2, 4  # per worker: 2 local steps, an exchange, 2 local steps
    ctx, _, log = run(make(LATENCY_ONLY, FIXED, cluster__workers=2, strategy__kind="easgd",
                           strategy__local_steps=tau, run__iterations=2 * steps))
    table = update_table(ctx)
    # a worker's local steps take C each; after every tau of them, an exchange of 3 alpha
    for w in range(2):
        times = [r[1] for r in table if r[3] == w]
        np.testing.assert_allclose(times, [(k + 1) * C + (k // tau) * 3 * ALPHA
                                           for k in range(steps)], atol=TOL)
    server, nbytes = int(ctx.server.hosts[0]), float(ctx.params.nbytes)
    expected = []
    for w in ctx.workers:
        t0 = tau * C  # the exchange after the first tau steps: pull, then push
        expected += [(t0, w.host, server, float(REQUEST_BYTES)),
                     (t0 + ALPHA, server, w.host, nbytes),
                     (t0 + 2 * ALPHA, w.host, server, nbytes),
                     # the next exchange's request leaves as the run ends
                     (steps * C + 3 * ALPHA, w.host, server, float(REQUEST_BYTES))]
    same_log(log, expected)
    assert ctx.server.store.version == 2  # one center update per exchange


# ---- pipelined ----------------------------------------------------------------------------

@pytest.mark.parametrize(("C_s", "M_s", "T_s", "hidden"), [
    (2.0, 1.0, 2.5, 0.5),  # half the communication hidden
    (2.0, 1.0, 2.0, 1.0),  # all of it
    (2.0, 1.0, 3.5, 0.0),  # CPU beyond the wire: clipped at 0
])
def test_pipelining_summary_is_its_closed_form(C_s, M_s, T_s, hidden):
    ctx, strategy, _ = run(make(FIXED, strategy__kind="bsp", run__iterations=5))
    assert isinstance(strategy, PipelinedStrategy)
    got = strategy.pipelining_summary(C_s, M_s, T_s, 4.0, 3)
    assert got["iter_s"] == T_s / 5
    assert got["exposed_comm_s"] == (T_s - C_s) / 5
    assert got["pipelining_ratio"] == M_s / C_s
    assert got["overlap_efficiency"] == hidden
    assert got["speedup_vs_none"] == 4.0 / T_s
    assert got["messages_per_step"] == 3


def test_wfbp_messages_cover_every_layer_once_and_overlap_backprop():
    steps = 3
    ctx, strategy, _ = run(make(MODELS["mlp"], HDR, FIXED, strategy__kind="bsp",
                                strategy__pipelining="wfbp", run__iterations=steps,
                                workload__hidden=[64, 64], workload__features=256))
    layers = sorted(i for m in strategy.messages for i in range(m.lo, m.hi + 1))
    assert layers == list(range(len(ctx.layers.grad_bytes)))
    assert sum(m.nbytes for m in strategy.messages) == sum(ctx.layers.grad_bytes)
    summary = strategy.summary_extra()
    # overlapped: each step is shorter than its compute plus its messages one after another
    assert summary["iter_s"] < C + summary["comm_alone_s"] / steps
    assert summary["overlapped_comm_s"] > 0


# ---- table_exchange -----------------------------------------------------------------------

WIDE_DEEP = {"workload.model": "wide-deep", "workload.dataset": "ctr-synthetic",
             "workload.features": 3, "workload.fields": 3, "workload.vocab": 200,
             "workload.embedding_dim": 4, "workload.cross_buckets": 64,
             "workload.hidden": [8], "workload.samples": 1200, "workload.batch": 16,
             "cluster.workers": 3, "run.iterations": 3, "strategy.kind": "bsp"}


def exchanged(placement: str, **keys: Any) -> tuple[Any, Any, float]:
    """One step's table exchange of a wide-deep bsp run, driven alone after every worker
    took a gradient (its part before the forward pass first, where it has one): (context,
    exchange, its seconds)."""
    env, ctx, strategy = build_simulation(make(WIDE_DEEP, HDR, embeddings__placement=placement,
                                               **keys))
    strategy.setup_replicas()
    tables = strategy.tables
    for w in ctx.workers:
        w.gradient(ctx.params)

    def step():
        if tables.before_forward:
            yield simpy.AllOf(env, [env.process(tables.forward_part(w.index))
                                    for w in ctx.workers])
        yield from tables.timed_exchange(ctx.params.nbytes, False)

    env.run(env.process(step()))
    return ctx, tables, float(env.now)


def test_replicated_tables_allreduce_the_whole_gradient():
    ctx, tables, took = exchanged("replicated")
    assert isinstance(tables, Replicated)
    fabric = ctx.network.fabric
    ring = get_collective(ctx.config.strategy.collective).closed_form_s(
        ctx.n, ctx.params.nbytes, alpha_s(fabric), beta_s(fabric))
    assert took == pytest.approx(ring, rel=1e-9) and tables.mean_s == took
    summary = tables.summary()
    assert summary["push_bytes_per_step"] == ctx.params.nbytes
    assert summary["pull_bytes_per_step"] == 0.0
    assert summary["shard_load_max_over_mean"] is None
    touched = [ctx.model.touched(w.last_batch[0]) for w in ctx.workers]
    assert summary["unique_ids_per_step"] == sum(len(i) for t in touched for i in t) / ctx.n


def test_sparse_allreduce_gathers_the_largest_block_of_touched_rows():
    ctx, tables, took = exchanged("replicated", embeddings__sparse_allreduce=True)
    model = ctx.model
    blocks = [sum(len(ids) * (t.dim * VALUE_BYTES + ID_BYTES)
                  for ids, t in zip(model.touched(w.last_batch[0]), model.tables, strict=True))
              for w in ctx.workers]
    block = max(blocks)
    dense = (model.size - model.dense_start) * VALUE_BYTES
    summary = tables.summary()
    assert summary["push_bytes_per_step"] == dense + block
    assert summary["pull_bytes_per_step"] == (ctx.n - 1) * block
    fabric = ctx.network.fabric
    alpha, beta = alpha_s(fabric), beta_s(fabric)
    expected = (get_collective(ctx.config.strategy.collective).closed_form_s(
        ctx.n, dense, alpha, beta) + get_collective(ctx.config.strategy.allgather)
        .closed_form_s(ctx.n, block, alpha, beta))
    assert took == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("sharding", ["table", "column", "row-hash", "row-range"])
def test_alltoall_bytes_are_conserved_and_counted(sharding):
    ctx, tables, _ = exchanged("alltoall", embeddings__sharding=sharding)
    assert isinstance(tables, AllToAll)
    forward, n = tables.forward, ctx.n
    assert np.all(np.diag(forward) == 0)  # a rank's own part does not travel
    batch = ctx.config.workload.batch
    # every worker receives each pooled column it does not hold, batch rows of them
    pooled = forward.sum(axis=1) / (batch * VALUE_BYTES * (n - 1))  # columns per owner
    assert np.allclose(pooled, np.round(pooled))
    for i in range(n):
        assert forward[:, i].sum() == (pooled.sum() - pooled[i]) * batch * VALUE_BYTES
    summary = tables.summary()
    dense = (ctx.model.size - ctx.model.dense_start) * VALUE_BYTES
    assert summary["pull_bytes_per_step"] == forward.sum() / n
    assert summary["push_bytes_per_step"] == forward.sum() / n + dense
    assert summary["shard_load_max_over_mean"] >= 1.0

def test_alltoall_exchanges_before_forward_and_after_backward():
    """On the ideal host the step's exchange is the forward all-to-all (before the forward
    pass), the backward one (its transpose) and the dense allreduce, each alone on the
    network: their times add up, and the step counts once."""
    ctx, tables, took = exchanged("alltoall")
    fabric = ctx.network.fabric
    hosts = np.arange(ctx.n)

    def alone(matrix):
        env = simpy.Environment()
        network = build_network(env, fabric, ctx.n)
        env.run(env.process(alltoallv(network, matrix, hosts)))
        return env.now

    dense = (ctx.model.size - ctx.model.dense_start) * VALUE_BYTES
    ring = get_collective(ctx.config.strategy.collective).closed_form_s(
        ctx.n, dense, alpha_s(fabric), beta_s(fabric))
    expected = alone(tables.forward) + alone(tables.forward.T) + ring
    assert took == pytest.approx(expected, rel=1e-9)
    assert tables.mean_s == pytest.approx(took, rel=1e-12) and tables.steps == 1


def test_alltoall_messages_cost_their_ends_the_cpu_an_allreduces_do():
    """On a host with costs every message of the all-to-alls costs its ends what an
    allreduce's does: each round's slowest endpoint, its send and its receive, summed over
    the rounds, by hand here; each worker records both exchanges' and the dense
    allreduce's as overhead, and nothing else as overhead."""
    ctx, tables, _ = exchanged("alltoall", cluster__host="epyc-core")
    message = ctx.cpu.message

    def by_hand(b):
        p = len(b)
        return sum(max(message.send_s(b[i, (i + k) % p]) + message.receive_s(b[(i - k) % p, i])
                       for i in range(p)) for k in range(1, p))

    assert tables.forward_cpu_s > 0
    assert tables.forward_cpu_s == pytest.approx(by_hand(tables.forward), rel=1e-12)
    assert tables.backward_cpu_s == pytest.approx(by_hand(tables.forward.T), rel=1e-12)
    dense = (ctx.model.size - ctx.model.dense_start) * VALUE_BYTES
    expected = (tables.forward_cpu_s + tables.backward_cpu_s
                + tables.strategy.allreduce_cpu_s(dense))
    overhead = ctx.recorder.breakdown[:, list(KINDS).index("overhead")]
    assert overhead == pytest.approx([expected] * ctx.n, rel=1e-12)


def test_the_ideal_host_pays_no_cpu_on_table_exchanges():
    _, tables, _ = exchanged("alltoall")
    assert tables.forward_cpu_s == tables.backward_cpu_s == 0.0
    _, gathered, _ = exchanged("replicated", embeddings__sparse_allreduce=True)
    assert gathered.messages_cpu_s(gathered.gather, 4096) == 0.0


def test_sparse_allreduce_gathers_pay_their_messages_cpu_on_a_host_with_costs():
    ctx, tables, _ = exchanged("replicated", embeddings__sparse_allreduce=True,
                               cluster__host="epyc-core")
    schedule = tables.gather.schedule(ctx.n, 4096)
    assert tables.messages_cpu_s(tables.gather, 4096) == pytest.approx(
        ctx.cpu.collective_s(schedule, 1.0), rel=1e-12)
    assert tables.messages_cpu_s(tables.gather, 4096) >= (ctx.n - 1) * (
        ctx.cpu.message.send_s(4096) + ctx.cpu.message.receive_s(4096)) * (1 - 1e-12)
