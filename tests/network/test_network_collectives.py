"""Collectives: exact closed forms, true sums on real buffers, and the bandwidth bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.network.collective_alone import run_alone, simulate
from sim.network.collectives import REGISTRY, get_collective
from sim.network.fabrics import REGISTRY as FABRICS
from sim.network.fabrics import Fabric, get_fabric
from sim.network.message_cost import alpha_s, beta_s
from sim.network.network_builder import build_network

ALLREDUCES = [name for name, cls in REGISTRY.items() if cls.kind == "allreduce"]
# each rank's buffer is the whole input (allgathers: tests/network/test_network_allgather.py,
# all-to-alls: tests/network/test_network_alltoall.py)
ONE_BLOCK = [name for name, cls in REGISTRY.items() if cls.kind not in ("allgather", "alltoall")]
P_RANGE = range(2, 65)


def lg(p: int) -> int:
    return p.bit_length() - 1


def exact_bytes(p: int) -> int:
    """A size every chunk rule splits evenly: divisible by p and by the power of two <= p."""
    return p * (1 << lg(p)) * 1000


def uncontended(algo: str, p: int, fabric: Fabric, **params: int) -> tuple[float, float, float]:
    """(simulated time, alpha, beta) on one switch for a vector of exact_bytes(p) bytes."""
    t, _ = run_alone(get_collective(algo, **params), p=p, nbytes=exact_bytes(p), fabric=fabric)
    return t, alpha_s(fabric), beta_s(fabric)


# ---- uncontended time == Thakur, Rabenseifner & Gropp (2005) ----------------------------

@pytest.mark.parametrize("fabric", [get_fabric("ib-hdr"), get_fabric("eth-10g")],
                         ids=lambda f: f.name)
def test_ring_closed_form_any_p(fabric: Fabric) -> None:
    for p in P_RANGE:
        t, a, b = uncontended("ring", p, fabric)
        n = exact_bytes(p)
        assert t == pytest.approx(2 * (p - 1) * a + 2 * (p - 1) / p * n * b, rel=1e-9), p


@pytest.mark.parametrize("fabric", [get_fabric("ib-hdr"), get_fabric("eth-10g")],
                         ids=lambda f: f.name)
def test_recursive_doubling_closed_form(fabric: Fabric) -> None:
    for p in P_RANGE:
        t, a, b = uncontended("recursive-doubling", p, fabric)
        n = exact_bytes(p)
        # powers of two: lg p (a + n b); others fold in and out: two more such steps
        steps = lg(p) if p & (p - 1) == 0 else lg(p) + 2
        assert t == pytest.approx(steps * (a + n * b), rel=1e-9), p


@pytest.mark.parametrize("fabric", [get_fabric("ib-hdr"), get_fabric("eth-10g")],
                         ids=lambda f: f.name)
def test_rabenseifner_closed_form(fabric: Fabric) -> None:
    for p in P_RANGE:
        t, a, b = uncontended("rabenseifner", p, fabric)
        n, q = exact_bytes(p), 1 << lg(p)
        fold = 0 if p == q else 2 * (a + n * b)
        assert t == pytest.approx(2 * lg(q) * a + 2 * (q - 1) / q * n * b + fold, rel=1e-9), p


def test_tree_and_broadcast_closed_forms() -> None:
    fabric = get_fabric("roce-100g")
    for p in P_RANGE:
        n, rounds = exact_bytes(p), math.ceil(math.log2(p))
        t, a, b = uncontended("tree", p, fabric)
        assert t == pytest.approx(2 * rounds * (a + n * b), rel=1e-9), p
        t, a, b = uncontended("broadcast", p, fabric)
        assert t == pytest.approx(rounds * (a + n * b), rel=1e-9), p


@pytest.mark.parametrize("servers", [1, 2, 3, 8])
def test_parameter_server_closed_form(servers: int) -> None:
    # each phase is limited by the busier NIC: a worker's (n) or a server's (p n / S)
    fabric = get_fabric("eth-25g")
    for p in (1, 2, 5, 8, 24):
        n = servers * 10**6
        t, _ = run_alone(get_collective("ps", servers=servers), p=p, nbytes=n, fabric=fabric)
        a, b = alpha_s(fabric), beta_s(fabric)
        assert t == pytest.approx(2 * (a + max(1, p / servers) * n * b), rel=1e-9), (p, servers)


@pytest.mark.parametrize("algo", list(REGISTRY))
def test_class_closed_form_matches_flow_model_and_analytical_model(algo: str) -> None:
    fabric = get_fabric("ib-ndr")
    collective = get_collective(algo)
    for p in (2, 6, 16, 33):
        n = exact_bytes(p)
        closed = collective.closed_form_s(p, n, alpha_s(fabric), beta_s(fabric))
        for model in ("flow", "analytical"):
            t, _ = run_alone(collective, p=p, nbytes=n, fabric=fabric, model=model)
            assert t == pytest.approx(closed, rel=1e-9), (p, model)


def test_one_worker_costs_nothing() -> None:
    for algo in ("ring", "rabenseifner", "recursive-doubling", "tree", "broadcast"):
        assert run_alone(algo, p=1, nbytes=10**6)[0] == 0.0


# ---- data really moves -------------------------------------------------------------------

def vectors(p: int, n: int, dtype: type, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(dtype) for _ in range(p)]


def expected(algo: str, inputs: list[np.ndarray]) -> np.ndarray:
    if REGISTRY[algo].kind == "broadcast":
        return inputs[0]
    return np.sum(np.stack(inputs).astype(np.float64), axis=0)


@pytest.mark.parametrize("algo", ONE_BLOCK)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_results_equal_numpy_and_are_identical_on_every_rank(algo: str, dtype: type) -> None:
    tolerance = {np.float64: 1e-12, np.float32: 2e-5}[dtype]
    for p, n in [(2, 100), (3, 1000), (5, 17), (8, 1000), (13, 999), (7, 3)]:  # 3 < p: empty chunks
        inputs = vectors(p, n, dtype, seed=p * n)
        time_s, result = simulate(algo, [v.copy() for v in inputs])
        assert time_s > 0
        for buffer in result:
            assert buffer.dtype == dtype
            np.testing.assert_allclose(buffer, expected(algo, inputs), rtol=tolerance,
                                       atol=tolerance * p)
            np.testing.assert_array_equal(buffer, result[0])  # replicas agree bit for bit


@pytest.mark.parametrize("servers", [1, 2, 3, 5])
def test_parameter_server_shards_sum_right(servers: int) -> None:
    inputs = vectors(6, 101, np.float64, seed=servers)  # 101 does not split evenly
    _, result = simulate(get_collective("ps", servers=servers), [v.copy() for v in inputs])
    for buffer in result:
        np.testing.assert_allclose(buffer, np.sum(inputs, axis=0), rtol=1e-12, atol=1e-12)


def test_parameter_server_adds_in_worker_order() -> None:
    # bit for bit the left-to-right sum over workers, under heavy incast (pushes arriving
    # in any order): float32 rounding would show any other order
    inputs = vectors(9, 1000, np.float32, seed=11)
    in_order = np.zeros(1000, np.float32)
    for v in inputs:
        in_order = in_order + v
    _, result = simulate(get_collective("ps", servers=3), [v.copy() for v in inputs],
                         topology="leaf-spine", hosts_per_leaf=2, oversubscription=4)
    np.testing.assert_array_equal(result[4], in_order)


@pytest.mark.parametrize("algo", ONE_BLOCK)
def test_results_do_not_depend_on_timing(algo: str) -> None:
    # flow model on a contended topology and the analytical model give the same bits
    inputs = vectors(12, 500, np.float32, seed=7)
    _, flow = simulate(algo, [v.copy() for v in inputs], topology="leaf-spine",
                       hosts_per_leaf=4, oversubscription=3, placement="round-robin")
    _, analytical = simulate(algo, [v.copy() for v in inputs], model="analytical")
    for a, b in zip(flow, analytical, strict=True):
        np.testing.assert_array_equal(a, b)


def test_timing_only_takes_the_same_time_as_moving_the_data() -> None:
    inputs = vectors(4, 1000, np.float64, seed=1)
    with_data, _ = simulate("rabenseifner", [v.copy() for v in inputs])
    timing_only, result = simulate("rabenseifner", p=4, nbytes=8000)
    assert result is None
    assert with_data == timing_only


def test_called_from_a_simpy_process() -> None:
    # a training-like process: compute, allreduce, then use the sum
    env = simpy.Environment()
    net = build_network(env, "ib-hdr", 4)
    grads = vectors(4, 64, np.float64, seed=3)
    total = np.sum(grads, axis=0)
    seen = {}

    def step():
        yield env.timeout(1e-3)  # compute
        elapsed = yield from get_collective("tree").run(net, grads)
        seen["elapsed"], seen["now"] = elapsed, env.now

    env.run(env.process(step()))
    assert seen["now"] == pytest.approx(1e-3 + seen["elapsed"], rel=1e-12)
    np.testing.assert_allclose(grads[2], total, rtol=1e-12)


@pytest.mark.parametrize("bad, message", [
    (lambda: simulate("ring", [np.zeros(4), np.zeros(5)]), "shape"),
    (lambda: simulate("ring", [np.zeros(4, np.int64)] * 2), "float32 or float64"),
    (lambda: simulate("ring", p=4), "nbytes"),
    (lambda: simulate("ring", [np.zeros(4)], p=1, nbytes=8), "not both"),
    (lambda: get_collective("ps", servers=0), "servers"),
    (lambda: get_collective("allgather"), "unknown collective"),
    (lambda: get_collective("ring", servers=2), "does not take"),
])
def test_bad_arguments(bad, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        bad()


# ---- nothing beats the bandwidth lower bound ----------------------------------------------

TOPOLOGIES = st.sampled_from([
    {"topology": "star"},
    {"topology": "ring"},
    {"topology": "leaf-spine", "hosts_per_leaf": 4, "oversubscription": 1},
    {"topology": "leaf-spine", "hosts_per_leaf": 3, "oversubscription": 2.5,
     "placement": "round-robin"},
])
FABRIC_CHOICES = st.sampled_from(list(FABRICS.values())
                                 + [Fabric("no-alpha", 8e10, latency_s=0.0, overhead_s=0.0)])


@settings(max_examples=80, deadline=None, derandomize=True)
@given(algo=st.sampled_from(ALLREDUCES), p=st.integers(1, 40),
       nbytes=st.integers(1, 10**8), fabric=FABRIC_CHOICES, where=TOPOLOGIES,
       servers=st.integers(1, 6))
def test_no_allreduce_beats_the_bandwidth_lower_bound(algo, p, nbytes, fabric, where,
                                                      servers) -> None:
    collective = get_collective(algo, servers=servers) if algo == "ps" else get_collective(algo)
    t, net = run_alone(collective, p=p, nbytes=nbytes, fabric=fabric, **where)
    bound = collective.lower_bound_s(p, nbytes, net.topology.injection_Bps())
    assert bound == 2 * (p - 1) / p * nbytes / net.topology.injection_Bps()
    assert t >= bound * (1 - 1e-12)
