"""The parameter-server strategies' pushes and pulls over gRPC (``cluster.transport =
"grpc"``, ``sim real --transport grpc``): the same losses as over MPI, the links on their
own (a held pull blocks its call), and what the gRPC path refuses. Tiny configs: each real
run takes 2-3 s (mpiexec's start-up and grpcio's import)."""

from __future__ import annotations

import csv
import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sim.cli import main
from sim.errors import UserError
from sim.network.transports import REGISTRY, save_transport
from sim.real.executors.assemble import RankLog
from sim.real.executors.ps_wire import HEADER, PARAMS, PULL, PUSH, from_bytes, to_bytes
from sim.training.real_checks import real_transport
from sim.training.validator import validate

pytest.importorskip("mpi4py")
pytest.importorskip("grpc")


@pytest.fixture
def tiny(tmp_path: Path, tiny_real_config_data, write_toml):
    """``tiny(**keys)``: the shared tiny real config (2 workers, logreg, 20 updates) with
    ``keys`` (``__`` for ``.``), written to tmp_path; the path."""
    def write(**keys) -> Path:
        return write_toml(tmp_path / "c.toml", tiny_real_config_data(**keys))

    return write


def real(config: Path, out: Path, *args: str) -> tuple[dict, list[tuple[str, str]]]:
    """Run ``config`` for real; its summary and metrics.csv's (kind, loss) rows as written."""
    assert main(["real", str(config), "--out", str(out), *args]) == 0
    with (out / "metrics.csv").open() as f:
        losses = [(row["kind"], row["loss"]) for row in csv.DictReader(f)]
    return json.loads((out / "summary.json").read_text()), losses


@pytest.mark.parametrize("keys", [
    {"strategy__kind": "bsp-ps"},  # deterministic: a step's gradients summed in worker order
    {"strategy__kind": "asp", "cluster__workers": 1},  # one worker: one order
], ids=["bsp-ps", "asp-1-worker"])
def test_grpc_gives_the_mpi_runs_losses_bit_for_bit(tmp_path, tiny, keys):
    config = tiny(**keys)
    mpi, mpi_losses = real(config, tmp_path / "mpi")
    grpc, grpc_losses = real(config, tmp_path / "grpc", "--transport", "grpc")
    assert grpc_losses == mpi_losses and len(mpi_losses) == 25  # 20 updates, 5 evals
    assert (mpi["transport"], grpc["transport"]) == ("mpi", "grpc")
    assert grpc["iterations"] == 20 and grpc["kind"] == "real"
    # the same activities: packing is overhead, blocking in a call wire; the server's apart
    assert all(w["wire"] > 0 and w["overhead"] > 0 and w["compute"] > 0
               for w in grpc["workers"])
    assert set(grpc["server_breakdown"]) >= {"wire", "update", "overhead"}


def test_the_config_key_chooses_grpc_as_the_flag_does(tmp_path, tiny):
    summary, _ = real(tiny(strategy__kind="ssp", cluster__transport="grpc"), tmp_path / "out")
    assert summary["transport"] == "grpc" and summary["iterations"] == 20


def test_wide_deep_on_two_shards_over_grpc_is_the_mpi_run(tmp_path):
    """Wide & Deep's tables on 2 server shards (4 ranks on this machine's 2 cores): sparse
    pulls and pushes to both shards at once over gRPC."""
    from test_real_wide_deep import PS, WIDE_DEEP, config_file

    path = config_file(tmp_path, PS, cluster={"servers": 2})
    mpi, mpi_losses = real(path, tmp_path / "mpi")
    grpc, grpc_losses = real(path, tmp_path / "grpc", "--transport", "grpc")
    assert grpc_losses == mpi_losses and len(mpi_losses) == WIDE_DEEP["run"]["iterations"] + 4
    for key in ("pull_bytes_per_step", "push_bytes_per_step", "unique_ids_per_step"):
        assert grpc[key] == mpi[key], key  # the same bytes in the messages


