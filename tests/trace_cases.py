"""What tests read from a Chrome trace: the slice an event binds to."""

from __future__ import annotations


def holder(events: list[dict], event: dict) -> dict:
    """The one slice on the event's own thread that holds its ts (what it binds to)."""
    found = [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) ==
             (event["pid"], event["tid"]) and e["ts"] <= event["ts"] <= e["ts"] + e["dur"]]
    assert len(found) == 1, (event, found)
    return found[0]
