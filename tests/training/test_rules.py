"""Strategy rules: closed forms, and one sequence of pushes and pulls through both executors'
adapters (the simulated servers and the real server rank's protocol) giving the same bits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from training_cases import make

from sim.real.executors.ps import PARAMS, ServerProtocol
from sim.simulated.engine import build_simulation
from sim.training.rules import Rules
from sim.training.store import ParameterCache, ParameterStore
from sim.training.strategies import STRATEGIES, make_rules
from sim.training.workload import build_workload


def store_for(kind: str, workers: int = 3, d: int = 5, **keys) -> ParameterStore:
    config = make(strategy__kind=kind, cluster__workers=workers, **keys)
    return ParameterStore(make_rules(config), np.zeros(d))


# ---- closed forms ---------------------------------------------------------------------------

def test_every_strategy_row_has_rules_and_a_simulated_executor():
    from sim.simulated.strategies.base import Strategy

    for row in STRATEGIES.values():
        assert issubclass(row.rules_class(), Rules), row.name
        assert issubclass(row.simulated_class(), Strategy), row.name


@pytest.mark.parametrize("kind, workers, staleness_lr, staleness, expected", [
    ("asp", 4, False, 7, 0.1 / 4),  # N gradients move the model as far as one sync step
    ("asp", 4, True, 5, 0.1 / 4 / 5),  # staleness-aware: lr / (N s)
    ("ssp", 2, True, 1, 0.1 / 2),  # s <= 1: not divided
    ("bsp-ps", 4, True, 0, 0.1),
    ("backup", 4, False, 0, 0.1),
    ("bsp", 8, True, 0, 0.1),
])
def test_learning_rate_for_a_staleness(kind, workers, staleness_lr, staleness, expected):
    rules = make_rules(make(strategy__kind=kind, cluster__workers=workers,
                            strategy__staleness_lr=staleness_lr, workload__lr=0.1))
    assert rules.lr(staleness) == expected


@pytest.mark.parametrize("kind", ["asp", "ssp"])
def test_async_lr_is_per_worker_by_default_or_full_as_downpour(kind):
    """lr / N makes N gradients one synchronous step; Dean et al. 2012 apply each at lr."""
    def lr(mode, staleness=0, staleness_lr=False):
        return make_rules(make(strategy__kind=kind, cluster__workers=8, workload__lr=0.4,
                               strategy__async_lr=mode,
                               strategy__staleness_lr=staleness_lr)).lr(staleness)
    assert lr("per-worker") == pytest.approx(0.05) and lr("full") == 0.4
    assert lr("full", 4, staleness_lr=True) == pytest.approx(0.1)  # the two compose


def test_the_model_is_evaluated_every_eval_every_updates_and_at_the_end():
    rules = make_rules(make(run__iterations=45, run__eval_every=20))
    assert [i for i in range(1, 60) if rules.evaluates_after(i)] == [20, 40, 45]


def test_mean_sums_in_the_order_given_then_divides():
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(7) * 10.0 ** rng.integers(-8, 8, 7) for _ in range(3)]
    out = np.empty(7)
    make_rules(make()).mean(grads, out)
    np.testing.assert_array_equal(out, ((grads[0] + grads[1]) + grads[2]) * (1.0 / 3))


def test_ssp_answers_a_pull_only_within_the_clock_bound():
    store = store_for("ssp", workers=3, strategy__staleness=2)
    store.clocks[:] = [3, 1, 2]
    assert store.may_pull(0) and store.admit(0) == 2
    store.clocks[0] = 4
    assert not store.may_pull(0)
    assert store.may_pull(1) and store.admit(1) == 0


def test_asp_applies_every_push_at_once_with_its_staleness():
    store = store_for("asp", workers=2, d=3, workload__lr=0.5)
    grad = np.ones(3)
    first = store.push(0, grad, version_read=0, loss=1.0)
    second = store.push(1, grad, version_read=0, loss=2.0)  # read before the first update
    assert (first.staleness, second.staleness) == (0, 1)
    assert (second.worker, second.clock, second.version_read) == (1, 1, 0)
    np.testing.assert_array_equal(store.params, -2 * 0.5 / 2 * grad)
    assert store.version == 2


@pytest.mark.parametrize("kind, backup, needed", [("bsp-ps", 0, 4), ("backup", 1, 3)])
def test_a_synchronous_step_closes_with_the_needed_gradients_and_drops_late_ones(
        kind, backup, needed):
    store = store_for(kind, workers=4, d=2, strategy__backup=backup, workload__lr=1.0)
    order = [2, 0, 3, 1]
    grads = {w: np.full(2, w + 1.0) for w in range(4)}
    updates = [store.push(w, grads[w], 0, loss=float(w)) for w in order]
    assert updates[:needed - 1] == [None] * (needed - 1)
    closed = updates[needed - 1]
    accepted = sorted(order[:needed])
    assert (closed.worker, closed.clock, closed.version_read) == (-1, 1, 0)
    assert closed.loss == np.mean(accepted) and closed.samples == needed * 8
    assert store.last_step == accepted
    assert all(u is None for u in updates[needed:])  # late: read version 0, now 1
    expected = -sum(grads[w] for w in accepted) * (1.0 / needed)
    np.testing.assert_array_equal(store.params, expected)
    assert store.rules.leaves_workers_out == (backup > 0)
    assert [store.may_pull(w) for w in range(4)] == [True] * 4


def test_a_worker_that_pushed_waits_for_its_step_to_close():
    store = store_for("bsp-ps", workers=2, d=2)
    store.push(1, np.ones(2), 0, 0.0)
    assert store.may_pull(0) and not store.may_pull(1)


def test_an_ssp_cache_is_read_while_within_the_bound_with_the_workers_own_updates():
    """SSPTable (Ho et al. 2013): worker 0, alone ahead, pulls once and then reads its cache
    for s more gradients, each holding its own updates; the servers count the same gaps."""
    config = make(strategy__kind="ssp", strategy__staleness=2, cluster__workers=2,
                  workload__lr=0.5)
    rules = make_rules(config)
    store = ParameterStore(rules, np.zeros(3))
    cache = ParameterCache(rules, np.empty(3))
    assert not cache.fresh  # nothing pulled yet
    cache.pulled(store.read(cache.params), store.admit(0))
    grads = [np.array([1.0, 2.0, 3.0]) * k for k in (1, 2, 3)]
    recorded = []
    for grad in grads:
        assert cache.fresh and store.may_pull(0)  # a fresh cache implies an open gate
        recorded.append(store.push(0, grad, cache.version, 0.0))
        cache.pushed(grad)
    assert not cache.fresh and not store.may_pull(0)  # 3 clocks ahead of worker 1: s = 2
    assert [u.clock_gap for u in recorded] == [0, 1, 2] and cache.gap == store.gaps[0] == 3
    assert [u.staleness for u in recorded] == [0, 0, 0]  # it held all updates: its own
    np.testing.assert_array_equal(cache.params, store.params)  # read-my-writes, exactly
    np.testing.assert_allclose(store.params, -0.5 / 2 * sum(grads))
    assert rules.summary(store) == {"pulls_per_update": 1 / 3}


@pytest.mark.parametrize("kind", ["asp", "ssp"])
def test_without_a_usable_cache_every_read_pulls(kind):
    """asp never reads a cache; ssp with s = 0 cannot: a push moves the worker's clock past
    what it pulled (so SSP with s = 0 stays BSP)."""
    config = make(strategy__kind=kind, strategy__staleness=0)
    rules = make_rules(config)
    store = ParameterStore(rules, np.zeros(2))
    cache = ParameterCache(rules, np.empty(2))
    for _ in range(3):
        assert not cache.fresh
        cache.pulled(store.read(cache.params), store.admit(0))
        store.push(0, np.ones(2), cache.version, 0.0)
        cache.pushed(np.ones(2))
    assert not cache.fresh and rules.summary(store) == {"pulls_per_update": 1.0}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=25))
def test_one_async_rule_set_equals_sequential_sgd_on_the_numbers(pushes):
    """asp: every push is p -= lr / N g, in arrival order, whatever the staleness."""
    store = store_for("asp", workers=3, d=4, workload__lr=0.3)
    expected = np.zeros(4)
    for w, seed in pushes:
        grad = np.random.default_rng(seed).standard_normal(4)
        store.push(w, grad, store.version, 0.0)
        expected -= 0.3 / 3 * grad
    np.testing.assert_allclose(store.params, expected, rtol=1e-12, atol=1e-15)
    assert store.version == len(pushes)
    assert list(store.clocks) == [sum(1 for w, _ in pushes if w == v) for v in range(3)]


# ---- both executors' adapters, one sequence ----------------------------------------------------

def simulated_sequence(config):
    """Run ``config`` in the simulator; the pulls and pushes its servers saw, in order, and
    the final parameters and update rows."""
    env, ctx, strategy = build_simulation(config)
    store, ops = ctx.server.store, []
    read, push = store.read, store.push

    def reading(out, rows=None):
        version = read(out, rows)
        ops.append(("pull", ops_worker[0], version, out.copy()))
        return version

    def pushing(worker, grad, version_read, loss, rows=None):
        ops.append(("push", worker, version_read, grad.copy(), loss))
        return push(worker, grad, version_read, loss, rows)

    # the pull's worker: the simulated server reads on behalf of a host
    ops_worker = [None]
    pull = ctx.server.pull
    hosts = {w.host: w.index for w in ctx.workers}

    def pulling(host, out, rows=None, serve_s=None, wait=None, **trace):
        ops_worker[0] = hosts[host]
        return (yield from pull(host, out, rows, serve_s, wait, **trace))

    store.read, store.push, ctx.server.pull = reading, pushing, pulling
    strategy.start()
    env.run(until=ctx.done)
    rows = [(r[3], r[4], r[5], r[6], r[8]) for r in ctx.recorder.rows if r[0] == "update"]
    return ops, store.params.copy(), rows


def replay_on_the_real_server(config, ops):
    """The same pulls and pushes through the real server rank's protocol (no MPI)."""
    protocol = ServerProtocol(make_rules(config), build_workload(config))
    out = np.empty_like(protocol.store.params)
    for t, op in enumerate(ops):
        if op[0] == "pull":
            _, worker, version, seen = op
            protocol.on_pull(worker, float(t))
            answered = {r.worker: r for r in protocol.replies()}
            assert answered[worker].kind == PARAMS
            assert protocol.store.read(out) == version
            np.testing.assert_array_equal(out, seen)
        else:
            _, worker, version_read, grad, loss = op
            protocol.on_push(worker, grad, version_read, loss, float(t))
    rows = [(u.worker, u.clock, u.version_read, u.staleness, u.loss)
            for _, u in protocol.log.updates]
    return protocol.store.params, rows


