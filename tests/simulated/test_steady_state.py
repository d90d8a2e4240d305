"""run.engine = "steady" (sim/simulated/steady_state.py) against the event engine on small
plans: sim_time_s, every activity (mean and per rank), the plan's keys and metrics.csv's
times agree to 1e-6 relative, with far fewer events; what it does not cover, the validator
refuses with one line naming run.engine."""

from __future__ import annotations

import csv
import io

import pytest

from sim.errors import UserError
from sim.recorder import KINDS
from sim.simulated.engine import simulate
from sim.training.validator import validate

REL = 1e-6


def config(**keys):
    """2 replicas of an 8-layer MLP of width 512 (timing only) on A100s, IB HDR between
    hosts, NVLink 3 inside; ``keys`` (``__`` = ``.``) on top."""
    data = {
        "cluster": {"workers": 2, "fabric": "ib-hdr", "ranks_per_host": 2,
                    "host_link": "nvlink3-a100"},
        "workload": {"model": "mlp", "dataset": "gaussian", "features": 512, "classes": 8,
                     "samples": 4096, "hidden": [512] * 7, "batch": 64, "numerics": False},
        "strategy": {"kind": "bsp", "collective": "ring"},
        "parallel": {"pipeline": 4, "tensor": 2, "microbatches": 8, "schedule": "1f1b"},
        "compute": {"device": "a100"},
        "run": {"iterations": 2, "eval_every": 2, "memory": "report"},
    }
    for key, value in keys.items():
        section, name = key.split("__")
        data[section][name] = value
    return data


def both(data):
    events = simulate(validate(data))
    steady = simulate(validate({**data, "run": {**data["run"], "engine": "steady"}}))
    return events, steady


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b)) or a == b


HIERARCHICAL = {"cluster__workers": 4, "parallel__tensor": 1, "cluster__ranks_per_host": 8,
                "strategy__collective": "hierarchical-rs"}
CASES = {
    "1f1b, tensor groups on a host, pipeline over IB": {},
    "gpipe": {"parallel__schedule": "gpipe"},
    "4 shards a host": {"parallel__tensor": 4, "cluster__ranks_per_host": 4},
    "ring of 3 replicas (chunks a byte apart), mirrored": {"cluster__workers": 3},
    "recursive doubling on 4 replicas, mirrored": {"cluster__workers": 4,
                                                   "strategy__collective":
                                                   "recursive-doubling"},
    "rabenseifner on 3 replicas, each run": {"cluster__workers": 3,
                                         "strategy__collective": "rabenseifner"},
    # no shards: stages 0-3 of a replica share a host, messages over NVLink
    "pipeline inside a host": {"parallel__tensor": 1, "cluster__ranks_per_host": 4},
    # both replicas on one host: the data groups' allreduces share its NVSwitch
    "data groups inside a host": {"parallel__tensor": 1, "cluster__ranks_per_host": 8,
                                  "parallel__schedule": "gpipe"},
    "interleaved, 2 chunks a stage": {"parallel__schedule": "interleaved",
                                      "parallel__virtual_stages": 2,
                                      "workload__hidden": [512] * 15},
    "one replica": {"cluster__workers": 1},
    "bf16 messages": {"compute__precision": "bf16"},
    "eth-100g, 16 microbatches": {"cluster__fabric": "eth-100g",
                                  "parallel__microbatches": 16},
    # 2 replicas a host: each data group is 2 members on each of 2 hosts (g = 2), its
    # reduce-scatter on NVLink beside the stages' messages, its slices on IB (balanced:
    # replica 0 runs and is mirrored)
    "hierarchical-rs on the data groups, mirrored": HIERARCHICAL,
    # 8 ranks on 2 NICs: the 2 slices of a data group's host leave on NICs 0 and 1, each
    # NIC shared with the other stages' ranks' messages
    "hierarchical-rs, ranks sharing NICs": {**HIERARCHICAL, "cluster__nics_per_host": 2},
    "hierarchical-rs, tree across hosts": {**HIERARCHICAL,
                                           "strategy__inter_collective": "tree"},
    # a ring with 2 members a host: half its hops on NVLink, half on IB, members wait
    # unalike (one_link): every replica runs
    "ring with 2 members a host, each run": {**HIERARCHICAL, "strategy__collective": "ring"},
    "ring, ranks sharing NICs": {**HIERARCHICAL, "strategy__collective": "ring",
                                 "cluster__nics_per_host": 2},
    # only the leaders cross hosts: not balanced, every replica runs
    "hierarchical on the data groups, each run": {**HIERARCHICAL,
                                                  "strategy__collective": "hierarchical"},
}


