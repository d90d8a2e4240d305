"""All-to-alls (pairwise, Bruck) and the variable-size pairwise all-to-all: closed forms on
one idle switch (Thakur, Rabenseifner and Gropp 2005, sec. 4), the data (a transpose of
blocks), the bound, ``sim collective``, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_network_collectives import FABRIC_CHOICES, TOPOLOGIES

from sim.cli import main
from sim.network import alltoall as alltoall_module
from sim.network.alltoall import Alltoallv, alltoallv, closed_form_s
from sim.network.collective_alone import run_alone, simulate
from sim.network.collectives import REGISTRY, get_collective
from sim.network.fabrics import REGISTRY as FABRICS
from sim.network.fabrics import Fabric, get_fabric
from sim.network.message_cost import alpha_s, beta_s
from sim.network.network_builder import build_network
from tests.collective_cases import collective_json

ALLTOALLS = ["pairwise-alltoall", "bruck-alltoall"]
PS = [2, 3, 4, 5, 8]
MODELS = ["flow", "analytical"]
SIZES = [1, 1000, 12345, 10**6]  # bytes each rank sends each rank (m)


def ceil_lg(p: int) -> int:
    return (p - 1).bit_length()


def bruck_blocks(p: int) -> int:
    """Blocks of m a rank sends over all of Bruck's rounds: round k sends the positions
    q < p with bit k set, so the total counts the ones in the binary numbers 0..p-1."""
    return sum(bin(q).count("1") for q in range(p))


def expected_s(algo: str, p: int, m: int, a: float, b: float) -> float:
    if algo == "pairwise-alltoall":
        return (p - 1) * (a + m * b)
    return ceil_lg(p) * a + bruck_blocks(p) * m * b


# ---- uncontended time == closed form ------------------------------------------------------

@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("algo", ALLTOALLS)
@pytest.mark.parametrize("fabric", [get_fabric("ib-hdr"), get_fabric("eth-10g")],
                         ids=lambda f: f.name)
def test_time_on_one_switch_is_the_closed_form(fabric: Fabric, algo: str, model: str) -> None:
    a, b = alpha_s(fabric), beta_s(fabric)
    collective = get_collective(algo)
    for p in PS:
        for m in SIZES:
            t, _ = run_alone(collective, p=p, nbytes=m, fabric=fabric, model=model)
            assert t == pytest.approx(expected_s(algo, p, m, a, b), rel=1e-9), (p, m)
            assert collective.closed_form_s(p, m, a, b) == pytest.approx(t, rel=1e-9)


def test_thakur_closed_forms_with_n_the_whole_send_buffer() -> None:
    # n = p m (nccl-tests' S): pairwise (p - 1) alpha + (p - 1) / p n beta; Bruck on a
    # power of two lg p alpha + n / 2 lg p beta
    a, b = 2e-6, 1e-10
    for p in (2, 4, 8, 16, 64):
        m = 4096
        n = p * m
        lg = p.bit_length() - 1
        assert get_collective("pairwise-alltoall").closed_form_s(p, m, a, b) == pytest.approx(
            (p - 1) * a + (p - 1) / p * n * b, rel=1e-12)
        assert get_collective("bruck-alltoall").closed_form_s(p, m, a, b) == pytest.approx(
            lg * a + n / 2 * lg * b, rel=1e-12)
    # not a power of two: p = 5 moves positions 1, 3 | 2, 3 | 4, 5 blocks in 3 rounds
    assert get_collective("bruck-alltoall").closed_form_s(5, 1, a, b) == pytest.approx(
        3 * a + 5 * b, rel=1e-12)


@pytest.mark.parametrize("algo", ALLTOALLS)
def test_one_message_per_rank_and_round(algo: str) -> None:
    # Bruck packs a round's blocks into one message, as MPICH does
    for p in PS:
        _, net = run_alone(algo, p=p, nbytes=100)
        rounds = p - 1 if algo == "pairwise-alltoall" else ceil_lg(p)
        assert net.messages_delivered == p * rounds, p


def test_one_worker_costs_nothing() -> None:
    for algo in ALLTOALLS:
        for model in MODELS:
            assert run_alone(algo, p=1, nbytes=10**6, model=model)[0] == 0.0
    env = simpy.Environment()
    run = env.process(alltoallv(build_network(env, "ib-hdr", 1), [[10**6]]))
    env.run(run)
    assert run.value == 0.0


# ---- the blocks are transposed -------------------------------------------------------------

def send_blocks(p: int, count: int, dtype: type, seed: int) -> tuple[list, np.ndarray]:
    """Buffers of p blocks (block j for rank j) and the (p, p, count) array they come from."""
    blocks = np.random.default_rng(seed).standard_normal((p, p, count)).astype(dtype)
    return [blocks[i].ravel().copy() for i in range(p)], blocks


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("algo", ALLTOALLS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_rank_ends_with_its_blocks_from_every_rank(algo: str, model: str,
                                                         dtype: type) -> None:
    for p in [1, *PS, 7, 13]:
        for count in (1, 3, 16):
            buffers, blocks = send_blocks(p, count, dtype, seed=p * count)
            time_s, result = simulate(algo, buffers, model=model)
            assert time_s > 0 or p == 1
            received = blocks.transpose(1, 0, 2)  # rank i's block j: rank j's block i
            for i, buf in enumerate(result):
                assert buf.dtype == dtype
                for j in range(p):  # copies: the same bits
                    np.testing.assert_array_equal(buf[j * count:(j + 1) * count],
                                                  received[i, j], err_msg=f"p={p} {i} {j}")


@pytest.mark.parametrize("algo", ALLTOALLS)
def test_results_and_time_do_not_depend_on_moving_the_data(algo: str) -> None:
    where = {"topology": "leaf-spine", "hosts_per_leaf": 4, "oversubscription": 3,
             "placement": "round-robin"}
    buffers, blocks = send_blocks(11, 50, np.float64, seed=5)
    with_data, result = simulate(algo, buffers, **where)
    timing_only, _ = simulate(algo, p=11, nbytes=50 * 8, **where)
    assert with_data == timing_only  # nbytes is one block
    np.testing.assert_array_equal(np.stack(result), blocks.transpose(1, 0, 2).reshape(11, -1))


def test_a_buffer_must_hold_p_equal_blocks() -> None:
    with pytest.raises(ValueError, match="p = 3 equal blocks"):
        simulate("bruck-alltoall", [np.zeros(10) for _ in range(3)])


def test_kind_byte_counts_and_bus_factor() -> None:
    assert [n for n, cls in REGISTRY.items() if cls.kind == "alltoall"] == ALLTOALLS
    for algo in ALLTOALLS:
        collective = get_collective(algo)
        assert collective.total_bytes(8, 100) == 800  # nccl-tests' S: all a rank sends
        assert collective.bus_factor(8) == 7 / 8


# ---- nothing beats the bandwidth lower bound ----------------------------------------------

@settings(max_examples=40, deadline=None, derandomize=True)
@given(algo=st.sampled_from(ALLTOALLS), p=st.integers(1, 24), nbytes=st.integers(1, 10**6),
       fabric=FABRIC_CHOICES, where=TOPOLOGIES)
def test_no_alltoall_beats_the_bandwidth_lower_bound(algo, p, nbytes, fabric, where) -> None:
    collective = get_collective(algo)
    t, net = run_alone(collective, p=p, nbytes=nbytes, fabric=fabric, **where)
    bound = collective.lower_bound_s(p, nbytes, net.topology.injection_Bps())
    # each rank sends the p - 1 blocks for the others through its own link
    assert bound == pytest.approx((p - 1) * nbytes / net.topology.injection_Bps(), rel=1e-12)
    assert t >= bound * (1 - 1e-12)


# ---- the variable-size all-to-all ----------------------------------------------------------

def timed_alltoallv(bytes_matrix, model: str = "flow", fabric: str = "ib-hdr", **kw) -> float:
    env = simpy.Environment()
    net = build_network(env, fabric, len(bytes_matrix), model=model)
    run = env.process(alltoallv(net, bytes_matrix, **kw))
    env.run(run)
    return run.value


def pairwise_sendrecv_s(b: np.ndarray, a: float, beta: float) -> float:
    """The pairwise exchange worked out message by message: a rank starts round k when its
    round k - 1 is through, and a message (alone on its uplink and downlink: alpha + bytes
    beta) when both its ranks have started the round."""
    p = len(b)
    through = [0.0] * p
    for k in range(1, p):
        arrivals: dict[int, list[float]] = {i: [] for i in range(p)}
        for i in range(p):
            j = (i + k) % p
            end = max(through[i], through[j]) + a + int(b[i, j]) * beta
            arrivals[i].append(end)
            arrivals[j].append(end)
        through = [max(arrivals[i]) for i in range(p)]
    return max(through)


def hot_shard(p: int, seed: int) -> np.ndarray:
    """Embedding exchange bytes: rank 0 holds the hot rows, so it sends far more."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 50_000, (p, p))
    b[0] *= 40
    return b


