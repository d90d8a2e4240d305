"""Incremental max-min: after every start and every end, the rates equal a full solve.

Random scenarios (hypothesis) drive :class:`IncrementalMaxMin` through starts and ends on
random routes and capacities; at every event each active flow's rate must be the one
:func:`max_min_rates` gives for all the active flows at once. The flow network as a whole
(both its engines, messages sent one by one and in batches) must deliver every message when
the brute-force reference says.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_network_flow import IDEAL, deliveries, reference_deliveries

from sim.network.incremental import Flow, IncrementalMaxMin
from sim.network.maxmin import fill, max_min_rates
from sim.network.network_builder import build_network

CAPACITIES = st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 10.0]), min_size=1, max_size=8)


def full_solve(flows: list[Flow], capacity: list[float]) -> np.ndarray:
    flow = np.repeat(np.arange(len(flows)), [len(f.route) for f in flows])
    link = np.array([link for f in flows for link in f.route], np.int64)
    return max_min_rates(flow, link, len(flows), np.array(capacity))


@st.composite
def scenarios(draw):
    """Capacities, then starts: (gap before it in s, route, bytes) each."""
    capacity = draw(CAPACITIES)
    links = len(capacity)
    route = st.lists(st.integers(0, links - 1), min_size=1, max_size=min(4, links),
                     unique=True).map(tuple)
    # gaps of 0 start flows together; sizes from few bytes to many
    start = st.tuples(st.sampled_from([0.0, 0.0, 0.1, 0.5, 1.0, 3.0]), route,
                      st.sampled_from([1.0, 2.0, 3.0, 7.0, 10.0, 64.0]))
    return capacity, draw(st.lists(start, min_size=1, max_size=25))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_rates_equal_the_full_solver_at_every_event(scenario) -> None:
    capacity, starts = scenario
    engine = IncrementalMaxMin(capacity)
    active: list[Flow] = []
    now, events = 0.0, 0

    def check() -> None:
        engine.settle(now)
        if active:
            expected = full_solve(active, capacity)
            got = [engine.rate(flow) for flow in active]
            np.testing.assert_allclose(got, expected, rtol=1e-12)

    def finish_until(t: float) -> None:
        nonlocal now, events
        while engine.n_flows and engine.first_finish() <= t:
            now = max(now, engine.first_finish())
            done = engine.take_done(now, 1e-9)
            assert done, "the first flow due is not through when it is due"
            for flow in done:
                active.remove(flow)
                events += 1
            check()

    for i, (gap, route, size) in enumerate(starts):
        finish_until(now + gap)
        now += gap
        flow = Flow(i, route, size, now)
        engine.add(flow, now)
        active.append(flow)
        check()
    finish_until(np.inf)
    assert not active and engine.n_flows == 0 and events == len(starts)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=0, max_size=4, unique=True),
                min_size=1, max_size=12), CAPACITIES.filter(lambda c: len(c) >= 6))
def test_plain_python_filling_gives_the_numpy_bits(routes, capacity) -> None:
    rates, _ = fill(routes, capacity)
    flow = np.repeat(np.arange(len(routes)), [len(r) for r in routes])
    link = np.array([link for r in routes for link in r], np.int64)
    assert rates == max_min_rates(flow, link, len(routes), np.array(capacity)).tolist()


def test_a_hub_keeps_its_flows_in_one_group_at_c_over_n() -> None:
    # eight fast senders into one slower receiver (an incast): every flow gets C / n as
    # they come and go, without a full solve
    engine = IncrementalMaxMin([8.0] * 8 + [4.0])
    flows = [Flow(i, (i, 8), 8.0 * (i + 1), 0.0) for i in range(8)]
    for n, flow in enumerate(flows, start=1):
        engine.add(flow, 0.0)
        assert not engine.pending
        assert {engine.rate(f) for f in flows[:n]} == {4.0 / n}
    first = engine.take_done(engine.first_finish(), 1e-9)
    assert [f.key for f in first] == [0]
    assert not engine.pending
    assert {engine.rate(f) for f in flows[1:]} == {4.0 / 7}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["star", "leaf-spine", "ring"]),
       st.integers(1, 40))
def test_network_mixing_single_messages_and_batches_matches_the_reference(
        seed: int, topology: str, batch: int) -> None:
    # some messages alone, one batch large enough for the numpy table: they share links
    rng = np.random.default_rng(seed)
    hosts, count = 6, 12
    options = {"hosts_per_leaf": 3, "oversubscription": 2} if topology == "leaf-spine" else {}
    net = build_network(simpy.Environment(), IDEAL, hosts, topology=topology, **options)
    src = rng.integers(0, hosts, count)
    dst = (src + rng.integers(1, hosts, count)) % hosts
    starts = np.round(rng.uniform(0, 10, count), 1)
    sizes = rng.integers(50, 1000, count).astype(float)
    messages = list(zip(starts.tolist(), src.tolist(), dst.tolist(), sizes.tolist(),
                        strict=True))
    bulk_src = rng.integers(0, hosts, batch)
    bulk_dst = (bulk_src + rng.integers(1, hosts, batch)) % hosts
    bulk_at, bulk_sizes = float(np.round(rng.uniform(0, 10), 1)), np.full(batch, 300.0)
    every = messages + [(bulk_at, int(s), int(d), 300.0)
                        for s, d in zip(bulk_src, bulk_dst, strict=True)]
    expected = reference_deliveries(net.topology, every)
    arrived: dict[int, float] = {}

    def batch_sender():
        yield net.env.timeout(bulk_at)
        net.send_many(bulk_src, bulk_dst, bulk_sizes, lambda which: arrived.update(
            {count + int(i): net.env.now for i in which}))

    net.env.process(batch_sender())
    log = deliveries(net, [(i, *m) for i, m in enumerate(messages)])
    arrived.update({i: t for t, i in log})
    assert sorted(arrived) == list(range(len(every)))
    for i, t in arrived.items():
        assert t == pytest.approx(expected[i], rel=1e-9), i


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("count", [1, 5, 40])
def test_send_all_fires_with_the_last_delivery_of_send_many(model: str, count: int) -> None:
    # one event for a whole batch (a push to every shard) instead of a callback per instant
    rng = np.random.default_rng(count)
    src = rng.integers(0, 8, count)
    dst = (src + rng.integers(1, 8, count)) % 8
    sizes = rng.integers(0, 5000, count).astype(float)  # 0 bytes: latency and overheads only
    sent = sizes.tolist()
    times = {}
    for how in ("all", "many"):
        net = build_network(simpy.Environment(), "eth-25g", 8, model=model,
                            topology="leaf-spine", hosts_per_leaf=4)
        if how == "all":
            done = net.send_all(src, dst, sizes)
            net.env.run()
            times[how] = done.value
        else:
            arrivals: list[float] = []
            env = net.env
            net.send_many(src, dst, sizes,
                          lambda which, env=env, log=arrivals: log.extend([env.now] * len(which)))
            env.run()
            assert len(arrivals) == count
            times[how] = max(arrivals)
    assert times["all"] == times["many"] > 0
    assert sizes.tolist() == sent  # the caller's array is not worked down


def link_samples(seed: int, topology: str, every_link: bool) -> dict[str, list]:
    """The trace's link counters of a random mix of single messages and one batch, sampling
    the links the engines say changed, or (``every_link``) every link at every settle."""
    rng = np.random.default_rng(seed)
    hosts, count = 6, 14
    options = {"hosts_per_leaf": 3, "oversubscription": 2} if topology == "leaf-spine" else {}
    net = build_network(simpy.Environment(), IDEAL, hosts, topology=topology, **options)
    net.start_log(10**6)
    if every_link:
        net._changed_links = lambda: set(range(len(net.capacity)))
    src = rng.integers(0, hosts, count)
    dst = (src + rng.integers(1, hosts, count)) % hosts
    starts = np.round(rng.uniform(0, 10, count), 1).tolist()
    sizes = rng.integers(50, 1000, count).astype(float).tolist()

    def batch_sender():
        yield net.env.timeout(float(np.round(rng.uniform(0, 10), 1)))
        net.send_many(src[:8], dst[:8], np.full(8, 300.0), lambda which: None)

    net.env.process(batch_sender())
    deliveries(net, [(i, starts[i], int(src[i]), int(dst[i]), sizes[i])
                     for i in range(count)])
    log = net.flow_log
    return {**{k: list(v) for k, v in log.link_samples.items()},
            **{f"in_flight_{k}": list(v) for k, v in log.in_flight.items()}}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["star", "leaf-spine", "ring"]))
def test_the_link_counters_sample_only_changed_links_yet_miss_no_change(seed, topology):
    # (they sampled every busy link at every flow start or end: O(links) per event)
    changed = link_samples(seed, topology, every_link=False)
    assert changed["time_s"]
    assert changed == link_samples(seed, topology, every_link=True)
