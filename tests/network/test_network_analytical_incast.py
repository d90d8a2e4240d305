"""Incast in the analytical network: each side of a host's link is a FIFO queue.

Closed forms are asserted exactly (==) where the arithmetic allows it: sizes are whole
bytes, so queued bytes add up exactly, and times are computed as the closed forms compute
them (alpha + (k n) beta). Runs use the default seed.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy
from training_cases import make, train, update_table

from sim.network.collective_alone import run_alone
from sim.network.collectives import REGISTRY, ParameterServer, get_collective
from sim.network.fabrics import get_fabric
from sim.network.message_cost import alpha_s, beta_s
from sim.network.network_builder import build_network

FABRIC = get_fabric("ib-hdr")
ALPHA, BETA = alpha_s(FABRIC), beta_s(FABRIC)
N = 1_000_000  # bytes of one message
ALLREDUCES = [name for name, cls in REGISTRY.items() if cls.kind == "allreduce"]


def analytical(hosts: int) -> Any:
    return build_network(simpy.Environment(), FABRIC, hosts, model="analytical")


def send(net: Any, src: list[int], dst: list[int], nbytes: list[float]) -> np.ndarray:
    """One batch sent now; each message's arrival time (s) is filled in as the env runs."""
    when = np.full(len(src), np.nan)

    def delivered(which: np.ndarray) -> None:
        when[which] = net.env.now

    net.send_many(np.array(src), np.array(dst), np.array(nbytes, np.float64), delivered)
    return when


# ---- incast: k senders, one receiver ------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13])
def test_k_messages_to_one_host_in_one_batch_arrive_one_after_another(k: int) -> None:
    net = analytical(k + 1)
    when = send(net, list(range(k)), [k] * k, [N] * k)
    net.env.run()
    # FIFO at the receiver: message i is through after i n beta (the flow model shares the
    # link and delivers all k at the last of these instants)
    assert when.tolist() == [ALPHA + i * N * BETA for i in range(1, k + 1)]
    assert when[-1] == ParameterServer(1).closed_form_s(k, N, ALPHA, BETA) / 2


@pytest.mark.parametrize("k", [1, 2, 3, 8, 13])
@pytest.mark.parametrize("t0", [0.0, 1e-3])
def test_k_separate_sends_at_one_instant_end_at_alpha_plus_k_n_beta(k: int, t0: float) -> None:
    net = analytical(k + 1)
    env = net.env
    done: list[float] = []

    def worker(w: int) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(t0)
        done.append((yield net.send(w, k, N)))

    for w in range(k):
        env.process(worker(w))
    env.run()
    assert done == [t0 + (ALPHA + i * N * BETA) for i in range(1, k + 1)]


def push_pull_s(model: str, p: int, servers: int) -> float:
    """Time (s) for p workers to push n / S to each of S servers at once, then pull it."""
    env = simpy.Environment()
    net = build_network(env, FABRIC, p + servers, model=model)
    shard = np.full(servers, N / servers)  # whole bytes: N divides by S
    shards = p + np.arange(servers)

    def exchange() -> Generator[simpy.Event, Any, None]:
        yield simpy.AllOf(env, [net.send_all(np.full(servers, w), shards, shard)
                                for w in range(p)])
        yield simpy.AllOf(env, [net.send_all(shards, np.full(servers, w), shard)
                                for w in range(p)])

    env.run(env.process(exchange()))
    return env.now


@pytest.mark.parametrize(("p", "servers"), [(8, 1), (8, 2), (8, 4), (6, 4), (3, 4)])
def test_sharded_push_then_pull_is_the_ps_closed_form(p: int, servers: int) -> None:
    """alpha + max(p, S) n / S beta each way, exactly; the flow model agrees."""
    closed = ParameterServer(servers).closed_form_s(p, N, ALPHA, BETA)
    assert push_pull_s("analytical", p, servers) == closed
    assert push_pull_s("flow", p, servers) == pytest.approx(closed, rel=1e-9)


# ---- what does not share a link is unaffected; what comes later waits ----------------------

def test_messages_that_share_no_host_link_do_not_interact() -> None:
    net = analytical(4)
    # disjoint pairs, and the two directions of one pair (full duplex: separate queues)
    batch = send(net, [0, 2], [1, 3], [N, N])
    duplex = send(net, [1], [0], [N])
    separate = [net.send(3, 2, N)]
    net.env.run()
    assert batch.tolist() == [ALPHA + N * BETA] * 2
    assert duplex.tolist() == [ALPHA + N * BETA]
    assert [e.value for e in separate] == [ALPHA + N * BETA]


