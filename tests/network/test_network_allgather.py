"""Allgathers (ring, recursive doubling): closed forms, the data, the bound, ``sim collective``,
and compressed bsp, which exchanges its messages with one (QSGD, Alistarh et al. 2017;
SparCML, Renggli et al. 2019)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_network_collectives import FABRIC_CHOICES, TOPOLOGIES

from sim.cli import main
from sim.errors import UserError
from sim.network.collective_alone import run_alone, simulate
from sim.network.collectives import REGISTRY, get_collective
from sim.network.fabrics import REGISTRY as FABRICS
from sim.network.fabrics import Fabric, get_fabric
from sim.network.message_cost import alpha_s, beta_s
from sim.network.schedule import Schedule
from sim.real.executors.rank_collectives import ScheduleAllreduce
from sim.simulated.engine import build_simulation
from sim.simulated.engine import simulate as train
from sim.training.config_warnings import config_warnings
from sim.training.validator import load_config
from tests.collective_cases import collective_json

ALLGATHERS = ["ring-allgather", "recursive-doubling-allgather"]
COMPRESSION = Path(__file__).resolve().parents[2] / "experiments" / "compression.toml"


def lg(p: int) -> int:
    return p.bit_length() - 1


def critical_path_s(schedule: Schedule, alpha_s: float, beta_s: float) -> float:
    """The schedule's time when every message takes alpha + bytes beta and none share a
    link: an endpoint enters a round when its previous ones are done, a transfer starts when
    both its ends are in (the semantics of sim.network.schedule), computed round by round."""
    ready = np.zeros(schedule.n_endpoints)
    for r in range(schedule.n_rounds):
        rnd = schedule.round(r)
        end = np.maximum(ready[rnd.src], ready[rnd.dst]) + alpha_s + rnd.count * beta_s
        done = ready.copy()
        np.maximum.at(done, rnd.src, end)
        np.maximum.at(done, rnd.dst, end)
        ready = done
    return float(ready.max())


# ---- uncontended time == closed form (Thakur, Rabenseifner & Gropp 2005, sec. 4.1) ------

@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("fabric", [get_fabric("ib-hdr"), get_fabric("eth-10g")],
                         ids=lambda f: f.name)
def test_ring_allgather_closed_form_any_p(fabric: Fabric, model: str) -> None:
    a, b = alpha_s(fabric), beta_s(fabric)
    for p in range(2, 65):
        n = 1000 * p + 7  # each rank's block: no divisibility needed
        t, _ = run_alone("ring-allgather", p=p, nbytes=n, fabric=fabric, model=model)
        assert t == pytest.approx((p - 1) * (a + n * b), rel=1e-9), p


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("fabric", [get_fabric("ib-hdr"), get_fabric("eth-10g")],
                         ids=lambda f: f.name)
def test_recursive_doubling_allgather_closed_form(fabric: Fabric, model: str) -> None:
    a, b = alpha_s(fabric), beta_s(fabric)
    algo = get_collective("recursive-doubling-allgather")
    for p in range(2, 65):
        n = 1000 * p + 7
        t, _ = run_alone(algo, p=p, nbytes=n, fabric=fabric, model=model)
        if p & (p - 1) == 0:
            assert t == pytest.approx(lg(p) * a + (p - 1) * n * b, rel=1e-9), p
        # folded or not, the rounds' critical path, worked out apart from the class
        path = critical_path_s(algo.schedule(p, n), a, b)
        assert t == pytest.approx(path, rel=1e-9), p


def test_recursive_doubling_allgather_folds_by_hand() -> None:
    # p = 3: rank 0 hands block 0 to rank 1 (a + n b), ranks 1 and 2 swap 2 and 1 blocks
    # (a + 2 n b), rank 1 sends all 3 back to rank 0 (a + 3 n b).
    # p = 6: fold in (a + n b); rounds of 1 + 1 and 2 + 2 blocks (survivors 0 and 1 hold
    # two); fold out 6 blocks
    fabric = get_fabric("ib-ndr")
    a, b = alpha_s(fabric), beta_s(fabric)
    n = 10**5
    for p, by_hand in [(3, 3 * a + 6 * n * b), (6, 4 * a + 13 * n * b)]:
        t, _ = run_alone("recursive-doubling-allgather", p=p, nbytes=n, fabric=fabric)
        assert t == pytest.approx(by_hand, rel=1e-9), p


def test_one_worker_costs_nothing() -> None:
    for algo in ALLGATHERS:
        assert run_alone(algo, p=1, nbytes=10**6)[0] == 0.0


# ---- every rank ends with every rank's block ---------------------------------------------

def blocks_in_place(p: int, count: int, dtype: type, seed: int) -> tuple[list, np.ndarray]:
    """p buffers of p blocks, rank i's own block at i x count (the rest NaN), and the
    gathered vector every rank should end with."""
    rng = np.random.default_rng(seed)
    gathered = rng.standard_normal(p * count).astype(dtype)
    buffers = [np.full(p * count, np.nan, dtype) for _ in range(p)]
    for i, buf in enumerate(buffers):
        buf[i * count:(i + 1) * count] = gathered[i * count:(i + 1) * count]
    return buffers, gathered


@pytest.mark.parametrize("algo", ALLGATHERS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_rank_ends_with_every_block(algo: str, dtype: type) -> None:
    for p in range(1, 14):
        for count in (1, 5, 64):
            buffers, gathered = blocks_in_place(p, count, dtype, seed=p * count)
            time_s, result = simulate(algo, buffers)
            assert time_s > 0 or p == 1
            for buf in result:
                np.testing.assert_array_equal(buf, gathered)  # copies: the same bits


@pytest.mark.parametrize("algo", ALLGATHERS)
def test_results_and_time_do_not_depend_on_moving_the_data(algo: str) -> None:
    buffers, gathered = blocks_in_place(11, 50, np.float32, seed=5)
    with_data, result = simulate(algo, buffers, topology="leaf-spine", hosts_per_leaf=4,
                                 oversubscription=3, placement="round-robin")
    timing_only, _ = simulate(algo, p=11, nbytes=50 * 4, topology="leaf-spine",
                              hosts_per_leaf=4, oversubscription=3, placement="round-robin")
    assert with_data == timing_only  # nbytes is one rank's block
    for buf in result:
        np.testing.assert_array_equal(buf, gathered)


def test_a_buffer_must_hold_p_equal_blocks() -> None:
    with pytest.raises(ValueError, match="p = 3 equal blocks"):
        simulate("ring-allgather", [np.zeros(10) for _ in range(3)])


def test_kind_keeps_allgathers_out_of_allreduce_lists() -> None:
    assert [n for n, cls in REGISTRY.items() if cls.kind == "allgather"] == ALLGATHERS
    algo = get_collective("ring-allgather")
    assert algo.total_bytes(8, 100) == 800  # nccl-tests' S: the gathered vector
    assert algo.bus_factor(8) == 7 / 8


# ---- nothing beats the bandwidth lower bound ----------------------------------------------

@settings(max_examples=60, deadline=None, derandomize=True)
@given(algo=st.sampled_from(ALLGATHERS), p=st.integers(1, 40), nbytes=st.integers(1, 10**7),
       fabric=FABRIC_CHOICES, where=TOPOLOGIES)
def test_no_allgather_beats_the_bandwidth_lower_bound(algo, p, nbytes, fabric, where) -> None:
    collective = get_collective(algo)
    t, net = run_alone(collective, p=p, nbytes=nbytes, fabric=fabric, **where)
    bound = collective.lower_bound_s(p, nbytes, net.topology.injection_Bps())
    # each rank receives the p - 1 blocks it lacks through its own link
    assert bound == pytest.approx((p - 1) * nbytes / net.topology.injection_Bps(), rel=1e-12)
    assert t >= bound * (1 - 1e-12)


# ---- sim collective -----------------------------------------------------------------------

@pytest.mark.parametrize("algo, collective, heading", [
    ("ring-allgather", "allgather", "ring-allgather allgather of 10.21 kB from each rank "
                                    "(81.7 kB gathered) over 8 workers"),
    ("pairwise-alltoall", "alltoall", "pairwise-alltoall alltoall of 10.21 kB from each rank "
                                      "to each (81.7 kB sent by each) over 8 workers")])
def test_sim_collective_reports_p_minus_1_exchanges(capsys: pytest.CaptureFixture[str], algo,
                                                    collective, heading) -> None:
    """The ring allgather and the pairwise all-to-all both take p - 1 rounds of one n-byte
    message per rank (Thakur et al. 2005): the same closed form and bandwidths."""
    p, n, fabric = 8, 10212, FABRICS["eth-10g"]
    a, B = alpha_s(fabric), fabric.bandwidth_Bps
    result = collective_json(capsys, "--fabric", "eth-10g", "--algo", algo,
                             "--workers", str(p), "--bytes", str(n))
    assert result["collective"] == collective
    assert result["bytes"] == n and result["total_bytes"] == p * n
    assert result["time_s"] == pytest.approx((p - 1) * (a + n / B), rel=1e-9)
    assert result["closed_form_s"] == pytest.approx(result["time_s"], rel=1e-9)
    # nccl-tests' doc/PERFORMANCE.md: algbw = S / t with S = p n, busbw = algbw (p - 1) / p
    assert result["algbw_Bps"] == pytest.approx(p * n / result["time_s"], rel=1e-12)
    assert result["busbw_Bps"] == pytest.approx(result["algbw_Bps"] * (p - 1) / p, rel=1e-12)
    assert result["lower_bound_s"] == pytest.approx((p - 1) * n / B, rel=1e-12)
    assert result["messages"] == p * (p - 1)
    assert main(["collective", "--fabric", "eth-10g", "--algo", algo,
                 "--workers", "8", "--bytes", "10212"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(heading)
    assert "(0.875 S / B)" in text


def test_sim_collective_recursive_doubling_allgather(capsys) -> None:
    result = collective_json(capsys, "--algo", "recursive-doubling-allgather", "--workers",
                             "16", "--bytes", "1MiB", "--alpha", "1e-6", "--bandwidth", "12.5e9")
    assert result["time_s"] == pytest.approx(4 * 1e-6 + 15 * 2**20 / 12.5e9, rel=1e-9)
    assert result["messages"] == 16 * 4


def test_sim_list_shows_each_collectives_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "collectives"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["ring-allgather", "allgather"] for line in lines)
    assert any(line.split()[:2] == ["ring", "allreduce"] for line in lines)


def test_calibrate_refuses_an_allgather(capsys, tmp_path: Path) -> None:
    assert main(["calibrate", "--out", str(tmp_path / "cal"), "--collective",
                 "ring-allgather"]) == 2
    err = capsys.readouterr().err  # names the option and says ring-allgather is no allreduce
    assert "--collective" in err and "unknown allreduce 'ring-allgather'" in err
    assert not (tmp_path / "cal").exists()


def test_real_schedule_allreduce_refuses_an_allgather() -> None:
    class OneOfFour:  # what ScheduleAllreduce asks of an MPI communicator before any message
        def Get_size(self) -> int:
            return 4

        def Get_rank(self) -> int:
            return 0

    with pytest.raises(ValueError, match="'ring-allgather' is not an allreduce"):
        ScheduleAllreduce(OneOfFour(), "ring-allgather", 10, None)


# ---- config --------------------------------------------------------------------------------

def compression(*overrides: str):
    return load_config(COMPRESSION, ["run.iterations=4", "run.eval_every=1000", *overrides])


@pytest.mark.parametrize("override, key", [
    ('strategy.collective="ring-allgather"', "strategy.collective"),
    ('strategy.allgather="ring"', "strategy.allgather"),
    ('strategy.allgather="tree"', "strategy.allgather"),
])
def test_config_keeps_allreduce_and_allgather_names_apart(override: str, key: str) -> None:
    with pytest.raises(UserError, match=key):
        compression('strategy.compression="topk"', override)


def test_an_allgather_without_compression_is_warned_about() -> None:
    chosen = 'strategy.allgather="recursive-doubling-allgather"'
    (line,) = config_warnings(compression('strategy.compression="none"', chosen))
    assert line.startswith("strategy.allgather = 'recursive-doubling-allgather' has no effect")
    assert config_warnings(compression('strategy.compression="topk"', chosen)) == []
    assert config_warnings(compression('strategy.compression="none"')) == []


# ---- compressed bsp exchanges its messages with the allgather ------------------------------

def compressed_bytes(config) -> int:
    """One worker's compressed message, as the strategy charges it."""
    env, ctx, strategy = build_simulation(config)
    strategy.start()  # computes step 0's gradients and sizes the message
    return strategy.message_bytes(strategy.messages[0])


