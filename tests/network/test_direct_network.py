"""Network modules driven directly rather than through a strategy: the analytical network's
queues and closed forms (sim/network/analytical.py), the bulk flow table's max-min rates
(bulk.py), the two-tier network's routing between fabric and host link (two_tier.py), and
the trace's flow log (linklog.py). Each against a closed form or a count by hand.

A fabric of 1 GB/s with alpha = 2 us (1 us a hop, no overhead) makes every time a short
sum: a message of n bytes alone takes 2e-6 + n * 1e-9 s.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sim.network.analytical import AnalyticalNetwork
from sim.network.bulk import BulkFlows
from sim.network.collectives import REGISTRY, get_collective
from sim.network.fabrics import fabric_from_dict
from sim.network.linklog import FlowLog
from sim.network.message_cost import alpha_s, beta_s
from sim.network.topology import make_topology
from sim.network.two_tier import TwoTierNetwork

FABRIC = fabric_from_dict({"base": "ib-hdr", "latency_s": 1e-6, "overhead_s": 0.0,
                           "bandwidth_Bps": 1e9})
ALPHA, BETA = alpha_s(FABRIC), beta_s(FABRIC)
N = 1000.0  # bytes


def analytical(hosts: int, env: simpy.Environment | None = None, fabric=FABRIC,
               ) -> AnalyticalNetwork:
    env = env or simpy.Environment()
    return AnalyticalNetwork(env, fabric, make_topology("star", hosts, fabric.bandwidth_Bps))


def arrivals(net, src: list[int], dst: list[int], nbytes: list[float]) -> np.ndarray:
    """One batch sent now; each message's arrival time (filled in as the env runs)."""
    when = np.full(len(src), np.nan)

    def delivered(which: np.ndarray) -> None:
        when[which] = net.env.now

    net.send_many(np.array(src), np.array(dst), np.array(nbytes, float), delivered)
    return when


# ---- analytical ---------------------------------------------------------------------------

def test_a_message_alone_costs_alpha_plus_n_beta():
    net = analytical(2)
    assert ALPHA == 2e-6 and BETA == 1e-9
    done = net.send(0, 1, N)
    net.env.run(done)
    assert done.value == net.env.now == pytest.approx(ALPHA + N * BETA, rel=1e-15)
    assert net.messages_delivered == 1


def test_a_host_sending_two_messages_at_once_serves_them_in_order():
    net = analytical(3)
    when = arrivals(net, [0, 0], [1, 2], [N, 2 * N])
    net.env.run()
    # its send side is FIFO: the second waits behind the first (receive sides are idle)
    assert when.tolist() == [ALPHA + N * BETA, ALPHA + 3 * N * BETA]


def test_messages_that_share_no_host_do_not_interact():
    net = analytical(4)
    when = arrivals(net, [0, 2], [1, 3], [N, N])
    net.env.run()
    assert when.tolist() == [ALPHA + N * BETA] * 2


def test_a_message_to_itself_queues_on_the_hosts_two_sides():
    net = analytical(2)
    when = arrivals(net, [0, 1], [0, 0], [N, N])
    net.env.run()
    # the second's receive side (host 0's) waits behind the first
    assert when.tolist() == [ALPHA + N * BETA, ALPHA + 2 * N * BETA]


def test_a_host_outside_the_topology_is_a_value_error():
    net = analytical(2)
    with pytest.raises(ValueError, match="hosts must be in"):
        net.send(0, 2, N)


@pytest.mark.parametrize("name", [n for n, c in REGISTRY.items() if c.kind == "allreduce"])
@pytest.mark.parametrize("p", [2, 3, 4, 7])
def test_a_collective_on_idle_links_takes_its_closed_form(name, p):
    net = analytical(p + 8)  # room for the servers of ps (hosts p..)
    collective = get_collective(name)
    took = net.env.process(collective.run(net, p=p, nbytes=int(N)))
    net.env.run(took)
    assert took.value == collective.closed_form_s(p, N, ALPHA, BETA)


