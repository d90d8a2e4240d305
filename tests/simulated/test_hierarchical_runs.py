"""A bsp run over a hierarchical allreduce: its step is compute plus the two-level closed
form, and the validator's rules for collectives that group ranks by host."""

from __future__ import annotations

import pytest

from sim.errors import UserError
from sim.network.collectives import get_collective
from sim.network.fabrics import get_fabric
from sim.network.host_links import get_host_link
from sim.network.message_cost import alpha_s, beta_s
from sim.simulated.engine import simulate
from sim.training.validator import validate
from sim.workloads.timing_profiles import get_profile

ITERATIONS = 3


def run_data(collective: str, **cluster) -> dict:
    return {"cluster": {"workers": 8, "ranks_per_host": 4, "host_link": "nvlink3-a100",
                        "fabric": "ib-hdr", "cores": 4, **cluster},  # a core a rank
            "compute": {"device": "a100"},
            "workload": {"profile": "resnet50", "numerics": False, "batch": 32},
            "strategy": {"kind": "bsp", "collective": collective},
            "run": {"iterations": ITERATIONS, "eval_every": ITERATIONS}}


@pytest.mark.parametrize("name", ["hierarchical", "hierarchical-rs"])
def test_a_step_is_compute_plus_the_two_level_closed_form(name: str) -> None:
    s = simulate(validate(run_data(name))).summary
    link, fabric = get_host_link("nvlink3-a100"), get_fabric("ib-hdr")
    n = 4 * get_profile("resnet50").params  # float32 gradients, one allreduce a step
    step_s = get_collective(name, ranks_per_host=4).two_level_s(
        8, n, (alpha_s(link), beta_s(link)), (alpha_s(fabric), beta_s(fabric)))
    assert s["comm_alone_s"] == pytest.approx(ITERATIONS * step_s, rel=1e-9)
    assert s["sim_time_s"] == pytest.approx(s["compute_s"] + ITERATIONS * step_s, rel=1e-9)


def test_the_inter_collective_is_the_configured_one() -> None:
    ring = simulate(validate(run_data("hierarchical"))).summary
    data = run_data("hierarchical")
    data["strategy"]["inter_collective"] = "tree"
    tree = simulate(validate(data)).summary
    assert tree["comm_alone_s"] > ring["comm_alone_s"]  # two hosts: 2 (a + n b) vs 2 a + n b


@pytest.mark.parametrize("change, message", [
    ({"cluster": {"rank_hosts": [0, 0, 0, 0, 1, 1, 1, 1]}},
     "cluster.rank_hosts: strategy.collective 'hierarchical-rs' groups consecutive ranks"),
    ({"cluster": {"ranks_per_host": 3}},
     "cluster.ranks_per_host: hierarchical-rs: every host needs g = 3 ranks"),
    ({"strategy": {"inter_collective": "ps"}}, "strategy.inter_collective: unknown"),
    ({"parallel": {"pipeline": 2}}, "strategy.collective: 'hierarchical-rs' groups all workers"),
])
def test_the_validator_refuses_what_the_grouping_cannot_place(change, message) -> None:
    data = run_data("hierarchical-rs")
    for table, values in change.items():
        data[table] = {**data.get(table, {}), **values}
    with pytest.raises(UserError, match=message):
        validate(data)


def test_real_runs_refuse_it() -> None:
    from sim.training.validator import validate_real
    data = {"cluster": {"workers": 4, "ranks_per_host": 2},
            "strategy": {"kind": "bsp", "collective": "hierarchical"}}
    with pytest.raises(UserError, match="strategy.collective 'hierarchical': simulated only"):
        validate_real(validate(data))