@pytest.mark.parametrize("codec", ["topk", "qsgd"])
@pytest.mark.parametrize("algo", ALLGATHERS)
def test_compressed_bsp_communicates_one_allgather_per_step(capsys, codec: str,
                                                            algo: str) -> None:
    config = compression(f'strategy.compression="{codec}"', f'strategy.allgather="{algo}"')
    nbytes = compressed_bytes(config)
    summary = train(config).summary
    p = config.cluster.workers
    gather = collective_json(capsys, "--fabric", "eth-10g", "--algo", algo, "--workers",
                             str(p), "--bytes", str(nbytes))
    # the ideal host: no CPU, so a step's communication is the allgather's time
    assert summary["overhead_s"] == 0.0
    assert summary["comm_s"] == pytest.approx(summary["iterations"] * gather["time_s"],
                                              rel=1e-9)


def test_allgather_is_slower_than_the_allreduce_charged_before_once_bandwidth_bound(
        capsys) -> None:
    # ring allgather - ring allreduce of n = (p - 1) (n beta (p - 2) / p - alpha): slower
    # once n > alpha / beta * p / (p - 2), 35 kB on eth-10g for p = 8. QSGD's message is
    # above that, top-k's (1% of the entries) below: latency-bound, the allgather's p - 1
    # rounds beat the allreduce's 2 (p - 1)
    fabric = FABRICS["eth-10g"]
    p = 8
    crossover = alpha_s(fabric) * fabric.bandwidth_Bps * p / (p - 2)
    for codec in ("qsgd", "topk"):
        nbytes = compressed_bytes(compression(f'strategy.compression="{codec}"'))
        args = ("--fabric", "eth-10g", "--workers", str(p), "--bytes", str(nbytes))
        gather = collective_json(capsys, "--algo", "ring-allgather", *args)
        reduce = collective_json(capsys, "--algo", "ring", *args)
        assert (gather["time_s"] > reduce["time_s"]) == (nbytes > crossover), codec
        # (the closed forms: the simulated ring allreduce is a little slower when p does not
        # divide n, its chunks then differ by an element)
        assert gather["closed_form_s"] - reduce["closed_form_s"] == pytest.approx(
            (p - 1) * (nbytes * (p - 2) / p / fabric.bandwidth_Bps - alpha_s(fabric)),
            rel=1e-9)
    qsgd = compression('strategy.compression="qsgd"')
    assert compressed_bytes(qsgd) > crossover


