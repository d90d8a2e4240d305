"""sim.calibration.message_reload_bench under mpiexec: every (count, work) point printed, the
back-to-back point the zero its extras are taken from, every median a positive time."""

from __future__ import annotations

import json
import subprocess
import sys

from sim.calibration.message_reload_bench import COUNTS, WORKS_S
from sim.real.launch.launcher import mpiexec


def test_the_bench_prints_each_point_against_back_to_back():
    run = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m",
                          "sim.calibration.message_reload_bench", "--reps", "10"],
                         capture_output=True, text=True, timeout=120, check=True)
    points = [json.loads(line) for line in run.stdout.splitlines()]
    assert [(p["count"], p["work_ms"]) for p in points] == [
        (count, work * 1e3) for count in COUNTS for work in WORKS_S]
    for point in points:
        assert point["wire_us"] > 0 and point["overhead_us"] > 0
        if point["work_ms"] == 0:
            assert point["extra_us"] == 0


def test_the_bench_refuses_other_than_two_ranks():
    run = subprocess.run([mpiexec(), "-n", "1", sys.executable, "-m",
                          "sim.calibration.message_reload_bench", "--reps", "2"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "run it on 2 ranks" in run.stderr
