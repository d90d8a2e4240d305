"""The flow model: max-min sharing, exact event times, contention on real topologies."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sim.network.collective_alone import run_alone
from sim.network.fabrics import Fabric
from sim.network.flow import FlowNetwork
from sim.network.maxmin import max_min_rates
from sim.network.message_cost import alpha_s, beta_s
from sim.network.network_builder import build_network
from sim.network.topology import LeafSpine, Ring, Star, make_topology, place

B = 100.0  # bytes/s: round numbers make hand-computed times exact
IDEAL = Fabric("ideal", 8 * B, latency_s=0.0, overhead_s=0.0)  # no alpha: pure bandwidth


def network(fabric: Fabric = IDEAL, hosts: int = 8) -> FlowNetwork:
    env = simpy.Environment()
    return FlowNetwork(env, fabric, Star(hosts, fabric.bandwidth_Bps))


def deliveries(net: FlowNetwork, messages: list[tuple[str, float, int, int, float]]
               ) -> list[tuple[float, str]]:
    """Send (name, at, src, dst, bytes) messages; return the (time, name) delivery log."""
    log: list[tuple[float, str]] = []

    def sender(name: str, at: float, src: int, dst: int, nbytes: float):
        yield net.env.timeout(at)
        delivered_at = yield net.send(src, dst, nbytes)
        log.append((delivered_at, name))

    for message in messages:
        net.env.process(sender(*message))
    net.env.run()
    return sorted(log)


# ---- max-min fairness --------------------------------------------------------------------

def test_two_flows_on_one_link_each_get_half() -> None:
    # flows 0 and 1 both cross link 0 (capacity 10); link 1 and 2 are private
    flow, link = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 2])
    rates = max_min_rates(flow, link, 2, np.array([10.0, 100.0, 100.0]))
    assert rates.tolist() == [5.0, 5.0]


def test_progressive_filling_has_two_levels() -> None:
    # f0: link A (cap 10); f1: links A and B; f2: link B (cap 4).
    # B saturates first at 2 each, then f0 takes what is left of A: 10 - 2 = 8.
    flow, link = np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1])
    rates = max_min_rates(flow, link, 3, np.array([10.0, 4.0]))
    assert rates == pytest.approx([8.0, 2.0, 2.0], rel=1e-15)


def test_a_flow_without_links_is_unlimited() -> None:
    rates = max_min_rates(np.array([1]), np.array([0]), 2, np.array([3.0]))
    assert rates.tolist() == [np.inf, 3.0]


def test_two_messages_out_of_one_nic_take_twice_as_long() -> None:
    log = deliveries(network(), [("a", 0, 0, 1, 500), ("b", 0, 0, 2, 500)])
    assert log == [(10.0, "a"), (10.0, "b")]  # 500 bytes at B/2 each, vs 5 s alone


@pytest.mark.parametrize("k", [2, 3, 7])
def test_incast_takes_k_times_one_transfer(k: int) -> None:
    alone = deliveries(network(), [("x", 0, 1, 0, 300)])[0][0]
    log = deliveries(network(), [(f"s{i}", 0, i, 0, 300) for i in range(1, k + 1)])
    assert alone == 3.0
    assert [t for t, _ in log] == [k * alone] * k


# ---- exact event logs (the way SimPy tests its own scheduler) -----------------------------

SCENARIO = [
    ("A", 0.0, 0, 2, 300),  # alone on host 2's downlink until B arrives
    ("D", 0.0, 2, 0, 300),  # the other direction of A's links: full duplex, never slowed
    ("C", 0.5, 3, 4, 50),  # disjoint links
    ("B", 1.0, 1, 2, 100),  # shares host 2's downlink with A from t = 1
]


def test_event_log_without_alpha() -> None:
    # A: 100 B/s until 1 s (200 bytes left), then 50 B/s with B; B ends at 1 + 100/50 = 3
    # with A at 100 left, alone again: 4. C: 0.5 + 50/100 = 1. D: 300/100 = 3.
    assert deliveries(network(), SCENARIO) == [(1.0, "C"), (3.0, "B"), (3.0, "D"), (4.0, "A")]


def test_event_log_with_overheads_and_latency() -> None:
    # o = 0.1 delays every flow's start and its delivery; 2 hops of L = 0.05 add 0.1 more:
    # the same flows as above shifted by 0.1, each delivered 0.2 after its last byte.
    fabric = Fabric("slow", 8 * B, latency_s=0.05, overhead_s=0.1)
    log = deliveries(network(fabric), SCENARIO)
    assert [name for _, name in log] == ["C", "B", "D", "A"]
    assert [t for t, _ in log] == pytest.approx([1.3, 3.3, 3.3, 4.3], rel=1e-12)


def test_empty_message_costs_alpha_only() -> None:
    fabric = Fabric("alpha", 8 * B, latency_s=0.25, overhead_s=0.5)
    assert deliveries(network(fabric), [("e", 0.0, 0, 1, 0)]) == [(1.5, "e")]


def test_flows_a_byte_apart_finish_together_and_never_early() -> None:
    # 2e9 B/s: one byte is 0.5 ns, inside the 1 ns precision window -> one event, at the
    # later of the two times
    net = network(Fabric("fast", 16e9, 0.0, 0.0))
    log = deliveries(net, [("a", 0, 0, 1, 1_000_000), ("b", 0, 2, 3, 1_000_001)])
    assert log[0][0] == log[1][0] == pytest.approx(1_000_001 / 2e9, rel=1e-15)


# ---- topologies ----------------------------------------------------------------------------

def test_routes() -> None:
    star = Star(4, 1.0)
    assert star.route(1, 3) == [1, 4 + 3]
    spine = LeafSpine(8, 1.0, hosts_per_leaf=4)
    assert spine.route(0, 3) == [0, 8 + 3]  # same leaf: 2 hops
    assert [spine.link_name(x) for x in spine.route(1, 6)] == [
        "host1->leaf0", "leaf0->spine", "spine->leaf1", "leaf1->host6"]
    ring = Ring(6, 1.0)
    assert ring.route(0, 2) == [0, 1]  # clockwise
    assert ring.route(0, 4) == [6 + 0, 6 + 5]  # counter-clockwise is shorter
    assert ring.route(0, 3) == [0, 1, 2]  # a tie goes clockwise
    assert ring.route(2, 2) == []


def test_leaf_uplink_capacity_follows_oversubscription() -> None:
    spine = make_topology("leaf-spine", 32, 10.0, hosts_per_leaf=8, oversubscription=4)
    assert spine.n_leaves == 4
    assert spine.capacity_Bps[-1] == 8 * 10.0 / 4


def test_round_robin_placement_deals_ranks_across_leaves() -> None:
    spine = LeafSpine(8, 1.0, hosts_per_leaf=4)
    hosts = place(spine, 8, "round-robin")
    assert spine.group[hosts].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert sorted(hosts.tolist()) == list(range(8))


def test_bad_topology_options_are_named() -> None:
    with pytest.raises(ValueError, match="oversubscription"):
        make_topology("star", 4, 1.0, oversubscription=2)
    with pytest.raises(ValueError, match="unknown topology 'torus'"):
        make_topology("torus", 4, 1.0)
    with pytest.raises(ValueError, match=">= 1"):
        make_topology("leaf-spine", 4, 1.0, oversubscription=0.5)


def test_cross_leaf_ring_over_2_to_1_spine_is_slower_by_the_predicted_factor() -> None:
    # 2 leaves x 8 hosts, ranks alternating leaves: every ring message crosses the spine.
    # A leaf uplink carries 8 hosts' worth / 2 = 4 links' capacity for 8 flows: B/2 each,
    # so the bandwidth term doubles; inter-leaf messages have 4 hops of latency.
    p, nbytes = 16, 16 * 10**6
    fabric = Fabric("hdr-like", 200e9, latency_s=0.15e-6, overhead_s=0.35e-6)
    times = {r: run_alone("ring", p=p, nbytes=nbytes, fabric=fabric, topology="leaf-spine",
                          hosts_per_leaf=8, oversubscription=r, placement="round-robin")[0]
             for r in (1, 2)}
    alpha, beta = alpha_s(fabric, hops=4), beta_s(fabric)
    for r, t in times.items():
        assert t == pytest.approx(2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * r * beta,
                                  rel=1e-9)
    bandwidth_only = {r: run_alone("ring", p=p, nbytes=nbytes, fabric=IDEAL,
                                   topology="leaf-spine", hosts_per_leaf=8, oversubscription=r,
                                   placement="round-robin")[0] for r in (1, 2)}
    assert bandwidth_only[2] / bandwidth_only[1] == pytest.approx(2.0, rel=1e-12)


def test_ring_placed_by_leaf_does_not_feel_the_oversubscription() -> None:
    # block placement: one flow per leaf uplink, which has capacity to spare
    times = [run_alone("ring", p=32, nbytes=32 * 10**5, topology="leaf-spine", hosts_per_leaf=8,
                       oversubscription=r)[0] for r in (1, 4)]
    assert times[0] == times[1]


def test_recursive_doubling_over_oversubscribed_spine_slows_down() -> None:
    # partners 8 and 16 apart cross the spine with every rank's full vector
    base, slow = (run_alone("recursive-doubling", p=32, nbytes=10**6, topology="leaf-spine",
                            hosts_per_leaf=8, oversubscription=r)[0] for r in (1, 4))
    assert slow > 1.5 * base


def test_concurrent_collectives_share_the_nics() -> None:
    # two timing-only ring allreduces over the same 4 hosts, started together: every link
    # carries both rings' chunks, so the bandwidth term doubles and alpha does not
    from sim.network.collectives import get_collective

    p, nbytes = 4, 4 * 10**6
    env = simpy.Environment()
    net = build_network(env, "ib-edr", p)
    ring = get_collective("ring")
    runs = [env.process(ring.run(net, p=p, nbytes=nbytes)) for _ in range(2)]
    env.run(env.all_of(runs))
    fabric = net.fabric
    expected = 2 * (p - 1) * alpha_s(fabric) + 2 * 2 * (p - 1) / p * nbytes / fabric.bandwidth_Bps
    assert [run.value for run in runs] == pytest.approx([expected, expected], rel=1e-9)


# ---- against a brute-force reference --------------------------------------------------------

def reference_deliveries(topology, messages) -> dict[int, float]:
    """Fluid max-min by the book: recompute every rate from scratch at every event."""
    routes = {i: topology.route(src, dst) for i, (_, src, dst, _) in enumerate(messages)}
    pending = sorted(range(len(messages)), key=lambda i: messages[i][0])
    left: dict[int, float] = {}
    done: dict[int, float] = {}
    now = 0.0
    while pending or left:
        rate = {}
        unfrozen, cap = set(left), dict(enumerate(topology.capacity_Bps.tolist()))
        level = 0.0
        while unfrozen:  # progressive filling, one bottleneck link at a time
            users = {link: [i for i in unfrozen if link in routes[i]] for link in cap}
            shares = {link: cap[link] / len(u) for link, u in users.items() if u}
            link, share = min(shares.items(), key=lambda item: item[1])
            level += share
            for other, u in users.items():
                cap[other] -= share * len(u)
            for i in users[link]:
                rate[i] = level
                unfrozen.discard(i)
        next_start = messages[pending[0]][0] if pending else np.inf
        next_end = min((now + left[i] / rate[i] for i in left), default=np.inf)
        step = min(next_start, next_end) - now
        for i in left:
            left[i] -= rate[i] * step
        now += step
        for i in [i for i in left if left[i] <= 1e-9 * messages[i][3]]:
            done[i] = now
            del left[i]
        while pending and messages[pending[0]][0] <= now:
            i = pending.pop(0)
            left[i] = messages[i][3]
    return done


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("topology", ["star", "leaf-spine", "ring"])
def test_matches_brute_force_reference(seed: int, topology: str) -> None:
    rng = np.random.default_rng(seed)
    hosts, count = 6, 14
    options = {"hosts_per_leaf": 3, "oversubscription": 2} if topology == "leaf-spine" else {}
    net = build_network(simpy.Environment(), IDEAL, hosts, topology=topology, **options)
    src = rng.integers(0, hosts, count)
    dst = (src + rng.integers(1, hosts, count)) % hosts
    starts = np.round(rng.uniform(0, 10, count), 1)  # some start together
    sizes = rng.integers(50, 1000, count).astype(float)
    messages = list(zip(starts.tolist(), src.tolist(), dst.tolist(), sizes.tolist(),
                        strict=True))
    expected = reference_deliveries(net.topology, messages)
    log = deliveries(net, [(i, *m) for i, m in enumerate(messages)])
    assert len(log) == count
    for t, i in log:
        assert t == pytest.approx(expected[i], rel=1e-9), i
