"""Transports (sim.network.transports): closed forms of one RPC, frames, window-bounded flows,
one-sided pulls, and bad tables."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.network.fabrics import get_fabric
from sim.network.maxmin import fill
from sim.network.message_cost import PARTS, alpha_s, beta_s, rtt_s, wire_bytes
from sim.network.network_builder import build_network
from sim.network.transports import REGISTRY, get_transport, save_transport
from sim.plots.transport_figures import plot_message_parts, plot_transports, transport_rows
from sim.simulated.engine import simulate
from sim.training.host_costs import HOSTS, cpu_costs, message_parts
from sim.training.validator import load_config

GRPC = get_transport("grpc")
WIDE = dataclasses.replace(GRPC, window_bytes=math.inf)  # gRPC without flow control


def test_a_grpc_message_carries_its_headers_and_a_frame_header_per_16_kib():
    assert wire_bytes(GRPC, 0.0) == 0.0  # an empty message is a signal, not a flow
    assert wire_bytes(GRPC, 1.0) == 1 + 60 + 9
    assert wire_bytes(GRPC, 16384.0) == 16384 + 60 + 9
    assert wire_bytes(GRPC, 16385.0) == 16385 + 60 + 2 * 9
    sizes = np.array([0.0, 1.0, 16385.0, 1e6])
    assert wire_bytes(GRPC, sizes).tolist() == [wire_bytes(GRPC, float(n)) for n in sizes]
    assert wire_bytes(REGISTRY["mpi"], 1e6) == 1e6


def test_the_mpi_transport_is_the_model_before_transports():
    for host in ("ideal", "epyc-core"):
        fabric = get_fabric("eth-25g")
        assert cpu_costs(HOSTS[host], fabric, REGISTRY["mpi"]) == cpu_costs(HOSTS[host], fabric)


def test_send_and_receive_cpu_follow_the_transport_s_closed_form():
    costs = cpu_costs(HOSTS["ideal"], get_fabric("ib-hdr"), GRPC)
    message = costs.message
    n = 1e6
    common = GRPC.overhead_s + GRPC.rpc_s + n / GRPC.copy_Bps
    assert message.send_s(n) == pytest.approx(common + n / GRPC.serialize_Bps, rel=1e-12)
    assert message.receive_s(n) == pytest.approx(common + n / GRPC.deserialize_Bps, rel=1e-12)
    assert costs.charged  # the transport's costs are paid even on the ideal host
    rdma = cpu_costs(HOSTS["ideal"], get_fabric("eth-25g"), REGISTRY["rdma"]).message
    assert rdma.send_s(n) == rdma.receive_s(n) == 0.5e-6  # no copy, whatever the fabric


def one_message_s(model: str, fabric: str, transport, nbytes: float) -> float:
    env = simpy.Environment()
    network = build_network(env, fabric, 2, model=model, transport=transport)
    done = network.send(0, 1, nbytes)
    env.run(done)
    return env.now


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("nbytes", [1.0, 20000.0, 3e6])
def test_a_message_s_wire_time_is_alpha_plus_its_framed_bytes_times_beta(model, nbytes):
    fabric = get_fabric("eth-100g")
    expected = alpha_s(fabric) + wire_bytes(WIDE, nbytes) * beta_s(fabric)
    assert one_message_s(model, "eth-100g", WIDE, nbytes) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_a_window_limited_stream_runs_at_window_over_rtt(model):
    """65,535 B in flight per round trip of 2 (2 L + 2 o) = 33.2 us: 1.97 GB/s, below the
    100 GbE link's 11.25 GB/s, so the window sets the rate."""
    fabric = get_fabric("eth-100g")
    rtt = 2 * (2 * fabric.latency_s + 2 * GRPC.overhead_s)
    assert rtt_s(GRPC, 2, fabric.latency_s, fabric.overhead_s) == pytest.approx(rtt)
    rate = GRPC.window_bytes / rtt
    assert rate < fabric.bandwidth_Bps
    n = 8e6
    expected = alpha_s(fabric) + wire_bytes(GRPC, n) / rate
    assert one_message_s(model, "eth-100g", GRPC, n) == pytest.approx(expected, rel=1e-9)
    # a window larger than the bandwidth-delay product: the link sets the rate again
    big = dataclasses.replace(GRPC, window_bytes=1e9)
    assert one_message_s(model, "eth-100g", big, n) == pytest.approx(
        alpha_s(fabric) + wire_bytes(GRPC, n) * beta_s(fabric), rel=1e-9)


