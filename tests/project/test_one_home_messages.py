"""A message's cost has one home, :mod:`sim.network.message_cost`: no other module of sim/
or the notebooks defines a message-cost formula or does arithmetic on a message's
parameters; and the home's closed forms are the ones its docstring states."""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from sim.network.fabrics import SWITCH_HOPS, Fabric
from sim.network.message_cost import (
    PARTS,
    REQUEST_BYTES,
    MessageCpu,
    alpha_s,
    arrival_s,
    beta_s,
    half_bytes,
    idle_s,
    message_cpu,
    parts,
    path_window_Bps,
    posted_s,
    shard_costs,
    wire_bytes,
    wire_fabric,
)
from sim.network.transports import REGISTRY as TRANSPORTS
from sim.training.host_costs import HOSTS, cpu_costs, message_parts

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "sim" / "network" / "message_cost.py"

# functions that compute (part of) a message's cost: defined in the home only
FORMULAS = {"alpha_s", "beta_s", "beta_s_per_byte", "idle_s", "half_bytes", "posted_s",
            "arrival_s", "wire_fabric", "wire_bytes", "rtt_s", "window_Bps",
            "path_window_Bps", "message_s", "send_s", "receive_s", "handled_s", "unpacked_s",
            "requests_s", "answer_s", "overhead_s", "message_cpu", "shard_costs"}
# a message's parameters (a host's per message, a network stack's, a transport's, a
# fabric's): arithmetic on them is the home's
PARAMETERS = {"message_s", "message_Bps", "stack_s", "stack_Bps", "host_s", "host_Bps",
              "rpc_s", "serialize_Bps", "deserialize_Bps", "header_bytes", "frame_bytes",
              "frame_payload_bytes", "window_bytes", "latency_s", "overhead_s"}
# packages that measure, fit or print these parameters (the inverse problem, not a cost)
MEASURING = ("sim/calibration/", "sim/validation/", "sim/commands/", "sim/bench/")
# the same names meaning something else: (module, attribute) -> what it is
OTHER_MEANING = {
    ("sim/training/compute_model.py", "overhead_s"): "a device's constant per gradient",
    ("sim/faults/storage.py", "latency_s"): "a storage's latency per write",
}
REQUEST = "REQUEST_BYTES"


def sources() -> list[Path]:
    files = sorted((ROOT / "sim").rglob("*.py")) + sorted((ROOT / "notebooks").glob("*.py"))
    return [p for p in files if p != HOME]


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_module_but_the_home_defines_a_message_formula():
    found = [f"{relative(p)}:{node.lineno} defines {node.name}"
             for p in sources() for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
             and node.name in FORMULAS]
    assert not found, "a message's cost is sim/network/message_cost.py's:\n" + "\n".join(found)


def test_no_module_but_the_home_computes_with_a_message_s_parameters():
    found = []
    for p in sources():
        name = relative(p)
        if name.startswith(MEASURING):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.BinOp):
                continue
            for side in (node.left, node.right):
                if (isinstance(side, ast.Attribute) and side.attr in PARAMETERS
                        and (name, side.attr) not in OTHER_MEANING):
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "a message's cost is sim/network/message_cost.py's:\n" + "\n".join(found)


def test_only_the_home_sizes_a_request():
    found = [f"{relative(p)}:{node.lineno}" for p in sources()
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == REQUEST for t in node.targets)]
    assert not found


def test_the_scan_sees_a_formula_outside_the_home():
    """The two scans above would catch the formulas this issue moved (here as they were)."""
    code = ("class Fabric:\n    def alpha_s(self, hops=2):\n"
            "        return 2 * self.overhead_s + hops * self.latency_s\n")
    tree = ast.parse(code)
    assert any(isinstance(n, ast.FunctionDef) and n.name in FORMULAS for n in ast.walk(tree))
    assert any(isinstance(n, ast.BinOp) and isinstance(n.right, ast.Attribute)
               and n.right.attr in PARAMETERS for n in ast.walk(tree))


def test_fabrics_and_transports_keep_only_their_parameters():
    for cls in (Fabric, type(TRANSPORTS["grpc"])):
        methods = {name for name, value in vars(cls).items()
                   if callable(value) or isinstance(value, property)}
        assert not FORMULAS & methods, cls


# ---- the closed forms -------------------------------------------------------------------

B, L, OVERHEAD = 1e9, 2e-7, 5e-7  # bytes/s, s per hop, s per message at each end (o)
FABRIC = Fabric("test", 8 * B, latency_s=L, overhead_s=OVERHEAD, source="a test")
TCP = dataclasses.replace(FABRIC, stack_Bps=4e9)


@pytest.mark.parametrize("n", [0.0, 1.0, 4096.0, 3e7])
@pytest.mark.parametrize("hops", [SWITCH_HOPS, 4])
def test_a_message_alone_costs_alpha_plus_n_beta(n, hops):
    assert alpha_s(FABRIC, hops) == 2 * OVERHEAD + hops * L
    assert beta_s(FABRIC) == 1.0 / B
    assert idle_s(FABRIC, n, hops) == (2 * OVERHEAD + hops * L) + n * (1.0 / B)
    # the flow model pays the same alpha: o before the first byte, hops L + o after the last
    assert posted_s(FABRIC) + arrival_s(FABRIC, hops) == pytest.approx(alpha_s(FABRIC, hops),
                                                                       rel=1e-15)
    assert half_bytes(FABRIC) == (2 * OVERHEAD + 2 * L) * B