def test_a_collective_waits_for_its_hosts_links_then_holds_them():
    net = analytical(4)  # ranks on hosts 0..2; host 3 only receives
    ring = get_collective("ring")
    closed = ring.closed_form_s(3, N, ALPHA, BETA)
    before = net.send(0, 3, 4 * N)  # host 0's send side busy for 4 N beta
    took = net.env.process(ring.run(net, p=3, nbytes=int(N), hosts=np.arange(3)))
    net.env.run(took)
    assert took.value == pytest.approx(4 * N * BETA + closed, rel=1e-12)
    assert before.processed
    # a message from a host of the collective queues behind it
    after = net.send(1, 3, N)
    start = net.env.now
    net.env.run(after)
    assert net.env.now - start == pytest.approx(ALPHA + N * BETA, rel=1e-9)


def test_a_collective_with_buffers_reduces_the_numbers():
    p = 3
    net = analytical(p)
    rng = np.random.default_rng(0)
    buffers = [rng.normal(size=12) for _ in range(p)]
    total = buffers[0] + buffers[1] + buffers[2]
    net.env.run(net.env.process(get_collective("ring").run(net, buffers)))
    for b in buffers:
        np.testing.assert_allclose(b, total, rtol=1e-14)


# ---- bulk ---------------------------------------------------------------------------------

def add(table: BulkFlows, now: float, routes: list[list[int]], sizes: list[float]) -> None:
    n = len(routes)
    table.add(now, {"left": np.array(sizes, float), "size": np.array(sizes, float),
                    "hops": np.array([len(r) for r in routes], np.int64),
                    "batch": np.zeros(n, np.int64), "index": np.arange(n, dtype=np.int64),
                    "started": np.full(n, now)},
              np.repeat(np.arange(n), [len(r) for r in routes]),
              np.array([link for r in routes for link in r], np.int64))


def test_bulk_flows_on_their_own_links_run_at_their_slowest_link():
    table = BulkFlows(np.array([10.0, 10.0, 5.0]))
    add(table, 0.0, [[0], [1, 2]], [20.0, 20.0])
    table.settle()
    assert table.rate.tolist() == [10.0, 5.0]
    assert table.first_wait() == 2.0  # 20 bytes at 10 B/s
    assert table.load.tolist() == [1, 1, 1]
    assert table.links_of(1) == (1, 2)


def test_bulk_flows_sharing_a_link_get_max_min_fair_rates():
    table = BulkFlows(np.array([10.0, 10.0, 4.0]))
    add(table, 0.0, [[0], [1]], [100.0, 100.0])
    table.settle()
    # a flow on links 0 and 2: link 2 caps it at 4, flow 0 takes the rest of link 0
    add(table, 1.0, [[0, 2]], [8.0])
    assert table.left.tolist() == [90.0, 90.0, 8.0]  # advanced to t = 1 at the old rates
    table.settle()
    assert table.rate.tolist() == [6.0, 10.0, 4.0]
    table.advance(3.0)  # the new flow is through after 2 s
    done = table.done_rows(3.0)
    assert done.tolist() == [False, False, True]
    assert table.remove(done)  # flow 0 shared link 0 with it: its rate went stale
    table.settle()
    assert table.rate.tolist() == [10.0, 10.0] and table.load.tolist() == [1, 1, 0]
    assert table.left.tolist() == [78.0, 70.0]


def test_bulk_flows_all_done_leave_an_empty_table():
    table = BulkFlows(np.array([1.0]))
    add(table, 0.0, [[0]], [1.0])
    table.settle()
    table.advance(1.0)
    assert not table.remove(table.done_rows(1.0))
    assert table.n_flows == 0 and table.load.tolist() == [0] and not table.busy([0])


# ---- two_tier -----------------------------------------------------------------------------

NVLINK = fabric_from_dict({"base": "ib-hdr", "latency_s": 1e-7, "overhead_s": 0.0,
                           "bandwidth_Bps": 1e11})


def two_tier(machine: list[int]) -> TwoTierNetwork:
    env = simpy.Environment()
    n = len(machine)
    return TwoTierNetwork(analytical(n, env), analytical(n, env, NVLINK), np.array(machine))


def test_a_message_takes_the_host_link_inside_a_machine_and_the_fabric_across():
    net = two_tier([0, 0, 1, 1])
    inside = alpha_s(NVLINK) + N * beta_s(NVLINK)
    outside = ALPHA + N * BETA
    for src, dst, expected in [(0, 1, inside), (2, 3, inside), (1, 2, outside),
                               (0, 0, outside)]:  # to itself: the fabric, as without one
        start = net.env.now
        done = net.send(src, dst, N)
        net.env.run(done)
        assert net.env.now - start == pytest.approx(expected, rel=1e-12)
    assert net.messages_delivered == 4
    assert net.inside.messages_delivered == 2 and net.outside.messages_delivered == 2