@pytest.mark.parametrize("model", MODELS)
def test_uniform_alltoallv_is_the_pairwise_alltoall(model: str) -> None:
    for p in PS:
        for m in SIZES:
            t = timed_alltoallv(np.full((p, p), m), model)
            pairwise, _ = run_alone("pairwise-alltoall", p=p, nbytes=m, model=model)
            assert t == pytest.approx(pairwise, rel=1e-12), (p, m)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("fabric", ["ib-hdr", "eth-10g"])
def test_skewed_alltoallv_is_the_closed_form(model: str, fabric: str) -> None:
    f = get_fabric(fabric)
    a, beta = alpha_s(f), beta_s(f)
    for p in PS:
        for seed in range(4):
            b = hot_shard(p, seed) if seed % 2 else np.random.default_rng(seed).integers(
                0, 10**6, (p, p))
            t = timed_alltoallv(b, model, fabric)
            assert t == pytest.approx(pairwise_sendrecv_s(b, a, beta), rel=1e-9), (p, seed)
            assert closed_form_s(b, a, beta) == pytest.approx(t, rel=1e-9)
            # between each rank's own rounds and rounds held in step by a barrier
            ranks = np.arange(p)
            own = max(sum(a + max(b[i, (i + k) % p], b[(i - k) % p, i]) * beta
                          for k in range(1, p)) for i in ranks)
            barrier = sum(a + b[ranks, (ranks + k) % p].max() * beta for k in range(1, p))
            assert own * (1 - 1e-12) <= t <= barrier * (1 + 1e-12)


