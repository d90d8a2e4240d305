"""Pipeline schedules (sim/training/stage_schedule.py) against closed forms: step time and
bubble of balanced stages, GPipe's step with unbalanced stages, 1F1B's peak of stashed
microbatches, and every schedule a valid order (no deadlock) for p <= 8, m <= 32; the
interleaved schedule's bubble, order (Megatron-LM's) and stash."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.training.stage_schedule import (
    SCHEDULES,
    Op,
    evaluate,
    peak_in_flight,
    peak_stash,
    schedule_ops,
    stage_ops,
)

GRID = list(itertools.product(range(1, 9), range(1, 33)))  # (p, m)
TIMES = st.floats(0.01, 100.0, allow_nan=False, allow_infinity=False)


def slots_by_op(timeline):
    return {(slot.stage, slot.op): slot for stage in timeline.slots for slot in stage}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_schedule_is_a_valid_order_without_deadlock(schedule):
    """Each stage runs F and B of every microbatch once, F(k) before B(k); the timeline
    respects every dependency (checked here from the slots, not by the evaluator's rules)."""
    for p, m in GRID:
        ops = schedule_ops(schedule, p, m)
        for order in ops:
            assert sorted(order) == sorted([Op("F", k) for k in range(m)]
                                           + [Op("B", k) for k in range(m)])
            assert all(order.index(Op("F", k)) < order.index(Op("B", k)) for k in range(m))
        at = slots_by_op(evaluate(ops, [1.0] * p, [2.0] * p))  # raises on a deadlock
        for (s, op), slot in at.items():
            k = op.microbatch
            if op.kind == "F" and s > 0:
                assert slot.start_s >= at[(s - 1, op)].end_s
            if op.kind == "B":
                assert slot.start_s >= at[(s, Op("F", k))].end_s
                if s < p - 1:
                    assert slot.start_s >= at[(s + 1, op)].end_s


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_balanced_stages_take_m_plus_p_minus_1_slots(schedule):
    """Balanced stages, no communication: step = (m + p - 1)(t_f + t_b), bubble (idle share
    of the stages' time) = (p - 1)/(m + p - 1) (Huang et al. 2019, Sec. 2.3; Narayanan et
    al. 2021, Sec. 2.2.1, state the same idle time as (p - 1)/m of the busy time)."""
    f, b = 1.5, 2.75
    for p, m in GRID:
        timeline = evaluate(schedule_ops(schedule, p, m), [f] * p, [b] * p)
        assert timeline.step_s == pytest.approx((m + p - 1) * (f + b), rel=1e-12)
        assert timeline.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
        assert timeline.busy_s == pytest.approx([m * (f + b)] * p)


def gpipe_closed_form(f, b, m):
    """The sum of the stages' times plus (m - 1) times the slowest stage, forward and
    backward (issue 29): the makespan of a flow shop of m identical jobs, once forward
    (stage 0 to p - 1) and once backward (p - 1 to 0)."""
    return sum(f) + (m - 1) * max(f) + sum(b) + (m - 1) * max(b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(TIMES, TIMES), min_size=1, max_size=8), st.integers(1, 32))
def test_gpipe_with_unbalanced_stages_matches_the_closed_form(times, m):
    f, b = [x for x, _ in times], [y for _, y in times]
    step = evaluate(schedule_ops("gpipe", len(f), m), f, b).step_s
    assert step == pytest.approx(gpipe_closed_form(f, b, m), rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(TIMES, TIMES), min_size=1, max_size=8), st.integers(1, 32))
def test_1f1b_matches_the_closed_form_when_the_last_stage_is_slowest(times, m):
    """With the last stage slowest forward and backward, 1F1B's last stage, once its first
    forward arrives, computes without a pause: sum(f[:-1]) + m (f[-1] + b[-1]) +
    sum(b[:-1]), which is the same closed form as GPipe's."""
    f, b = [x for x, _ in times], [y for _, y in times]
    f[f.index(max(f))], f[-1] = f[-1], max(f)
    b[b.index(max(b))], b[-1] = b[-1], max(b)
    step = evaluate(schedule_ops("1f1b", len(f), m), f, b).step_s
    assert step == pytest.approx(gpipe_closed_form(f, b, m), rel=1e-9)
    assert step == pytest.approx(sum(f[:-1]) + m * (f[-1] + b[-1]) + sum(b[:-1]), rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(TIMES, TIMES), min_size=1, max_size=8), st.integers(1, 32),
       st.sampled_from(SCHEDULES))
