"""trace.json: Chrome trace events that Perfetto can show: worker, server and link tracks,
message arguments, flow arrows from a send to its link flows, and counters."""

from __future__ import annotations

import bisect
import csv
import io
import json
from collections import defaultdict

import pytest

from sim.errors import UserError
from sim.rundir import write_run
from sim.simulated.engine import simulate
from sim.training.validator import validate
from sim.training.workload import build_workload

SMALL = {"model": "mlp", "dataset": "digits", "hidden": [32], "batch": 8}


def config(kind: str = "asp", workers: int = 4, iterations: int = 6, host: str = "ideal",
           **strategy) -> dict:
    return {"cluster": {"workers": workers, "fabric": "eth-10g", "host": host},
            "workload": SMALL, "strategy": {"kind": kind, **strategy},
            "run": {"iterations": iterations, "eval_every": iterations}}


def run(data: dict):
    """(the result, its trace events) of a tiny seeded run."""
    result = simulate(validate(data))
    return result, result.trace["traceEvents"]


def trace_of(kind: str, **strategy) -> list[dict]:
    return run(config(kind, **strategy))[1]


def slices(events: list[dict], pid: int) -> list[dict]:
    return [e for e in events if e["ph"] == "X" and e["pid"] == pid]


def counter(events: list[dict], name: str, series: str) -> list[tuple[float, float]]:
    """(ts us, value) of one counter track, in time order."""
    return sorted((e["ts"], e["args"][series]) for e in events
                  if e["ph"] == "C" and e["name"] == name and series in e["args"])


def value_at(samples: list[tuple[float, float]], ts: float) -> float:
    """A counter's value at ``ts`` (us): its latest sample at or before it, else 0."""
    i = bisect.bisect_right(samples, (ts, float("inf")))
    return samples[i - 1][1] if i else 0.0


def enclosing(events: list[dict], pid: int, tid: int, ts: float) -> dict:
    """The slice on thread (pid, tid) that holds ``ts`` (what a v1 flow event binds to)."""
    found = [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == (pid, tid)
             and e["ts"] <= ts <= e["ts"] + e["dur"]]
    assert len(found) == 1, (pid, tid, ts, found)
    return found[0]


CASES = [("asp", {}, "ideal"), ("bsp", {}, "ideal"), ("bsp", {"pipelining": "wfbp"}, "ideal"),
         ("bsp-ps", {"pipelining": "wfbp"}, "ideal"),
         ("bsp-ps", {"pipelining": "wfbp"}, "epyc-core"), ("ssp", {}, "epyc-core")]


