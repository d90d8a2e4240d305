"""Tensor Fusion in simulated time: buffers leave on the coordinator's cycle ticks, a
hand-worked overlap, and a bsp run whose step is the closed form of its buffers' queue."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from sim.errors import UserError
from sim.network.collectives import get_collective
from sim.network.fabrics import get_fabric
from sim.network.message_cost import alpha_s, beta_s
from sim.simulated.backprop_overlap import AllreduceChannel, BackpropOverlap
from sim.simulated.engine import build_simulation, simulate
from sim.training.messages import StepCosts, fuse, next_tick, ready_times
from sim.training.validator import validate


def test_hand_worked_overlap_waits_for_the_cycle() -> None:
    # forward 1 s a layer, backward 2 s: layers 2, 1, 0 ready 2, 4, 6 s into backward.
    # cycle 5 s: layers 2 and 1 leave at tick 5 (20 B, 2 s), layer 0 at tick 10 (10 B, 1 s).
    # A step: forward 3 s, backward's tick 10, then layer 0's 1 s before the next forward.
    env = simpy.Environment()
    messages = fuse([10, 10, 10], ready_times([2.0, 2.0, 2.0]), math.inf, 5.0)
    ends: list[float] = []

    def comm(step, msg):
        yield env.timeout(msg.nbytes / 10)

    costs = StepCosts(np.ones(3), np.full(3, 2.0))
    overlap = BackpropOverlap(env, 2, messages, AllreduceChannel(env, False, comm),
                              lambda w, k: costs, lambda *span: None,
                              lambda step: ends.append(env.now), cycle_s=5.0)
    env.run(overlap.start(4))
    assert [(m.lo, m.hi) for m in messages] == [(1, 2), (0, 0)]
    assert ends == [14.0, 28.0, 42.0, 56.0]


MLP = {"cluster": {"workers": 4, "fabric": "eth-10g"},
       "workload": {"model": "mlp", "dataset": "digits", "hidden": [128, 64], "batch": 16},
       "compute": {"time_s": 0.004},
       "run": {"iterations": 6, "eval_every": 3}}


def run(**strategy):
    config = validate({**MLP, "strategy": {"kind": "bsp", **strategy}})
    env, ctx, sim = build_simulation(config)
    sim.start()
    env.run(until=ctx.done)
    return env.now, ctx, sim


# the MLP's layers: 66560, 66048 and 5200 B, ready 2.41, 1.65 and 0.12 ms into backward
@pytest.mark.parametrize("fusion_bytes, cycle_s, buffers", [
    (80_000, 0.0, [(2, 2), (1, 1), (0, 0)]),  # ready apart: one each
    (1e12, 2e-3, [(1, 2), (0, 0)]),  # ticks 2, 2, 4 ms
    (60_000, 2e-3, [(2, 2), (1, 1), (0, 0)]),  # 5200 + 66048 B overflow 60 kB
    (80_000, 3e-3, [(1, 2), (0, 0)]),  # one tick; layer 0 would overflow 80 kB
    (0, 3e-3, [(2, 2), (1, 1), (0, 0)]),  # threshold 0: no fusion
    (1e12, 1.0, [(0, 2)]),  # one buffer, a second after backward started
])
def test_a_step_is_forward_plus_the_buffers_queue(fusion_bytes, cycle_s, buffers) -> None:
    """T_step = F + e_last: buffer k leaves at r_k = the tick after its last layer is
    ready, e_k = max(r_k, e_{k-1}) + A(n_k) with A the ring's closed form, and the next
    forward waits for the last buffer (it holds layer 0)."""
    now, ctx, sim = run(pipelining="fusion", fusion_bytes=fusion_bytes, cycle_s=cycle_s)
    costs = sim.layers.split(0.004, sim.shares)
    ready = ready_times(costs.backward_s)
    assert sim.messages == fuse(sim.layers.grad_bytes, ready, fusion_bytes, cycle_s)
    assert [(m.lo, m.hi) for m in sim.messages] == buffers
    fabric, ring = get_fabric("eth-10g"), get_collective("ring")
    end = 0.0
    for msg in sim.messages:
        end = max(next_tick(ready[msg.lo], cycle_s), end) + ring.closed_form_s(
            4, msg.nbytes, alpha_s(fabric), beta_s(fabric))
    steps = ctx.recorder.iteration
    assert now == pytest.approx(steps * (costs.forward_s.sum() + end), rel=1e-9)


def test_fusion_changes_time_not_numbers() -> None:
    t_none, _, none = run()
    t_fused, _, fused = run(pipelining="fusion", cycle_s=1e-3)
    assert np.array_equal(none.model_of_record(), fused.model_of_record())
    assert t_fused != t_none


def test_one_long_cycle_and_no_threshold_is_none_plus_the_wait() -> None:
    t_none, ctx, _ = run()
    t_fused, _, fused = run(pipelining="fusion", fusion_bytes=1e12, cycle_s=1.0)
    assert len(fused.messages) == 1
    backward = fused.layers.split(0.004, fused.shares).backward_s.sum()
    assert t_fused == pytest.approx(t_none + ctx.recorder.iteration * (1.0 - backward),
                                    rel=1e-9)


def test_fusion_is_for_allreduce_strategies_and_simulated_runs() -> None:
    with pytest.raises(UserError, match="strategy.pipelining: 'fusion' applies to bsp, "
                                        "not 'bsp-ps'"):
        validate({**MLP, "strategy": {"kind": "bsp-ps", "pipelining": "fusion"}})
    from sim.training.validator import validate_real
    config = validate({**MLP, "compute": {}, "strategy": {"kind": "bsp",
                                                          "pipelining": "fusion"}})
    with pytest.raises(UserError, match="strategy.pipelining 'fusion': simulated only"):
        validate_real(config)
    assert simulate(config).summary["pipelining"] == "fusion"
