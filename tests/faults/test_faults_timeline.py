"""The restart timeline against closed forms: exact gap logs for listed failures, and Monte
Carlo against Daly (2006) and the expected lost work per failure."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from sim.faults import theory
from sim.faults.checkpoints import CheckpointPlan
from sim.faults.failures import FailureClock
from sim.faults.storage import Storage
from sim.faults.timeline import Gap, RestartTimeline, TimeMap

STEP = 1.0  # fault-free seconds per update in these timelines


def faults(mtbf_s=None, at_s=(), rank=0):
    failures = [SimpleNamespace(rank=rank, at_s=t, at_update=None) for t in at_s]
    return SimpleNamespace(mtbf_s=mtbf_s, distribution="exponential", weibull_shape=1.0,
                           failures=failures)


def plan(every=None, write_s=0.5, read_s=0.25, background=False, snapshot_s=0.0,
         every_s=None):
    """Checkpoints costing exactly write_s to write and read_s to read (latency only)."""
    storage = Storage("t", write_Bps=1e300, read_Bps=1e300, latency_s=write_s)
    storage = _ReadAs(storage, read_s)
    return CheckpointPlan(every, every_s, background, storage, 1.0, 1, snapshot_s)


class _ReadAs:
    """A storage whose reads take ``read_s``."""

    def __init__(self, storage, read_s):
        self.storage, self.read = storage, read_s

    def write_s(self, nbytes, writers=1):
        return self.storage.write_s(nbytes, writers)

    def read_s(self, nbytes, readers=1):
        return self.read


def run(timeline, steps):
    for s in range(1, steps + 1):
        timeline.step_end(s * STEP, s, s == steps)
    return timeline


def gaps(timeline):
    return [(pytest.approx(g.at_s), pytest.approx(g.length_s), g.kind) for g in timeline.gaps]


def test_checkpoints_alone_insert_their_writes_after_every_kth_update():
    tl = run(RestartTimeline(FailureClock(faults(), [], 0), 2.0, plan(every=3)), 10)
    assert gaps(tl) == [(3.0, 0.5, "checkpoint"), (6.0, 0.5, "checkpoint"),
                        (9.0, 0.5, "checkpoint")]  # none after the last update
    assert tl.offset_s == pytest.approx(1.5) and tl.failed == 0


def test_a_failure_costs_restart_read_and_the_work_since_the_checkpoint():
    # checkpoint after update 3 ends at wall 3.5; a failure at wall 5.0 is 1.5 s of work
    # after training resumed: restart 2, read 0.25, recompute 1.5
    tl = run(RestartTimeline(FailureClock(faults(at_s=[5.0]), [], 0), 2.0, plan(every=3)), 5)
    assert gaps(tl) == [(3.0, 0.5, "checkpoint"), (4.5, 2.25, "restart"),
                        (4.5, 1.5, "recompute")]
    assert tl.lost_s == pytest.approx(1.5) and tl.losses == [pytest.approx(1.5)]
    assert tl.wall_now(5.0) == pytest.approx(5.0 + 0.5 + 2.25 + 1.5)


def test_without_a_checkpoint_a_failure_restarts_from_the_beginning_without_a_read():
    tl = run(RestartTimeline(FailureClock(faults(at_s=[2.5]), [], 0), 2.0, plan()), 4)
    assert gaps(tl) == [(2.5, 2.0, "restart"), (2.5, 2.5, "recompute")]


def test_a_failure_during_a_checkpoint_uses_the_previous_one_and_splits_the_write():
    # second checkpoint after update 6 starts at wall 6.5; the failure 0.2 s into it
    tl = run(RestartTimeline(FailureClock(faults(at_s=[6.7]), [], 0), 2.0, plan(every=3)), 7)
    assert gaps(tl) == [(3.0, 0.5, "checkpoint"), (6.0, 0.2, "checkpoint"),
                        (6.0, 2.25, "restart"), (6.0, 3.2, "recompute"),
                        (6.0, 0.3, "checkpoint")]
    assert [s.step for s in tl.saved] == [3, 6]


def test_a_failure_during_the_recovery_starts_it_again():
    # failure at 2.5 (no checkpoint): restart 2 + recompute 2.5; a second failure 3 s in
    # (1 s into recomputing) loses that 1 s and starts over
    tl = run(RestartTimeline(FailureClock(faults(at_s=[2.5, 5.5]), [], 0), 2.0, plan()), 4)
    assert gaps(tl) == [(2.5, 2.0, "restart"), (2.5, 1.0, "recompute"),
                        (2.5, 2.0, "restart"), (2.5, 2.5, "recompute")]
    assert tl.failed == 2 and tl.losses == [pytest.approx(2.5), pytest.approx(1.0)]


def test_a_failure_while_restarting_loses_no_work():
    tl = run(RestartTimeline(FailureClock(faults(at_s=[2.5, 3.0]), [], 0), 2.0, plan()), 4)
    assert gaps(tl) == [(2.5, 0.5, "restart"), (2.5, 2.0, "restart"),
                        (2.5, 2.5, "recompute")]
    assert tl.losses == [pytest.approx(2.5), None]


def test_a_failure_at_an_update_comes_before_that_updates_checkpoint():
    tl = run(RestartTimeline(FailureClock(faults(), [], 0), 1.0, plan(every=2),
                             at_updates={4: [1]}), 5)
    # checkpoint after 2 resumed at work 2.5; the failure right after update 4 (work 4.5)
    assert gaps(tl) == [(2.0, 0.5, "checkpoint"), (4.0, 1.25, "restart"),
                        (4.0, 2.0, "recompute"), (4.0, 0.5, "checkpoint")]


def test_background_checkpoints_wait_for_the_snapshot_and_count_once_written():
    # snapshot 0.1, write 0.5 in the background: usable 0.5 s after training resumes
    p = plan(every=1, write_s=0.5, background=True, snapshot_s=0.1)
    tl = run(RestartTimeline(FailureClock(faults(at_s=[2.3]), [], 0), 1.0, p), 3)
    # after update 1: snapshot to 1.1 (usable 1.6); after update 2 (work 2.1): snapshot
    # to 2.2, usable 2.7; the failure at 2.3 restores checkpoint 1 (resumed at 1.1)
    assert gaps(tl) == [(1.0, 0.1, "checkpoint"), (2.0, 0.1, "checkpoint"),
                        (2.1, 1.25, "restart"), (2.1, 1.2, "recompute")]


def test_a_background_snapshot_first_waits_for_the_write_before_it():
    p = plan(every=1, write_s=2.0, background=True, snapshot_s=0.1)
    tl = run(RestartTimeline(FailureClock(faults(), [], 0), 1.0, p), 3)
    # write 1 runs 1.1..3.1 of work; update 2 at work 2.1 waits 1.0, then snapshots
    assert gaps(tl) == [(1.0, 0.1, "checkpoint"), (2.0, 1.1, "checkpoint")]


def test_every_s_counts_work_time_since_the_last_checkpoint_began():
    p = plan(every_s=2.5, write_s=0.5)
    tl = run(RestartTimeline(FailureClock(faults(), [], 0), 1.0, p), 8)
    # begins at work 3 (>= 2.5), then 3.5 + ... next at update 5 (work 5.5 >= 3 + 2.5)
    assert [g.at_s for g in tl.gaps] == [3.0, 5.0, 7.0]


def test_the_time_map_moves_points_and_cuts_spans_around_gaps():
    tm = TimeMap([Gap(1.0, 0.5, "checkpoint"), Gap(2.0, 1.0, "restart")])
    assert tm(np.array([0.5, 1.0, 1.5, 2.5])).tolist() == [0.5, 1.0, 2.0, 4.0]
    assert tm(1.0, after=True) == 1.5
    assert tm.pieces(0.5, 2.5) == [(0.5, 1.0), (1.5, 2.5), (3.5, 4.0)]
    assert tm.pieces(1.0, 2.0) == [(1.5, 2.5)]
    assert tm.spans() == [("checkpoint", 1.0, 1.5), ("restart", 2.5, 3.5)]


# ---- against theory: Monte Carlo over failure seeds ----------------------------------

def wall_times(tau_steps, seeds, steps, mtbf_s, delta_s, restart_s):
    out = []
    for seed in seeds:
        clock = FailureClock(faults(mtbf_s), [0], seed)
        tl = run(RestartTimeline(clock, restart_s - delta_s, plan(tau_steps, delta_s,
                                                                  delta_s)), steps)
        out.append((steps * STEP + tl.offset_s, tl))
    return out


@pytest.mark.parametrize("tau", [20, 60])
def test_mean_wall_time_matches_dalys_expected_time(tau):
    """Daly's eq. 19 is exact for this model (failures also during checkpoints and
    restarts): 200 seeds agree within 3 standard errors."""
    M, delta, R, steps = 100.0, 5.0, 15.0, 2000
    walls = np.array([w for w, _ in wall_times(tau, range(200), steps, M, delta, R)])
    expected = theory.daly_wall_s(steps * STEP, tau * STEP, delta, R, M)
    assert abs(walls.mean() - expected) < 3 * walls.std(ddof=1) / math.sqrt(len(walls))


def test_lost_work_per_failure_matches_the_truncated_exponential_mean():
    """Each failure during work loses its offset in the segment (checkpoint to
    checkpoint, L = tau + delta): mean M - L / (e^{L/M} - 1), here 0.42 L, not L / 2."""
    M, delta, tau = 50.0, 5.0, 45
    losses = [x for _, tl in wall_times(tau, range(60), 2000, M, delta, 10.0)
              for x in tl.losses if x is not None]
    L = tau * STEP + delta
    expected = theory.expected_lost_s(L, M)
    assert len(losses) > 1000
    assert abs(np.mean(losses) - expected) < 3 * np.std(losses) / math.sqrt(len(losses))
    assert abs(np.mean(losses) - L / 2) > 3 * np.std(losses) / math.sqrt(len(losses))


def test_closed_forms_agree_where_they_should():
    # Daly's optimum tends to Young's as delta / M -> 0, and is below it
    assert theory.daly_interval(1.0, 1e6) / theory.young_interval(1.0, 1e6) == \
        pytest.approx(1.0, abs=1e-3)
    assert theory.daly_interval(60.0, 3600.0) < theory.young_interval(60.0, 3600.0)
    assert theory.daly_interval(10.0, 4.0) == 4.0  # delta >= 2M: checkpoint every M
    # the expected lost work tends to L / 2 for L << M, and to M for L >> M
    assert theory.expected_lost_s(1.0, 1e6) == pytest.approx(0.5, rel=1e-5)
    assert theory.expected_lost_s(1e3, 1.0) == pytest.approx(1.0)
    # Young's first-order overhead is Daly's to first order when delta, R << tau << M
    tau, delta, R, M = 100.0, 1.0, 1.0, 1e5
    daly = theory.daly_wall_s(1e6, tau, delta, R, M) / 1e6 - 1
    assert theory.young_overhead(tau, delta, R, M) == pytest.approx(daly, rel=0.01)


def test_weibull_lifetimes_have_the_configured_mean():
    f = faults(10.0)
    f.distribution, f.weibull_shape = "weibull", 0.7
    clock = FailureClock(f, [0], 3)
    times = [clock.pop().at_s for _ in range(20000)]
    gaps_ = np.diff([0.0, *times])
    assert gaps_.mean() == pytest.approx(10.0, rel=0.05)
    # shape < 1: more short lifetimes than an exponential of the same mean has
    assert np.mean(gaps_ < 1.0) > 1 - math.exp(-0.1) + 0.05
