"""Host calibration (sim.calibration: measure_host, fit_host, host_report): a quick profile
code paths, read back by ``cluster.host = "calibrated:PATH"``'s loader."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from sim.calibration import measure_host as H
from sim.calibration.fit_host import (
    eager_limit,
    fit,
    fit_gather,
    host_profile,
    median_measurement,
    numbers,
)
from sim.calibration.host_report import busy_warning
from sim.calibration.sequence import calibrate_host
from sim.calibration.serve_bench import line
from sim.training.host_costs import HostProfile, load_host

pytest.importorskip("mpi4py")


@pytest.fixture(scope="module")
def measured():
    """One quick measurement of this host, through the real runner's code paths."""
    return H.measure_host(quick=True, wait="auto", concurrency=1)


def scaled(m, factor):
    """``m`` with every timed point ``factor`` times as long, fitted again."""
    m = copy.deepcopy(m)
    for f in m["fits"].values():
        for sample in f["samples"]:
            sample["seconds"] *= factor
    times = {"step": ("step_s", "iteration_s"), "poll": ("poll_s", "p10_s", "p90_s"),
             "rendezvous": ("pingpong_half_rtt_s", "noticed_s"), "share": ("unit_alone_s",),
             "reload": ("warm_s", "extra_s", "spin_extra_s"), "serving": ("pulls_s",),
             "message_reload": ("extra_s",)}
    for part, keys in times.items():
        for key in keys:
            m[part][key] = (np.asarray(m[part][key]) * factor).tolist()
    for wait in ("spin", "sleep"):
        m["share"][wait]["slowdowns"] = [x * factor for x in m["share"][wait]["slowdowns"]]
    for p in m["serving"]["points"]:
        p["round_s"] *= factor
        p["kernels_s"] *= factor
    return median_measurement([m, m])  # the median of two alike: its points, fitted again


