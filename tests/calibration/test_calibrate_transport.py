"""``sim calibrate --only transport`` (sim.calibration.transport_bench): the round-trip
and rate fits recover known constants, a quick run over loopback writes a profile
``cluster.transport = "calibrated:PATH"`` loads, and a bad --out is one line, exit 2."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import simpy

from sim.calibration.reload_bench import TAUS_S
from sim.calibration.transport_bench import (
    calibrate_transport,
    fit_rate,
    fit_reload,
    fit_rtt,
    fit_transport,
    median_measurement,
    transport_profile,
)
from sim.cli import main
from sim.network.fabrics import get_fabric
from sim.network.transports import REGISTRY, get_transport
from sim.simulated.engine import build_hosts
from sim.training.host_costs import cpu_costs, load_host
from sim.training.validator import validate

pytest.importorskip("grpc")

SIZES = [8] + [4**k for k in range(3, 12)]


def test_the_round_trip_fit_recovers_the_per_message_and_per_byte_costs():
    c, copy_Bps = 150e-6, 1.5e9  # per end: a message's constant, the copies' rate
    p = 2 / copy_Bps  # a message's per-byte time, both ends
    seconds = [2 * (2 * c + n * p) for n in SIZES]
    fit = fit_rtt(SIZES, seconds)
    assert fit["rpc_s"] == pytest.approx(c, rel=1e-6)
    assert fit["copy_Bps"] == pytest.approx(copy_Bps, rel=1e-6)
    assert fit["max_error"] < 1e-6 and fit["rms_log_error"] < 1e-6
    assert [p["what"] for p in fit["points"]] == [f"round trip {n} B" for n in SIZES]


def test_the_round_trip_fit_reports_each_sizes_error():
    seconds = [2 * (2 * 100e-6 + n / 1e9) for n in SIZES]
    seconds[-1] *= 1.5  # one slow size: the fit misses it, and says by how much
    fit = fit_rtt(SIZES, seconds)
    errors = [p["error"] for p in fit["points"]]
    assert errors[-1] < -0.1 and fit["max_error"] == pytest.approx(max(map(abs, errors)))
    for point in fit["points"]:
        assert point["error"] == pytest.approx(point["predicted_s"] / point["measured_s"] - 1)


def test_the_rate_fit_recovers_a_constant_and_a_rate():
    sizes = [1 << 18, 1 << 20, 4 << 20]
    fit = fit_rate(sizes, [2e-6 + n / 20e9 for n in sizes], "serialize")
    assert fit["rate_Bps"] == pytest.approx(20e9, rel=1e-6)
    assert fit["constant_s"] == pytest.approx(2e-6, rel=1e-4)


def test_the_profile_is_the_grpc_preset_with_the_fitted_costs():
    rtt = {"rpc_s": 1e-4, "copy_Bps": 2e9}
    t = transport_profile(rtt, {"rate_Bps": 10e9}, {"rate_Bps": 12e9}, "here")
    grpc = REGISTRY["grpc"]
    assert (t.overhead_s, t.rpc_s, t.copy_Bps, t.serialize_Bps, t.deserialize_Bps) == (
        0.0, 1e-4, 2e9, 10e9, 12e9)
    assert (t.header_bytes, t.frame_bytes, t.frame_payload_bytes, t.window_bytes) == (
        grpc.header_bytes, grpc.frame_bytes, grpc.frame_payload_bytes, grpc.window_bytes)


def test_the_reload_fit_recovers_a_calls_extra_after_work():
    """Round trips after t of work, 700 us + 250 us x (1 - exp(-t / tau)): the extra over
    the one back to back is the curve, recovered (tau one of the fit's grid)."""
    tau = float(TAUS_S[200])
    works = [0.0, 1e-4, 3e-4, 1e-3, 3e-3]
    rtt = [700e-6 - 250e-6 * math.expm1(-w / tau) for w in works]
    fit = fit_reload(works, rtt)
    assert fit["reload_s"] == pytest.approx(250e-6, rel=1e-6)
    assert fit["reload_tau_s"] == pytest.approx(tau, rel=1e-9)
    assert max(abs(e) for e in fit["errors"]) < 1e-6
    t = transport_profile({"rpc_s": 1e-4, "copy_Bps": 2e9}, {"rate_Bps": 1e10},
                          {"rate_Bps": 1e10}, "here", fit)
    assert (t.reload_s, t.reload_tau_s) == (fit["reload_s"], fit["reload_tau_s"])
    with pytest.raises(ValueError, match="back to back"):
        fit_reload(works[1:], rtt[1:])


def test_a_transports_reload_replaces_the_hosts_in_a_run():
    """The host profile's message reload was measured on MPI's path; a transport that
    measured its own (gRPC's calls after work) charges that one instead."""
    config = validate({"cluster": {"workers": 2}})
    host = replace(load_host("ideal"), message_reload_s=30e-6, message_reload_tau_s=1e-3)
    fabric = get_fabric("eth-10g")
    plain = build_hosts(simpy.Environment(), config, 2, cpu_costs(host, fabric))
    assert plain.message_reload == (30e-6, 1e-3)
    grpc = replace(REGISTRY["grpc"], reload_s=250e-6, reload_tau_s=5e-4)
    own = build_hosts(simpy.Environment(), config, 2, cpu_costs(host, fabric, grpc))
    assert own.message_reload == (250e-6, 5e-4)
    with pytest.raises(ValueError, match="reload_tau_s > 0"):
        replace(REGISTRY["grpc"], reload_s=1e-4)


def test_a_quick_run_writes_a_profile_the_transport_loader_reads(tmp_path, capsys):
    out = tmp_path / "profiles"
    assert main(["calibrate", "--only", "transport", "--out", str(out), "--quick"]) == 0
    path = out / "transport.json"
    assert sorted(p.name for p in out.iterdir()) == ["transport.json"]  # nothing else
    t = get_transport(f"calibrated:{path}")
    assert t.name == "grpc" and t.overhead_s == 0.0
    for value in (t.rpc_s, t.copy_Bps, t.serialize_Bps, t.deserialize_Bps):
        assert value > 0 and math.isfinite(value)
    assert t.source.startswith("measured here (sim calibrate --only transport, ")
    data = json.loads(path.read_text())
    pp = data["measurements"]["pingpong"]
    assert len(pp["sizes"]) == len(pp["samples"]) == len(pp["seconds"]) >= 3
    assert all(len(s) >= 10 and min(s) > 0 for s in pp["samples"])
    assert pp["seconds"] == [float(np.median(s)) for s in pp["samples"]]
    assert set(data["fits"]) == {"rtt", "reload", "serialize", "deserialize",
                                 "deserialize_into"}
    reload = data["measurements"]["reload"]
    assert reload["works_s"][0] == 0.0 and len(reload["seconds"]) == len(reload["works_s"])
    assert t.reload_s == data["fits"]["reload"]["reload_s"] >= 0
    assert data["fits"]["rtt"]["rpc_s"] == t.rpc_s
    for name, fit in data["fits"].items():
        assert name == "reload" or (fit["max_error"] >= 0 and len(fit["points"]) >= 2)
    printed = capsys.readouterr().out
    for name in ("rpc_s", "copy_Bps", "serialize_Bps", "deserialize_Bps"):
        assert any(line.strip().startswith(name) for line in printed.splitlines())
    assert f'cluster.transport = "calibrated:{path}"' in printed


def test_a_bad_out_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    bad = tmp_path / "a-file" / "profiles"
    assert main(["calibrate", "--only", "transport", "--out", str(bad), "--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --out {bad}") and len(err.splitlines()) == 1


def measurement(factor):
    """A measurement of known costs (150 us a message at each end, 1.5 GB/s; serialising
    at 20 GB/s), every time ``factor`` times as long."""
    sizes = [1 << 18, 1 << 20]
    rtt = [factor * 2 * (2 * 150e-6 + n * 2 / 1.5e9) for n in SIZES]
    timed = [factor * (2e-6 + n / 20e9) for n in sizes]
    part = {"samples": [[t, t] for t in timed], "seconds": timed}
    return {"pingpong": {"sizes": SIZES, "samples": [[t] for t in rtt], "seconds": rtt},
            "serialization": {"sizes": sizes, **{k: {"how": k, **part} for k in (
                "serialize", "deserialize", "deserialize_into")}},
            "wall_s": factor}


def test_repeats_are_fitted_to_each_sizes_median_with_their_samples_pooled():
    merged = median_measurement([measurement(1.5), measurement(1.0), measurement(0.5)])
    fits = fit_transport(merged)
    assert fits["rtt"]["rpc_s"] == pytest.approx(150e-6, rel=1e-6)
    assert fits["rtt"]["copy_Bps"] == pytest.approx(1.5e9, rel=1e-6)
    assert fits["serialize"]["rate_Bps"] == pytest.approx(20e9, rel=1e-6)
    assert [len(s) for s in merged["pingpong"]["samples"]] == [3] * len(SIZES)
    assert [len(s) for s in merged["serialization"]["deserialize"]["samples"]] == [6, 6]
    assert merged["repeats"] == 3 and merged["wall_s"] == 3.0
    single = measurement(1.0)
    assert median_measurement([single]) is single


def test_fewer_than_one_repeat_is_refused(tmp_path):
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        calibrate_transport(tmp_path / "t.json", quick=True, repeats=0)