@pytest.mark.parametrize("kind, strategy, host", CASES)
def test_slices_on_one_track_never_overlap(kind, strategy, host):
    tracks = defaultdict(list)
    for e in run(config(kind, host=host, **strategy))[1]:
        if e["ph"] == "X":
            assert e["dur"] >= 0
            tracks[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    assert any(pid == 0 for pid, _ in tracks)
    for spans in tracks.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end - 1e-6


@pytest.mark.parametrize("kind, strategy, host", CASES)
def test_counters_stay_in_their_ranges(kind, strategy, host):
    events = run(config(kind, host=host, **strategy))[1]
    values = defaultdict(list)
    for e in events:
        if e["ph"] == "C":
            (series, value), = e["args"].items()
            values[series].append(value)
    assert values["utilisation"] and all(0.0 <= v <= 1.0 for v in values["utilisation"])
    assert 1.0 in values["utilisation"]  # some link is a bottleneck at some time
    assert min(values["flows in flight"]) == 0  # (a run may stop with flows in flight)
    assert all(v >= 0 for v in values["pushes queued"])


@pytest.mark.parametrize("kind, strategy, host", CASES)
def test_every_process_and_thread_used_is_named_and_ordered(kind, strategy, host):
    events = run(config(kind, host=host, **strategy))[1]
    meta = defaultdict(dict)
    for e in events:
        if e["ph"] == "M":
            meta[e["pid"], e.get("tid")][e["name"]] = e["args"]
    for e in events:
        if e["ph"] != "M":
            assert {"process_name", "process_sort_index"} <= set(meta[e["pid"], None])
        if "tid" in e:
            assert {"thread_name", "thread_sort_index"} <= set(meta[e["pid"], e["tid"]]), e
    order = sorted((args["process_sort_index"]["sort_index"], args["process_name"]["name"])
                   for (pid, tid), args in meta.items() if tid is None)
    assert [name for _, name in order][:1] == ["workers"]
    assert [name for _, name in order][-1] == "network links (flows)"
    if kind != "bsp":
        assert meta[3, 0]["thread_name"]["name"] == "server 0"


def test_the_trace_file_is_chrome_trace_json(tmp_path):
    result, _ = run(config("bsp-ps", host="epyc-core", pipelining="wfbp"))
    write_run(tmp_path / "r", result.files())
    trace = json.loads((tmp_path / "r" / "trace.json").read_text())
    required = {"X": {"name", "cat", "pid", "tid", "ts", "dur"}, "C": {"name", "pid", "ts"},
                "M": {"name", "pid", "args"}, "s": {"id", "cat", "name", "pid", "tid", "ts"},
                "t": {"id", "cat", "name", "pid", "tid", "ts"},
                "f": {"id", "cat", "name", "pid", "tid", "ts", "bp"}}
    phases = set()
    for e in trace["traceEvents"]:
        phases.add(e["ph"])
        assert required[e["ph"]] <= set(e), e
        if e["ph"] == "C":
            assert all(isinstance(v, int | float) for v in e["args"].values())
    assert phases == set(required)
    assert trace["displayTimeUnit"] == "ms"


def test_a_push_slice_says_what_it_carried_and_how_stale_it_was():
    data = config("asp", iterations=12)
    result, events = run(data)
    nbytes = build_workload(validate(data)).params.nbytes  # an uncompressed dense gradient
    updates = [row for row in csv.DictReader(io.StringIO(result.metrics_csv))
               if row["kind"] == "update"]
    pushes = sorted((e for e in slices(events, 0) if e.get("args", {}).get("message") == "push"),
                    key=lambda e: e["ts"])
    assert pushes and all(e["name"] == "wire" and e["args"]["bytes"] == nbytes
                          for e in pushes)
    for w in range(4):
        applied = [e["args"] for e in pushes if e["tid"] == w and "staleness" in e["args"]]
        rows = [row for row in updates if row["worker"] == str(w)]
        assert [(a["version_read"], a["staleness"]) for a in applied] == \
            [(int(r["version_read"]), int(r["staleness"])) for r in rows]
    assert {a["staleness"] for e in pushes if "staleness" in (a := e["args"])} == {
        int(r["staleness"]) for r in updates}
    pulls = [e["args"] for e in slices(events, 0) if e.get("args", {}).get("message") == "pull"]
    assert pulls and all(a["bytes"] == nbytes and len(a["flows"]) == 2 and "version_read" in a
                         for a in pulls)  # a request and the shards' answer


def test_pipelined_slices_name_their_layers():
    data = config("bsp", pipelining="wfbp")
    _, events = run(data)
    grad_bytes = build_workload(validate(data)).layers.grad_bytes
    collective = [e["args"] for e in slices(events, 1)
                  if e.get("args", {}).get("message") == "collective"]
    assert {a["layer"] for a in collective} == set(range(len(grad_bytes)))
    assert all(a["bytes"] == grad_bytes[a["layer"]] for a in collective)
    waits = [e["args"] for e in slices(events, 0) if e["name"] in ("wait", "wire")]
    assert waits and all(set(a) == {"layer"} for a in waits)  # the message waited for


def test_flow_arrows_run_from_a_send_along_its_links():
    _, events = run(config("asp"))
    links = slices(events, 2)
    chains = defaultdict(list)
    for e in events:
        if e["ph"] in "stf":
            chains[e["id"]].append(e)
    assert len(chains) == len(links) // 2  # every flow crosses two links: host->switch->host
    for chain in chains.values():
        start, step, end = chain  # in route order
        assert (start["ph"], step["ph"], end["ph"], end["bp"]) == ("s", "t", "f", "e")
        sender = enclosing(events, start["pid"], start["tid"], start["ts"])
        hops = [enclosing(events, 2, e["tid"], e["ts"]) for e in (step, end)]
        assert hops[0]["args"] == hops[1]["args"]  # one flow, on each link of its route
        assert hops[0]["args"]["flow"] in sender["args"]["flows"]
        assert hops[0]["name"] == sender["args"]["message"]
        assert hops[0]["ts"] >= sender["ts"]


def test_a_message_alone_on_its_links_uses_them_fully():
    """One worker: every flow is alone, so each link is at 1 exactly while a flow crosses
    it and at 0 between flows."""
    _, events = run(config("asp", workers=1, iterations=3))
    by_link = defaultdict(list)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in slices(events, 2):
        by_link[names[2, e["tid"]]].append((e["ts"], e["ts"] + e["dur"]))
    assert len(by_link) == 4  # both directions of the worker's and the server's links
    for link, spans in by_link.items():
        samples = counter(events, link, "utilisation")
        expected = [(t, value) for start, end in sorted(spans)
                    for t, value in ((start, 1.0), (end, 0.0))]
        assert [value for _, value in samples] == [value for _, value in expected]
        assert [t for t, _ in samples] == pytest.approx([t for t, _ in expected], rel=1e-12)


def test_flows_into_one_host_share_its_link():
    """Four workers pull at once: the server's incoming link is full, each worker's
    outgoing link carries a quarter of it; four flows are in flight."""
    _, events = run(config("asp"))
    first = min(e["ts"] for e in events if e["ph"] == "C" and e["pid"] == 2)
    assert value_at(counter(events, "switch->host4", "utilisation"), first) == 1.0
    for w in range(4):
        assert value_at(counter(events, f"host{w}->switch", "utilisation"), first) == 0.25
    assert value_at(counter(events, "network", "flows in flight"), first) == 4
    values = [e["args"]["utilisation"] for e in events
              if e["ph"] == "C" and "utilisation" in e["args"]]
    assert values and all(0.0 <= v <= 1.0 for v in values)
    assert value_at(counter(events, "network", "flows in flight"), float("inf")) == 0


def test_the_server_queue_holds_every_push_of_an_incast():
    """bsp-ps with four equal workers: their pushes arrive together, so four wait at the
    shard, which works through them one by one."""
    _, events = run(config("bsp-ps", iterations=3, host="epyc-core"))
    queue = counter(events, "server 0", "pushes queued")
    assert queue[0] == (0.0, 0) and queue[-1][1] == 0
    assert min(v for _, v in queue) == 0 and max(v for _, v in queue) == 4
    work = slices(events, 3)
    pushes = [e for e in work if e["name"] == "push"]
    assert sorted(e["args"]["worker"] for e in pushes) == sorted(list(range(4)) * 3)
    assert {e["name"] for e in work} == {"push", "apply", "pull"}
    # the queue falls by one as each push's work ends
    ends = sorted(e["ts"] + e["dur"] for e in pushes)
    assert [value_at(queue, t + 1e-6) for t in ends[:4]] == [3, 2, 1, 0]


def test_the_analytical_network_has_no_link_side():
    data = config("asp")
    data["cluster"]["network"] = "analytical"
    _, events = run(data)
    assert not [e for e in events if e["pid"] == 2]
    pushes = [e["args"] for e in slices(events, 0) if e.get("args", {}).get("message") == "push"]
    assert pushes and all("bytes" in a and "flows" not in a for a in pushes)
    assert not [e for e in events if e["ph"] in "stf"]


def test_links_carry_the_flows_with_readable_names():
    events = trace_of("asp")
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["pid"] == 2
             and "name" in e["args"]}
    assert "network links (flows)" in names and "host4->switch" in names  # the server's NIC
    flows = slices(events, 2)
    assert flows and all(e["cat"] == "flow" and e["name"] in ("push", "pull") for e in flows)
    # every message crosses two links (host -> switch -> host): each flow shows on both
    per_flow = defaultdict(int)
    for e in flows:
        per_flow[e["args"]["flow"], e["args"]["part"]] += 1
    assert set(per_flow.values()) == {2}