def test_any_stage_times_respect_the_per_stage_lower_bound(times, m, schedule):
    """Stage s cannot start before microbatch 0 has come through stages 0..s-1, computes
    m (f_s + b_s), and its last backward still crosses stages s-1..0; one microbatch's
    chain alone takes sum(f + b)."""
    f, b = [x for x, _ in times], [y for _, y in times]
    step = evaluate(schedule_ops(schedule, len(f), m), f, b).step_s
    bound = max(max(sum(f[:s]) + sum(b[:s]) + m * (f[s] + b[s]) for s in range(len(f))),
                sum(f) + sum(b))
    assert step >= bound * (1 - 1e-12)


def test_1f1b_is_never_slower_than_gpipe_on_a_grid_of_unbalanced_stages():
    """An observation, not a theorem we prove: with no communication, 1F1B's step is at most
    GPipe's closed form, and strictly shorter for some unbalanced stages (its backwards
    start before every forward is done). Checked on a fixed grid."""
    shorter = 0
    for p, m in itertools.product(range(2, 6), (1, 2, 3, 5, 8)):
        for f in itertools.product((1.0, 3.0), repeat=p):
            b = tuple(reversed([2 * x for x in f]))
            step = evaluate(schedule_ops("1f1b", p, m), f, b).step_s
            assert step <= gpipe_closed_form(f, b, m) * (1 + 1e-12)
            shorter += step < gpipe_closed_form(f, b, m) * (1 - 1e-12)
    assert shorter > 0


def test_peak_stash_is_m_for_gpipe_and_min_p_minus_i_m_for_1f1b():
    """Narayanan et al. 2021, Sec. 2.2.1, with stages counted from 0: 1F1B's stage i
    stashes at most min(p - i, m) microbatches; GPipe's every stage all m."""
    for p, m in GRID:
        for i in range(p):
            assert peak_in_flight(stage_ops("gpipe", p, i, m)) == m
            assert peak_in_flight(stage_ops("1f1b", p, i, m)) == min(p - i, m)


def test_1f1b_orders_as_pipedream_flush():
    assert [str(op) for op in stage_ops("1f1b", 4, 0, 6)] == [
        "F0", "F1", "F2", "F3", "B0", "F4", "B1", "F5", "B2", "B3", "B4", "B5"]
    assert [str(op) for op in stage_ops("1f1b", 4, 3, 3)] == ["F0", "B0", "F1", "B1", "F2",
                                                              "B2"]
    assert [str(op) for op in stage_ops("gpipe", 2, 1, 2)] == ["F0", "F1", "B0", "B1"]


def test_a_send_delay_adds_one_hop_per_stage_boundary_each_way():
    """Balanced stages with a delay d per message: microbatch 0 crosses 2 (p - 1) boundaries
    on the critical path, so GPipe's step grows by 2 (p - 1) d."""
    p, m, f, b, d = 4, 6, 1.0, 2.0, 0.25
    step = evaluate(schedule_ops("gpipe", p, m), [f] * p, [b] * p, send_s=d).step_s
    assert step == pytest.approx((m + p - 1) * (f + b) + 2 * (p - 1) * d)


def test_an_order_that_deadlocks_is_refused():
    """Stage 0 waits for B0 before it sends F1; stage 1 wants F1 before B0."""
    ops = [(Op("F", 0), Op("B", 0), Op("F", 1), Op("B", 1)),
           (Op("F", 0), Op("F", 1), Op("B", 0), Op("B", 1))]
    with pytest.raises(ValueError, match="deadlocks"):
        evaluate(ops, [1.0, 1.0], [1.0, 1.0])


@pytest.mark.parametrize("call, message", [
    (lambda: stage_ops("pipedream", 2, 0, 2), "expected one of gpipe, 1f1b"),
    (lambda: stage_ops("1f1b", 2, 2, 2), "stage 2 of 2"),
    (lambda: evaluate(schedule_ops("1f1b", 2, 2), [1.0], [1.0, 1.0]), "2 stages"),
    (lambda: evaluate(schedule_ops("1f1b", 2, 2), [1.0, -1.0], [1.0, 1.0]), ">= 0"),
    (lambda: evaluate([(Op("F", 0), Op("F", 0))], [1.0], [1.0]), "once each"),
])
def test_bad_input_is_a_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2) ------------------------------

INTERLEAVED = [(p, v, k * p) for p in range(1, 7) for v in range(1, 5) for k in range(1, 5)]


