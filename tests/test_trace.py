"""trace.json: Chrome trace events that Perfetto can show, with worker and link tracks."""

from __future__ import annotations

from collections import defaultdict

import pytest

from sim.config import validate
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