def link_flow_trace(**run_options) -> dict:
    data = {"cluster": {"workers": 4, "fabric": "eth-10g"},
            "workload": {"model": "logreg", "features": 64, "batch": 8},
            "strategy": {"kind": "asp"},
            "run": {"iterations": 800, "eval_every": 800, **run_options}}
    return simulate(validate(data)).trace


def flow_slices(trace: dict) -> set[tuple[int, int]]:
    return {(e["args"]["flow"], e["args"]["part"]) for e in slices(trace["traceEvents"], 2)}


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
    events = trace["traceEvents"]
    note = trace["otherData"]["link_flows"]
    assert (note["kept"], note["finished"], note["left_out"]) == (300, whole, whole - 300)
    cut = [e for e in events if e["ph"] == "i"]
    assert len(cut) == 1 and f"{whole - 300} of {whole} link flows left out" in cut[0]["name"]
    last_kept = max(e["ts"] + e["dur"] for e in slices(events, 2))
    assert cut[0]["ts"] >= last_kept - 1e-6
    # the counters stop where the link tracks do, at 0
    link_counters = [e for e in events if e["ph"] == "C" and e["pid"] == 2]
    stop = max(e["ts"] for e in link_counters)
    assert stop == pytest.approx(last_kept, rel=1e-12)
    assert all(e["args"] in ({"utilisation": 0.0}, {"flows in flight": 0})
               for e in link_counters if e["ts"] == stop)


