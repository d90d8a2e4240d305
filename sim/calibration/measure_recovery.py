"""Restarts on this machine, measured through the real runner (the recovery profile's
points).

A short real bsp job of each config (3 updates, a checkpoint after every one, its last rank
SIGKILLed after update 2) runs through :func:`sim.real.launch.real_run.run_faulty`, which
starts it again from the checkpoint of update 1 and measures the restart as every real run
does: from the kill to the new job's clock start (mpiexec, imports, building the workload,
reading the checkpoint, the warm-up). ``restart_s`` is that, minus the checkpoint's read as
the storage fit gives it (the simulator adds the read itself). Building the workload is part
of it, so each config is measured apart (:func:`~sim.calibration.recovery_profile.restart_for`
picks a config's own).
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import Any

from sim.calibration.measure_device import describe_workload
from sim.calibration.recovery_profile import config_key
from sim.config import Config
from sim.faults.storage import Storage
from sim.real.executors import checkpoint as ckpt
from sim.training.validator import validate


def restart_job(config: Config) -> Config:
    """``config`` as the short killed-and-restarted bsp job that measures its restart."""
    workers = max(config.cluster.workers, 2)
    data = config.model_dump(mode="json", exclude_none=True)
    data["strategy"].update(kind="bsp", pipelining="none")
    data["run"].update(iterations=3, eval_every=1)
    data["run"].pop("time_limit_s", None)
    data["cluster"]["workers"] = workers
    data["faults"] = {**data.get("faults", {}),
                      "failures": [{"rank": workers - 1, "at_update": 2}]}
    data["faults"].pop("mtbf_s", None)
    data["checkpoint"] = {**data.get("checkpoint", {}), "every_steps": 1, "mode": "blocking"}
    data["checkpoint"].pop("every_s", None)
    return validate(data, "restart calibration")


def measure_restart(config: Config, directory: Path, storage: Storage,
                    repeats: int) -> dict[str, Any]:
    """The restart of ``config``'s short killed job, ``repeats`` times: the spans (s), the
    checkpoint read back, and ``restart_s`` (the median span minus that read).
    Raises RunFailed or UserError."""
    from sim.real.launch.real_run import RealOptions, run_faulty
    from sim.training.validator import validate_real

    job = restart_job(config)
    real = validate_real(job)
    spans, size = [], 0
    for i in range(repeats):
        place = directory / f"restart-{i}"
        shutil.rmtree(place, ignore_errors=True)
        try:
            files = run_faulty(job, real, RealOptions(hang_s=120), None, i, place)
            size = ckpt.path_for(place, 1).stat().st_size
        finally:
            shutil.rmtree(place, ignore_errors=True)
        spans.append(float(json.loads(files["summary.json"])["restart_time_s"]))
    read_s = storage.read_s(size)
    return {"workload": describe_workload(config), "ranks": real.ranks, "key": config_key(config),
            "restart_time_s": spans, "checkpoint_bytes": size, "read_s": read_s,
            "restart_s": max(statistics.median(spans) - read_s, 0.0)}

