"""Every pipelining mode charges the host's update and per-message CPU (issue 47, item 0).

On a calibrated host, a bsp step's ``update`` and ``overhead`` time per update is the closed
form of the messages the mode sends: for each message of n bytes, its ring allreduce on 2
ranks (two sends and two receives of n / 2, one sum of n / 2: the per-message CPU of
:mod:`sim.network.message_cost`) and its mean and SGD step (the host's reduce and update
rates); plus the framework's code once per step. ``wfbp`` and ``bucket`` used to record that
CPU as communication beside compute, so their ``update_s`` was 0 and ``overhead_s`` was
the step's code alone.
"""

from __future__ import annotations

import pytest

from sim.network.fabrics import get_fabric
from sim.network.message_cost import message_cpu
from sim.simulated.engine import simulate
from sim.training.host_costs import HOSTS
from sim.training.validator import validate

FEATURES, HIDDEN, CLASSES = 300, [64, 32], 3
ITEMSIZE = 8  # float64 parameters
STEPS = 6
BUCKET_BYTES = 10_000  # the top two layers fill one bucket, the first layer is its own

# bytes of each dense layer's gradient (weights and biases), forward order
LAYERS = [(FEATURES * HIDDEN[0] + HIDDEN[0]) * ITEMSIZE,
          (HIDDEN[0] * HIDDEN[1] + HIDDEN[1]) * ITEMSIZE,
          (HIDDEN[1] * CLASSES + CLASSES) * ITEMSIZE]
# the messages each mode sends per update, in the order backward produces them
MESSAGES = {"none": [sum(LAYERS)],
            "wfbp": LAYERS[::-1],
            "bucket": [LAYERS[2] + LAYERS[1], LAYERS[0]]}


def summary(mode: str) -> dict:
    config = validate({
        "cluster": {"workers": 2, "fabric": "ib-hdr", "host": "epyc-core"},
        "workload": {"model": "mlp", "dataset": "gaussian", "features": FEATURES,
                     "classes": CLASSES, "hidden": HIDDEN, "samples": 1024, "batch": 32},
        "strategy": {"kind": "bsp", "collective": "ring", "pipelining": mode,
                     "bucket_bytes": BUCKET_BYTES},
        "compute": {"device": "cpu-core", "distribution": "constant"},
        "run": {"iterations": STEPS, "eval_every": STEPS}})
    return simulate(config).summary


def closed_form(mode: str) -> tuple[float, float]:
    """(update, overhead) CPU seconds per update of one rank, from the host's numbers."""
    host = HOSTS["epyc-core"]
    message = message_cpu(host.message_s, host.message_Bps, get_fabric("ib-hdr"), None)

    def reduce_s(nbytes: float) -> float:
        return host.reduce_call_s + nbytes / host.reduce_Bps

    def update_s(nbytes: float) -> float:
        return host.update_call_s + nbytes / host.update_Bps

    def ring_s(nbytes: float) -> float:  # 2 ranks: reduce-scatter, then allgather
        half = nbytes / 2
        return 2 * float(message.send_s(half)) + 2 * float(message.receive_s(half)) \
            + reduce_s(half)

    sizes = MESSAGES[mode]
    update = sum(reduce_s(n) + update_s(n) for n in sizes)
    overhead = host.step_s + sum(ring_s(n) for n in sizes)
    return update, overhead


@pytest.mark.parametrize("mode", ["none", "wfbp", "bucket"])
def test_each_mode_charges_the_closed_form_of_its_messages_and_updates(mode):
    s = summary(mode)
    assert s["messages_per_step"] == len(MESSAGES[mode])
    update, overhead = closed_form(mode)
    assert update > 0 and overhead > HOSTS["epyc-core"].step_s
    assert s["update_s"] / s["iterations"] == pytest.approx(update, rel=1e-9)
    assert s["overhead_s"] / s["iterations"] == pytest.approx(overhead, rel=1e-9)


@pytest.mark.parametrize("mode", ["wfbp", "bucket"])
def test_the_breakdown_still_adds_up_to_the_run_time(mode):
    """The messages' CPU is the workers' time: their compute and waits leave it out."""
    s = summary(mode)
    kinds = ("compute", "data", "update", "overhead", "wire", "wait")
    for worker in s["workers"]:
        assert sum(worker[k] for k in kinds) == pytest.approx(s["sim_time_s"], rel=1e-9)
    # the compute is the model's, not stretched by messages queued on the same core
    assert s["compute_s"] == pytest.approx(summary("none")["compute_s"], rel=1e-9)