def test_window_bounded_flows_leave_their_share_of_a_link_to_the_others():
    """Two flows into one host: one capped below half the link; the other takes the rest
    (max-min fairness with bounds, as SimGrid's)."""
    env = simpy.Environment()
    network = build_network(env, "eth-100g", 3, transport=GRPC)
    small, large = network.send(0, 2, 1e5), network.send(1, 2, 8e6)
    env.run(simpy.AllOf(env, [small, large]))
    fabric = get_fabric("eth-100g")
    rate = GRPC.window_bytes / rtt_s(GRPC, 2, fabric.latency_s, fabric.overhead_s)
    # both are window-bound (2 x 1.97 GB/s < 11.25 GB/s): neither slows the other
    assert large.value == pytest.approx(alpha_s(fabric) + wire_bytes(GRPC, 8e6) / rate,
                                        rel=1e-9)


routes_and_bounds = st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
             min_size=n, max_size=n),
    st.lists(st.one_of(st.just(math.inf), st.floats(0.1, 20.0)), min_size=n, max_size=n)))


@settings(max_examples=200, deadline=None)
@given(routes_and_bounds, st.lists(st.floats(0.5, 10.0), min_size=4, max_size=4))
def test_a_bound_is_a_private_link_of_that_capacity(case, capacity):
    """Independent of the bounded filling: each bounded flow given a link of its own whose
    capacity is the bound gets the same max-min rates."""
    routes, bounds = case
    rates, _ = fill(routes, capacity, bounds)
    private = [list(r) + ([4 + i] if b < math.inf else []) for i, (r, b)
               in enumerate(zip(routes, bounds, strict=True))]
    links = capacity + [b if b < math.inf else 1.0 for b in bounds]
    expected, _ = fill(private, links)
    assert rates == pytest.approx(expected, rel=1e-9)


PS = """
[cluster]
workers = 1
fabric = "ib-hdr"
host = "ideal"
[workload]
features = 1999
samples = 4000
batch = 16
[strategy]
kind = "{kind}"
[compute]
time_s = 1e-4
[run]
iterations = 20
eval_every = 20
"""


def step_s(tmp_path, kind: str, *overrides: str) -> float:
    path = tmp_path / f"{kind}.toml"
    path.write_text(PS.format(kind=kind))
    summary = simulate(load_config(path, list(overrides))).summary
    return summary["sim_time_s"] / summary["iterations"]


def test_a_bsp_ps_step_over_grpc_pays_each_rpc_s_closed_form(tmp_path):
    """One worker, the ideal host. The push is a call: sent, on the wire, taken by the
    server's handler, which sends an empty response (alpha), received by the worker; the
    worker then sends the held pull's request, which the server receives once its main loop
    has unpacked the push (5 us, well before), and answers with the parameters (sent, on
    the wire, received). Each message's wire is alpha (o off it: the transport pays it on
    the CPU) plus its framed bytes."""
    table = '{base = "grpc", window_bytes = inf}'
    costs = cpu_costs(HOSTS["ideal"], get_fabric("ib-hdr"), WIDE).message
    wire = dataclasses.replace(get_fabric("ib-hdr"), overhead_s=0.0)
    n = 1999 * 8  # logreg: a weight per feature (1,999), float64

    def on_wire(nbytes: float) -> float:
        return alpha_s(wire) + wire_bytes(WIDE, nbytes) * beta_s(wire)

    expected = (1e-4 + costs.send_s(n) + on_wire(n) + costs.handled_s(n) + on_wire(0)
                + costs.receive_s(0) + costs.send_s(64)
                + costs.receive_s(64) + costs.send_s(n) + on_wire(n) + costs.receive_s(n))
    assert costs.handled_s(n) == costs.message_s(n) + costs.send_s(0)
    assert costs.unpacked_s(n) == n / WIDE.deserialize_Bps < costs.send_s(64)
    got = step_s(tmp_path, "bsp-ps", f"cluster.transport={table}")
    assert got == pytest.approx(expected, rel=1e-9)


def test_one_sided_pulls_take_no_server_cpu(tmp_path):
    """asp, one worker: with two-sided pulls the server receives the request and sends the
    parameters on the pull's critical path; a one-sided read skips both."""
    one = step_s(tmp_path, "asp", 'cluster.transport="rdma"')
    two = step_s(tmp_path, "asp", 'cluster.transport={base = "rdma", one_sided_pulls = false}')
    costs = cpu_costs(HOSTS["ideal"], get_fabric("ib-hdr"), REGISTRY["rdma"]).message
    n = 1999 * 8
    assert two - one == pytest.approx(costs.receive_s(64) + costs.send_s(n), rel=1e-6)