def test_calibrate_host_writes_a_profile_load_host_reads_with_every_fit_error(
        tmp_path, measured, monkeypatch):
    # three repeats, every point of one half and of another 1.5 times the middle one's:
    # the profile is the middle one's, fitted again
    repeats = iter([scaled(measured, 1.5), measured, scaled(measured, 0.5)])
    monkeypatch.setattr(H, "measure_host", lambda *args: next(repeats))
    path = tmp_path / "cal" / "host.json"
    lines = calibrate_host(path, quick=True, repeats=3)
    profile = load_host(f"calibrated:{path}")
    middle = numbers(host_profile(measured, 0.0, float("inf")))
    assert numbers(profile) == pytest.approx(middle, rel=1e-9)
    assert profile.source.endswith("fitted to each point's median over 3 calibrations")
    assert isinstance(profile, HostProfile)
    assert profile.copy_Bps > 0 and profile.update_Bps > 0 and profile.reduce_Bps > 0
    assert profile.message_s >= 0 and profile.step_s >= 0 and profile.slice_s == 3e-3
    data = json.loads(path.read_text())
    assert set(data["fits"]) == {"copy", "update", "reduce", "message", "table", "table_step",
                                 "unique"}
    assert profile.unique_id_s == pytest.approx(1 / data["fits"]["unique"]["rate_Bps"])
    assert profile.table_row_s == data["fits"]["table"]["row_s"] >= 0
    assert profile.table_step_row_s == data["fits"]["table_step"]["row_s"] >= 0
    for f in data["fits"].values():
        assert f["max_error"] >= 0 and f["rms_error"] >= 0 and len(f["samples"]) >= 3
        assert all({"bytes", "seconds", "error"} <= set(s) for s in f["samples"])
    assert set(data["measured_through"]) == {"copy", "update", "reduce", "message", "step",
                                             "poll", "rendezvous", "share", "reload",
                                             "message_reload", "table", "table_step",
                                             "unique", "serving"}
    assert profile.notice_s >= 0 and profile.rendezvous_s >= 0
    noticed = data["rendezvous"]["noticed_s"]  # per level of ranks, per message size
    assert len(noticed) == 3 and all(len(n) == 2 and min(n) > 0 for n in noticed)
    assert profile.notice_base_s >= 0
    assert profile.spin_share >= 0 and profile.nap_share >= 0
    for wait in ("spin", "sleep"):  # slowdowns beside 1 and 2 waiters, and the fit's errors
        assert len(data["share"][wait]["slowdowns"]) == 2
        assert min(data["share"][wait]["slowdowns"]) > 0
    assert any(line.strip().startswith("nap_share") and "fit error" in line for line in lines)
    reload = data["reload"]  # the extra time after each gap, and its fit
    assert len(reload["gaps_s"]) == len(reload["extra_s"]) >= 3 and reload["warm_s"] > 0
    assert profile.reload_s == reload["reload_s"] >= 0
    assert profile.reload_s == 0 or profile.reload_tau_s > 0
    assert len(reload["spin_extra_s"]) == len(reload["gaps_s"])  # the same gaps, spun
    assert profile.reload_spin_base_s == reload["reload_spin_base_s"] >= 0
    assert any(line.strip().startswith("reload_spin") and "fit error" in line
               for line in lines)
    assert any(line.strip().startswith("reload") and "fit error" in line for line in lines)
    message = data["message_reload"]  # the allreduce's extra after each span of work
    assert len(message["works_s"]) == len(message["extra_s"]) >= 3
    assert profile.message_reload_s == message["message_reload_s"] >= 0
    assert profile.message_reload_s == 0 or profile.message_reload_tau_s > 0
    assert any(line.strip().startswith("message reload") and "fit error" in line
               for line in lines)
    serving = data["serving"]  # the server's own code: asp and bsp-ps rounds, 1-4 workers
    assert [(p["kind"], p["workers"]) for p in serving["points"]] == [
        (k, n) for k in ("asp", "bsp-ps") for n in (1, 2, 4)]
    assert all(p["round_s"] > 0 for p in serving["points"]) and len(serving["pulls_s"]) == 6
    for name in ("serve_apply_s", "serve_push_s", "serve_step_s", "serve_pull_s"):
        assert getattr(profile, name) == serving[name] >= 0
    assert any(line.strip().startswith("serve") and "fit error" in line for line in lines)
    assert profile.poll_s >= 20e-6 and profile.poll_spin_s == 50e-6  # a nap takes what it asks
    assert data["step"]["step_s"] == pytest.approx(profile.step_s)
    assert lines[-1] == f'  cluster.host = "calibrated:{path}"'
    for name in data["fits"]:  # every fit printed with its error
        assert any(line.strip().startswith(name) and "fit error" in line for line in lines)
    assert [r["step_s"] for r in data["repeats"]] == pytest.approx(
        [1.5 * profile.step_s, profile.step_s, 0.5 * profile.step_s])
    spread = [line.split() for line in lines[lines.index(next(
        line for line in lines if line.startswith("  repeats  3:"))) + 1:]
        if line.startswith("    ")]
    assert ["step_s", f"{profile.step_s:.4g}",
            f"({0.5 * profile.step_s:.4g}", "..", f"{1.5 * profile.step_s:.4g})"] in spread


def test_a_profile_missing_a_key_is_refused_naming_it(tmp_path):
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"copy_Bps": 1e9, "update_Bps": 1e9, "reduce_Bps": 1e9,
                                "message_s": 1e-6, "slice_s": 3e-3}))
    with pytest.raises(ValueError, match="step_s"):
        load_host(f"calibrated:{path}")


def test_the_eager_limit_is_the_last_size_before_the_ping_pong_steps_up():
    sizes = list(range(1024, 16385, 1024))
    half_rtt = [3.5e-6 + 0.01e-6 * k for k in range(7)] + [7.2e-6 + 0.1e-6 * k
                                                          for k in range(9)]
    assert eager_limit(sizes, half_rtt) == 7168
    half_rtt[3] = 9e-6  # one slow sample far from the step makes none
    assert eager_limit(sizes, half_rtt) == 7168
    assert eager_limit(sizes, [3.5e-6 + 0.05e-6 * k for k in range(16)]) == float("inf")


