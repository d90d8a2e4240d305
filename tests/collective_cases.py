"""Running ``sim collective`` from the tests (the allgather and all-to-all ones)."""

from __future__ import annotations

import json

import pytest

from sim.cli import main


def collective_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    """``sim collective ARGV --json``'s answer (asserting it exits 0)."""
    assert main(["collective", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)
