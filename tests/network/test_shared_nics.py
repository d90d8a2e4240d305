"""Hosts with fewer NICs than ranks (cluster.nics_per_host): which NIC each rank uses, and
flows of ranks sharing one splitting its bandwidth, against their closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sim.network.fabrics import Fabric
from sim.network.network_builder import build_network, nic_ports, with_host_link
from sim.network.topology import make_topology
from sim.training.validator import validate

B = 10.0  # bytes/s of the fabric: round numbers make hand-computed times exact
FABRIC = Fabric("slow", 8 * B, latency_s=0.5, overhead_s=1.0)  # alpha = 2 o + 2 L = 3 s
LINK = Fabric("link", 8 * 100.0, latency_s=0.05, overhead_s=0.1)
MODELS = ["flow", "analytical"]
N = 500.0  # bytes a message


def deliveries(net, messages: list[tuple[int, int, float]]) -> list[float]:
    """Send every (src, dst, bytes) at t = 0; their delivery times, in order."""
    events = [net.send(src, dst, nbytes) for src, dst, nbytes in messages]
    net.env.run(simpy.AllOf(net.env, events))
    return [event.value for event in events]


def cluster(model: str, nics: int, topology: str = "star", **options) -> object:
    """Two hosts of 4 ranks each (endpoints 0-3 and 4-7), ``nics`` NICs a host."""
    machines = np.arange(8) // 4
    net = build_network(simpy.Environment(), FABRIC, 8, model=model, topology=topology,
                        ports=nic_ports(machines, nics).tolist(), **options)
    return with_host_link(net, LINK, machines)


def test_a_hosts_ranks_take_its_nics_in_order() -> None:
    # rank i of g uses NIC (i k) // g; a port is named by the first rank using it
    assert nic_ports([0] * 8, 4).tolist() == [0, 0, 2, 2, 4, 4, 6, 6]
    assert nic_ports([0] * 4 + [1] * 4, 1).tolist() == [0, 0, 0, 0, 4, 4, 4, 4]
    assert nic_ports([0] * 4, 4).tolist() == [0, 1, 2, 3]  # as many NICs as ranks
    assert nic_ports([0] * 3, 2).tolist() == [0, 0, 2]  # 3 ranks: NICs 0, 0, 1
    assert nic_ports([0, 0, 1], 8).tolist() == [0, 1, 2]  # more NICs than ranks: one each


@pytest.mark.parametrize("model", MODELS)
def test_two_ranks_sharing_a_nic_send_at_half_its_rate_each(model: str) -> None:
    # ranks 0 and 1 share NIC 0 of host 0 (2 NICs for 4 ranks); both send N to host 1:
    # N / (B / 2) each through the shared port, plus alpha (the flow model delivers both at
    # that instant; the analytical one queues them, the second at the same time)
    times = deliveries(cluster(model, nics=2), [(0, 4, N), (1, 6, N)])
    assert max(times) == pytest.approx(3.0 + 2 * N / B, rel=1e-12)
    if model == "flow":
        assert times == pytest.approx([3.0 + 2 * N / B] * 2, rel=1e-12)


@pytest.mark.parametrize("model", MODELS)
def test_two_ranks_on_separate_nics_send_at_the_full_rate(model: str) -> None:
    # ranks 0 and 2 use NICs 0 and 1 of host 0, to ranks on separate NICs of host 1
    times = deliveries(cluster(model, nics=2), [(0, 4, N), (2, 6, N)])
    assert times == pytest.approx([3.0 + N / B] * 2, rel=1e-12)


@pytest.mark.parametrize("model", MODELS)
def test_a_nic_is_shared_on_the_receiving_side_too(model: str) -> None:
    # host 0 sends from its two NICs (ranks 0 and 2), host 1 receives on its one (ranks 4
    # and 5 share it): the receiving port carries both, N / (B / 2) each
    machines = np.arange(8) // 4
    net = with_host_link(build_network(simpy.Environment(), FABRIC, 8, model=model,
                                       ports=[0, 0, 2, 2, 4, 4, 4, 4]), LINK, machines)
    times = deliveries(net, [(0, 4, N), (2, 5, N)])
    assert max(times) == pytest.approx(3.0 + 2 * N / B, rel=1e-12)


def test_ranks_of_one_host_still_talk_over_the_host_link() -> None:
    # ranks 0 and 1 share a NIC but their message takes the host link, not the port
    net = cluster("flow", nics=1)
    assert deliveries(net, [(0, 1, N)]) == pytest.approx([0.3 + N / 100.0], rel=1e-12)


def test_leaf_spine_ports_hang_off_their_owners_leaf() -> None:
    # 4 hosts a leaf: the sharing ranks stay on the NIC owner's leaf and share its port
    times = deliveries(cluster("flow", nics=1, topology="leaf-spine", hosts_per_leaf=4),
                       [(0, 4, N), (1, 5, N)])
    assert times == pytest.approx([0.5 * 4 + 2.0 + 2 * N / B] * 2, rel=1e-12)


def test_without_shared_nics_every_endpoint_has_its_own_port() -> None:
    topology = make_topology("star", 4, B)
    assert topology.ports.tolist() == [0, 1, 2, 3]
    assert topology.route(1, 2) == [1, 4 + 2]
    with pytest.raises(ValueError, match="ports"):
        make_topology("star", 4, B, ports=[1, 0, 2, 3])  # port 1's owner uses port 0


@pytest.mark.parametrize("keys, message", [
    ({"cluster": {"nics_per_host": 2, "topology": "ring"}}, "has no NIC ports"),
    ({"cluster": {"nics_per_host": 2, "placement": "round-robin",
                  "topology": "leaf-spine"}}, "placement"),
    ({"cluster": {"nics_per_host": 0}}, "cluster.nics_per_host"),
])
def test_the_validator_refuses_nics_it_cannot_share(keys: dict, message: str) -> None:
    from sim.errors import UserError

    with pytest.raises(UserError, match=message) as err:
        validate(keys)
    assert "cluster.nics_per_host" in str(err.value)
