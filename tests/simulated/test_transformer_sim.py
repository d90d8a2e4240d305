"""The simulated executor runs a transformer profile's plan and recomputation
(sim/simulated/strategies/model_parallel.py on sim/training/parallel_plan.py): with free
communication and a fixed gradient time, its step is stage_schedule.evaluate's for the
stages' forward and backward seconds written out here (a backward that recomputes takes
its forward again), and its memory keys are the plan's."""

from __future__ import annotations

import itertools

import pytest

from sim.simulated.engine import simulate
from sim.training.parallel_plan import PlanLayer, build_plan
from sim.training.stage_schedule import evaluate
from sim.training.validator import validate
from sim.workloads.timing_profiles import get_profile
from sim.workloads.transformer import get_transformer

FREE = {"name": "free", "bandwidth_Bps": 1e30, "latency_s": 0.0, "overhead_s": 0.0}
STEP_S = 1e-3  # compute.time_s: a whole replica's gradient (no recomputation)
NAME = "megatron-1.2b"


def gpt(**keys):
    data = {"cluster": {"workers": 1, "fabric": FREE},
            "workload": {"profile": NAME, "numerics": False, "batch": 4},
            "compute": {"time_s": STEP_S}, "strategy": {"kind": "bsp"},
            "run": {"iterations": 2}}
    for key, value in keys.items():
        table, name = key.split("__")
        data.setdefault(table, {})[name] = value
    return validate(data)


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
@pytest.mark.parametrize("t", [1, 2])
def test_a_transformer_step_is_the_schedules_for_its_recomputing_stages(mode, t):
    """Stage seconds per microbatch: STEP_S x its shard's FLOPs over the replica's
    gradient's (3 x the forward's, per sample) over m; backward: 2 x forward + the
    recomputed forward (full: the layers'; selective: their attention cores' 4 s^2 h / t)."""
    spec, profile = get_transformer(NAME), get_profile(NAME)
    s, h, v = spec.seq, spec.hidden, spec.vocab
    p, m = 2, 2
    config = gpt(parallel__pipeline=p, parallel__microbatches=m, parallel__tensor=t,
                 parallel__recompute=mode)
    gradient = 3 * profile.forward_flops
    layer = (24 * s * h * h + 4 * s * s * h) / t
    again = {"none": 0.0, "selective": 4 * s * s * h / t, "full": layer}[mode]
    forward = [20 * layer, 20 * layer + 2 * s * h * v / t]
    backward = [2 * f + 20 * again for f in forward]
    scale = STEP_S / gradient / m
    reference = evaluate([st.ops for st in build_plan(config).stages],
                         [f * scale for f in forward], [b * scale for b in backward])
    summary = simulate(config).summary
    assert summary["iter_s"] == pytest.approx(reference.step_s, rel=1e-9)
    plan = build_plan(config)
    assert summary["memory_bytes_by_stage"] == plan.memory_bytes_by_stage


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8)])
def test_balanced_mlp_stages_with_full_recomputation_step_in_m_plus_p_minus_1_slots(p, m):
    """Equal dense layers: (m + p - 1)(t_f + t_b) with t_b = 2 t_f + t_f recomputed."""
    config = validate({"cluster": {"workers": 1, "fabric": FREE},
                       "workload": {"model": "mlp", "hidden": [16] * 7, "features": 8,
                                    "samples": 256, "batch": 8},
                       "compute": {"time_s": STEP_S}, "strategy": {"kind": "bsp"},
                       "parallel": {"pipeline": p, "microbatches": m, "recompute": "full"},
                       "run": {"iterations": 2, "eval_every": 1}})
    layers = [PlanLayer(f"d{i}", 16, 16, True, 2.0 * 256, 4.0 * 256) for i in range(8)]
    plan = build_plan(config, layers=layers)
    summary = simulate(config, plan=plan).summary
    # the gradient's FLOPs per sample, as the MLP counts them (8 -> 16 x 7 -> 2)
    widths = [8, *[16] * 7, 2]
    gradient = sum((2 + (4 if i else 2)) * a * b for i, (a, b) in
                   enumerate(itertools.pairwise(widths)))
    t_f = STEP_S * 2 * 256 * (8 // p) / gradient / m
    assert summary["iter_s"] == pytest.approx((m + p - 1) * (t_f + 3 * t_f), rel=1e-9)