def test_light_rounds_run_ahead_of_a_barrier() -> None:
    # p = 5, H bytes from 0 to 1 (round 1) and from 2 to 4 (round 2), nothing else: ranks 2
    # and 4 send theirs while 0 -> 1 is on the wire, so T = 4 alpha + H beta, not the
    # barrier's 4 alpha + 2 H beta
    f = get_fabric("eth-25g")
    a, beta = alpha_s(f), beta_s(f)
    b = np.zeros((5, 5), np.int64)
    b[0, 1] = b[2, 4] = 10**7
    for model in MODELS:
        assert timed_alltoallv(b, model, "eth-25g") == pytest.approx(4 * a + 10**7 * beta,
                                                                     rel=1e-9)


def test_the_diagonal_stays_home() -> None:
    b = np.full((4, 4), 1000)
    heavy = b.copy()
    np.fill_diagonal(heavy, 10**9)
    assert timed_alltoallv(heavy) == timed_alltoallv(b)
    assert Alltoallv(heavy).lower_bound_s(4, 0, 1e9) == 3000 / 1e9


def test_alltoallv_from_a_simpy_process_on_given_hosts() -> None:
    env = simpy.Environment()
    net = build_network(env, "ib-hdr", 8)
    b = hot_shard(4, seed=1)
    seen = {}

    def step():
        yield env.timeout(1e-3)  # compute
        seen["elapsed"] = yield from alltoallv(net, b, hosts=np.array([7, 5, 3, 1]))
        seen["now"] = env.now

    env.run(env.process(step()))
    f = get_fabric("ib-hdr")
    assert seen["elapsed"] == pytest.approx(closed_form_s(b, alpha_s(f), beta_s(f)),
                                            rel=1e-9)
    assert seen["now"] == pytest.approx(1e-3 + seen["elapsed"], rel=1e-12)


def test_alltoallv_is_exported() -> None:
    import sim.network

    assert sim.network.alltoallv is alltoall_module.alltoallv


