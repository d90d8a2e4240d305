"""This machine's network, measured on real ranks (the fabric profile's points).

On the network being calibrated (shared memory or ``emulate:RATE``) and waiting as real runs
wait, :mod:`sim.calibration.netbench` measures ping-pong times, back-to-back small messages
(the per-message overhead o) and allreduce times through the simulator's schedule on p
ranks; on an emulated network also ping-pongs after a pause that fills its token buckets
(their peak, which back-to-back ping-pongs barely see). :func:`netbench` launches it, as
the host's measurements do too. The fit is :func:`sim.calibration.fit_fabric.fit_network`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim.calibration.netbench import REPS
from sim.real.launch.emulate import Emulation
from sim.real.launch.launcher import Job, launch

SIZES = [8, 512, 4096, 32768, 262144, 1 << 20, 4 << 20]
QUICK_SIZES = [8, 4096, 262144]
# also measured on an emulated network: 512 B (above MPICH's inline sizes, and no bucket of
# 100 Mbit/s or more dries within its repetitions: it pins alpha), a size the buckets dry
# and one beyond them
SHAPED_SIZES = [512, 32768, 1 << 20]
PAUSE_BURSTS = 2  # a paused ping-pong idles this many buckets' refill times: they are full


def paused_sizes(burst_bytes: int) -> list[int]:
    """Ping-pong sizes that a full bucket of ``burst_bytes`` sends at its peak: an eighth to
    three quarters of it, where n / P stands well above the noise of alpha."""
    return [burst_bytes * k // 8 for k in (1, 2, 4, 6)]


def netbench(spec: dict[str, Any], ranks: int, emulation: Emulation | None,
             timeout_s: float = 600.0) -> dict[str, Any]:
    """Run :mod:`sim.calibration.netbench` on ``ranks`` ranks; its result."""
    with tempfile.TemporaryDirectory(prefix="sgd-calibrate-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        spec = {**spec, "result": str(work / "result.json")}
        (work / "spec.json").write_text(json.dumps(spec))
        launch(Job([sys.executable, "-m", "sim.calibration.netbench", "--spec",
                    str(work / "spec.json")], ranks, work,
                   env=emulation.env if emulation else {},
                   prefix=emulation.prefix if emulation else None, timeout_s=timeout_s))
        return json.loads((work / "result.json").read_text())


def measure_network(emulation: Emulation | None, ranks: list[int], wait: str,
                    algorithm: str = "ring", quick: bool = False) -> dict[str, Any]:
    """Ping-pong, stream and allreduce measurements (see :mod:`sim.calibration.netbench`)."""
    from sim.real.launch.real_run import wait_mode

    sizes, reps = (QUICK_SIZES, 20) if quick else (SIZES, REPS)
    if emulation is not None:
        sizes = sorted({*sizes, *SHAPED_SIZES})
    out = {"pingpong": netbench({"mode": "pingpong", "sizes": sizes, "reps": reps,
                                 "wait": wait_mode(wait, 2)}, 2, emulation),
           "stream": netbench({"mode": "stream", "reps": reps, "wait": wait_mode(wait, 2)},
                              2, emulation),
           "allreduce": [netbench({"mode": "allreduce", "sizes": sizes, "reps": reps,
                                   "algorithm": algorithm, "wait": wait_mode(wait, p)},
                                  p, emulation) for p in ranks]}
    out["algorithm"], out["reps"] = algorithm, reps
    if emulation is not None:  # token-bucket links: their fit takes the buckets' depth
        out["shaper"] = emulation.shaper
        out["pingpong_paused"] = netbench(
            {"mode": "pingpong", "sizes": paused_sizes(emulation.burst_bytes), "reps": reps,
             "pause_s": PAUSE_BURSTS * emulation.shaper["burst_s"],
             "wait": wait_mode(wait, 2)}, 2, emulation)
    return out