def test_send_many_reports_indices_into_the_callers_arrays_whichever_tier():
    net = two_tier([0, 0, 1, 1])
    when = arrivals(net, [0, 1, 2, 3], [1, 2, 3, 0], [N, N, N, N])
    net.env.run()
    inside = alpha_s(NVLINK) + N * beta_s(NVLINK)
    outside = ALPHA + N * BETA
    np.testing.assert_allclose(when, [inside, outside, inside, outside], rtol=1e-12)


def test_send_all_fires_when_the_last_of_both_tiers_has_arrived():
    net = two_tier([0, 0, 1, 1])
    done = net.send_all(np.array([0, 1]), np.array([1, 2]), np.array([N, N]))
    net.env.run(done)
    assert done.value == net.env.now == pytest.approx(ALPHA + N * BETA, rel=1e-12)


@pytest.mark.parametrize(("machine", "fabric"), [([0, 1, 2, 3], FABRIC),
                                                 ([5, 5, 5, 5], NVLINK)])
def test_a_collective_on_one_tier_runs_on_that_tiers_model(machine, fabric):
    net = two_tier(machine)
    ring = get_collective("ring")
    took = net.env.process(ring.run(net, p=4, nbytes=int(N)))
    net.env.run(took)
    assert took.value == ring.closed_form_s(4, N, alpha_s(fabric), beta_s(fabric))


# ---- linklog ------------------------------------------------------------------------------

def flow(start: float, links: tuple[int, ...] = (0,), send: int = 0, part: int = 0):
    return (start, 100.0, links, send, part)


def test_the_log_keeps_the_first_limit_flows_and_counts_the_rest():
    log = FlowLog(limit=2)
    log.keep(1.0, [flow(0.0), flow(0.5, send=1)], 2)
    assert log.flows == [(0.0, 1.0, 100.0, (0,), 0, 0), (0.5, 1.0, 100.0, (0,), 1, 0)]
    assert not log.sampling  # full: the counters stop
    log.keep(2.0, [flow(1.5, send=2)], 1)
    assert log.finished == 3 and log.left_out == 1 and log.first_left_out_s == 2.0


def test_the_log_keeps_only_flows_inside_its_window():
    log = FlowLog(limit=10, window_s=(1.0, 5.0))
    log.keep(2.0, [flow(0.5), flow(1.5, send=1)], 2)  # the first began before the window
    log.keep(6.0, [flow(4.0, send=2)], 1)  # ended after it
    assert [f[4] for f in log.flows] == [1]
    assert log.left_out == 2 and log.first_left_out_s == 2.0


def test_samples_record_each_links_utilisation_when_it_changes():
    log = FlowLog(limit=10)
    capacity = [10.0, 20.0]
    log.sample(0.0, [0, 1], lambda links: [5.0, 20.0], capacity, 2)
    log.sample(0.0, [0], lambda links: [10.0], capacity, 2)  # same instant: replaces
    log.sample(1.0, [0, 1], lambda links: [10.0, 10.0], capacity, 1)  # link 0 unchanged
    samples = log.link_samples
    assert list(zip(samples["time_s"], samples["link"], samples["utilisation"],
                    strict=True)) == [(0.0, 0, 1.0), (0.0, 1, 1.0), (1.0, 1, 0.5)]
    assert list(zip(log.in_flight["time_s"], log.in_flight["flows"], strict=True)) == [
        (0.0, 2), (1.0, 1)]


def test_sampling_stops_at_its_budget_and_drops_the_counters_to_zero():
    log = FlowLog(limit=10, sample_limit=3)
    log.sample(0.0, [0], lambda links: [4.0], [8.0], 1)
    log.sample(1.0, [0], lambda links: [8.0], [8.0], 1)  # 3 samples: the budget
    assert not log.sampling and log.samples_cut_s == 1.0
    samples = log.link_samples
    assert list(samples["utilisation"]) == [0.5, 0.0]  # the drop replaced the last value
    # flows in flight: 1 from t = 0 (unchanged at t = 1), then 0 where sampling stopped
    assert list(zip(log.in_flight["time_s"], log.in_flight["flows"], strict=True)) == [
        (0.0, 1), (1.0, 0)]
