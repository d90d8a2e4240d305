"""``sim calibrate --only transport`` (sim.calibration.transport_bench): the round-trip
and rate fits recover known constants, a quick run over loopback writes a profile
``cluster.transport = "calibrated:PATH"`` loads, and a bad --out is one line, exit 2."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sim.calibration.transport_bench import (
    calibrate_transport,
    fit_rate,
    fit_rtt,
    fit_transport,
    median_measurement,
    transport_profile,
)
from sim.cli import main
from sim.network.transports import REGISTRY, get_transport

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
    assert set(data["fits"]) == {"rtt", "serialize", "deserialize", "deserialize_into"}
    assert data["fits"]["rtt"]["rpc_s"] == t.rpc_s
    for fit in data["fits"].values():
        assert fit["max_error"] >= 0 and len(fit["points"]) >= 2
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
