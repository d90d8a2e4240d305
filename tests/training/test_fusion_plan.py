"""Horovod's Tensor Fusion buffers (sim.training.messages.fuse): hand-computed boundaries,
a tensor over the threshold alone, and the limits that give wfbp and none."""

from __future__ import annotations

import math

import pytest

from sim.training.messages import MODES, Message, Packing, fuse, next_tick, plan_messages

# layers 0..4 (forward order); backward produces 4 first: ready at 1, 2, 3, 6, 7 s
SIZES = [10, 20, 30, 40, 50]
READY = [7.0, 6.0, 3.0, 2.0, 1.0]


def test_buffers_by_hand() -> None:
    # cycle 2.5 s: ticks 2.5 (layers 4, 3), 5 (layer 2), 7.5 (layers 1, 0)
    assert fuse(SIZES, READY, 100, 2.5) == [Message(3, 4, 90), Message(2, 2, 30),
                                            Message(0, 1, 30)]
    # threshold 60: 50 + 40 would overflow it, so layer 3 opens a buffer of its own
    assert fuse(SIZES, READY, 60, 2.5) == [Message(4, 4, 50), Message(3, 3, 40),
                                           Message(2, 2, 30), Message(0, 1, 30)]
    # cycle 5 s: ticks 5 (layers 4, 3, 2: 120 B) and 10 (layers 1, 0)
    assert fuse(SIZES, READY, 120, 5.0) == [Message(2, 4, 120), Message(0, 1, 30)]
    assert fuse(SIZES, READY, 119, 5.0) == [Message(3, 4, 90), Message(2, 2, 30),
                                            Message(0, 1, 30)]


def test_a_tensor_over_the_threshold_goes_alone() -> None:
    sizes, ready = [10, 500, 10, 10], [4.0, 3.0, 2.0, 1.0]
    assert fuse(sizes, ready, 100, 10.0) == [Message(2, 3, 20), Message(1, 1, 500),
                                             Message(0, 0, 10)]


def test_cycle_zero_and_no_threshold_is_a_buffer_per_layer_ready_apart() -> None:
    assert fuse(SIZES, READY, math.inf, 0.0) == plan_messages(SIZES, "wfbp")
    # layers ready at one instant leave together
    assert fuse(SIZES, [2.0, 2.0, 1.0, 1.0, 1.0], math.inf, 0.0) == [Message(2, 4, 120),
                                                                    Message(0, 1, 30)]


def test_one_cycle_over_the_whole_backward_is_one_buffer() -> None:
    assert fuse(SIZES, READY, math.inf, 7.0) == plan_messages(SIZES, "none")
    assert fuse(SIZES, READY, math.inf, 100.0) == plan_messages(SIZES, "none")


def test_threshold_zero_disables_fusion() -> None:
    # HOROVOD_FUSION_THRESHOLD=0: every tensor its own allreduce, whatever the cycle
    assert fuse(SIZES, READY, 0, 100.0) == plan_messages(SIZES, "wfbp")


def test_next_tick() -> None:
    assert next_tick(0.0, 5.0) == 0.0
    assert next_tick(0.1, 5.0) == 5.0
    assert next_tick(5.0, 5.0) == 5.0
    assert next_tick(0.1 + 0.2, 0.1) == pytest.approx(0.3)  # 3.0000000000000004 cycles: 3
    assert next_tick(0.3, 0.0) == 0.3


def test_the_mode_row() -> None:
    assert plan_messages(SIZES, "fusion", packing=Packing(fusion_bytes=100, cycle_s=2.5,
                                                          ready_s=READY)) == \
        fuse(SIZES, READY, 100, 2.5)
    assert MODES["fusion"].cycled and not MODES["fusion"].real
    assert not any(MODES[m].cycled for m in ("none", "wfbp", "bucket"))
    with pytest.raises(ValueError, match="ready times"):
        plan_messages(SIZES, "fusion")
    with pytest.raises(ValueError, match="a ready time per layer"):
        fuse(SIZES, READY[:2], 100, 1.0)