def test_a_sender_queues_its_own_messages() -> None:
    net = analytical(3)
    when = send(net, [0, 0], [1, 2], [N, N])
    net.env.run()
    assert when.tolist() == [ALPHA + N * BETA, ALPHA + 2 * N * BETA]


def test_a_message_into_a_busy_link_waits_for_the_backlog_and_an_idle_one_does_not() -> None:
    net = analytical(3)
    env = net.env
    arrived: dict[str, float] = {}

    def at(t: float, name: str, src: int) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(t)
        arrived[name] = yield net.send(src, 2, N)

    env.process(at(0.0, "first", 0))
    env.process(at(N * BETA / 2, "behind", 1))  # host 2's link is half way through "first"
    env.process(at(3 * N * BETA, "after", 0))  # host 2's link drained at 2 n beta
    env.run()
    assert arrived["first"] == ALPHA + N * BETA
    assert arrived["behind"] == pytest.approx(ALPHA + 2 * N * BETA, rel=1e-12)
    assert arrived["after"] == pytest.approx(3 * N * BETA + ALPHA + N * BETA, rel=1e-12)


def test_a_host_outside_the_topology_is_refused() -> None:
    with pytest.raises(ValueError, match="hosts must be in"):
        analytical(2).send_many(np.array([0]), np.array([2]), np.array([1.0]), lambda _: None)


# ---- collectives keep their closed forms ----------------------------------------------------

@pytest.mark.parametrize("algo", [*ALLREDUCES, "ps"])
def test_a_collective_on_idle_links_is_exactly_its_closed_form(algo: str) -> None:
    collective = get_collective(algo)
    for p in range(1, 18):
        t, _ = run_alone(collective, p=p, nbytes=N, fabric=FABRIC, model="analytical")
        assert t == collective.closed_form_s(p, N, ALPHA, BETA), p


def test_a_collective_waits_for_its_hosts_links() -> None:
    ring = get_collective("ring")
    closed = ring.closed_form_s(4, N, ALPHA, BETA)
    for busy_host, wait in [(0, N * BETA), (7, 0.0)]:  # one of its hosts, or another one
        net = analytical(8)
        net.send(busy_host, 6, N)
        run = net.env.process(ring.run(net, p=4, nbytes=N, hosts=np.arange(4)))
        net.env.run(run)
        assert run.value == pytest.approx(wait + closed, rel=1e-12)


# ---- training runs ---------------------------------------------------------------------------

# 8 workers, 1 server, a 512 KB gradient (logreg over 2^16 - 1 features, float64) and 1 us
# of compute: the step is the push incast and the pull fan-out, 2 (alpha + 8 n beta)
PS_RUN = {"cluster.workers": 8, "cluster.servers": 1, "workload.features": 2**16 - 1,
          "workload.samples": 256, "workload.batch": 1, "compute.time_s": 1e-6,
          "compute.distribution": "constant", "run.eval_every": 10**6}


def update_times(network: str, kind: str, iterations: int) -> tuple[list[float], int]:
    """(simulated time of each update, gradient bytes)."""
    ctx, _ = train(make(PS_RUN, cluster__network=network, strategy__kind=kind,
                        run__iterations=iterations))
    return [float(row[1]) for row in update_table(ctx)], ctx.params.nbytes


def test_bsp_ps_step_on_the_analytical_network_matches_the_flow_network() -> None:
    steps = {}
    for network in ("analytical", "flow"):
        times, n = update_times(network, "bsp-ps", 16)
        steps[network] = times[-1] / len(times)
        closed = ParameterServer(1).closed_form_s(8, n, ALPHA, BETA)
        # the first step is compute, one push and one pull: the PS closed form
        assert times[0] == pytest.approx(1e-6 + closed, rel=1e-12), network
    # later steps differ by at most the compute time: FIFO pulls land one after another,
    # so the first workers start computing before the last pull ends (measured 0.3 %);
    # without incast the analytical step was 7.5x shorter
    assert steps["analytical"] == pytest.approx(steps["flow"], rel=0.02)


def test_asp_on_the_analytical_network_is_bounded_by_the_servers_link() -> None:
    """Every update brings n bytes into the server and sends n out: at least n beta each
    on its busier link side (the contention-free model gave 5.9 us per update here)."""
    times, n = update_times("analytical", "asp", 64)
    assert len(times) == 64
    assert times[-1] / len(times) >= n * BETA
