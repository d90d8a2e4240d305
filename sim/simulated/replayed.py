"""A simulation that replays a real run's own compute, so its error is the coordination's.

Trace-driven predictors (Daydream, Zhu et al. 2020; dPRO, Hu et al. 2022) replay the
measured compute of a run and predict the rest; SimGrid's SMPI times compute blocks inside
the run it simulates. Here the real run's trace gives, for each rank (by its track's name):

* ``steps``: the seconds of compute of each of its steps, in order (a gradient; a pipeline
  stage's passes of one step, its tensor sums left out). The rank's n-th step in the
  simulation takes the n-th of them; past the record (an asynchronous worker that does more
  steps here than there), a draw from that rank's own record, or from every rank's where it
  recorded none.
* ``scales``: for the host's data and update work, the factor that makes the model's
  charges on a rank add up to what that rank measured per step (its mean over the run:
  these are microseconds a step with little spread), found by a first simulation
  (:mod:`sim.validation.replay`).

Everything else (per-message CPU, the wire, waiting, the servers' code) stays the model's.

Where the real ranks outnumbered the cores under Linux's default scheduler, a compute span
is wall-clock time that holds the rank's waits for a core as well as its work: replayed as
CPU work on the simulated cores it would wait for them twice, so it is replayed as time
that holds no core (``off_core``). Under ``sim real --sched fifo`` a computing rank keeps
its core until it waits, so its spans are its work and are replayed on the cores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

REPLAYED_KINDS = ("data", "update")  # host work scaled to the run's own measurement


@dataclass(frozen=True)
class MeasuredTimes:
    """What a real run measured, by track name (``worker 0``, ``rank 3: ...``)."""

    source: str  # where it came from (a real run directory), for the summary
    steps: Mapping[str, np.ndarray]  # track -> seconds of compute in each step
    # (track, kind) -> the factor on the model's charges of ``kind`` there
    scales: Mapping[tuple[str, str], float] = field(default_factory=dict)
    # the steps are wall-clock time that already holds the rank's waits for a core (ranks
    # outnumbered cores under the default scheduler): replayed without holding one, else
    # the simulation's own sharing of the cores would count those waits twice
    off_core: bool = False


class Replay:
    """The measured times bound to a simulation's ranks (``tracks[r]``: rank r's name)."""

    def __init__(self, measured: MeasuredTimes, tracks: Sequence[str], seed: int) -> None:
        self.measured = measured
        pooled = [s for s in measured.steps.values() if s.size]
        self.pooled = np.concatenate(pooled) if pooled else np.zeros(0)
        self.records = [np.asarray(measured.steps.get(t, np.zeros(0)), float) for t in tracks]
        self.scales = [{k: float(measured.scales.get((t, k), 1.0)) for k in REPLAYED_KINDS}
                       for t in tracks]
        self.used = np.zeros(len(tracks), dtype=np.int64)  # steps drawn per rank
        self.rng = np.random.default_rng([seed, 0x5EED])
        self.drawn = 0  # steps past the record

    def step_s(self, rank: int) -> float:
        """Seconds of rank ``rank``'s next step of compute. Raises ValueError when the run
        recorded no compute at all (nothing to replay)."""
        n = int(self.used[rank])
        self.used[rank] += 1
        record = self.records[rank]
        if n < record.size:
            return float(record[n])
        source = record if record.size else self.pooled
        if not source.size:
            raise ValueError(f"{self.measured.source}: no compute recorded to replay")
        self.drawn += 1
        return float(source[self.rng.integers(source.size)])

    def scaled(self, rank: int, kind: str, seconds: float) -> float:
        """A charge of ``seconds`` of ``kind`` on ``rank`` as the run measured such work."""
        if kind not in REPLAYED_KINDS or rank >= len(self.scales):
            return seconds
        return seconds * self.scales[rank][kind]

    def summary(self) -> dict[str, object]:
        """What was replayed, for summary.json's ``replayed``."""
        return {"from": self.measured.source, "steps": int(self.used.sum()),
                "steps_drawn": self.drawn,
                "scales": {kind: [s[kind] for s in self.scales] for kind in REPLAYED_KINDS}}
