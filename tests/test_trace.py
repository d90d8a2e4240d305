"""trace.json: Chrome trace events that Perfetto can show, with worker and link tracks."""

from __future__ import annotations

from collections import defaultdict

import pytest

from sim.config import validate
from sim.errors import UserError
from sim.training.engine import simulate


def trace_of(kind: str, **strategy) -> list[dict]:
    data = {"cluster": {"workers": 4, "fabric": "eth-10g"},
            "workload": {"model": "mlp", "dataset": "digits", "hidden": [32], "batch": 8},
            "strategy": {"kind": kind, **strategy}, "run": {"iterations": 6, "eval_every": 6}}
    return simulate(validate(data)).trace["traceEvents"]


@pytest.mark.parametrize("kind, strategy", [("asp", {}), ("bsp", {}),
                                            ("bsp", {"pipelining": "wfbp"}),
                                            ("bsp-ps", {"pipelining": "wfbp"})])
def test_slices_on_one_track_never_overlap(kind, strategy):
    tracks = defaultdict(list)
    for e in trace_of(kind, **strategy):
        if e["ph"] == "X":
            assert e["dur"] >= 0
            tracks[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    assert any(pid == 0 for pid, _ in tracks)
    for spans in tracks.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end - 1e-6


def test_links_carry_the_flows_with_readable_names():
    events = trace_of("asp")
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["pid"] == 2}
    assert "network links (flows)" in names and "host4->switch" in names  # the server's NIC
    flows = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    assert flows and all(e["cat"] == "flow" for e in flows)
    # every message crosses two links (host -> switch -> host): each flow shows on both
    per_flow = defaultdict(int)
    for e in flows:
        per_flow[e["name"]] += 1
    assert set(per_flow.values()) == {2}


def link_flow_trace(**run) -> dict:
    data = {"cluster": {"workers": 4, "fabric": "eth-10g"},
            "workload": {"model": "logreg", "features": 64, "batch": 8},
            "strategy": {"kind": "asp"}, "run": {"iterations": 800, "eval_every": 800, **run}}
    return simulate(validate(data)).trace


def flow_slices(trace: dict) -> set[str]:
    return {e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 2}


def test_the_trace_keeps_every_link_flow_by_default():
    """(It kept the first 2,000 and said nothing: asp's stopped at a fifth of the run.)"""
    trace = link_flow_trace()
    note = trace["otherData"]["link_flows"]
    assert note["finished"] == note["kept"] > 2000 and note["left_out"] == 0
    assert len(flow_slices(trace)) == note["kept"]
    assert not [e for e in trace["traceEvents"] if e["ph"] == "i"]


def test_a_cut_trace_says_how_many_flows_it_left_out_and_where():
    whole = link_flow_trace()["otherData"]["link_flows"]["finished"]
    trace = link_flow_trace(trace_flows=300)
    note = trace["otherData"]["link_flows"]
    assert (note["kept"], note["finished"], note["left_out"]) == (300, whole, whole - 300)
    cut = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert len(cut) == 1 and f"{whole - 300} of {whole} link flows left out" in cut[0]["name"]
    last_kept = max(e["ts"] + e["dur"] for e in trace["traceEvents"]
                    if e["ph"] == "X" and e["pid"] == 2)
    assert cut[0]["ts"] >= last_kept - 1e-6


def test_a_window_keeps_only_the_flows_inside_it():
    full = link_flow_trace()
    ends = sorted(e["ts"] + e["dur"] for e in full["traceEvents"]
                  if e["ph"] == "X" and e["pid"] == 2)
    start_s, end_s = ends[len(ends) // 3] * 1e-6, ends[2 * len(ends) // 3] * 1e-6
    trace = link_flow_trace(trace_window_s=[start_s, end_s])
    inside = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    assert inside and all(e["ts"] >= start_s * 1e6 - 1e-6 and
                          e["ts"] + e["dur"] <= end_s * 1e6 + 1e-6 for e in inside)
    assert trace["otherData"]["link_flows"]["window_s"] == [start_s, end_s]
    assert 0 < trace["otherData"]["link_flows"]["kept"] < full["otherData"]["link_flows"]["kept"]


@pytest.mark.parametrize("window", [[0.5], [0.2, 0.1], [0.1, 0.1]])
def test_a_bad_window_names_the_key(window):
    with pytest.raises(UserError, match="run.trace_window_s"):
        validate({"run": {"trace_window_s": window}})


def test_sim_run_says_when_the_trace_was_cut(tmp_path, capsys):
    from sim.cli import main

    config = "experiments/quickstart.toml"
    assert main(["run", config, "--out", str(tmp_path / "a"), "--set", "run.trace_flows=50"]) == 0
    assert "link flows left out (run.trace_flows = 50" in capsys.readouterr().out
    assert main(["run", config, "--out", str(tmp_path / "b")]) == 0
    assert "left out" not in capsys.readouterr().out