@pytest.mark.parametrize("kind, late", [("asp", "drop"), ("ssp", "drop"), ("backup", "drop"),
                                        ("backup", "cancel")])
def test_the_simulated_and_the_real_server_follow_the_same_rules_bit_for_bit(kind, late):
    config = make(strategy__kind=kind, strategy__staleness=1, strategy__backup=1,
                  strategy__late_gradients=late,
                  strategy__staleness_lr=True, workload__momentum=0.9,
                  compute__distribution="exponential", compute__time_s=1e-3,
                  run__iterations=30)
    ops, params, rows = simulated_sequence(config)
    assert sum(op[0] == "push" for op in ops) >= 30
    real_params, real_rows = replay_on_the_real_server(config, ops)
    np.testing.assert_array_equal(real_params, params)
    assert real_rows == rows
    if kind == "backup":  # each step closes with N - b pushes read at its version
        step, accepted, late_pushes = 0, 0, 0
        for op in ops:
            if op[0] == "push" and op[2] < step:
                late_pushes += 1
            elif op[0] == "push":
                accepted += 1
                step, accepted = (step + 1, 0) if accepted == 3 else (step, accepted)
        assert step == len(rows)
        # drop: late workers finish and push (dropped); cancel: they never push
        assert (late_pushes > 0) == (late == "drop")


ROOT = Path(__file__).resolve().parents[2]


# ---- layering ---------------------------------------------------------------------------------

PURE = [f"sim.training.{p.stem}" for p in (ROOT / "sim" / "training").glob("*.py")] + [
    "sim.recorder", "sim.real.executors.registry"]
RANK_PROGRAMS = ["sim.real.executors.rank", "sim.real.executors.bsp",
                 "sim.real.executors.bsp_pipelined", "sim.real.executors.ps"]


def loaded_after_importing(modules: list[str]) -> list[str]:
    """Which of simpy and mpi4py a fresh interpreter has loaded after importing ``modules``."""
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
            + "print(' '.join(m for m in ('simpy', 'mpi4py') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_method_needs_neither_simpy_nor_mpi():
    """Every module of sim/training (the method both executors share)."""
    assert loaded_after_importing(PURE) == []


def test_real_ranks_never_import_simpy():
    assert loaded_after_importing(RANK_PROGRAMS) == []  # mpi4py: imported once running
