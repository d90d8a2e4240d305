"""The simulation's parts beside the strategies, driven directly: the parameter servers'
message split and timing (sim/simulated/server.py), the reload transient of a rank's cores
(core_reload.py), and the two recoveries (elastic_recovery.py, restart_recovery.py, chosen
by recovery.py), each against a closed form or a count by hand.

Timed checks use the analytical network with every message costing exactly ``ALPHA``
(latency only, 1e18 B/s), so an instant is a sum of alphas and of ``C`` (a gradient).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from training_cases import make, update_table

from sim.faults.timeline import Gap, TimeMap
from sim.network.analytical import AnalyticalNetwork
from sim.network.fabrics import fabric_from_dict
from sim.network.message_cost import REQUEST_BYTES
from sim.network.topology import make_topology
from sim.simulated.core_reload import Reload
from sim.simulated.elastic_recovery import ElasticRecovery
from sim.simulated.engine import build_simulation
from sim.simulated.recovery import build_recovery
from sim.simulated.restart_recovery import RestartRecovery, retime_trace
from sim.simulated.server import ParameterServer, least_loaded, round_robin
from sim.training.store import ParameterStore
from sim.training.strategies import make_rules

C = 0.01
ALPHA = 2e-3
LATENCY_ONLY = {"cluster.network": "analytical",
                "cluster.fabric": {"base": "ib-hdr", "latency_s": 1e-3, "overhead_s": 0.0,
                                   "bandwidth_Bps": 1e18}}
FIXED = {"compute.time_s": C}
TOL = 1e-12


# ---- server -------------------------------------------------------------------------------

def servers(shards: int, params: int = 10, workers: int = 2,
            ) -> tuple[simpy.Environment, ParameterServer, list]:
    """``shards`` shards (hosts workers..) around a store of ``params`` parameters
    0, 1, 2...; no cores (shards cost no CPU). The network logs every send."""
    env = simpy.Environment()
    fabric = fabric_from_dict(LATENCY_ONLY["cluster.fabric"])
    network = AnalyticalNetwork(env, fabric, make_topology("star", workers + shards,
                                                          fabric.bandwidth_Bps))
    log: list = []
    send, send_all = network.send, network.send_all

    def one(src, dst, nbytes):
        log.append((env.now, src, dst, nbytes))
        return send(src, dst, nbytes)

    def many(src, dst, nbytes):
        log.extend(zip([env.now] * len(src), src, dst, nbytes, strict=True))
        return send_all(src, dst, nbytes)

    network.send, network.send_all = one, many
    config = make(cluster__workers=workers, cluster__servers=shards, strategy__kind="asp")
    store = ParameterStore(make_rules(config), np.arange(params, dtype=float))
    return env, ParameterServer(network, np.arange(workers, workers + shards), store), log


def test_shards_split_a_message_by_their_key_ranges_as_array_split_does():
    _, server, _ = servers(3)  # 10 keys: 4, 3, 3
    assert server.share.tolist() == [0.4, 0.3, 0.3]
    nbytes = 1000.0
    np.testing.assert_allclose(server.range_bytes(0.0, 1.0, nbytes), [400, 300, 300])
    # keys [0.2, 0.6): half of it on shard 0 ([0, 0.4)), half on shard 1 ([0.4, 0.7))
    np.testing.assert_allclose(server.range_bytes(0.2, 0.6, nbytes), [500, 500, 0])
    rng = np.random.default_rng(0)
    for _ in range(20):  # conservation: every byte of a message goes to some shard
        a, b = np.sort(rng.uniform(0, 1, 2))
        assert server.range_bytes(a, b, nbytes).sum() == pytest.approx(nbytes, rel=1e-12)


def test_whole_layers_dealt_round_robin_and_least_loaded_by_hand():
    sizes = np.array([5.0, 3.0, 3.0, 1.0])
    assert round_robin(sizes, 2).tolist() == [0, 1, 0, 1]
    # loads (0, 0) -> 5 on 0 -> 3 on 1 -> 3 on 1 (3 < 5) -> 1 on 0 (5 < 6)
    assert least_loaded(sizes, 2).tolist() == [0, 1, 1, 0]
    assert least_loaded(np.ones(3), 3).tolist() == [0, 1, 2]  # a tie goes to the first


def test_dealt_layers_split_a_message_by_the_layers_it_carries():
    _, server, _ = servers(2, params=12)
    server.deal_layers(np.array([5.0, 3.0, 3.0, 1.0]), "least-loaded")  # shards 0 1 1 0
    assert server.share.tolist() == [0.5, 0.5]
    nbytes = 1200.0
    np.testing.assert_allclose(server.range_bytes(0.0, 1.0, nbytes), [600, 600])
    # layers 1 and 2 (keys [5/12, 11/12)), both on shard 1
    np.testing.assert_allclose(server.range_bytes(5 / 12, 11 / 12, nbytes), [0, 1200])
    # layer 3 alone, on shard 0
    np.testing.assert_allclose(server.range_bytes(11 / 12, 1.0, nbytes), [1200, 0])
    # a shard's keys are its layers': 0..4 and 11 on shard 0, 5..10 on shard 1
    assert server.shard_keys(0).tolist() == [0, 1, 2, 3, 4, 11]
    assert server.shard_keys(1).tolist() == list(range(5, 11))
    copy = servers(2, params=12)[1]
    copy.follow(server)
    np.testing.assert_array_equal(copy.range_bytes(5 / 12, 11 / 12, nbytes), [0, 1200])


def test_push_sends_each_shard_its_part_and_fires_after_alpha():
    env, server, log = servers(2, params=8)
    done = server.push(0, 800.0)
    env.run(done)
    assert env.now == pytest.approx(ALPHA, abs=TOL)
    assert sorted((src, dst, n) for _, src, dst, n in log) == [(0, 2, 400.0), (0, 3, 400.0)]


def test_pull_requests_then_copies_the_parameters_and_returns_the_version():
    env, server, log = servers(2, params=8)
    server.store.version = 5
    out = np.zeros(8)
    got = env.process(server.pull(1, out))
    env.run(got)
    assert got.value == 5 and np.array_equal(out, np.arange(8.0))
    assert env.now == pytest.approx(2 * ALPHA, abs=TOL)  # the request, then the reply
    assert sorted((t > 0, src, dst, n) for t, src, dst, n in log) == [
        (False, 1, 2, REQUEST_BYTES), (False, 1, 3, REQUEST_BYTES),  # 64 B a shard
        (True, 2, 1, 32.0), (True, 3, 1, 32.0)]  # each shard's 4 float64 keys


def test_pull_of_rows_copies_only_those_rows():
    env, server, log = servers(2, params=8)
    out = np.full(8, -1.0)
    rows = np.array([1, 6], np.int64)
    env.run(env.process(server.pull(0, out, rows)))
    assert out.tolist() == [-1, 1, -1, -1, -1, -1, 6, -1]
    request = sum(n for t, src, _, n in log if src == 0)
    assert request == 2 * REQUEST_BYTES + rows.nbytes  # the requests carry the ids
    assert sum(n for _, src, _, n in log if src != 0) == 2 * 8  # two float64 back


def test_a_shard_taken_down_holds_messages_to_it_until_it_is_back():
    env, server, _ = servers(2, params=8)
    back = server.take_down(1, 0.05)
    done = server.push(0, 800.0)
    env.run(done)
    assert env.now == pytest.approx(0.05 + ALPHA, abs=TOL)  # the retry leaves at its return
    assert back.processed and server.back_up == {}
    assert server.process(np.array([True, True]), np.array([1.0, 1.0])) is None  # no cores


# ---- core_reload --------------------------------------------------------------------------

R, TAU, BASE, SPIN_BASE = 2e-4, 3e-3, 1e-5, 4e-6


def reload_after(gap: float, cores: int = 1, spinners: int = 0,
                 spin_base_s: float | None = None) -> float:
    """Rank 0 works, sleeps ``gap`` s while ``spinners`` other ranks of its host spin, then
    works again: the reload its second task pays."""
    env = simpy.Environment()
    reload = Reload(env, [0] * (1 + spinners), cores, R, TAU, BASE, spin_base_s)
    for r in range(1, 1 + spinners):
        reload.spin(r)
    assert reload.work(0) == 0.0  # no gap yet
    reload.idle(0)
    env.run(until=gap)
    return reload.work(0)


@pytest.mark.parametrize("gap", [1e-4, 3e-3, 1e-1])
def test_reload_after_an_idle_gap_is_thiebaut_and_stones_transient(gap):
    # base + R (1 - exp(-t / tau)): every line survives t of foreign use w.p. exp(-t / tau)
    assert reload_after(gap) == pytest.approx(BASE + R * (1 - math.exp(-gap / TAU)),
                                              rel=1e-12)


def test_a_spinning_neighbour_halves_the_foreign_use_of_a_two_core_host():
    gap = 3e-3  # foreign use at (c - k) / c = 1/2 a second
    assert reload_after(gap, cores=2, spinners=1) == pytest.approx(
        BASE + R * (1 - math.exp(-gap / 2 / TAU)), rel=1e-12)


def test_spinning_is_no_gap_unless_the_profile_measured_it():
    for spin_base_s, expected in [(None, 0.0),
                                  (SPIN_BASE, SPIN_BASE + R * (1 - math.exp(-1e-3 / TAU)))]:
        env = simpy.Environment()
        reload = Reload(env, [0], 1, R, TAU, BASE, spin_base_s)
        reload.work(0)
        reload.spin(0)
        env.run(until=1e-3)
        assert reload.work(0) == pytest.approx(expected, rel=1e-12)


def test_a_nap_after_a_spin_counts_only_the_sleep_without_a_spin_profile():
    env = simpy.Environment()
    reload = Reload(env, [0], 1, R, TAU, BASE)
    reload.work(0)
    reload.idle(0, after_s=1e-3)  # spin 1 ms, then sleep
    env.run(until=4e-3)
    assert reload.work(0) == pytest.approx(BASE + R * (1 - math.exp(-3e-3 / TAU)), rel=1e-12)


# ---- recovery: which one ------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "keys", "expected"), [
    ("bsp", {}, type(None)),
    ("bsp", {"checkpoint.every_steps": 2}, RestartRecovery),
    ("bsp-ps", {"faults.failures": [{"rank": 0, "at_update": 1}]}, RestartRecovery),
    ("asp", {"faults.failures": [{"rank": 0, "at_update": 1}]}, ElasticRecovery),
    ("easgd", {"checkpoint.every_steps": 2}, ElasticRecovery),
])
def test_build_recovery_follows_the_strategy_row(kind, keys, expected):
    env, ctx, strategy = build_simulation(make(keys, strategy__kind=kind))
    assert isinstance(build_recovery(ctx, strategy), expected)


# ---- elastic recovery ---------------------------------------------------------------------

def asp_run(**keys):
    config = make(LATENCY_ONLY, FIXED, cluster__workers=2, strategy__kind="asp",
                  faults__failures=[{"rank": 0, "at_s": 100.0}], **keys)  # never reached
    env, ctx, strategy = build_simulation(config)
    strategy.start()
    return env, ctx, strategy


def test_a_failed_shard_without_checkpoint_goes_back_to_the_initial_parameters():
    env, ctx, strategy = asp_run(faults__restart_s=0.05, run__iterations=20)
    recovery = ctx.recovery
    assert isinstance(recovery, ElasticRecovery)
    env.run(until=0.05)
    store = ctx.server.store
    version = store.version
    assert version > 0 and not np.array_equal(store.params, ctx.params)
    recovery.fail(2)  # rank N + 0: shard 0, the only one
    assert np.array_equal(store.params, ctx.params)
    assert recovery.lost_updates == version and recovery.failed == 1
    assert recovery.shard_up_s[0] == pytest.approx(0.1)  # restart_s, nothing to read
    recovery.fail(2)  # already down: not hit again
    assert recovery.failed == 1
    env.run(until=ctx.done)
    assert recovery.finish()["lost_updates"] == version


def test_a_failed_shard_goes_back_to_its_last_durable_checkpoint():
    env, ctx, strategy = asp_run(faults__restart_s=0.05, run__iterations=40,
                                 checkpoint__every_steps=4)
    recovery = ctx.recovery
    env.run(until=0.06)
    save = [s for s in recovery.saves[0] if s.durable_s <= env.now][-1]
    store = ctx.server.store
    version = store.version
    recovery.fail(2)
    assert np.array_equal(store.params, save.params)
    assert recovery.lost_updates == version - save.version
    assert save.version % 4 == 0


def test_a_failed_worker_stops_and_rejoins_after_restart_s():
    restart = 0.05
    env, ctx, strategy = asp_run(faults__restart_s=restart, run__iterations=30)
    recovery = ctx.recovery
    env.run(until=0.02)
    recovery.fail(0)
    failed_at = float(env.now)
    assert not ctx.server.store.alive[0]
    env.run(until=failed_at + restart / 2)
    assert not strategy.loops[0].is_alive  # interrupted where it was
    assert all(r[3] == 1 for r in update_table(ctx) if r[1] > failed_at)  # only worker 1
    env.run(until=failed_at + restart + 1e-9)
    assert strategy.loops[0].is_alive and ctx.server.store.alive[0]
    env.run(until=ctx.done)
    summary = recovery.finish()
    assert summary["failures"] == 1
    assert summary["restart_time_s"] == pytest.approx(restart, abs=TOL)
    assert any(r[3] == 0 and r[1] > failed_at + restart for r in update_table(ctx))


# ---- restart recovery ---------------------------------------------------------------------

def test_restart_inserts_checkpoint_restart_and_recompute_gaps_as_counted():
    step = C + 2 * ALPHA  # a bsp step of 2 workers: compute, then a ring of 2 alphas
    restart = 0.05
    config = make(LATENCY_ONLY, FIXED, cluster__workers=2, strategy__kind="bsp",
                  run__iterations=6, faults__restart_s=restart, checkpoint__every_steps=2,
                  faults__failures=[{"rank": 1, "at_update": 3}])
    env, ctx, strategy = build_simulation(config)
    recovery = ctx.recovery
    assert isinstance(recovery, RestartRecovery)
    strategy.start()
    env.run(until=ctx.done)
    fault_free = float(env.now)
    assert fault_free == pytest.approx(6 * step, abs=TOL)
    summary = recovery.finish()
    assert summary["fault_free_s"] == fault_free and summary["failures"] == 1
    spans = recovery.spans()
    kinds = [k for k, _, _ in spans]
    assert kinds == ["checkpoint", "restart", "recompute", "checkpoint"]
    length = {k: b - a for k, a, b in spans}
    # the failure at update 3 loses the step since the checkpoint of update 2
    assert summary["lost_work_s"] == pytest.approx(step, abs=TOL)
    assert length["recompute"] == pytest.approx(step, abs=TOL)
    assert length["restart"] == pytest.approx(restart + summary["checkpoint_read_s"], abs=TOL)
    assert length["checkpoint"] == pytest.approx(summary["checkpoint_write_s"], abs=TOL)
    # wall time is the fault-free time plus every gap
    assert recovery.wall_end == pytest.approx(fault_free + sum(b - a for _, a, b in spans),
                                              abs=TOL)
    trace = recovery.trace(ctx.recorder.trace())
    restarts = [e for e in trace["traceEvents"] if e.get("name") == "restart"]
    assert sorted(e["tid"] for e in restarts) == [0, 1]  # one slice on every worker


def test_restart_job_mtbf_is_the_ranks_failure_rates_superposed():
    env, ctx, _ = build_simulation(make(cluster__workers=3, strategy__kind="bsp",
                                        faults__mtbf_s=30.0))
    assert ctx.recovery.job_mtbf_s == 10.0


def test_retime_trace_moves_events_past_gaps_and_cuts_the_slices_across_them():
    to_wall = TimeMap([Gap(1.0, 0.5, "restart")])  # 0.5 s inserted at fault-free 1 s
    us = 1e6
    trace = {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0},  # metadata: untouched
        {"ph": "X", "name": "compute", "pid": 1, "tid": 0, "ts": 0.5 * us, "dur": 1.0 * us},
        {"ph": "X", "name": "wire", "pid": 1, "tid": 0, "ts": 2.0 * us, "dur": 1.0 * us},
        {"ph": "i", "name": "mark", "pid": 1, "tid": 0, "ts": 1.0 * us},  # ended there
    ], "otherKey": 1}
    out = retime_trace(trace, to_wall, [("restart", 1.0, 1.5)], workers=2)
    assert out["otherKey"] == 1
    got = sorted((e["name"], e.get("tid"), round(e["ts"] / us, 9) if "ts" in e else -1,
                  round(e.get("dur", 0) / us, 9)) for e in out["traceEvents"])
    assert got == sorted([
        ("thread_name", 0, -1, 0),
        ("compute", 0, 0.5, 0.5), ("compute", 0, 1.5, 0.5),  # cut around the gap
        ("wire", 0, 2.5, 1.0),  # after it: moved by its length
        ("mark", 0, 1.0, 0),  # a point at the gap's time is before it
        ("restart", 0, 1.0, 0.5), ("restart", 1, 1.0, 0.5),  # the gap on every worker
    ])
