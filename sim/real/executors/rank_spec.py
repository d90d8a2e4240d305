"""What the launcher hands every rank: the validated config and the launch's own fields.

The parent validates the config once (:func:`sim.training.validator.validate_real`) and
writes a :class:`RankSpec` as JSON; a rank reads it back without checking the config again:
the config is rebuilt by its schema alone (types and ranges, no cross-key checks). A spec
that does not read back is the launcher's bug, not the user's: it raises ValueError or
pydantic's ValidationError, which the rank reports as its failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.config import Config


@dataclass(frozen=True)
class RankSpec:
    """One launch of a real run's ranks."""

    config: Config  # resolved and validated in the parent
    workdir: Path  # shared with the launcher: markers, the runner's records
    result: Path  # where the writing rank puts the run's files (JSON {name: text})
    net: str  # --net: shm or emulate:RATE
    transport: str  # the message path: "mpi" or "grpc" (sim.training.real_checks)
    impl: str  # allreduce implementation: schedule or mpi
    wait: str  # how a waiting rank waits: spin or sleep
    repeat: int = 0  # which repeat of the run this launch is
    # failures and checkpoints (sim.real.launch.relaunch): elastic, checkpoints, done,
    # origin, resume; None without [faults] and [checkpoint]
    faults: dict[str, Any] | None = None
    sched: str = "default"  # --sched: default, or fifo (sim.real.executors.rank_sched)

    def to_json(self) -> str:
        return json.dumps({"config": self.config.model_dump(mode="json"),
                           "workdir": str(self.workdir), "result": str(self.result),
                           "net": self.net, "transport": self.transport, "impl": self.impl,
                           "wait": self.wait, "repeat": self.repeat, "faults": self.faults,
                           "sched": self.sched})

    @classmethod
    def from_json(cls, text: str) -> RankSpec:
        """The spec :meth:`to_json` wrote; the config rebuilt by its schema alone."""
        data = json.loads(text)
        return cls(config=Config.model_validate(data.pop("config")),
                   workdir=Path(data.pop("workdir")), result=Path(data.pop("result")),
                   **data)

    @property
    def elastic(self) -> bool:
        """Whether the launcher lets workers die and the run carry on."""
        return bool((self.faults or {}).get("elastic"))
