"""Network emulation: namespaces, veth, bridge and tbf come and go, also after errors.
Skipped where network namespaces are not permitted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sim.cli import main
from sim.real.launch.emulate import Emulation, parse_rate, unavailable

REASON = unavailable()
needs_namespaces = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.startswith("sgd-")}


def test_rates_parse_and_bad_ones_are_named():
    assert parse_rate("1gbit") == 1e9
    assert parse_rate("100mbit") == 1e8
    assert parse_rate("2.5Gbit") == 2.5e9
    for bad in ("fast", "10", "-1gbit", "0gbit"):
        with pytest.raises(ValueError, match="expected a positive number"):
            parse_rate(bad)


@needs_namespaces
def test_emulation_is_removed_after_use_and_after_an_error():
    with Emulation(2, 1e9) as emulation:
        assert set(emulation.namespaces) <= namespaces()
        shaped = subprocess.run(["tc", "qdisc", "show", "dev", emulation.veths[0]],
                                capture_output=True, text=True).stdout
        assert "tbf" in shaped and "rate 1Gbit" in shaped
    assert emulation.leftovers() == []
    with pytest.raises(RuntimeError, match="inside"):
        with Emulation(2, 1e8) as emulation:
            raise RuntimeError("inside")
    assert emulation.leftovers() == []


@needs_namespaces
def test_a_real_run_on_an_emulated_network(tmp_path, two_rank_config_data, write_toml,
                                           monkeypatch):
    config = write_toml(tmp_path / "c.toml", two_rank_config_data(
        {"strategy.kind": "bsp", "run.iterations": 10, "run.eval_every": 5}))
    made: list[str] = []  # this run's namespaces (other tests may run emulations beside it)
    enter = Emulation.__enter__

    def noted(self: Emulation) -> Emulation:
        made.extend(self.namespaces)
        return enter(self)

    monkeypatch.setattr(Emulation, "__enter__", noted)
    out = tmp_path / "real"
    assert main(["real", str(config), "--out", str(out), "--net", "emulate:1gbit"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["net"] == "emulate:1gbit" and summary["iterations"] == 10
    assert len(made) == 2 and not set(made) & namespaces()  # nothing left behind


def test_without_permission_the_error_says_why(tmp_path, monkeypatch, capsys):
    import sim.real.launch.emulate as emulate

    monkeypatch.setattr(emulate, "unavailable", lambda: "network emulation needs root")
    config = tmp_path / "c.toml"
    config.write_text('[cluster]\nworkers = 2\n[strategy]\nkind = "bsp"\n')
    assert main(["real", str(config), "--out", str(tmp_path / "o"), "--net",
                 "emulate:1gbit"]) == 2
    assert "needs root" in capsys.readouterr().err
    assert not Path(tmp_path / "o").exists()


@needs_namespaces
def test_leftovers_of_a_killed_owner_are_reaped(tmp_path):
    import signal
    import sys
    import time

    from sim.real.launch.emulate import reap_stale

    script = ("import time; from sim.real.launch.emulate import Emulation\n"
              "e = Emulation(2, 1e9).__enter__(); print(' '.join(e.namespaces), flush=True)\n"
              "time.sleep(60)\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE,
                            text=True)
    try:
        names = proc.stdout.readline().split()
        assert names and set(names) <= namespaces()
        proc.send_signal(signal.SIGKILL)  # no cleanup can run in the owner
        proc.wait(10)
        time.sleep(0.1)
        assert set(names) <= namespaces()
        reap_stale()  # what the next emulation does first
        assert not set(names) & namespaces()
    finally:
        proc.kill()
        reap_stale()


@needs_namespaces
def test_the_emulated_network_is_also_timed_after_a_pause():
    """The quick network measurement on emulated links also times ping-pongs after a pause
    of two bucket refills, up to 3/4 of a bucket, as the fit's peak needs them (their
    values are this machine's, and other tests load it: the fit is checked on closed forms
    in tests/network/test_token_bucket.py)."""
    from sim.calibration.measure_fabric import PAUSE_BURSTS, measure_network, paused_sizes

    with Emulation(2, 1e9) as emulation:
        measured = measure_network(emulation, [2], "spin", quick=True)
    paused = measured["pingpong_paused"]
    assert paused["sizes"] == paused_sizes(125000) == [15625, 31250, 62500, 93750]
    assert paused["pause_s"] == PAUSE_BURSTS * 1e-3 and measured["shaper"]["burst_s"] == 1e-3
    assert len(paused["seconds"]) == 4 and min(paused["seconds"]) > 0