def test_o_moves_off_the_wire_where_the_cores_pay_it():
    assert wire_fabric(FABRIC, False) is FABRIC
    assert alpha_s(wire_fabric(FABRIC, True)) == 2 * L


def test_grpc_frames_and_window():
    grpc = TRANSPORTS["grpc"]
    assert wire_bytes(grpc, 0.0) == 0.0  # an empty message is a signal, not a flow
    assert wire_bytes(grpc, 16384.0) == 16384 + 60 + 9
    assert wire_bytes(grpc, 16385.0) == 16385 + 60 + 2 * 9
    assert wire_bytes(TRANSPORTS["mpi"], 1e6) == 1e6
    rtt = 2 * (SWITCH_HOPS * L + 2 * grpc.overhead_s)
    assert path_window_Bps(grpc, FABRIC) == grpc.window_bytes / rtt
    assert path_window_Bps(TRANSPORTS["mpi"], FABRIC) == math.inf


@pytest.mark.parametrize("n", [0.0, 64.0, 1e6])
def test_each_end_pays_the_host_s_and_the_stack_s_cpu(n):
    """Under MPI on a TCP fabric: m + o + n / M + n / S at each end (m, M the host's)."""
    host = HOSTS["epyc-core"]
    costs = cpu_costs(host, TCP)
    assert costs.message == message_cpu(host.message_s, host.message_Bps, TCP)
    expected = host.message_s + OVERHEAD + 0.0 + n / host.message_Bps + n / 4e9
    assert costs.message.send_s(n) == costs.message.receive_s(n) == expected


def test_a_transport_s_costs_replace_the_stack_s_and_add_its_own():
    host, grpc = HOSTS["epyc-core"], TRANSPORTS["grpc"]
    message = cpu_costs(host, TCP, grpc).message
    n = 1e5
    common = (host.message_s + grpc.overhead_s + grpc.rpc_s + n / host.message_Bps
              + n / grpc.copy_Bps)
    assert message.send_s(n) == common + n / grpc.serialize_Bps
    assert message.receive_s(n) == common + n / grpc.deserialize_Bps
    assert message.handled_s(n) == message.message_s(n) + message.send_s(0.0)
    assert message.unpacked_s(n) == n / grpc.deserialize_Bps


def test_the_ideal_host_pays_nothing_under_mpi():
    message = cpu_costs(HOSTS["ideal"], TCP).message
    assert message == MessageCpu()
    assert message.send_s(1e9) == message.receive_s(1e9) == 0.0


def test_a_message_s_parts_are_its_cpu_and_its_wire():
    """Both ends' CPU, then alpha (without o: the host pays it) and n beta."""
    host, n = HOSTS["epyc-core"], 1e6
    costs = cpu_costs(host, TCP)
    got = parts(costs.message, TCP, TRANSPORTS["mpi"], n, costs.charged)
    assert set(got) == set(PARTS)
    assert got["calls"] == 2 * (host.message_s + OVERHEAD + 0.0)
    assert got["copies"] == 2 * n * (1 / host.message_Bps + 1 / 4e9)
    assert got["serialisation"] == 0.0
    assert got["wire"] == 2 * L + n / B
    assert sum(got.values()) == pytest.approx(
        costs.message.send_s(n) + idle_s(wire_fabric(TCP, True), n)
        + costs.message.receive_s(n), rel=1e-12)


def test_message_parts_by_name_is_the_home_s():
    costs = cpu_costs(HOSTS["epyc-core"], FABRIC, TRANSPORTS["grpc"])
    assert message_parts(TRANSPORTS["grpc"], FABRIC, 5e5, "epyc-core") == parts(
        costs.message, FABRIC, TRANSPORTS["grpc"], 5e5, costs.charged)


def test_a_pull_from_the_shards_costs_requests_and_answers():
    message = cpu_costs(HOSTS["epyc-core"], TCP).message
    split = np.array([3000.0, 0.0, 1000.0])
    pull = shard_costs(message, split, None, admit_s=1e-5)
    assert pull.owners.tolist() == [True, False, True]
    assert pull.request_s == 2 * message.send_s(REQUEST_BYTES)
    assert pull.shard_s.tolist() == [message.receive_s(REQUEST_BYTES) + 1e-5 + message.send_s(b)
                                     for b in (3000.0, 1000.0)]
    assert pull.sender_s == message.receive_s(3000.0) + message.receive_s(1000.0)
    push = shard_costs(message, split, lambda b: b * 1e-9, admit_s=1e-5)
    assert push.shard_s.tolist() == [message.receive_s(b) + b * 1e-9 for b in (3000.0, 1000.0)]
    rdma = cpu_costs(HOSTS["epyc-core"], TCP, TRANSPORTS["rdma"]).message
    assert not shard_costs(rdma, split, None, admit_s=1e-5).shards_busy  # one-sided reads