def test_grpc_costs_more_than_mpi_and_rdma_on_the_same_fabric(tmp_path):
    times = {t: step_s(tmp_path, "asp", f'cluster.transport="{t}"', 'cluster.fabric="eth-25g"')
             for t in ("mpi", "grpc", "rdma")}
    assert times["rdma"] < times["mpi"] < times["grpc"]


def test_a_calibrated_transport_profile_loads_back(tmp_path):
    path = tmp_path / "transport.json"
    save_transport(path, dataclasses.replace(GRPC, name="here", rpc_s=55e-6),
                   measurements={"samples": [1, 2]})
    loaded = get_transport(f"calibrated:{path}")
    assert loaded.rpc_s == 55e-6 and loaded.window_bytes == GRPC.window_bytes


@pytest.mark.parametrize("setting,named", [
    ('cluster.transport="carrier-pigeon"', "cluster.transport"),
    ('cluster.transport={base = "grpc", rpc_s = -1}', "rpc_s"),
    ('cluster.transport={base = "grpc", window = 4}', "window"),
    ('cluster.transport={base = "grpc", window_bytes = 0}', "window_bytes"),
    ('cluster.transport={base = "grpc", one_sided_pulls = 1}', "one_sided_pulls"),
    ('cluster.transport={base = "grpc", copy_Bps = "fast"}', "copy_Bps"),
    ('cluster.fabric={base = "eth-25g", stack_Bps = -5}', "stack_Bps"),
])
def test_bad_transport_tables_exit_2_naming_the_key(tmp_path, capsys, setting, named):
    path = tmp_path / "c.toml"
    path.write_text(PS.format(kind="asp"))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--set", setting]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_transport_profile_with_a_bad_value_exits_2_naming_it(tmp_path, capsys):
    profile = tmp_path / "t.json"
    profile.write_text(json.dumps({"name": "x", "rpc_s": "slow"}))
    path = tmp_path / "c.toml"
    path.write_text(PS.format(kind="asp"))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--set",
                 f'cluster.transport="calibrated:{profile}"']) == 2
    assert "rpc_s" in capsys.readouterr().err


@pytest.mark.parametrize("transport,fabric", [("grpc", "eth-100g"), ("mpi", "eth-25g"),
                                              ("rdma", "roce-100g"), ("grpc", "ib-hdr")])
@pytest.mark.parametrize("nbytes", [100.0, 3e6])
def test_a_message_s_parts_add_up_to_its_simulated_time(transport, fabric, nbytes):
    """message_parts (the notebook's breakdown) against the sender's CPU, the simulated
    network (o off the wire: the host pays it) and the receiver's CPU."""
    parts = message_parts(transport, fabric, nbytes, "epyc-core")
    costs = cpu_costs(HOSTS["epyc-core"], get_fabric(fabric), get_transport(transport)).message
    wire = dataclasses.replace(get_fabric(fabric), overhead_s=0.0)
    expected = (costs.send_s(nbytes) + one_message_s("flow", wire, get_transport(transport),
                                                     nbytes) + costs.receive_s(nbytes))
    assert sum(parts.values()) == pytest.approx(expected, rel=1e-9)
    assert set(parts) == set(PARTS) and all(v >= 0 for v in parts.values())


def test_a_transport_sweep_draws_a_figure_per_strategy(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(PS.format(kind="asp").replace("[run]", "[sweep]\n"
                    '"cluster.transport" = ["grpc", "rdma"]\n"strategy.kind" = ["asp", '
                    '"bsp-ps"]\n[run]'))
    assert main(["sweep", str(path), "--out", str(tmp_path / "s"), "--jobs", "1",
                 "--no-plots"]) == 0
    rows = transport_rows(tmp_path / "s")
    assert {(r["transport"], r["strategy"]) for r in rows} == {
        (t, k) for t in ("grpc", "rdma") for k in ("asp", "bsp-ps")}
    written = plot_transports(tmp_path / "s", tmp_path / "plots")
    assert {p.name for p in written} >= {"transports-asp.png", "transports-bsp-ps.png"}
    sizes = [1e3, 1e6]
    parts = {t: [message_parts(t, "eth-25g", n) for n in sizes] for t in ("grpc", "rdma")}
    drawn = plot_message_parts(parts, sizes, tmp_path / "plots")
    assert {p.name for p in drawn} == {"message-parts.png", "message-parts.svg",
                                       "message-parts.pdf"}