def test_the_link_counters_stop_at_their_sample_budget_and_say_where():
    """(A thousand asp workers on one server's NIC: every flow's start or end changed a
    thousand links, and the counters made trace.json 569 MB for 2,000 updates.)"""
    whole = link_flow_trace()
    trace = link_flow_trace(trace_samples=500)
    note = trace["otherData"]["link_flows"]
    assert whole["otherData"]["link_flows"]["samples_cut_s"] is None
    assert note["sample_limit"] == 500 and 500 <= note["samples"] < 500 + 64
    assert note["kept"] == whole["otherData"]["link_flows"]["kept"]  # the flows go on
    events = trace["traceEvents"]
    cut = [e for e in events if e["ph"] == "i"]
    assert len(cut) == 1 and "after 500 samples" in cut[0]["name"]
    assert cut[0]["ts"] == pytest.approx(note["samples_cut_s"] * 1e6, rel=1e-12)
    counters = [e for e in events if e["ph"] == "C" and e["pid"] == 2]
    assert max(e["ts"] for e in counters) == cut[0]["ts"]
    assert all(e["args"] in ({"utilisation": 0.0}, {"flows in flight": 0})
               for e in counters if e["ts"] == cut[0]["ts"])
    # up to the cut, the same samples as the whole trace's
    before = [e for e in counters if e["ts"] < cut[0]["ts"]]
    assert before == [e for e in whole["traceEvents"] if e["ph"] == "C" and e["pid"] == 2
                      and e["ts"] < cut[0]["ts"]]
    assert not [e for e in link_flow_trace(trace_samples=0)["traceEvents"]
                if e["ph"] == "C" and e["pid"] == 2]


def test_a_window_keeps_only_the_flows_inside_it():
    full = link_flow_trace()
    ends = sorted(e["ts"] + e["dur"] for e in slices(full["traceEvents"], 2))
    start_s, end_s = ends[len(ends) // 3] * 1e-6, ends[2 * len(ends) // 3] * 1e-6
    trace = link_flow_trace(trace_window_s=[start_s, end_s])
    inside = slices(trace["traceEvents"], 2)
    assert inside and all(e["ts"] >= start_s * 1e6 - 1e-6 and
                          e["ts"] + e["dur"] <= end_s * 1e6 + 1e-6 for e in inside)
    counters = [e["ts"] for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == 2]
    assert counters and start_s * 1e6 <= min(counters) and max(counters) <= end_s * 1e6
    assert trace["otherData"]["link_flows"]["window_s"] == [start_s, end_s]
    assert 0 < trace["otherData"]["link_flows"]["kept"] < full["otherData"]["link_flows"]["kept"]


@pytest.mark.parametrize("window", [[0.5], [0.2, 0.1], [0.1, 0.1]])
def test_a_bad_window_names_the_key(window):
    with pytest.raises(UserError, match="run.trace_window_s"):
        validate({"run": {"trace_window_s": window}})


def test_sim_run_says_when_the_trace_was_cut(tmp_path, capsys):
    from sim.cli import main

    config_path = "experiments/quickstart.toml"
    assert main(["run", config_path, "--out", str(tmp_path / "a"),
                 "--set", "run.trace_flows=50"]) == 0
    assert "link flows left out (run.trace_flows = 50" in capsys.readouterr().out
    assert main(["run", config_path, "--out", str(tmp_path / "b")]) == 0
    assert "left out" not in capsys.readouterr().out
