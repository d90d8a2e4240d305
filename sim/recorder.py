"""The recorder and the on-disk result contract.

A run directory holds ``config.toml`` (the resolved config), ``summary.json``,
``metrics.csv`` (tidy rows: one per update and one per evaluation, each with
``time_s``) and ``trace.json`` (Chrome trace event format, built by :mod:`sim.trace`).
:func:`write_run` writes them into a temporary directory beside the target and
renames it into place, so a killed run leaves nothing half-written; a run stopped on purpose
(Ctrl-C, SIGTERM) is written with ``"complete": false``.
"""

from __future__ import annotations

import csv
import io
import math
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.result_schema import METRIC_COLUMNS, Summary
from sim.trace import Facts, TraceNotes, chrome_trace, worker_track
from sim.trace import link_flows_note as link_flows_note  # (its home was here)

# Where a rank's time goes, the same keys for simulated and real runs (they add up to the
# run's time): its gradient, gathering its batch, applying updates, the CPU cost of its
# messages (framework, MPI, copies, the network stack), the network, and waiting; under
# failures (sim.faults) also writing checkpoints, restarting, and recomputing lost work.
KINDS = ("compute", "data", "update", "overhead", "wire", "wait", "checkpoint", "restart",
         "recompute")


@dataclass(frozen=True)
class UpdateRecord:
    """One update applied to the model of record: a row of metrics.csv."""

    worker: int  # -1: an aggregate of several workers' gradients
    clock: int
    version_read: int
    staleness: int
    loss: float
    samples: int
    clock_gap: int | None = None


# metrics.csv's update rows as typed columns; a missing clock gap is stored as _NO_GAP
_UPDATE_COLUMNS = (("time_s", "d"), ("iteration", "q"), ("worker", "q"), ("clock", "q"),
                   ("version_read", "q"), ("staleness", "q"), ("clock_gap", "q"), ("loss", "d"))
_NO_GAP = -(2**63)
_SPAN_COLUMNS = (("worker", "q"), ("kind", "b"), ("start", "d"), ("end", "d"),
                 ("overlapped", "b"))
_KIND_INDEX = {kind: i for i, kind in enumerate(KINDS)}


class _Span:
    """Times the enclosed waits of ``worker`` as ``kind`` (a small class: a generator-based
    context manager costs several times more, and every wait of a run enters one).
    ``facts``: what it carried, for the trace."""

    __slots__ = ("recorder", "worker", "kind", "overlapped", "start", "facts")

    def __init__(self, recorder: Recorder, worker: int, kind: str, overlapped: bool,
                 facts: Facts | None) -> None:
        self.recorder, self.worker, self.kind, self.overlapped = (recorder, worker, kind,
                                                                  overlapped)
        self.facts = facts

    def __enter__(self) -> None:
        self.start = self.recorder.clock()

    def __exit__(self, *exc: object) -> None:
        recorder = self.recorder
        recorder.add_span(self.worker, self.kind, self.start, recorder.clock(), self.overlapped,
                          self.facts)


