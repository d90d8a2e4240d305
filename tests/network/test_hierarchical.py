"""Hierarchical allreduces (Goyal et al. 2017's reduce/allreduce/broadcast and Horovod's
reduce-scatter/allreduce/allgather): the sum, the two-level closed form on a host link and
a fabric, and equality with a flat allreduce on one host or one rank a host."""

from __future__ import annotations

import numpy as np
import pytest

from sim.network.collective_alone import run_alone, simulate
from sim.network.collectives import REGISTRY, get_collective
from sim.network.fabrics import Fabric
from sim.network.message_cost import alpha_s, beta_s

LINK = Fabric("link", 8 * 100.0, latency_s=0.05, overhead_s=0.1)  # 100 B/s, alpha 0.3 s
FABRIC = Fabric("slow", 8 * 10.0, latency_s=0.5, overhead_s=1.0)  # 10 B/s, alpha 3 s
NAMES = ["hierarchical", "hierarchical-rs"]
INTERS = ["ring", "rabenseifner", "recursive-doubling", "tree"]
NBYTES = 4 * 3 * 5 * 7 * 64  # splits evenly into every piece below


def timed(algo, p: int, g: int, model: str = "flow", link: Fabric | None = LINK) -> float:
    time_s, _ = run_alone(algo, p=p, nbytes=NBYTES, fabric=FABRIC, model=model,
                          host_link=link, machines=[r // g for r in range(p)])
    return time_s


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("p, g", [(8, 4), (12, 4), (6, 1), (4, 4), (10, 4)])
def test_every_rank_ends_with_the_sum(name: str, p: int, g: int) -> None:
    if name == "hierarchical-rs" and p % g:
        with pytest.raises(ValueError, match="every host needs g = 4 ranks"):
            get_collective(name, ranks_per_host=g).schedule(p, 40)
        return
    rng = np.random.default_rng(0)
    buffers = [rng.standard_normal(40) for _ in range(p)]
    want = np.sum(buffers, axis=0)
    _, result = simulate(get_collective(name, ranks_per_host=g), [b.copy() for b in buffers],
                         fabric=FABRIC, host_link=LINK, machines=[r // g for r in range(p)])
    assert all(np.array_equal(r, result[0]) for r in result)  # the same bits everywhere
    np.testing.assert_allclose(result[0], want, rtol=1e-12)


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("inter", INTERS)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("p, g", [(16, 4), (8, 2), (12, 3)])
def test_uncontended_time_is_the_two_level_closed_form(name: str, inter: str, p: int, g: int,
                                                       model: str) -> None:
    algo = get_collective(name, ranks_per_host=g, inter=inter)
    want = algo.two_level_s(p, NBYTES, (alpha_s(LINK), beta_s(LINK)),
                            (alpha_s(FABRIC), beta_s(FABRIC)))
    assert timed(algo, p, g, model) == pytest.approx(want, rel=1e-12)


def test_the_closed_form_by_hand() -> None:
    # 2 hosts of 4 ranks, n = 400 B. Link: a = 0.3 s, b = 0.01 s/B; fabric: a = 3, b = 0.1.
    # Goyal: 2 [3 (0.3 + 100 x 0.01) + 0.3 + 300 x 0.01] + ring(2, 400) = 2 x 7.2
    #        + 2 (3 + 200 x 0.1) = 14.4 + 46 = 60.4 s
    # Horovod: 2 x 3 (0.3 + 1) + ring(2, 100) = 7.8 + 2 (3 + 50 x 0.1) = 23.8 s
    link, fabric = (0.3, 0.01), (3.0, 0.1)
    assert get_collective("hierarchical", ranks_per_host=4).two_level_s(
        8, 400, link, fabric) == pytest.approx(60.4)
    assert get_collective("hierarchical-rs", ranks_per_host=4).two_level_s(
        8, 400, link, fabric) == pytest.approx(23.8)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("inter", INTERS)
def test_one_rank_a_host_is_the_inter_allreduce(name: str, inter: str) -> None:
    algo = get_collective(name, ranks_per_host=1, inter=inter)
    flat = get_collective(inter)
    assert timed(algo, 8, 1) == timed(flat, 8, 1)
    a, b = alpha_s(FABRIC), beta_s(FABRIC)
    assert algo.closed_form_s(8, NBYTES, a, b) == flat.closed_form_s(8, NBYTES, a, b)


@pytest.mark.parametrize("name", NAMES)
def test_one_host_is_the_ring_allreduce_on_its_link(name: str) -> None:
    algo = get_collective(name, ranks_per_host=8, inter="tree")
    assert timed(algo, 8, 8) == timed(get_collective("ring"), 8, 8)
    assert algo.two_level_s(8, NBYTES, (0.3, 0.01), (3.0, 0.1)) == pytest.approx(
        get_collective("ring").closed_form_s(8, NBYTES, 0.3, 0.01), rel=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_without_a_host_link_one_alpha_beta_gives_the_time(name: str) -> None:
    algo = get_collective(name, ranks_per_host=4)
    assert timed(algo, 16, 4, link=None) == pytest.approx(
        algo.closed_form_s(16, NBYTES, alpha_s(FABRIC), beta_s(FABRIC)), rel=1e-12)


def test_reduce_scatter_variant_beats_the_leaders_on_a_slow_fabric() -> None:
    # only 1/g of the vector leaves each rank across hosts, on g NICs at once
    slow, fast = (get_collective(n, ranks_per_host=4) for n in NAMES)
    assert timed(fast, 16, 4) < timed(slow, 16, 4)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="across hosts"):
        get_collective("hierarchical", inter="ps")
    with pytest.raises(ValueError, match="across hosts"):
        get_collective("hierarchical", inter="hierarchical")
    with pytest.raises(ValueError, match="ranks_per_host"):
        get_collective("hierarchical-rs", ranks_per_host=0)
    assert REGISTRY["hierarchical"].takes == {"ranks_per_host": "cluster.ranks_per_host",
                                              "inter": "strategy.inter_collective"}
