"""When things happen: staleness, the SSP bound, step times, backup workers, stragglers.

Statistical checks use fixed seeds, and tolerances of four standard errors where the
variance is known (order statistics of exponentials), so they never flake and still catch
a wrong distribution: a bsp step that waited for the mean rather than the maximum would
be off by a factor H_N.
"""

from __future__ import annotations

import numpy as np
import pytest
from training_cases import FREE_NETWORK, harmonic, make, rows, train, update_table

from sim.training.engine import simulate

RATE = 2.0  # lambda: exponential compute times of mean 1 / RATE s
EXPONENTIAL = {"compute.distribution": "exponential", "compute.time_s": 1 / RATE}
CONSTANT = {"compute.distribution": "constant", "compute.time_s": 1.0}
FAST = {"workload.features": 4}  # these tests are about time, not learning


def clock_spreads(updates: list[dict]) -> list[int]:
    """max - min of the workers' clocks after each update."""
    workers = int(max(u["worker"] for u in updates)) + 1
    clocks = np.zeros(workers, int)
    spreads = []
    for u in updates:
        clocks[u["worker"]] = u["clock"]
        spreads.append(int(clocks.max() - clocks.min()))
    return spreads


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_ssp_never_exceeds_its_staleness_bound(bound):
    stragglers = {"compute.straggler_fraction": 0.25, "compute.straggler_slowdown": 4.0}
    result = simulate(make(FAST, EXPONENTIAL, stragglers, strategy__kind="ssp",
                           strategy__staleness=bound, run__iterations=300))
    updates = rows(result.metrics_csv)
    gaps = [u["clock_gap"] for u in updates]
    assert max(gaps) == bound  # the bound binds: stragglers make fast workers wait
    # A worker starts iteration c only when c - (slowest clock) <= s, so right after
    # any update no clock leads the slowest by more than s + 1.
    assert max(clock_spreads(updates)) == bound + 1
    assert result.summary["wait_s"] > 0


def test_asp_with_the_same_stragglers_exceeds_any_such_bound():
    """The contrast that shows the ssp check above has teeth."""
    stragglers = {"compute.straggler_fraction": 0.25, "compute.straggler_slowdown": 4.0}
    result = simulate(make(FAST, EXPONENTIAL, stragglers, strategy__kind="asp",
                           run__iterations=300))
    assert max(clock_spreads(rows(result.metrics_csv))) > 4


