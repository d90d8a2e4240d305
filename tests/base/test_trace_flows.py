"""Flow arrows in time order: each starts where its message leaves the sender, inside the
sender's slice, and its steps and end follow it on the link slices (issue 33). A v1 flow
event binds to the slice that holds its ts on its own thread, and a viewer reads the events
in time order, so an arrow that ends before it starts cannot be drawn."""

from __future__ import annotations

from collections import defaultdict

import pytest

from sim.simulated.engine import simulate
from sim.trace import TraceNotes, chrome_trace
from sim.training.strategies import STRATEGIES
from sim.training.validator import validate

SMALL = {"model": "mlp", "dataset": "digits", "hidden": [32], "batch": 8}
LINKS = 2  # the pid of the link tracks


def events_of(kind: str, host: str = "ideal", parallel: dict | None = None,
              **strategy) -> list[dict]:
    data = {"cluster": {"workers": 4, "fabric": "eth-10g", "host": host},
            "workload": SMALL, "strategy": {"kind": kind, **strategy},
            "parallel": parallel or {}, "run": {"iterations": 6, "eval_every": 6}}
    return simulate(validate(data)).trace["traceEvents"]


def holder(events: list[dict], event: dict) -> dict:
    """The one slice on the event's own thread that holds its ts (what it binds to)."""
    found = [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) ==
             (event["pid"], event["tid"]) and e["ts"] <= event["ts"] <= e["ts"] + e["dur"]]
    assert len(found) == 1, (event, found)
    return found[0]


def chains(events: list[dict]) -> dict[int, list[dict]]:
    """The link flows' arrows (not the handoffs between ranks' slices, which
    tests/simulated/test_model_parallel_sim.py checks)."""
    found = defaultdict(list)
    for e in events:
        if e["ph"] in ("s", "t", "f") and e["cat"] == "message":
            found[e["id"]].append(e)
    return found


CASES = [(kind, {}, "ideal") for kind in STRATEGIES] + [
    ("bsp", {"pipelining": "wfbp"}, "ideal"), ("bsp-ps", {"pipelining": "wfbp"}, "epyc-core"),
    ("ssp", {}, "epyc-core"), ("asp", {}, "epyc-core")]


# model parallelism: messages between stages (on a host with CPU costs their posting slices
# carry link flows) and bsp-ps's pushes and pulls of each stage's shard
SPLIT = {"pipeline": 2, "microbatches": 2}
MP_CASES = [(kind, host) for kind, row in STRATEGIES.items() if row.model_parallel
            for host in ("ideal", "epyc-core")]


def assert_arrows_in_time_order(events: list[dict]) -> None:
    for chain in chains(events).values():
        start, *steps, end = chain  # in route order
        assert (start["ph"], end["ph"], end.get("bp")) == ("s", "f", "e")
        assert all(step["ph"] == "t" for step in steps)
        times = [e["ts"] for e in chain]
        assert times == sorted(times), chain


def assert_arrow_events_in_their_slices(events: list[dict]) -> None:
    for chain in chains(events).values():
        start, *hops = chain
        sender = holder(events, start)
        links = [holder(events, e) for e in hops]
        assert all(e["pid"] == LINKS for e in hops)
        assert all(link["args"] == links[0]["args"] for link in links)  # one flow, its route
        assert links[0]["args"]["flow"] in sender["args"]["flows"]
        leaves = links[0]["ts"]
        assert start["ts"] == pytest.approx(
            min(max(leaves, sender["ts"]), sender["ts"] + sender["dur"]), abs=2e-3)


@pytest.mark.parametrize("kind, strategy, host", CASES)
def test_every_arrow_starts_at_or_before_its_steps_and_end(kind, strategy, host):
    assert_arrows_in_time_order(events_of(kind, host, **strategy))


@pytest.mark.parametrize("kind, strategy, host", CASES)
def test_every_arrow_event_lies_in_its_own_slice(kind, strategy, host):
    """The start binds to the sender's slice (which lists the flow's send) at the moment its
    message leaves (the link flow's start), each step and the end to the flow's slice on
    that link."""
    assert_arrow_events_in_their_slices(events_of(kind, host, **strategy))


@pytest.mark.parametrize("kind, host", MP_CASES)
def test_model_parallel_runs_arrows_follow_the_same_rules(kind, host):
    events = events_of(kind, host, SPLIT)
    assert_arrows_in_time_order(events)
    assert_arrow_events_in_their_slices(events)
    if host != "ideal" or kind == "bsp-ps":  # not vacuous: some message has link arrows
        assert chains(events)


def test_the_ps_strategies_draw_arrows():
    """The checks above are not vacuous: a parameter-server run has an arrow per link flow."""
    for kind in ("asp", "ssp", "bsp-ps"):
        events = events_of(kind)
        flows = [e for e in events if e["ph"] == "X" and e["pid"] == LINKS]
        assert flows and len(chains(events)) == len(flows) // 2  # host->switch->host


@pytest.mark.parametrize("receiver, drawn", [((1e-6, 3e-6), True), ((-4e-6, -1e-6), False)])
def test_a_handoff_whose_times_overlap_is_clamped_forward(receiver, drawn):
    """An arrow between ranks' slices (a stage message) whose receiver's slice begins before
    the sender's ends (no clock of this lab gives that, but a trace must not draw an arrow
    back in time): both ends meet inside both slices; with no such time, no arrow."""
    notes = TraceNotes()
    notes.handoff(0, 1)
    slices = [(0, "compute", 0.0, 2e-6, False), (1, "compute", *receiver, False)]
    events = chrome_trace(slices, 2, notes)["traceEvents"]
    arrow = [e for e in events if e["ph"] in ("s", "f") and e["cat"] == "handoff"]
    if not drawn:
        assert arrow == []
        return
    start, end = arrow
    assert start["ts"] <= end["ts"]
    assert (holder(events, start)["tid"], holder(events, end)["tid"]) == (0, 1)