@pytest.mark.parametrize("codec", ["topk", "qsgd"])
def test_cpu_of_a_compressed_step(codec: str) -> None:
    # per step: the framework's step_s, the allgather's messages (2 (p - 1) of them on a
    # rank's busiest path, nothing summed) and decoding the p - 1 received into the sum
    config = compression(f'strategy.compression="{codec}"', 'cluster.host="epyc-core"')
    env, ctx, strategy = build_simulation(config)
    strategy.start()
    nbytes = strategy.message_bytes(strategy.messages[0])
    p, costs, codec_0 = ctx.n, ctx.cpu, ctx.workers[0].codec
    # top-k scatter-adds its k float64 values, QSGD adds every entry
    decode_bytes = codec_0.k * 8 if codec == "topk" else codec_0.size * 8
    expected = (costs.step_s + 2 * (p - 1) * costs.message.message_s(nbytes)
                + (p - 1) * costs.reduce_s(decode_bytes))
    summary = train(config).summary
    assert summary["overhead_s"] / summary["iterations"] == pytest.approx(expected, rel=1e-9)


def test_local_sgd_is_not_compressed() -> None:
    # local-sgd averages its replicas with the allreduce, whatever strategy.compression says
    plain = compression('strategy.kind="local-sgd"')
    topk = compression('strategy.kind="local-sgd"', 'strategy.compression="topk"')
    assert train(topk).summary["comm_s"] == train(plain).summary["comm_s"]
