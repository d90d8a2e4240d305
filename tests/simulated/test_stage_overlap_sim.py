"""parallel.dp_overlap (sim/simulated/stage_overlap.py): a split replica's data-parallel
allreduce of each stage's gradient overlapped with its last backward, over bsp's channel.
With free communication the step is the non-overlapped one; with a fixed time per
allreduce, the exposed tail after the last backward is the serial channel's closed form."""

from __future__ import annotations

import itertools

import pytest

from sim.errors import UserError
from sim.recorder import KINDS
from sim.simulated.engine import simulate
from sim.training.validator import validate

FREE = {"name": "free", "bandwidth_Bps": 1e30, "latency_s": 0.0, "overhead_s": 0.0}
STEP_S = 1e-3  # compute.time_s: a whole replica's gradient
HIDDEN = [16, 16, 16]  # 8 -> 16 -> 16 -> 16 -> 2: four dense layers


def config_of(tiny_config_data, *layers, **keys):
    return validate(tiny_config_data(
        {"workload.model": "mlp", "workload.hidden": HIDDEN, "compute.time_s": STEP_S,
         "cluster.fabric": FREE, "run.iterations": 4, "run.eval_every": 2}, *layers, **keys))


OVERLAP = {"parallel.dp_overlap": True, "strategy.pipelining": "wfbp"}


@pytest.mark.parametrize("keys", [
    {"parallel.pipeline": 2, "parallel.microbatches": 4},
    {"parallel.pipeline": 2, "parallel.microbatches": 2, "parallel.schedule": "interleaved",
     "parallel.virtual_stages": 2},
    {"parallel.pipeline": 2, "parallel.tensor": 2, "parallel.microbatches": 2,
     "parallel.schedule": "gpipe"},
    {"parallel.microbatches": 2, "strategy.pipelining": "bucket", "strategy.bucket_bytes": 600},
])
def test_with_free_communication_overlap_changes_nothing(tiny_config_data, keys):
    plain = simulate(config_of(tiny_config_data, keys | {"strategy.pipelining": "none"}))
    overlapped = simulate(config_of(tiny_config_data, OVERLAP, keys))
    for key in ("iter_s", "sim_time_s", "bubble_fraction", "stage_compute_s"):
        assert overlapped.summary[key] == pytest.approx(plain.summary[key], rel=1e-12,
                                                        abs=1e-15)
    assert overlapped.metrics_csv == plain.metrics_csv


@pytest.mark.parametrize("fabric, per_byte", [
    ({"name": "latency", "bandwidth_Bps": 1e30, "latency_s": 1e-4, "overhead_s": 0.0}, False),
    ({"name": "bandwidth", "bandwidth_Bps": 1e7, "latency_s": 0.0, "overhead_s": 0.0}, True),
])
def test_the_exposed_tail_is_the_serial_channels_closed_form(tiny_config_data, fabric,
                                                              per_byte):
    """One stage, two replicas, two microbatches (1F1B: F0 B0 F1 B1), on a fabric of
    latency only (every allreduce of two ranks takes the same A, whatever its size) or of
    bandwidth only (A in proportion to its bytes). A: the non-overlapped run's tail, one
    allreduce of the whole gradient after the last backward. Overlapped (wfbp), layer l's
    message is ready when B1 has done layers L-1..l, at e_l = s + sum_{j >= l} b_j, and the
    channel reduces them one at a time: done_l = max(e_l, done_{l+1}) + A_l. The step is
    done_0; its exposed (non-overlapped) tail done_0 - e_0."""
    keys = {"parallel.microbatches": 2, "cluster.fabric": fabric}
    plain = simulate(config_of(tiny_config_data, keys)).summary
    overlapped = simulate(config_of(tiny_config_data, keys, OVERLAP)).summary
    pairs = list(itertools.pairwise([8, *HIDDEN, 2]))
    flops = [(2 + (4 if i else 2)) * a * b for i, (a, b) in enumerate(pairs)]
    per_flop = STEP_S / sum(flops) / 2  # a microbatch's share of the step's time
    backward = [per_flop * (4 if i else 2) * a * b for i, (a, b) in enumerate(pairs)]
    nbytes = [8 * (a * b + b) for a, b in pairs]  # each layer's gradient (float64)
    whole = plain["iter_s"] - STEP_S  # one allreduce of the whole gradient
    start, done = STEP_S - sum(backward), 0.0  # B1 starts when the step's compute is done
    for layer in range(len(pairs) - 1, -1, -1):
        cost = whole * nbytes[layer] / sum(nbytes) if per_byte else whole
        done = max(start + sum(backward[layer:]), done) + cost
    assert whole > 0
    assert overlapped["iter_s"] == pytest.approx(done, rel=1e-9)
    # per message latency: four allreduces cost more than one; per byte: the overlap wins
    assert (overlapped["iter_s"] < plain["iter_s"]) == per_byte
    for rank in overlapped["workers"]:
        assert set(rank) == set(KINDS)
        assert sum(rank.values()) == pytest.approx(overlapped["sim_time_s"], rel=1e-9)


@pytest.mark.parametrize("keys, message", [
    ({"parallel.dp_overlap": True}, "parallel.dp_overlap"),  # no split
    ({"parallel.dp_overlap": True, "parallel.pipeline": 2}, "strategy.pipelining"),
    ({"strategy.pipelining": "wfbp", "parallel.pipeline": 2}, "parallel.dp_overlap"),
    (OVERLAP | {"parallel.pipeline": 2, "strategy.kind": "bsp-ps"}, "parallel.dp_overlap"),
    (OVERLAP | {"parallel.pipeline": 2, "cluster.host": "epyc-core"}, "cluster.host"),
])
def test_a_bad_overlap_is_refused_naming_the_key(tiny_config_data, keys, message):
    with pytest.raises(UserError, match=message):
        config_of(tiny_config_data, keys)


@pytest.mark.parametrize("keys", [
    {"parallel.pipeline": 2, "parallel.tensor": 2, "parallel.microbatches": 4},
    {"parallel.pipeline": 2, "parallel.microbatches": 2, "parallel.schedule": "interleaved",
     "parallel.virtual_stages": 2, "strategy.pipelining": "bucket",
     "strategy.bucket_bytes": 1000, "strategy.priority": True},
])
def test_every_ranks_activities_add_up_with_stages_on_a_real_fabric(tiny_config_data, keys):
    """Allreduces, messages between stages and tensor allreduces share eth-10g's links."""
    config = config_of(tiny_config_data, OVERLAP, keys, cluster__fabric="eth-10g")
    first, again = simulate(config).summary, simulate(config).summary
    for rank in first["workers"]:
        assert sum(rank.values()) == pytest.approx(first["sim_time_s"], rel=1e-9)
        assert rank["wire"] > 0
    assert {k: v for k, v in first.items() if k != "wall_s"} == \
        {k: v for k, v in again.items() if k != "wall_s"}
