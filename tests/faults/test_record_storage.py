"""The recorder keeps updates and spans as typed columns; a run's results must be exactly what
the plain storage (a Python tuple per event, as it was) gives.

``ListRecorder`` below is that plain storage; every output (summary.json, metrics.csv,
trace.json) is computed by the same code from either, so these runs check that the columns
lose nothing: same values, same types where the files show them, same order.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sim.simulated.engine as engine
from sim.recorder import KINDS, Recorder
from sim.training.validator import validate


class ListRecorder(Recorder):
    """The recorder with its former storage: lists of tuples and numpy accumulators."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        workers = len(self._time)
        self._rows: list[tuple] = []
        self._staleness: list[int] = []
        self._breakdown = np.zeros((workers, len(KINDS)))
        self._overlapped_s = np.zeros(workers)
        self._slices: list[tuple] = []

    def update(self, worker, clock, version_read, staleness, loss, samples, clock_gap=None):
        self._rows.append(("update", self.clock(), self.iteration + 1, worker, clock,
                           version_read, staleness, clock_gap, loss, None))
        self._staleness.append(staleness)
        super().update(worker, clock, version_read, staleness, loss, samples, clock_gap)

    def evaluate_now(self) -> None:
        super().evaluate_now()
        self._rows.append(self._evals[-1][1])

    def add_span(self, worker, kind, start, end, overlapped=False, facts=None) -> None:
        if end > start:
            if overlapped:
                self._overlapped_s[worker] += end - start
            else:
                self._breakdown[worker, KINDS.index(kind)] += end - start
            self._slices.append((worker, kind, start, end, overlapped))
            self.notes.note(worker, len(self._slices) - 1, overlapped, facts)

    rows = property(lambda self: self._rows)
    staleness = property(lambda self: self._staleness)
    breakdown = property(lambda self: self._breakdown)
    overlapped_s = property(lambda self: self._overlapped_s)
    slices = property(lambda self: self._slices)


CASES = {
    "asp": {"strategy": {"kind": "asp"}, "compute": {"distribution": "exponential"}},
    "ssp": {"strategy": {"kind": "ssp", "staleness": 1}},
    "bsp": {"strategy": {"kind": "bsp"}, "run": {"target_loss": 0.9}},
    "bsp-pipelined": {"strategy": {"kind": "bsp", "pipelining": "wfbp"},
                      "workload": {"model": "mlp", "dataset": "digits"}},
    "backup-on-shared-cores": {"strategy": {"kind": "backup", "backup": 1},
                               "cluster": {"host": "epyc-core", "cores": 1,
                                           "ranks_per_host": 2}},
    "bsp-ps-sample-budget": {"strategy": {"kind": "bsp-ps"}, "run": {"samples": 2000}},
}


def config(case: dict) -> object:
    base = {"cluster": {"workers": 4}, "workload": {"features": 16, "samples": 1024},
            "run": {"iterations": 30, "eval_every": 7}}
    for section, values in case.items():
        base[section] = {**base.get(section, {}), **values}
    return validate(base)


def results(monkeypatch, recorder: type, case: dict) -> tuple:
    monkeypatch.setattr(engine, "Recorder", recorder)
    result = engine.simulate(config(case))
    summary = {k: v for k, v in result.summary.items() if k != "wall_s"}
    return summary, result.metrics_csv, result.trace


@pytest.mark.parametrize("name", CASES)
def test_columns_give_the_results_of_plain_storage(monkeypatch, name) -> None:
    plain = results(monkeypatch, ListRecorder, CASES[name])
    columns = results(monkeypatch, Recorder, CASES[name])
    assert columns[0] == plain[0]  # summary.json, NaN-free
    assert columns[1] == plain[1]  # metrics.csv, byte for byte
    assert columns[2] == plain[2]  # trace.json
    assert plain[1].count("\nupdate,") >= 4 and plain[1].count("\neval,") >= 2


def test_rows_keep_their_order_and_missing_values() -> None:
    rec = Recorder(lambda: 1.5, 2, 10, lambda i: i == 2, None)
    rec.evaluate = lambda: (0.5, math.nan)
    rec.evaluate_now()
    rec.update(0, 1, 0, 0, 0.25, 8)
    rec.update(-1, 2, 1, 1, 0.125, 16, clock_gap=3)
    rec.add_span(1, "wire", 0.0, 1.5)
    rec.add_span(0, "wire", 1.0, 1.0)  # empty: not kept
    rec.add_span(0, "compute", 0.5, 1.5, overlapped=True)
    assert [row[0] for row in rec.rows] == ["eval", "update", "update", "eval"]
    assert rec.rows[1] == ("update", 1.5, 1, 0, 1, 0, 0, None, 0.25, None)
    assert rec.rows[2][7] == 3
    assert list(rec.staleness) == [0, 1]
    assert rec.slices == [(1, "wire", 0.0, 1.5, False), (0, "compute", 0.5, 1.5, True)]
    assert rec.breakdown[1, KINDS.index("wire")] == 1.5 and rec.overlapped_s.tolist() == [1.0, 0]