@pytest.mark.parametrize("bad, message", [
    (np.zeros((2, 3)), "bytes_matrix: expected a p x p matrix"),
    (np.zeros(4), "bytes_matrix: expected a p x p matrix"),
    (np.zeros((0, 0)), "bytes_matrix: expected a p x p matrix"),
    ([[0, -1], [0, 0]], "bytes_matrix: expected whole numbers of bytes >= 0"),
    ([[0, 1.5], [0, 0]], "bytes_matrix: expected whole numbers of bytes >= 0"),
    ([[0, np.nan], [0, 0]], "bytes_matrix: expected whole numbers of bytes >= 0"),
    ([["a", "b"], ["c", "d"]], "bytes_matrix: expected numbers of bytes"),
])
def test_bad_matrices_name_the_argument(bad, message: str) -> None:
    env = simpy.Environment()
    net = build_network(env, "ib-hdr", 4)
    with pytest.raises(ValueError, match=message):
        env.run(env.process(alltoallv(net, bad)))
    with pytest.raises(ValueError, match=message):
        closed_form_s(bad, 1e-6, 1e-9)


def test_bad_hosts_and_data_are_refused() -> None:
    with pytest.raises(ValueError, match="expected 3 hosts"):
        timed_alltoallv(np.ones((3, 3)), hosts=np.array([0, 1]))
    with pytest.raises(ValueError, match="timing only"):
        Alltoallv(np.ones((2, 2))).plan([np.zeros(2), np.zeros(2)])
    with pytest.raises(ValueError, match="for 2 ranks, not 3"):
        Alltoallv(np.ones((2, 2))).plan(p=3)


# ---- sim collective -----------------------------------------------------------------------

def test_sim_collective_bruck_alltoall(capsys) -> None:
    result = collective_json(capsys, "--algo", "bruck-alltoall", "--workers", "16", "--bytes",
                             "1MiB", "--alpha", "1e-6", "--bandwidth", "12.5e9")
    # lg 16 alpha + n / 2 lg 16 beta with n = 16 MiB
    assert result["time_s"] == pytest.approx(4 * 1e-6 + 8 * 4 * 2**20 / 12.5e9, rel=1e-9)
    assert result["messages"] == 16 * 4
    for model in MODELS:  # 6 ranks: 3 rounds of 3, 2 and 2 blocks
        result = collective_json(capsys, "--algo", "bruck-alltoall", "--workers", "6",
                                 "--bytes", "1000", "--alpha", "1e-6", "--bandwidth", "1e9",
                                 "--model", model)
        assert result["time_s"] == pytest.approx(3e-6 + 7 * 1000 / 1e9, rel=1e-9)


def test_sweep_has_nccl_tests_alltoall_sizes_and_busbw(capsys) -> None:
    p, fabric = 8, FABRICS["ib-hdr"]
    rows = collective_json(capsys, "--algorithms", "alltoall", "--workers", str(p),
                           "--min-bytes", "8", "--max-bytes", "1M", "--factor", "8")
    sizes = [8, 64, 512, 4096, 32768, 262144]
    assert [(r["algorithm"], r["type"]) for r in rows] == [(a, "float") for a in ALLTOALLS
                                                           for _ in sizes]
    for row, size in zip(rows, sizes * 2, strict=True):
        # nccl-tests' src/alltoall.cu: the count to each peer is (S / 4 // p) rounded down
        # to 4 floats (16 bytes); S = p count 4; busbw = algbw (p - 1) / p
        assert row["count"] == (size // 4 // p) & ~3
        assert row["size_bytes"] == p * row["count"] * 4
        closed = expected_s(row["algorithm"], p, row["count"] * 4, alpha_s(fabric),
                            beta_s(fabric))
        assert row["time_us"] == pytest.approx(closed * 1e6, rel=1e-9)
        assert row["closed_form_us"] == pytest.approx(closed * 1e6, rel=1e-12)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * (p - 1) / p, rel=1e-12)
    assert main(["collective", "--algorithms", "bruck-alltoall", "--workers", "8",
                 "--min-bytes", "1M", "--max-bytes", "1M", "--model", "analytical"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# bruck-alltoall alltoall on ib-hdr: 8 ranks, star topology, " \
                       "analytical model"
    assert lines[4].split()[:3] == ["1048576", "32768", "float"]
