"""This machine, as every recorded figure names it: its CPU model.

Machines differ between sessions (an AMD EPYC with a 32 MB last-level cache, an Intel Xeon
with 260 MB), so a benchmark, a calibration or a validation records the CPU it ran on, and
a comparison across runs checks it.
"""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s, as lscpu prints it), else the platform's
    processor."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
