"""Host links (cluster.host_link): messages inside a host against their closed forms, the
fabric untouched across hosts, and the config's errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import simpy
import tomli_w

from sim.cli import main
from sim.network.collective_alone import run_alone
from sim.network.collectives import get_collective
from sim.network.fabrics import Fabric, get_fabric
from sim.network.host_links import REGISTRY, get_host_link
from sim.network.message_cost import alpha_s, beta_s
from sim.network.network_builder import build_network, with_host_link
from sim.training.config_warnings import config_warnings
from sim.training.validator import validate

B = 100.0  # bytes/s of the host link: round numbers make hand-computed times exact
LINK = Fabric("link", 8 * B, latency_s=0.05, overhead_s=0.1)  # alpha = 2 o + 2 L = 0.3 s
FABRIC = Fabric("slow", 8 * 10.0, latency_s=0.5, overhead_s=1.0)  # 10 B/s, alpha 3 s
MODELS = ["flow", "analytical"]


def two_hosts(model: str = "flow", link: Fabric | None = LINK, ranks: int = 8,
              per_host: int = 4):
    """A network of ``ranks`` endpoints, ``per_host`` to a machine."""
    env = simpy.Environment()
    net = build_network(env, FABRIC, ranks, model=model)
    return with_host_link(net, link, np.arange(ranks) // per_host)


def deliveries(net, messages: list[tuple[int, int, float]]) -> list[float]:
    """Send every (src, dst, bytes) at t = 0; their delivery times, in order."""
    events = [net.send(src, dst, nbytes) for src, dst, nbytes in messages]
    net.env.run(simpy.AllOf(net.env, events))
    return [event.value for event in events]


# ---- point to point ------------------------------------------------------------------

@pytest.mark.parametrize("model", MODELS)
def test_a_message_inside_a_host_costs_the_links_alpha_plus_n_over_b(model: str) -> None:
    # o + 2 L + n / B + o = 0.3 + 500 / 100
    assert deliveries(two_hosts(model), [(1, 2, 500)]) == pytest.approx([5.3], rel=1e-12)


@pytest.mark.parametrize("model", MODELS)
def test_a_message_across_hosts_is_unchanged_by_the_host_link(model: str) -> None:
    with_link = deliveries(two_hosts(model), [(1, 5, 500)])
    without = deliveries(two_hosts(model, link=None), [(1, 5, 500)])
    assert with_link == without == pytest.approx([3.0 + 500 / 10.0], rel=1e-12)


def test_two_flows_out_of_one_port_share_it_max_min() -> None:
    # one rank's port out carries both: B / 2 each, 500 bytes in 10 s, plus alpha
    assert deliveries(two_hosts(), [(0, 1, 500), (0, 2, 500)]) == pytest.approx([10.3, 10.3])


def test_flows_between_other_ranks_of_the_host_do_not_slow_each_other() -> None:
    # an NVSwitch: 0 -> 1 and 2 -> 3 use four different ports
    assert deliveries(two_hosts(), [(0, 1, 500), (2, 3, 500)]) == pytest.approx([5.3, 5.3])


def test_max_min_between_a_shared_port_and_a_free_one() -> None:
    # 0 -> 1 and 0 -> 2 share 0's port out; 3 -> 2 shares 2's port in with 0 -> 2. Progressive
    # filling: all three at 50 B/s saturate both ports together; 0 -> 1 (300 B) ends at 6 s,
    # then 0 -> 2 and 3 -> 2 still share port 2 in at 50 each: 0 -> 2 (600 B) at 12 s, as
    # does 3 -> 2 (600 B).
    times = deliveries(two_hosts(), [(0, 1, 300), (0, 2, 600), (3, 2, 600)])
    assert times == pytest.approx([6.3, 12.3, 12.3], rel=1e-12)


def test_inside_and_across_flows_share_nothing() -> None:
    # rank 0 sends to rank 1 (host link) and rank 4 (its NIC) at once: each as if alone
    times = deliveries(two_hosts(), [(0, 1, 500), (0, 4, 50)])
    assert times == pytest.approx([5.3, 3.0 + 5.0], rel=1e-12)


def test_batches_mixing_both_tiers_deliver_each_message_on_its_own_tier() -> None:
    net = two_hosts()
    got: list[tuple[float, list[int]]] = []
    net.send_many(np.array([0, 0, 5]), np.array([1, 4, 6]), np.array([500.0, 50.0, 100.0]),
                  lambda which: got.append((net.env.now, sorted(which.tolist()))))
    done = net.send_all(np.array([2, 3]), np.array([3, 7]), np.array([100.0, 10.0]))
    net.env.run(done)
    assert done.value == pytest.approx(3.0 + 1.0)  # the later of 1.3 (inside) and 4 (across)
    net.env.run()
    assert [w for _, w in got] == [[2], [0], [1]]  # 1.3 s, 5.3 s, 8 s
    assert [t for t, _ in got] == pytest.approx([1.3, 5.3, 8.0], rel=1e-12)


# ---- collectives ---------------------------------------------------------------------

def ring_s(p: int, n: float, fabric: Fabric) -> float:
    """The lab's ring allreduce closed form (Thakur et al. 2005): 2 (p - 1) (a + n / (p B))."""
    return 2 * (p - 1) * (alpha_s(fabric) + n / p * beta_s(fabric))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("t", [2, 4, 8])