def test_the_serving_line_recovers_a_slope_and_an_intercept_both_non_negative():
    assert line([(1, 3e-6 + 70e-6), (2, 6e-6 + 70e-6), (4, 12e-6 + 70e-6)]) == \
        pytest.approx((3e-6, 70e-6))
    assert line([(1, 80e-6), (2, 70e-6), (4, 60e-6)]) == pytest.approx((0.0, 70e-6))
    slope, intercept = line([(1, 1e-6), (2, 10e-6), (4, 30e-6)])  # falls below 0 at n = 0
    assert intercept == 0.0 and slope == pytest.approx((10e-6 * 2 + 30e-6 * 4 + 1e-6) / 21)


def test_fit_recovers_a_line_and_busy_cpus_are_warned_about():
    f = fit([1e3, 1e5, 1e7], [1e-6 + n / 2e9 for n in (1e3, 1e5, 1e7)])
    assert f["constant_s"] == pytest.approx(1e-6) and f["rate_Bps"] == pytest.approx(2e9)
    assert f["max_error"] < 1e-9
    assert busy_warning(0.1, 1.0, 1.0) == []
    assert all(w.startswith("warning:") for w in busy_warning(2.0, 0.5, 1.0))
    assert len(busy_warning(2.0, 0.5, 1.0)) == 2


def test_fit_gather_recovers_a_constant_a_cost_per_row_and_a_rate():
    rows = [16, 256, 4096, 4, 64, 256]
    nbytes = [r * 2048 for r in rows[:3]] + [r * 32768 for r in rows[3:]]
    seconds = [2e-6 + r * 0.25e-6 + n / 12e9 for r, n in zip(rows, nbytes, strict=True)]
    f = fit_gather(rows, nbytes, seconds)
    assert f["constant_s"] == pytest.approx(2e-6, rel=1e-6)
    assert f["row_s"] == pytest.approx(0.25e-6, rel=1e-6)
    assert f["rate_Bps"] == pytest.approx(12e9, rel=1e-6) and f["max_error"] < 1e-9
    # no per-row cost in the data: none is found (and a term is never negative)
    f = fit_gather(rows, nbytes, [1e-6 + n / 12e9 for n in nbytes])
    assert 0 <= f["row_s"] < 1e-15 and f["rate_Bps"] == pytest.approx(12e9, rel=1e-6)


def test_the_waiters_share_is_the_least_squares_slope_through_one():
    from sim.calibration.fit_host import fit_share, linear_in_excess

    exact = fit_share([1, 2], [2.3, 3.6])
    assert exact["share"] == pytest.approx(1.3) and exact["max_error"] == pytest.approx(0)
    off = fit_share([1, 2], [2.0, 3.8])  # share = (1 + 5.6) / 5 = 1.32
    assert off["share"] == pytest.approx(1.32)
    assert off["errors"] == pytest.approx([2.32 / 2.0 - 1, 3.64 / 3.8 - 1])
    assert fit_share([1, 2], [0.9, 0.95])["share"] == 0.0  # never negative
    line = linear_in_excess([1, 2, 3], [55e-6, 80e-6, 105e-6])
    assert line["base_s"] == pytest.approx(30e-6) and line["per_rank_s"] == pytest.approx(25e-6)
    assert line["max_error"] == pytest.approx(0, abs=1e-9)
    through_zero = linear_in_excess([1, 3], [10e-6, 60e-6])  # the line would cross below 0
    assert through_zero["base_s"] == 0.0 and through_zero["per_rank_s"] > 0


def test_fewer_than_one_repeat_is_refused_before_measuring(tmp_path):
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        calibrate_host(tmp_path / "host.json", quick=True, repeats=0)
    assert not (tmp_path / "host.json").exists()
