"""A hierarchical allreduce on a parallelism plan's groups: each data and tensor group runs
strategy.collective built for its own members a host (PlanRanks.group_collective), its
uncontended time is the two-level closed form (NICs shared: the inter-host beta times the
ranks a NIC), and the validator admits a plan whose groups sit in equal consecutive
blocks, one host a block, and refuses any other with one line."""

from __future__ import annotations

import re

import pytest

from sim.errors import UserError
from sim.network.collectives import get_collective
from sim.network.message_cost import alpha_s, beta_s
from sim.simulated.engine import build_simulation
from sim.training.validator import validate

NBYTES = 4 * 3 * 5 * 7 * 64  # cuts into equal pieces for every g and H below


def plan_data(collective: str = "hierarchical-rs", **cluster) -> dict:
    """4 replicas x 2 stages of an 8-layer MLP (timing only), 4 ranks a host (2 hosts): a
    data group is 2 replicas' stage s on each host (g = 2, H = 2)."""
    return {"cluster": {"workers": 4, "ranks_per_host": 4, "host_link": "nvlink3-a100",
                        "fabric": "ib-hdr", **cluster},
            "workload": {"model": "mlp", "dataset": "gaussian", "features": 64, "classes": 8,
                         "samples": 512, "hidden": [64] * 7, "batch": 16, "numerics": False},
            "strategy": {"kind": "bsp", "collective": collective},
            "parallel": {"pipeline": 2, "microbatches": 2},
            "compute": {"device": "a100"},
            "run": {"iterations": 1, "eval_every": 1, "memory": "report"}}


def ranks_built(data: dict):
    sim = build_simulation(validate(data))
    strategy = sim.strategy
    strategy.setup_replicas()
    strategy.build_ranks()
    return sim, strategy


def allreduce_alone_s(data: dict, rank: int, nbytes: int = NBYTES) -> tuple[float, object]:
    """Seconds of ``rank``'s data group's allreduce of ``nbytes`` on the idle network, and
    the simulation it ran in."""
    sim, strategy = ranks_built(data)
    sim.env.run(sim.env.process(strategy.allreduce_time(nbytes, strategy.data_groups[rank])))
    return float(sim.env.now), sim


@pytest.mark.parametrize("name", ["hierarchical", "hierarchical-rs"])
@pytest.mark.parametrize("nics", [None, 2, 1])
def test_a_data_groups_allreduce_is_the_two_level_closed_form(name: str, nics) -> None:
    """Stage 0's data group: ranks 0, 2 on host 0 and 4, 6 on host 1. Each rank a NIC, or
    k of them a host in rank order (rank i of 4 on NIC i k // 4): with k = 2 ranks 0 and 2
    are on NICs 0 and 1, with k = 1 they share one, so hierarchical-rs's 2 inter-host
    allreduces run at half the fabric's bandwidth each; the leaders' one runs alone."""
    data = plan_data(name, **({} if nics is None else {"nics_per_host": nics}))
    seconds, sim = allreduce_alone_s(data, 0)
    group = sim.strategy.data_groups[0]
    assert group.ranks == (0, 2, 4, 6) and group.collective.ranks_per_host == 2
    network = sim.ctx.network
    link, fabric = network.host_link, network.fabric
    sharing = 2 if nics == 1 and name == "hierarchical-rs" else 1  # slices on a NIC
    want = group.collective.two_level_s(4, NBYTES, (alpha_s(link), beta_s(link)),
                                        (alpha_s(fabric), sharing * beta_s(fabric)))
    assert seconds == pytest.approx(want, rel=1e-12)


def test_hierarchical_rs_beats_the_ring_across_hosts() -> None:
    ring, _ = allreduce_alone_s(plan_data("ring"), 0, 10**6)
    rs, _ = allreduce_alone_s(plan_data("hierarchical-rs"), 0, 10**6)
    assert rs < ring


def test_each_group_gets_its_members_a_host() -> None:
    """2 replicas x 2 stages x 4 shards on hosts of 8: a tensor group (4 shards) sits on
    one host and runs the ring; a data group has one member a host (g = 1: the inter-host
    allreduce alone); on hosts of 16 a data group has its 2 members on one host."""
    def built(ranks_per_host: int):
        data = plan_data(ranks_per_host=ranks_per_host, workers=2)
        data["parallel"] = {"pipeline": 2, "tensor": 4, "microbatches": 2}
        return ranks_built(data)[1]

    strategy = built(8)
    assert strategy.tensor_groups[0].collective.ranks_per_host == 4
    assert strategy.data_groups[0].collective.ranks_per_host == 1
    assert built(16).data_groups[5].collective.ranks_per_host == 2


def test_a_tensor_group_on_one_host_is_the_ring() -> None:
    data = plan_data(workers=2)
    data["parallel"] = {"tensor": 4, "microbatches": 2}  # 2 hosts of 4: one replica each
    _, strategy = ranks_built(data)
    ring = get_collective("ring")
    group = strategy.tensor_groups[0]
    assert group.collective.schedule(4, 100).n_rounds == ring.schedule(4, 100).n_rounds
    for r in range(ring.schedule(4, 100).n_rounds):
        a, b = group.collective.schedule(4, 100).round(r), ring.schedule(4, 100).round(r)
        assert (a.src.tolist(), a.dst.tolist(), a.count.tolist()) == \
            (b.src.tolist(), b.dst.tolist(), b.count.tolist())


def test_the_validator_admits_equal_blocks_and_refuses_the_rest() -> None:
    assert validate(plan_data()).strategy.collective == "hierarchical-rs"
    assert validate(plan_data(rank_hosts=[1, 1, 1, 1, 0, 0, 0, 0]))  # a listed placement
    uneven = plan_data(ranks_per_host=4, workers=8)
    uneven["parallel"] = {"pipeline": 3, "microbatches": 2}  # stage 0 on hosts 0,0,1,2,...
    with pytest.raises(UserError, match=re.escape(
            "strategy.collective: 'hierarchical-rs' on the data group of ranks [0, 3, 6, 9, "
            "12, 15, 18, 21]: members on hosts [0, 0, 1, 2, 3, 3, 4, 5] are not in equal "
            "consecutive blocks, one host a block")):
        validate(uneven)
    apart = plan_data(rank_hosts=[0, 1, 1, 0, 0, 1, 1, 0])  # a host's members not together
    with pytest.raises(UserError, match="on the data group of ranks \\[0, 2, 4, 6\\]"):
        validate(apart)
