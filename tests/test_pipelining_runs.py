"""Pipelining through whole runs: the issue-6 identities on simulated bsp and bsp-ps runs."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import validate
from sim.network.fabrics import get_fabric
from sim.training.engine import build_simulation, simulate
from sim.workloads.profiles import get_profile

MLP = {"cluster": {"workers": 4, "fabric": "eth-10g"},
       "workload": {"model": "mlp", "dataset": "digits", "hidden": [128, 64], "batch": 16},
       "run": {"iterations": 8, "eval_every": 4}}


def config(kind="bsp", mode="none", **strategy):
    data = {**MLP, "strategy": {"kind": kind, "pipelining": mode, **strategy}}
    return validate(data)


def summary(kind="bsp", mode="none", **strategy):
    return simulate(config(kind, mode, **strategy)).summary


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps"])
def test_none_takes_compute_plus_communication_exactly(kind):
    s = summary(kind)
    assert s["sim_time_s"] == pytest.approx(s["compute_s"] + s["comm_alone_s"], rel=1e-12)
    assert s["speedup_vs_none"] == pytest.approx(1.0, rel=1e-12)
    assert s["overlap_efficiency"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("mode, extra", [("wfbp", {}), ("bucket", {"bucket_bytes": 4e4}),
                                         ("wfbp", {"priority": True})])
def test_allreduce_modes_lie_between_max_and_sum(mode, extra):
    s = summary("bsp", mode, **extra)
    C, M, T = s["compute_s"], s["comm_alone_s"], s["sim_time_s"]
    assert max(C, M) * (1 - 1e-12) <= T <= (C + M) * (1 + 1e-12)
    assert s["messages_per_step"] > 1
    assert s["speedup_vs_none"] <= (C + summary("bsp")["comm_alone_s"]) / max(C, M) + 1e-9


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps"])
def test_one_bucket_holding_everything_equals_none(kind):
    none, bucket = summary(kind), summary(kind, "bucket", bucket_bytes=1e9)
    for key in ("sim_time_s", "compute_s", "comm_s", "comm_alone_s", "wait_s", "final_loss"):
        assert bucket[key] == none[key]


@pytest.mark.parametrize("kind", ["bsp", "bsp-ps"])
def test_pipelining_changes_time_not_numbers(kind):
    def final_params(mode, **extra):
        env, ctx, strategy = build_simulation(config(kind, mode, **extra))
        strategy.start()
        env.run(until=ctx.done)
        return strategy.model_of_record().copy(), env.now

    base, t_none = final_params("none")
    for mode, extra in [("wfbp", {}), ("bucket", {"bucket_bytes": 4e4}),
                        ("wfbp", {"priority": True})]:
        params, t = final_params(mode, **extra)
        assert np.array_equal(params, base)
        assert t != t_none


def test_timing_only_profile_reports_no_numbers():
    data = {"cluster": {"workers": 8, "fabric": "ib-hdr"}, "compute": {"device": "a100"},
            "workload": {"profile": "resnet50", "numerics": False, "batch": 32},
            "strategy": {"kind": "bsp", "pipelining": "wfbp"},
            "run": {"iterations": 3, "eval_every": 3}}
    result = simulate(validate(data))
    s = result.summary
    assert s["timing"] == "profile:resnet50 (timing only)"
    assert s["final_loss"] is None and s["messages_per_step"] == 54
    # on Infiniband ResNet-50's communication hides almost entirely behind backprop
    assert s["overlap_efficiency"] > 0.9
    # none: compute, then one ring allreduce of 25.56 M float32 gradients (closed form)
    fabric, p, n = get_fabric("ib-hdr"), 8, 4 * get_profile("resnet50").params
    ring_s = 2 * (p - 1) * fabric.alpha_s() + 2 * (p - 1) / p * n / fabric.bandwidth_Bps
    assert s["speedup_vs_none"] == pytest.approx((s["compute_s"] + 3 * ring_s) /
                                                 s["sim_time_s"], rel=1e-6)


def test_a_profile_can_time_a_small_model_that_trains():
    data = {**MLP, "workload": {**MLP["workload"], "profile": "vgg16"},
            "compute": {"device": "a100"}, "strategy": {"kind": "bsp", "pipelining": "bucket"}}
    s = simulate(validate(data)).summary
    assert s["timing"] == "profile:vgg16" and s["final_loss"] is not None
    assert s["messages_per_step"] == 5  # VGG-16's 553 MB in >= 25 MB buckets, fc6 alone
