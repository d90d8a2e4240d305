"""Pipelining: exact step times of hand-worked cases and the bounds every mode obeys."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.simulated.backprop_overlap import AllreduceChannel, BackpropOverlap, ParameterServerChannel
from sim.training.messages import Message, StepCosts, plan_messages


def run_pipeline(forward, backward, layer_bytes, mode, comm_s, *, priority=False,
                 bucket_bytes=25e6, steps=4, workers=2, channel="allreduce"):
    """Average step time T, and the step end times, with message m costing comm_s(msg) s."""
    env = simpy.Environment()
    messages = plan_messages(layer_bytes, mode, bucket_bytes)
    ends = []

    def comm(*args):
        yield env.timeout(comm_s(args[-1]))

    if channel == "allreduce":
        chan = AllreduceChannel(env, priority, comm)
    else:  # push takes the message's time, pull and apply are free
        def free(*args):
            yield env.timeout(0)
        chan = ParameterServerChannel(env, priority, comm, lambda step, msg: None, free)
    costs = StepCosts(np.asarray(forward, float), np.asarray(backward, float))
    overlap = BackpropOverlap(env, workers, messages, chan, lambda w, k: costs,
                    lambda *span: None, lambda step: ends.append(env.now))
    env.run(overlap.start(steps))
    return ends[-1] / steps, ends, messages


def test_messages_per_mode():
    sizes = [10, 20, 30, 40]
    assert plan_messages(sizes, "none", 0) == [Message(0, 3, 100)]
    assert [m.lo for m in plan_messages(sizes, "wfbp", 0)] == [3, 2, 1, 0]
    buckets = plan_messages(sizes, "bucket", 50)
    assert buckets == [Message(2, 3, 70), Message(0, 1, 30)]
    assert plan_messages(sizes, "bucket", 1000) == [Message(0, 3, 100)]
    with pytest.raises(ValueError, match="pipelining mode"):
        plan_messages(sizes, "eager", 0)


def test_hand_worked_three_layers_wfbp():
    # forward 1 s per layer, backward 2 s; messages of layers 0, 1, 2 take 3, 1, 2 s.
    # step 1: backward ends layer 2 at 5 (send 5-7), layer 1 at 7 (7-8), layer 0 at 9
    # (9-12); step 2 waits for layer 0 until 12, so every step takes 12 s.
    cost = {0: 3.0, 1: 1.0, 2: 2.0}
    T, ends, _ = run_pipeline([1, 1, 1], [2, 2, 2], [1, 1, 1], "wfbp", lambda m: cost[m.lo])
    assert ends == [12.0, 24.0, 36.0, 48.0] and T == 12.0


def test_priority_sends_the_first_layer_first():
    # layer 2's message (5 s) is still going when layers 1 and 0 are ready: FIFO sends 1
    # then 0 (ends 14), priority sends 0 then 1 (layer 0 back at 13, layer 1 at 14).
    # FIFO step 2: forward 14-17, backward 17-23; sends 2 (19-24), 1 (24-25), 0 (25-28).
    # Priority step 2: forward 13-16 (layer 1's message lands at 14, just in time),
    # backward 16-22;
    # sends 2 (18-23), 0 (23-26), 1 (26-27).
    cost = {0: 3.0, 1: 1.0, 2: 5.0}
    _, fifo, _ = run_pipeline([1, 1, 1], [2, 2, 2], [1, 1, 1], "wfbp", lambda m: cost[m.lo],
                              steps=2)
    _, prio, _ = run_pipeline([1, 1, 1], [2, 2, 2], [1, 1, 1], "wfbp", lambda m: cost[m.lo],
                              steps=2, priority=True)
    assert fifo == [14.0, 28.0]
    assert prio == [14.0, 27.0]


@pytest.mark.parametrize("channel", ["allreduce", "ps"])
def test_none_is_compute_plus_communication(channel):
    forward, backward = [0.5, 1.5, 1.0], [1.0, 3.0, 2.0]
    T, _, messages = run_pipeline(forward, backward, [4, 8, 16], "none", lambda m: 0.25 * m.nbytes,
                                  channel=channel)
    C, M = sum(forward) + sum(backward), sum(0.25 * m.nbytes for m in messages)
    assert T == C + M


@pytest.mark.parametrize("channel", ["allreduce", "ps"])
def test_one_bucket_holding_everything_equals_none(channel):
    args = ([0.5, 1.5, 1.0], [1.0, 3.0, 2.0], [4, 8, 16])
    none, _, _ = run_pipeline(*args, "none", lambda m: 1e-3 + 0.1 * m.nbytes, channel=channel)
    bucket, _, _ = run_pipeline(*args, "bucket", lambda m: 1e-3 + 0.1 * m.nbytes,
                                bucket_bytes=28, channel=channel)
    assert bucket == none


layer_lists = st.lists(st.floats(0.01, 5.0), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(forward=layer_lists, data=st.data(), mode=st.sampled_from(["none", "wfbp", "bucket"]),
       priority=st.booleans(), alpha=st.floats(0.0, 2.0), beta=st.floats(0.0, 1.0),
       channel=st.sampled_from(["allreduce", "ps"]))
def test_every_mode_lies_between_max_and_sum(forward, data, mode, priority, alpha, beta,
                                             channel):
    n = len(forward)
    backward = data.draw(st.lists(st.floats(0.01, 5.0), min_size=n, max_size=n))
    sizes = data.draw(st.lists(st.integers(1, 100), min_size=n, max_size=n))
    T, _, messages = run_pipeline(forward, backward, sizes, mode,
                                  lambda m: alpha + beta * m.nbytes, priority=priority,
                                  bucket_bytes=60, channel=channel)
    C, M = sum(forward) + sum(backward), sum(alpha + beta * m.nbytes for m in messages)
    assert max(C, M) - 1e-9 <= T <= C + M + 1e-9


def test_a_step_is_shared_over_layers_by_their_seconds_with_a_memory_term(tmp_path):
    """With a memory bandwidth, wait-free backprop's per-layer times are each layer's own
    seconds (r F / R + passes x W / B), scaled to the drawn step; without, FLOP shares."""
    import json
    from types import SimpleNamespace

    from sim.training.compute_model import ComputeModel
    from sim.training.messages import LayerCosts

    layers = LayerCosts(np.array([100.0, 300.0]), np.array([200.0, 600.0]),
                        np.array([80, 8], np.int64), "model", np.array([80.0, 8.0]))
    device = tmp_path / "d.json"
    device.write_text(json.dumps({"format": "sgd-lab.device-profile/1", "flops_per_s": 1e3,
                                  "memory_Bps": 1e2}))

    cfg = SimpleNamespace(device=f"calibrated:{device}", time_s=None, distribution="constant",
                          straggler_fraction=0.0, straggler_slowdown=1.0, slowdowns=[])
    compute = ComputeModel(cfg, layers.flops(1), 1, 0, layers.traffic())
    shares = compute.layer_shares((layers.forward_flops, layers.backward_flops),
                                  layers.weight_bytes)
    forward = np.array([100 / 1e3 + 80 / 1e2, 300 / 1e3 + 8 / 1e2])
    backward = np.array([200 / 1e3 + 160 / 1e2, 600 / 1e3 + 16 / 1e2])
    assert compute.base_s == pytest.approx(forward.sum() + backward.sum(), rel=1e-12)
    costs = layers.split(compute.base_s, shares)
    np.testing.assert_allclose(costs.forward_s, forward, rtol=1e-12)
    np.testing.assert_allclose(costs.backward_s, backward, rtol=1e-12)
    flop_only = layers.split(1.2)
    np.testing.assert_allclose(flop_only.forward_s, [0.1, 0.3], rtol=1e-12)