@pytest.mark.parametrize("args, key", [
    (["--transport", "rdma"], "cluster.transport = 'rdma': real runs need RDMA hardware, "
                              "which this machine has none of"),
    (["--set", 'cluster.transport={base = "rdma"}'], "cluster.transport = 'rdma+custom'"),
    (["--transport", "grpc", "--set", 'strategy.kind="bsp"'], "cluster.transport = 'grpc'"),
    (["--transport", "grpc", "--set", 'strategy.kind="backup"', "--set",
      'strategy.late_gradients="cancel"'], "strategy.late_gradients"),
    (["--transport", "grpc", "--set", 'strategy.kind="asp"', "--set",
      "faults.failures=[{rank = 1, at_update = 5}]"], "faults.enabled"),
    (["--transport", "grpc", "--set", 'strategy.kind="asp"', "--net", "emulate:1gbit"],
     "--net emulate:1gbit"),
    (["--transport", "carrier-pigeon"], "cluster.transport: unknown transport"),
], ids=["rdma", "rdma-table", "bsp", "cancel", "faults", "emulated-net", "unknown"])
def test_what_grpc_runs_refuse_exits_2_in_one_line(tmp_path, capsys, tiny, args, key):
    out = tmp_path / "out"
    assert main(["real", str(tiny(strategy__kind="bsp-ps")), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert key in err and len(err.splitlines()) == 1
    assert not out.exists()


# ---- which path a transport takes ------------------------------------------------------

def test_a_transport_takes_grpc_when_it_is_rpc(tmp_path, tiny_real_config_data):
    def path_of(transport) -> str:
        return real_transport(validate(tiny_real_config_data(cluster__transport=transport)))

    calibrated = save_transport(tmp_path / "t.json", replace(REGISTRY["grpc"], rpc_s=5e-5))
    assert path_of("mpi") == "mpi" and path_of("grpc") == "grpc"
    assert path_of({"base": "grpc", "window_bytes": 4194304}) == "grpc"
    assert path_of({"base": "mpi", "rpc_s": 1e-5}) == "grpc"  # an RPC layer's costs
    assert path_of(f"calibrated:{calibrated}") == "grpc"
    with pytest.raises(UserError, match="RDMA hardware"):
        path_of("rdma")


# ---- the links on their own (no MPI) ----------------------------------------------------

def test_bytes_on_the_wire_are_little_endian_float64():
    message = np.array([PUSH, 1.0, 2.5, -0.0, np.nan, 1e300, 7.0, 0.0])
    data = to_bytes(message)
    assert data == message.astype("<f8").tobytes() and len(data) == 64
    out = np.zeros(10)
    assert from_bytes(data, out) == 8
    np.testing.assert_array_equal(out[:8], message)
    with pytest.raises(ValueError, match="buffer of 4"):
        from_bytes(data, np.zeros(4))


@pytest.mark.parametrize("servers", [1, 2])  # blocking calls; asyncio calls to both at once
def test_a_held_pull_blocks_its_call_until_the_server_answers(servers):
    """A worker's push is acknowledged at once; its pull's call returns only when each
    server's main loop replies, with the reply's bytes in the inbox."""
    from sim.real.executors.ps_grpc import GrpcServerLink, GrpcWorkerLink

    start = time.perf_counter()
    clock = SimpleNamespace(now=lambda: time.perf_counter() - start, rank=0)
    links = [GrpcServerLink(clock, workers=1) for _ in range(servers)]  # type: ignore[arg-type]
    peers = range(1, servers + 1)  # server ranks after the worker
    worker = GrpcWorkerLink(clock, RankLog(0),  # type: ignore[arg-type]
                            {p: link.port for p, link in zip(peers, links, strict=True)})
    inboxes, got = [np.zeros(HEADER + 3) for _ in peers], {}

    def work() -> None:
        worker.warm_up([(p, np.zeros(HEADER + 3)) for p in peers], inboxes)
        push = np.array([PUSH, 0, 0, 0, 0, 0, 0, 0, 1.0, 2.0, 3.0])
        worker.send([(p, push) for p in peers])
        got["pushed_s"] = clock.now()
        request = np.zeros(HEADER)
        request[0] = PULL
        worker.ask([(p, request) for p in peers], inboxes)
        got["replies"] = worker.collect()
        worker.close()

    thread = threading.Thread(target=work)
    thread.start()
    box = np.zeros(HEADER + 3)
    for link in links:  # (each server is a rank of its own in a run: here one loop serves all)
        link.warm_up(box, [np.zeros(HEADER + 3)])
    for link in links:
        push = link.receive(box)
        assert push is not None and push.count == HEADER + 3 and list(box[HEADER:]) == [1, 2, 3]
    pulls = [link.receive(box) for link in links]
    assert all(p is not None and p.count == HEADER for p in pulls) and box[0] == PULL
    time.sleep(0.1)  # the rules hold the pulls
    assert "replies" not in got and thread.is_alive()  # still blocked in its calls
    held_s = clock.now()
    for s, link in enumerate(links):
        reply = np.zeros(HEADER + 3)
        reply[0], reply[HEADER:] = PARAMS, [4.0, 5.0, 6.0 + s]
        link.reply(0, reply)
    thread.join(timeout=10)
    for link in links:
        link.close(set())
    replies = got["replies"]
    assert replies.counts == [HEADER + 3] * servers and replies.got_s >= held_s
    assert all(got["pushed_s"] < pull.arrived_s for pull in pulls)  # acknowledged before
    for s, inbox in enumerate(inboxes):
        assert inbox[0] == PARAMS and list(inbox[HEADER:]) == [4.0, 5.0, 6.0 + s]