@pytest.mark.parametrize("workers", [2, 4, 8, pytest.param(32, marks=pytest.mark.slow)])
def test_asp_mean_staleness_is_workers_minus_one(workers):
    # Memoryless compute times: while one gradient is computed, each other worker applies
    # one gradient on average.
    ctx, _ = train(make(FAST, EXPONENTIAL, FREE_NETWORK, cluster__workers=workers,
                        strategy__kind="asp", run__iterations=3000 * max(1, workers // 8)))
    staleness = np.array(ctx.recorder.staleness)
    assert staleness.mean() == pytest.approx(workers - 1, rel=0.02)
    assert staleness.max() > workers - 1  # a distribution, not a constant


def test_asp_first_round_is_applied_with_staleness_0_to_n_minus_1():
    # constant, identical compute times and a simultaneous start, on the default network
    workers = 8
    ctx, _ = train(make(FAST, CONSTANT, cluster__workers=workers, strategy__kind="asp",
                        run__iterations=workers))
    first = update_table(ctx)
    assert [row[5] for row in first] == [0] * workers  # all read version 0
    assert [row[6] for row in first] == list(range(workers))
    assert len({row[1] for row in first}) == 1  # and arrived together


SLOW = pytest.mark.slow


@pytest.mark.parametrize(("kind", "workers", "backup", "steps"), [
    ("bsp", 8, 0, 4000), ("bsp-ps", 8, 0, 1000), ("backup", 8, 2, 1500),
    pytest.param("bsp", 32, 0, 10000, marks=SLOW),
    pytest.param("backup", 16, 5, 3000, marks=SLOW),
])
def test_synchronous_step_time_is_an_order_statistic(kind, workers, backup, steps):
    # A step ends with the (N - b)-th of N exponential compute times, a sum of independent
    # exponentials of rates lambda k for k = b + 1 .. N (Renyi): mean (H_N - H_b) / lambda,
    # variance sum 1 / (lambda k)^2; with b = 0 the maximum, H_N / lambda.
    ctx, _ = train(make(FAST, EXPONENTIAL, FREE_NETWORK, cluster__workers=workers,
                        strategy__kind=kind, strategy__backup=backup, run__iterations=steps))
    k = np.arange(backup + 1, workers + 1)
    mean, sd = np.sum(1 / k) / RATE, np.sqrt(np.sum(1 / k**2)) / RATE
    assert mean == pytest.approx((harmonic(workers) - harmonic(backup)) / RATE)
    assert ctx.env.now / steps == pytest.approx(mean, abs=4 * sd / np.sqrt(steps))


def test_backup_restarts_every_worker_each_step():
    """Late workers are interrupted when the step closes: each step is a fresh race.

    Worker 0 is 10x slower than the rest with b = 1. If it kept computing across steps it
    would deliver a gradient every 10 steps; interrupted, it never does.
    """
    slow = {"compute.slowdowns": [{"worker": 0, "factor": 10.0}]}
    steps = 20
    result = simulate(make(FAST, CONSTANT, FREE_NETWORK, slow, strategy__kind="backup",
                           strategy__backup=1, run__iterations=steps))
    times = [u["time_s"] for u in rows(result.metrics_csv)]
    np.testing.assert_allclose(np.diff([0.0, *times]), 1.0, rtol=1e-9)  # never waits for it
    slices = [e for e in result.trace["traceEvents"] if e.get("cat") == "compute"]
    mine = [e for e in slices if e["tid"] == 0]
    assert len(mine) == steps  # it started afresh every step...
    np.testing.assert_allclose([e["dur"] for e in mine], 1e6, rtol=1e-9)  # ...cut at 1 s
    assert len(slices) == 4 * steps


def test_backup_uses_exactly_n_minus_b_gradients_when_they_tie():
    steps, workers, backup = 10, 4, 1
    ctx, _ = train(make(FAST, CONSTANT, strategy__kind="backup", strategy__backup=backup,
                        run__iterations=steps))
    assert sum(w.clock for w in ctx.workers) == (workers - backup) * steps


def test_fractional_stragglers_are_slowed_by_their_factor():
    workers, slowdown = 8, 3.0
    result = simulate(make(FAST, CONSTANT, FREE_NETWORK, cluster__workers=workers,
                           compute__straggler_fraction=0.25,
                           compute__straggler_slowdown=slowdown,
                           strategy__kind="asp", run__iterations=60))
    stragglers = result.summary["stragglers"]
    assert len(stragglers) == 2
    for e in result.trace["traceEvents"]:
        if e.get("cat") == "compute":
            factor = slowdown if e["tid"] in stragglers else 1.0
            assert e["dur"] == pytest.approx(factor * 1e6, rel=1e-9)
    per_worker = [w["compute"] for w in result.summary["workers"]]
    assert min(per_worker[i] for i in stragglers) > 0


def test_named_slowdown_applies_to_that_worker_in_its_window_only():
    window = {"compute.slowdowns": [{"worker": 1, "start_s": 1.5, "end_s": 4.0,
                                     "factor": 5.0}]}
    result = simulate(make(FAST, CONSTANT, FREE_NETWORK, window, strategy__kind="asp",
                           run__iterations=40))
    slowed = 0
    for e in result.trace["traceEvents"]:
        if e.get("cat") == "compute":
            start_s = e["ts"] / 1e6
            inside = e["tid"] == 1 and 1.5 <= start_s < 4.0
            slowed += inside
            assert e["dur"] == pytest.approx((5.0 if inside else 1.0) * 1e6, rel=1e-9)
    assert slowed == 1  # the one starting at 2 s; it runs 5 s, past the window


def test_different_seeds_choose_different_stragglers_and_the_same_seed_the_same():
    def chosen(seed):
        return simulate(make(FAST, cluster__workers=16, compute__straggler_fraction=0.25,
                             compute__straggler_slowdown=2.0, run__seed=seed,
                             run__iterations=2)).summary["stragglers"]

    assert chosen(1) == chosen(1)
    assert len({tuple(chosen(s)) for s in range(4)}) > 1