def test_interleaved_is_a_valid_order_without_deadlock():
    """Each stage runs F and B of every (microbatch, chunk) once, F before B; the timeline
    respects every dependency between virtual stages u = c p + s (checked from the slots)."""
    for p, v, m in INTERLEAVED:
        ops = schedule_ops("interleaved", p, m, v)
        every = sorted(Op(kind, k, c) for kind in "FB" for k in range(m) for c in range(v))
        for order in ops:
            assert sorted(order) == every
            assert all(order.index(Op("F", k, c)) < order.index(Op("B", k, c))
                       for k in range(m) for c in range(v))
        at = slots_by_op(evaluate(ops, [1.0] * (p * v), [2.0] * (p * v)))
        for (s, op), slot in at.items():
            u, k = op.chunk * p + s, op.microbatch
            if op.kind == "F" and u > 0:
                assert slot.start_s >= at[((u - 1) % p, Op("F", k, (u - 1) // p))].end_s
            if op.kind == "B":
                assert slot.start_s >= at[(s, Op("F", k, op.chunk))].end_s
                if u < p * v - 1:
                    assert slot.start_s >= at[((u + 1) % p, Op("B", k, (u + 1) // p))].end_s


@pytest.mark.parametrize("f, b", [(1.0, 2.0), (1.0, 1.0), (3.0, 1.0), (0.7, 2.9)])
def test_interleaved_bubble_is_p_minus_1_over_v_m_of_the_ideal_time(f, b):
    """Balanced stages, no communication. t_f, t_b: a whole stage's (all v chunks')
    seconds per microbatch, so each chunk takes t_f / v and t_b / v. Narayanan et al.
    2021, Sec. 2.2.2: the bubble time is (p - 1)(t_f + t_b) / v, i.e. (p - 1)/(v m) of the
    ideal m (t_f + t_b); the step is (m + (p - 1)/v)(t_f + t_b)."""
    for p, v, m in INTERLEAVED:
        timeline = evaluate(schedule_ops("interleaved", p, m, v), [f / v] * (p * v),
                            [b / v] * (p * v))
        ideal = m * (f + b)
        assert timeline.step_s == pytest.approx((m + (p - 1) / v) * (f + b), rel=1e-12)
        assert timeline.step_s - ideal == pytest.approx((p - 1) / (v * m) * ideal, abs=1e-9)
        assert timeline.busy_s == pytest.approx([ideal] * p)


def test_interleaved_with_one_chunk_is_1f1b():
    """Megatron-LM drops a virtual pipeline size of 1 (megatron/training/arguments.py) and
    runs forward_backward_pipelining_without_interleaving."""
    for p, m in GRID:
        assert schedule_ops("interleaved", p, m, 1) == schedule_ops("1f1b", p, m)


def test_interleaved_orders_as_megatron_lm():
    """p = 2, v = 2, m = 4, as Megatron-LM's forward_backward_pipelining_with_interleaving
    orders them (megatron/core/pipeline_parallel/schedules.py: get_schedule_table with
    microbatch_group_size_per_vp_stage = p gives the virtual microbatches (0, c0) (1, c0)
    (0, c1) (1, c1) (2, c0) (3, c0) (2, c1) (3, c1), the backward ones with the chunk
    reversed; get_pp_rank_microbatches gives 2 (p - rank - 1) + (v - 1) p warm-up
    forwards: 4 on rank 0, 2 on rank 1; then forward k + warm-up and backward k in turn).
    "F2.1" is microbatch 2's forward through chunk 1."""
    assert [str(op) for op in stage_ops("interleaved", 2, 0, 4, 2)] == [
        "F0", "F1", "F0.1", "F1.1",
        "F2", "B0.1", "F3", "B1.1", "F2.1", "B0", "F3.1", "B1",
        "B2.1", "B3.1", "B2", "B3"]
    assert [str(op) for op in stage_ops("interleaved", 2, 1, 4, 2)] == [
        "F0", "F1",
        "F0.1", "B0.1", "F1.1", "B1.1", "F2", "B0", "F3", "B1", "F2.1", "B2.1", "F3.1", "B3.1",
        "B2", "B3"]


def test_interleaved_peak_stash_is_the_warm_up_plus_one():
    """A stage stashes each chunk's activations: its warm-up forwards and the steady
    state's one more, min(2 (p - i - 1) + (v - 1) p + 1, m v) (microbatch, chunk) pairs;
    in bytes, each chunk's stash counted by its own size."""
    for p, v, m in INTERLEAVED:
        for i in range(p):
            warm = min(2 * (p - i - 1) + (v - 1) * p, m * v) if v > 1 else min(p - i - 1, m)
            ops = stage_ops("interleaved", p, i, m, v)
            assert peak_in_flight(ops) == min(warm + 1, m * v)
            assert peak_stash(ops, lambda c: 1.0 + c) >= peak_in_flight(ops)
    assert peak_stash(stage_ops("interleaved", 2, 1, 4, 2), lambda c: 10.0 ** c) == 12  # F0.1


@pytest.mark.parametrize("call, message", [
    (lambda: stage_ops("interleaved", 2, 0, 3, 2), "not a multiple of 2 stages"),
    (lambda: stage_ops("1f1b", 2, 0, 4, 2), "only the interleaved schedule"),
    (lambda: evaluate(schedule_ops("interleaved", 2, 2, 2), [1.0] * 2, [1.0] * 4),
     "2 stages of 2 chunks"),
])
def test_bad_interleaved_input_is_a_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