class Recorder:
    """Collects updates, evaluations and each worker's compute / comm / wait time.

    ``clock()`` is the time now (s): simulated, or a real run's replayed one.
    ``evaluates_after(iteration)`` says when the model of record is evaluated (the strategy
    rules' :meth:`~sim.training.rules.Rules.evaluates_after`). ``on_done()`` is called when
    ``iterations`` updates have been applied, or once the updates have used
    ``sample_budget`` training samples (the same work for every strategy: a bsp step uses
    every worker's batch, an asp gradient one batch); strategies stop applying updates once
    :attr:`finished` is true.
    """

    def __init__(self, clock: Callable[[], float], workers: int, iterations: int,
                 evaluates_after: Callable[[int], bool], target_loss: float | None,
                 sample_budget: int | None = None) -> None:
        self.clock, self.iterations, self.evaluates_after = clock, iterations, evaluates_after
        self.sample_budget = sample_budget  # also done once this many samples were used
        self.target_loss = target_loss
        self.evaluate: Callable[[], tuple[float, float]] = lambda: (math.nan, math.nan)
        self.on_done: Callable[[], None] = lambda: None
        self.iteration = 0
        self.samples = 0
        # Updates and spans are kept as typed columns (8 bytes a number, not a Python tuple
        # of objects per event: a long run records millions); evaluations are few.
        self._updates = {name: array(code) for name, code in _UPDATE_COLUMNS}
        self._evals: list[tuple[int, tuple]] = []  # (updates before it, its row)
        self._spans = {name: array(code) for name, code in _SPAN_COLUMNS}
        self.notes = TraceNotes()  # what the trace shows beyond the spans
        self._time = [[0.0] * len(KINDS) for _ in range(workers)]  # s per worker and kind
        self._overlapped = [0.0] * workers  # communication beside compute, s per worker
        self.final = (math.nan, math.nan)
        self.time_to_target_s: float | None = None
        self.diverged = False
        # (updates, clock now, samples used) after every update
        self.on_update: Callable[[int, float, int], None] | None = None
        # (updates, worker, whether that was the last) after every update: recovery's hook
        self.on_step: Callable[[int, int, bool], None] | None = None

    @property
    def finished(self) -> bool:
        return self.iteration >= self.iterations or self.diverged or self._spent(self.samples)

    def _spent(self, samples: int) -> bool:
        return self.sample_budget is not None and samples >= self.sample_budget

    def update(self, worker: int, clock: int, version_read: int, staleness: int, loss: float,
               samples: int, clock_gap: int | None = None) -> None:
        """One update applied now: ``worker`` is -1 for an aggregate of several workers."""
        self.iteration += 1
        columns = self._updates
        for name, value in (("time_s", self.clock()), ("iteration", self.iteration),
                            ("worker", worker), ("clock", clock),
                            ("version_read", version_read), ("staleness", staleness),
                            ("clock_gap", _NO_GAP if clock_gap is None else clock_gap),
                            ("loss", loss)):
            columns[name].append(value)
        spent = self._spent(self.samples + samples) and not self._spent(self.samples)
        self.samples += samples
        if self.evaluates_after(self.iteration) or spent:
            self.evaluate_now()
        if self.on_step is not None:
            self.on_step(self.iteration, worker, self.finished)
        if self.on_update is not None:
            self.on_update(self.iteration, self.clock(), self.samples)
        if self.iteration == self.iterations or (spent and self.iteration < self.iterations):
            self.on_done()

    def record(self, update: UpdateRecord) -> None:
        """An update the strategy rules made of a worker's push, or of an aggregate of
        pushes (``worker`` -1; see :meth:`update`)."""
        self.notes.applied(update.worker, update.version_read, update.staleness)
        self.update(update.worker, update.clock, update.version_read, update.staleness,
                    update.loss, update.samples, update.clock_gap)

    def evaluate_now(self) -> None:
        """Held-out loss and accuracy of the model of record, now."""
        loss, accuracy = self.evaluate()
        now = self.clock()
        self._evals.append((len(self._updates["iteration"]),
                            ("eval", now, self.iteration, None, None, None, None, None,
                             loss, accuracy)))
        self.final = (loss, accuracy)
        if self.target_loss is not None and self.time_to_target_s is None \
                and loss <= self.target_loss:
            self.time_to_target_s = float(now)

    def diverge(self) -> None:
        """A NaN or Inf stopped the run: no final model, so no final loss or accuracy."""
        self.diverged = True
        self.final = (math.nan, math.nan)

    def add_span(self, worker: int, kind: str, start: float, end: float,
                 overlapped: bool = False, facts: Facts | None = None) -> int | None:
        """Worker spent [start, end) seconds on ``kind`` (one of :data:`KINDS`).

        ``overlapped`` spans run alongside the worker's compute (pipelined communication):
        the trace shows them on the worker's own network track, and they are summed apart
        (:attr:`overlapped_s`), not into the worker's time, which they do not take.
        ``facts``: what the span carried, for the trace. Returns the span's number (for
        :meth:`sim.trace.TraceNotes.handoff`), None for an empty span (not kept).
        """
        if not end > start:  # (a NaN too)
            return None
        index = _KIND_INDEX[kind]
        if overlapped:
            self._overlapped[worker] += end - start
        else:
            self._time[worker][index] += end - start
        spans = self._spans
        spans["worker"].append(worker)
        spans["kind"].append(index)
        spans["start"].append(start)
        spans["end"].append(end)
        spans["overlapped"].append(1 if overlapped else 0)
        number = len(spans["worker"]) - 1
        if facts is not None or self.notes.tag is not None:
            self.notes.note(worker, number, overlapped, facts)
        return number

    def span(self, worker: int, kind: str, overlapped: bool = False,
             facts: Facts | None = None) -> _Span:
        """A context manager timing the enclosed SimPy waits as ``kind`` (also when
        interrupted); ``facts`` (which may be filled in inside) go on the trace with it."""
        return _Span(self, worker, kind, overlapped, facts)

    @contextmanager
    def tagging(self, facts: Facts, overlapped: bool) -> Iterator[None]:
        """The spans recorded inside (``overlapped`` or not, as given) carried ``facts``:
        for a message whose spans the caller does not make itself (a collective)."""
        self.notes.tag = (facts, overlapped)
        try:
            yield
        finally:
            self.notes.tag = None

    def retime(self, to_wall: Callable[[Any], Any]) -> None:
        """Move every update, evaluation and the time to target through ``to_wall`` (a
        monotone map of arrays of times: :class:`sim.faults.timeline.TimeMap`). The spans
        are left alone: the trace is moved as a whole (its own slices and notes)."""
        times = self._updates["time_s"]
        if len(times):
            self._updates["time_s"] = array("d", to_wall(np.frombuffer(times, float)).tolist())
        self._evals = [(i, (row[0], float(to_wall(row[1])), *row[2:])) for i, row in self._evals]
        if self.time_to_target_s is not None:
            self.time_to_target_s = float(to_wall(self.time_to_target_s))

    def copy_time(self, source: int, worker: int) -> None:
        """``worker`` spent what ``source`` spent on each kind (a rank that stands for another,
        :mod:`sim.simulated.steady_state`); spans are not copied."""
        self._time[worker] = list(self._time[source])
        self._overlapped[worker] = self._overlapped[source]

    def add_time(self, kind: str, seconds: float) -> None:
        """Every worker spent ``seconds`` more on ``kind`` (a whole-job pause)."""
        index = _KIND_INDEX[kind]
        for row in self._time:
            row[index] += seconds

    # ---- what was recorded ------------------------------------------------------------

    @property
    def rows(self) -> list[tuple]:
        """metrics.csv's rows in order: (kind, time_s, iteration, worker, clock,
        version_read, staleness, clock_gap, loss, accuracy) each."""
        columns = self._updates
        updates = zip(*(columns[name] for name, _ in _UPDATE_COLUMNS), strict=True)
        rows: list[tuple] = []
        evals = iter(self._evals)
        pending = next(evals, None)
        for i, (time_s, iteration, worker, clock, version_read, staleness, gap,
                loss) in enumerate(updates):
            while pending is not None and pending[0] == i:
                rows.append(pending[1])
                pending = next(evals, None)
            rows.append(("update", time_s, iteration, worker, clock, version_read, staleness,
                         None if gap == _NO_GAP else gap, loss, None))
        while pending is not None:
            rows.append(pending[1])
            pending = next(evals, None)
        return rows

    @property
    def staleness(self) -> array:
        """Every update's staleness, in order."""
        return self._updates["staleness"]

    @property
    def breakdown(self) -> np.ndarray:
        """Seconds per worker (rows) and kind (columns, :data:`KINDS`)."""
        return np.array(self._time).reshape(len(self._time), len(KINDS))

    @property
    def overlapped_s(self) -> np.ndarray:
        """Communication beside compute, s per worker."""
        return np.array(self._overlapped)

    @property
    def slices(self) -> list[tuple[int, str, float, float, bool]]:
        """(worker, kind, start s, end s, overlapped) of every span, in order."""
        spans = self._spans
        return [(worker, KINDS[kind], start, end, bool(overlapped))
                for worker, kind, start, end, overlapped in
                zip(*(spans[name] for name, _ in _SPAN_COLUMNS), strict=True)]

    # ---- results --------------------------------------------------------------------

    def summary(self, seed: int, wall_s: float, events: int, complete: bool = True,
                clock: str = "simulated", reduced: str | None = None,
                **extra: Any) -> dict[str, Any]:
        """The run's summary.json: the common keys, then ``extra`` (a strategy's or a
        runner's own keys). ``complete``: false for a run stopped early (interrupted), whose
        figures cover what it reached. ``clock``: what its times (``sim_time_s``, ``time_s``)
        measure: "simulated" seconds, or a real run's "wall" seconds. ``reduced``: the
        config's run.reduced (what ``SGD_LAB_QUICK=1`` cut), kept as ``reduced`` when set.
        Raises ValueError if ``extra`` would replace a common key."""
        staleness = np.array(self.staleness) if len(self.staleness) else np.zeros(1, np.int64)
        sim_time = float(self.clock())
        # a worker that stopped before the run's end waited for it
        breakdown = self.breakdown.copy()
        breakdown[:, KINDS.index("wait")] += np.clip(sim_time - breakdown.sum(axis=1), 0.0, None)
        mean = breakdown.mean(axis=0)
        result = {
            "sim_time_s": sim_time,
            "clock": clock,
            "iterations": self.iteration,
            "final_loss": _finite_or_none(self.final[0]),
            "final_accuracy": _finite_or_none(self.final[1]),
            "time_to_target_s": self.time_to_target_s,
            "samples_per_s": self.samples / sim_time if sim_time > 0 else None,
            "staleness_mean": float(staleness.mean()),
            "staleness_max": int(staleness.max()),
            **{f"{kind}_s": float(value) for kind, value in zip(KINDS, mean, strict=True)},
            "comm_s": float(mean[KINDS.index("overhead")] + mean[KINDS.index("wire")]),
            "events": events,
            "wall_s": wall_s,
            "seed": seed,
            "diverged": self.diverged,
            "complete": complete,
            **({"reduced": reduced} if reduced is not None else {}),
            "workers": [dict(zip(KINDS, map(float, row), strict=True))
                        for row in breakdown],
        }
        replaced = sorted(set(extra) & set(result))
        if replaced:
            raise ValueError(f"summary extras would replace the common keys {replaced}")
        result.update(extra)
        Summary.model_validate(result)  # the contract its readers check (sim.result_schema)
        return result

    def metrics_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(METRIC_COLUMNS)
        for row in self.rows:
            # float(v): numpy scalars (env.now after a numpy delay) would print as
            # "np.float64(...)"; repr of a Python float round-trips exactly
            writer.writerow(["" if v is None else (repr(float(v)) if isinstance(v, float)
                                                   else v) for v in row])
        return out.getvalue()

    def trace(self, flows: Any = None, link_name: Callable[[int], str] = str,
              worker_name: Callable[[int], str] = worker_track) -> dict[str, Any]:
        """trace.json's Chrome trace events (:func:`sim.trace.chrome_trace`): the workers'
        spans (their tracks named by ``worker_name``), what the notes add, and the link
        flows of ``flows`` (a :class:`~sim.network.linklog.FlowLog`, named by
        ``link_name``)."""
        return chrome_trace(self.slices, len(self._time), self.notes, flows, link_name,
                            worker_name)


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