@pytest.mark.parametrize("keys", CASES.values(), ids=CASES.keys())
def test_steady_agrees_with_events(keys):
    events, steady = both(config(**keys))
    a, b = events.summary, steady.summary
    assert a["complete"] and b["complete"] and a["iterations"] == b["iterations"]
    for key in ("sim_time_s", "bubble_fraction", "pipeline_p2p_s", "tensor_allreduce_s",
                "comm_s", "iter_s", *(f"{kind}_s" for kind in KINDS)):
        assert close(a[key], b[key]), (key, a[key], b[key])
    for x, y in zip(a["stage_compute_s"], b["stage_compute_s"], strict=True):
        assert close(x, y)
    for row_a, row_b in zip(a["workers"], b["workers"], strict=True):  # every rank's
        assert all(close(row_a[kind], row_b[kind]) for kind in KINDS), (row_a, row_b)
    rows_a = list(csv.DictReader(io.StringIO(events.metrics_csv)))
    rows_b = list(csv.DictReader(io.StringIO(steady.metrics_csv)))
    assert [r["kind"] for r in rows_a] == [r["kind"] for r in rows_b]
    assert all(close(float(x["time_s"]), float(y["time_s"]))
               for x, y in zip(rows_a, rows_b, strict=True))
    same = set(a) - {"events", "wall_s", "workers", "sim_time_s", "bubble_fraction",
                      "stage_compute_s"}
    assert set(a) == set(b)  # the same keys
    assert {k for k in same if not isinstance(a[k], float) and a[k] != b[k]} == set()
    assert b["events"] <= a["events"]  # the same with one shard


def test_the_engines_part_only_by_the_flow_precision(monkeypatch):
    """The event engine finishes flows due within the flow model's precision (1 ns) of each
    other together, at the latest time (sim.network.flow), also flows of other hosts than
    a tensor allreduce's, which the steady engine times alone. This 0.45 ms step (a100
    timing; 2 x 4 x 4, batch 64) meets such near-ties: 1.5 ns apart (3.4e-6 relative; the
    bench's quick plans take batches of 512, where none occurs). At a precision of 0 the
    two engines agree to rounding."""
    from sim.bench.scale_bench import plan_config
    from sim.network.flow import FlowNetwork

    def step(engine: str) -> float:
        return simulate(plan_config(2, 4, 4, 8, 8, 1024, 64, engine)).summary["sim_time_s"]

    alone = step("steady")
    assert 1e-10 < abs(step("events") - alone) <= 1e-8  # a few flows' 1 ns
    monkeypatch.setattr(FlowNetwork.__init__, "__defaults__", (0.0, None))
    assert step("events") == pytest.approx(alone, rel=1e-13, abs=0)


def test_steady_is_far_cheaper_with_shards():
    """8 shards: the tensor allreduces' rounds were nearly all the events."""
    events, steady = both(config(parallel__tensor=8, cluster__ranks_per_host=8,
                                 run__iterations=1, run__eval_every=1))
    assert close(events.summary["sim_time_s"], steady.summary["sim_time_s"])
    assert steady.summary["events"] * 10 < events.summary["events"]


def test_trace_has_the_timed_shard():
    _, steady = both(config(run__iterations=1, run__eval_every=1))
    names = {e["args"]["name"] for e in steady.trace["traceEvents"]
             if e.get("name") == "thread_name"}
    assert any("shard 0" in n for n in names)
    spans = [e for e in steady.trace["traceEvents"] if e.get("ph") == "X"]
    assert spans


REFUSED = {
    "bsp-ps": {"strategy__kind": "bsp-ps"},
    "no plan": {"parallel__pipeline": 1, "parallel__tensor": 1, "parallel__microbatches": 1},
    "numerics": {"workload__numerics": True},
    "noise": {"compute__distribution": "exponential"},
    "stragglers": {"compute__straggler_fraction": 0.5, "compute__straggler_slowdown": 2.0},
    "a host with CPU costs": {"cluster__host": "epyc-core"},
    "leaf-spine": {"cluster__topology": "leaf-spine"},
    "overlapped data-parallel allreduce": {"parallel__dp_overlap": True,
                                           "strategy__pipelining": "wfbp"},
    "shards sharing a NIC": {"cluster__nics_per_host": 1},
    # a step cut mid-way: the event engine counts a tensor allreduce's finished rounds
    "a time limit": {"run__time_limit_s": 3e-4},
    # two stages on a host: their messages would share NVLink ports with tensor allreduces
    "tensor group beside other traffic": {"cluster__ranks_per_host": 4},
    "no host link": {"cluster__host_link": "none"},
}


