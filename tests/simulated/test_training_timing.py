"""When things happen: staleness, the SSP bound, step times, backup workers, stragglers.

Statistical checks use fixed seeds, and tolerances of four standard errors where the
variance is known (order statistics of exponentials), so they never flake and still catch
a wrong distribution: a bsp step that waited for the mean rather than the maximum would
be off by a factor H_N.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from training_cases import FREE_NETWORK, harmonic, make, rows, train, update_table

from sim.simulated.engine import build_simulation, simulate

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


@pytest.mark.parametrize("kind, bound", [("asp", 0), ("ssp", 0), ("ssp", 1), ("ssp", 2),
                                         ("ssp", 3)])
def test_ssp_reads_its_cache_within_the_bound_and_pulls_less_than_asp(kind, bound):
    env, ctx, strategy = build_simulation(make(FAST, EXPONENTIAL, FREE_NETWORK,
                                               strategy__kind=kind, strategy__staleness=bound,
                                               run__iterations=400))
    store, reads = ctx.server.store, []
    read = store.read

    def served(out, rows=None):  # the servers answer a pull
        reads.append(rows)
        return read(out, rows)

    store.read = served
    strategy.start()
    env.run(until=ctx.done)
    pulls = strategy.summary_extra()["pulls_per_update"]
    gaps = [row[7] for row in update_table(ctx)]
    if kind == "asp":
        assert pulls == 1.0 and gaps == [None] * 400
        return
    # every gradient, from a pull or the cache, was taken within the bound (the servers
    # count a cached read's gap as its pull's plus the worker's pushes since)
    assert max(gaps) <= bound
    # one pull serves at most s + 1 gradients; with s = 0 every read pulls
    assert 1 / (bound + 1) <= pulls <= 1.0 and (pulls < 1.0) == (bound > 0)
    # the pulls the servers served: those of the updates, and at most one per worker since
    assert pulls * 400 <= len(reads) <= pulls * 400 + 4


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
    # A step ends with the (N - b)-th of N exponential compute times (every worker starts
    # afresh each step: late ones are cancelled), a sum of independent exponentials of
    # rates lambda k for k = b + 1 .. N (Renyi): mean (H_N - H_b) / lambda, variance
    # sum 1 / (lambda k)^2; with b = 0 the maximum, H_N / lambda.
    ctx, _ = train(make(FAST, EXPONENTIAL, FREE_NETWORK, cluster__workers=workers,
                        strategy__kind=kind, strategy__backup=backup,
                        strategy__late_gradients="cancel", run__iterations=steps))
    k = np.arange(backup + 1, workers + 1)
    mean, sd = np.sum(1 / k) / RATE, np.sqrt(np.sum(1 / k**2)) / RATE
    assert mean == pytest.approx((harmonic(workers) - harmonic(backup)) / RATE)
    assert ctx.env.now / steps == pytest.approx(mean, abs=4 * sd / np.sqrt(steps))


def test_cancelled_backup_restarts_every_worker_each_step():
    """With late_gradients = "cancel", late workers are interrupted when the step closes:
    each step is a fresh race.

    Worker 0 is 10x slower than the rest with b = 1. If it kept computing across steps it
    would deliver a gradient every 10 steps; interrupted, it never does.
    """
    slow = {"compute.slowdowns": [{"worker": 0, "factor": 10.0}]}
    steps = 20
    result = simulate(make(FAST, CONSTANT, FREE_NETWORK, slow, strategy__kind="backup",
                           strategy__backup=1, strategy__late_gradients="cancel",
                           run__iterations=steps))
    times = [u["time_s"] for u in rows(result.metrics_csv)]
    np.testing.assert_allclose(np.diff([0.0, *times]), 1.0, rtol=1e-9)  # never waits for it
    slices = [e for e in result.trace["traceEvents"] if e.get("cat") == "compute"]
    mine = [e for e in slices if e["tid"] == 0]
    assert len(mine) == steps  # it started afresh every step...
    np.testing.assert_allclose([e["dur"] for e in mine], 1e6, rtol=1e-9)  # ...cut at 1 s
    assert len(slices) == 4 * steps
    assert result.summary["dropped_pushes"] == 0


def test_a_late_backup_worker_finishes_and_its_gradient_is_dropped():
    """By default a late worker finishes its gradient, which is dropped on arrival, and only
    then pulls: the 10x slower worker 0 pushes at 10 s and 20 s, both stale."""
    slow = {"compute.slowdowns": [{"worker": 0, "factor": 10.0}]}
    steps = 25
    result = simulate(make(FAST, CONSTANT, FREE_NETWORK, slow, strategy__kind="backup",
                           strategy__backup=1, run__iterations=steps))
    times = [u["time_s"] for u in rows(result.metrics_csv)]
    np.testing.assert_allclose(np.diff([0.0, *times]), 1.0, rtol=1e-9)  # never waits for it
    assert result.summary["dropped_pushes"] == 2
    mine = [e for e in result.trace["traceEvents"] if e.get("cat") == "compute"
            and e["tid"] == 0]
    np.testing.assert_allclose([e["ts"] for e in mine], [0.0, 10e6], atol=1.0)
    np.testing.assert_allclose([e["dur"] for e in mine], 10e6, rtol=1e-9)  # never cut


def backup_steps(workers: int, backup: int, late: str, steps: int, rate: float,
                 seed: int) -> np.ndarray:
    """Monte Carlo of backup workers' step times, apart from the simulator: exponential
    compute of rate ``rate``; a step closes at the (N - b)-th arrival of a gradient started
    on it; its workers then start again, and a late worker first finishes its stale
    gradient (drop) or starts again at once (cancel)."""
    rng = np.random.default_rng(seed)
    events = [(rng.exponential(1 / rate), w, 0) for w in range(workers)]  # (end, who, step)
    heapq.heapify(events)
    step, arrived, closes = 0, [], []
    while len(closes) < steps:
        end, w, started_on = heapq.heappop(events)
        if started_on < step:  # a stale gradient, dropped: start on the current step
            heapq.heappush(events, (end + rng.exponential(1 / rate), w, step))
            continue
        arrived.append(w)
        if len(arrived) < workers - backup:
            continue
        step, closes = step + 1, closes + [end]
        again = arrived if late == "drop" else range(workers)
        if late == "cancel":
            events = []
        for v in again:
            events.append((end + rng.exponential(1 / rate), v, step))
        heapq.heapify(events)
        arrived = []
    return np.diff([0.0, *closes])


def mean_and_error(durations: np.ndarray, batch: int = 50) -> tuple[float, float]:
    """The mean and its standard error by batch means (late workers correlate steps)."""
    means = durations[: len(durations) // batch * batch].reshape(-1, batch).mean(axis=1)
    return float(durations.mean()), float(means.std(ddof=1) / np.sqrt(len(means)))


@pytest.mark.parametrize("late, compute_times", [("drop", 1.63), ("cancel", 1.30)])
def test_backup_step_time_matches_a_monte_carlo(late, compute_times):
    # N = 16, b = 4 (Chen et al. 2016): finishing a late gradient before pulling makes a
    # step 1.63 mean compute times against 1.30 when late workers are cancelled
    workers, backup, steps = 16, 4, 1000
    result = simulate(make(FAST, EXPONENTIAL, FREE_NETWORK, cluster__workers=workers,
                           strategy__kind="backup", strategy__backup=backup,
                           strategy__late_gradients=late, run__iterations=steps))
    simulated, sim_error = mean_and_error(
        np.diff([0.0, *(u["time_s"] for u in rows(result.metrics_csv))]))
    expected, mc_error = mean_and_error(backup_steps(workers, backup, late, 20000, RATE,
                                                     seed=7))
    assert expected * RATE == pytest.approx(compute_times, abs=0.01)
    assert simulated == pytest.approx(expected, abs=4 * np.hypot(sim_error, mc_error))
    assert (result.summary["dropped_pushes"] > 0) == (late == "drop")


@pytest.mark.parametrize("late", ["drop", "cancel"])
def test_backup_with_no_backup_workers_is_bsp_ps(late):
    config = {**FAST, **EXPONENTIAL, **FREE_NETWORK, "workload.momentum": 0.9}
    backup_ctx, backup = train(make(config, strategy__kind="backup", strategy__backup=0,
                                    strategy__late_gradients=late))
    ps_ctx, ps = train(make(config, strategy__kind="bsp-ps"))
    assert np.array_equal(backup.model_of_record(), ps.model_of_record())
    ours, theirs = update_table(backup_ctx), update_table(ps_ctx)
    assert [row[2:] for row in ours] == [row[2:] for row in theirs]  # losses bit for bit
    np.testing.assert_allclose([row[1] for row in ours], [row[1] for row in theirs],
                               rtol=1e-9)  # the same compute times: the same steps


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