def test_ring_allreduce_inside_one_host_takes_the_closed_form_on_the_link(model: str,
                                                                          t: int) -> None:
    n = t * 8 * 1000  # every chunk the same size
    link = get_host_link("nvlink2-v100")
    time_s, _ = run_alone("ring", p=t, nbytes=n, fabric="eth-10g", model=model,
                          host_link="nvlink2-v100", machines=[0] * t)
    assert time_s == pytest.approx(ring_s(t, n, link), rel=1e-9)


@pytest.mark.parametrize("model", MODELS)
def test_ring_over_two_hosts_is_paced_by_its_two_fabric_hops(model: str) -> None:
    # ranks 0-3 and 4-7: 3 -> 4 and 7 -> 0 cross the fabric in every round, the other six
    # messages are through sooner, so every round waits for a fabric message
    fabric = get_fabric("eth-10g")
    n = 8 * 8 * 1000
    time_s, _ = run_alone("ring", p=8, nbytes=n, fabric=fabric, model=model,
                          host_link="nvlink2-v100", machines=[0, 0, 0, 0, 1, 1, 1, 1])
    assert time_s == pytest.approx(ring_s(8, n, fabric), rel=1e-9)


@pytest.mark.parametrize("model", MODELS)
def test_collectives_across_hosts_only_are_bit_for_bit_unchanged(model: str) -> None:
    for algo in ("ring", "recursive-doubling", "tree"):
        alone, _ = run_alone(algo, p=8, nbytes=64_000, fabric="ib-hdr", model=model)
        linked, net = run_alone(algo, p=8, nbytes=64_000, fabric="ib-hdr", model=model,
                                host_link="nvlink3-a100", machines=list(range(8)))
        assert linked == alone and net.model == model


def test_data_moves_right_over_both_tiers() -> None:
    rng = np.random.default_rng(3)
    buffers = [rng.standard_normal(96) for _ in range(6)]
    expected = np.sum(buffers, axis=0)
    env = simpy.Environment()
    net = with_host_link(build_network(env, "ib-hdr", 6), "pcie4-x16", np.arange(6) // 3)
    env.run(env.process(get_collective("ring").run(net, buffers)))
    for buffer in buffers:
        np.testing.assert_allclose(buffer, expected, rtol=1e-12)


# ---- presets and config --------------------------------------------------------------

def test_presets_are_the_datasheets_per_direction_rates() -> None:
    # datasheet totals count both directions: 300, 600, 900 GB/s
    line = {name: link.line_rate_bps / 8 for name, link in REGISTRY.items()}
    assert line["nvlink2-v100"] == pytest.approx(150e9)
    assert line["nvlink3-a100"] == pytest.approx(300e9)
    assert line["nvlink4-h100"] == pytest.approx(450e9)
    assert line["pcie4-x16"] == pytest.approx(31.5e9, rel=1e-3)
    assert all(link.source for link in REGISTRY.values())
    assert get_host_link("none") is None


CONFIG = {"cluster": {"workers": 1, "ranks_per_host": 4, "fabric": "eth-10g"},
          "workload": {"model": "mlp", "features": 32, "classes": 4, "hidden": [64] * 3,
                       "batch": 16},
          "parallel": {"pipeline": 2, "tensor": 2, "microbatches": 2},
          "compute": {"device": "v100"}, "run": {"iterations": 2, "eval_every": 2}}


def run_summary(tmp_path, name: str, *overrides: str) -> dict:
    path = tmp_path / "c.toml"
    if not path.exists():
        path.write_text(tomli_w.dumps(CONFIG))
    out = tmp_path / name
    assert main(["run", str(path), "--out", str(out), *[a for o in overrides
                                                          for a in ("--set", o)]]) == 0
    return json.loads((out / "summary.json").read_text())


def test_a_split_replica_on_one_host_talks_over_nvlink(tmp_path) -> None:
    fabric = run_summary(tmp_path, "fabric")
    nvlink = run_summary(tmp_path, "nvlink", "cluster.host_link='nvlink2-v100'")
    assert nvlink["tensor_allreduce_s"] < fabric["tensor_allreduce_s"] / 5
    assert nvlink["pipeline_p2p_s"] < fabric["pipeline_p2p_s"]
    assert nvlink["sim_time_s"] < fabric["sim_time_s"]
    assert nvlink["final_loss"] == fabric["final_loss"]  # the numbers do not depend on time


def test_a_host_link_with_every_rank_on_its_own_host_changes_nothing(tmp_path) -> None:
    alone = run_summary(tmp_path, "none", "cluster.ranks_per_host=1")
    linked = run_summary(tmp_path, "linked", "cluster.ranks_per_host=1",
                         "cluster.host_link='nvlink4-h100'")
    for summary in (alone, linked):
        summary.pop("wall_s")
    (note,) = linked.pop("notes")  # said once, where the run's results last
    assert note.startswith("cluster.host_link = 'nvlink4-h100' has no effect")
    assert linked == alone
    config = validate({**CONFIG, "cluster": {**CONFIG["cluster"], "ranks_per_host": 1,
                                             "host_link": "nvlink4-h100"}})
    assert any("cluster.host_link" in w for w in config_warnings(config))


def test_an_unknown_host_link_exits_2_naming_the_key(tmp_path, capsys) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[cluster]\nhost_link = "nvlink2"\n')
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "cluster.host_link" in err and "did you mean 'nvlink2-v100'" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