@pytest.mark.parametrize("keys", REFUSED.values(), ids=REFUSED.keys())
def test_validator_refuses_what_steady_does_not_cover(keys):
    data = config(run__engine="steady", **keys)
    with pytest.raises(UserError, match="run.engine: 'steady'"):
        validate(data)


def test_events_is_the_default():
    assert validate(config()).run.engine == "events"


@pytest.mark.parametrize(("collective", "replicas", "mirrored"), [
    ("ring", 3, True), ("recursive-doubling", 4, True), ("rabenseifner", 3, False)])
def test_replica_zero_stands_for_all_where_the_collective_is_balanced(collective, replicas,
                                                                      mirrored):
    """A ring (or recursive doubling on a power of two) treats every member alike: replica
    0 runs and its messages are mirrored; Rabenseifner's on 3 folds one member in first, so
    every replica runs. Both agree with the event engine (above)."""
    from sim.simulated.engine import build_simulation

    data = config(cluster__workers=replicas, strategy__collective=collective,
                  run__engine="steady")
    _, _, strategy = build_simulation(validate(data))
    strategy.start()
    assert strategy.mirror is mirrored
    assert len(strategy.timed) == 4 * (1 if mirrored else replicas)


@pytest.mark.parametrize(("collective", "mirrored"), [("hierarchical-rs", True),
                                                     ("hierarchical", False), ("ring", False)])
def test_hierarchical_rs_data_groups_are_balanced(collective, mirrored):
    """hierarchical-rs's rounds (the ring inside each host, g ring slices across hosts) give
    every member one message in and one out, all on one kind of link: replica 0 stands for
    all; the leaders-only variant leaves the others idle across hosts, and a flat ring's
    rounds mix NVLink and IB hops, so every replica runs."""
    from sim.simulated.engine import build_simulation

    data = config(**{**HIERARCHICAL, "strategy__collective": collective},
                  run__engine="steady")
    _, _, strategy = build_simulation(validate(data))
    strategy.start()
    group = strategy.data_groups[0]
    assert group.collective is None if collective == "ring" else \
        group.collective.ranks_per_host == 2
    assert strategy.mirror is mirrored


def test_the_shipped_3072_gpu_config_is_megatrons_layout():
    """experiments/scale/3072-gpus.toml: the gpt-1t profile (Narayanan et al. 2021, Table
    1's 1008 B row) at t = 8, p = 64, d = 6 (3,072 ranks), global batch 3072 of microbatch 1
    (m = 512), on the steady engine; the plan's tensor groups are hosts."""
    from pathlib import Path

    from sim.training.parallel_plan import build_plan
    from sim.training.validator import load_config

    path = Path(__file__).resolve().parents[2] / "experiments" / "scale" / "3072-gpus.toml"
    c = load_config(path)
    assert c.run.engine == "steady" and c.run.iterations == 1
    assert c.workload.profile == "gpt-1t"
    assert (c.cluster.workers, c.parallel.pipeline, c.parallel.tensor) == (6, 64, 8)
    assert c.cluster.workers * c.workload.batch == 3072 and c.parallel.microbatches == 512
    plan = build_plan(c)
    assert len(plan.ranks) == 3072 and plan.microbatch_rows == 1
    assert all(plan.ranks[r].host == plan.ranks[g].host
               for r in range(0, 3072, 8) for g in plan.tensor_group(r))


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_steady_agrees_on_a_transformer_plan(recompute):
    """Megatron-LM 2019's 1.2 B GPT (its profile's layers: attention and MLP blocks, each
    with its tensor allreduces) on 2 replicas x 2 stages x 2 shards, 4 microbatches."""
    data = config(parallel__pipeline=2, parallel__microbatches=4, parallel__recompute=recompute,
                  run__iterations=1, run__eval_every=1)
    data["workload"] = {"profile": "megatron-1.2b", "numerics": False, "batch": 4}
    events, steady = both(data)
    a, b = events.summary, steady.summary
    for key in ("sim_time_s", "bubble_fraction", "tensor_allreduce_s", "pipeline_p2p_s",
                *(f"{kind}_s" for kind in KINDS)):
        assert close(a[key], b[key]), (key, a[key], b[key])
    for row_a, row_b in zip(a["workers"], b["workers"], strict=True):
        assert all(close(row_a[kind], row_b[kind]) for kind in KINDS)
    assert b["events"] * 5 < a["events"]
