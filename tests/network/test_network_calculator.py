"""``python -m sim collective`` end to end, and ``python -m sim bench network``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main
from sim.network.fabrics import REGISTRY, save_profile
from sim.network.message_cost import alpha_s

ROOT = Path(__file__).resolve().parents[2]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["collective", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_ring_on_one_switch(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "--fabric", "ib-edr", "--algo", "ring", "--workers", "8",
                      "--bytes", "8MB")
    p, n, fabric = 8, 8 * 10**6, REGISTRY["ib-edr"]
    closed = 2 * (p - 1) * alpha_s(fabric) + 2 * (p - 1) / p * n / fabric.bandwidth_Bps
    assert result["time_s"] == pytest.approx(closed, rel=1e-9)
    assert result["closed_form_s"] == pytest.approx(closed, rel=1e-12)
    assert result["algbw_Bps"] == pytest.approx(n / result["time_s"])
    assert result["busbw_Bps"] == pytest.approx(result["algbw_Bps"] * 2 * (p - 1) / p)
    assert result["lower_bound_s"] == pytest.approx(2 * (p - 1) / p * n / fabric.bandwidth_Bps)
    assert result["lower_bound_s"] < result["time_s"]
    assert result["busbw_Bps"] < fabric.bandwidth_Bps
    assert result["messages"] == 2 * (p - 1) * p


def test_custom_alpha_and_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "--algo", "recursive-doubling", "--workers", "16", "--bytes",
                      "1MiB", "--alpha", "1e-6", "--bandwidth", "12.5e9")
    assert result["time_s"] == pytest.approx(4 * (1e-6 + 2**20 / 12.5e9), rel=1e-9)
    assert result["fabric"]["bandwidth_Bps"] == 12.5e9


def test_oversubscribed_leaf_spine_is_slower_than_closed_form(capsys) -> None:
    args = ["--workers", "32", "--bytes", "32MB", "--topology", "leaf-spine",
            "--hosts-per-leaf", "8", "--placement", "round-robin"]
    flat = run_json(capsys, *args, "--oversubscription", "1")
    oversubscribed = run_json(capsys, *args, "--oversubscription", "2")
    assert oversubscribed["closed_form_s"] == flat["closed_form_s"]
    assert oversubscribed["time_s"] > 1.9 * flat["time_s"]
    assert oversubscribed["topology_options"] == {"oversubscription": 2.0, "hosts_per_leaf": 8}


def test_analytical_model_reports_the_closed_form(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "--algo", "ps", "--servers", "4", "--workers", "1024",
                      "--bytes", "100MB", "--model", "analytical")
    assert result["time_s"] == result["closed_form_s"]
    assert result["servers"] == 4


def test_broadcast_bus_bandwidth_equals_algorithm_bandwidth(capsys) -> None:
    result = run_json(capsys, "--algo", "broadcast", "--workers", "8", "--bytes", "1MB")
    assert result["busbw_Bps"] == result["algbw_Bps"]
    assert result["collective"] == "broadcast"


def test_calibrated_fabric(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    save_profile(path, REGISTRY["ib-hdr"].with_overrides(alpha_s=5e-6, bandwidth_Bps=1e10))
    result = run_json(capsys, "--fabric", f"calibrated:{path}", "--algo", "tree",
                      "--workers", "4", "--bytes", "1e6")
    assert result["time_s"] == pytest.approx(2 * 2 * (5e-6 + 1e6 / 1e10), rel=1e-9)


def test_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collective", "--workers", "4", "--bytes", "4MB"]) == 0
    out = capsys.readouterr().out
    for label in ("simulated time", "closed form", "lower bound", "algbw", "busbw"):
        assert label in out


@pytest.mark.parametrize("argv, flag", [
    (["--workers", "0"], "--workers"),
    (["--bytes", "100XB"], "--bytes"),
    (["--bytes", "0"], "--bytes"),
    (["--fabric", "ib-xdr"], "--fabric"),
    (["--fabric", "calibrated:/no/such/file.json"], "--fabric"),
    (["--algo", "allgather"], "--algo"),
    (["--topology", "torus"], "--topology"),
    (["--oversubscription", "2"], "--oversubscription"),  # star has no spine
    (["--topology", "leaf-spine", "--oversubscription", "0.5"], "--oversubscription"),
    (["--servers", "2"], "--servers"),  # ring has no servers
    (["--algo", "ps", "--servers", "0"], "--servers"),
    (["--model", "packet"], "--model"),
    (["--placement", "random"], "--placement"),
    (["--bandwidth", "0"], "--bandwidth"),
    (["--alpha", "-1"], "--alpha"),
])
def test_bad_arguments_exit_2_naming_the_argument(capsys, argv: list[str], flag: str) -> None:
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag}: ")
    assert err.count("\n") == 1  # one line, no traceback


def test_command_line_in_a_subprocess() -> None:
    done = subprocess.run([sys.executable, "-m", "sim", "collective", "--fabric", "ib-hdr",
                           "--algo", "rabenseifner", "--workers", "64", "--bytes", "100MB",
                           "--topology", "leaf-spine", "--oversubscription", "2", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {"time_s", "closed_form_s", "algbw_Bps", "busbw_Bps", "lower_bound_s"} <= set(result)
    assert result["time_s"] >= result["lower_bound_s"]
    bad = subprocess.run([sys.executable, "-m", "sim", "collective", "--bytes", "100XB"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: --bytes:") and "Traceback" not in bad.stderr


def test_network_bench_quick(capsys: pytest.CaptureFixture[str]) -> None:
    # structure and counts only: timing claims belong to the benchmark's own output
    assert main(["bench", "network", "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    ring = result["events"]["ring_allreduce"]
    p = ring["p"]
    assert ring["model_events"] == 2 * 2 * (p - 1) * p  # every message starts and ends a flow
    assert ring["bare_simpy"]["events"] == ring["model_events"]
    assert result["scaling"]["p"] == [16, 32, 64]
    assert all(t > 0 for t in result["scaling"]["wall_s"])
    assert result["analytical_vs_flow"]["speedup"] > 0
