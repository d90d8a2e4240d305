"""This machine, as every recorded figure names it: its CPU model.

Machines differ between sessions (an AMD EPYC with a 32 MB last-level cache, an Intel Xeon
with 260 MB), so a benchmark, a calibration or a validation records the CPU it ran on, and
a comparison across runs checks it.
"""

from __future__ import annotations

import os
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


def last_level_cache_bytes() -> int | None:
    """Bytes of the largest data or unified cache of CPU 0 (sysfs ``cache/index*``), or None
    where Linux does not say. A VM reports its host's cache, which it may share."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            sizes.append(_cache_size_bytes((index / "size").read_text().strip()))
        except (OSError, ValueError):
            continue
    return max(sizes, default=None)


def _cache_size_bytes(text: str) -> int:
    """``"491520K"`` -> 503316480 (sysfs writes K, M or G; raises ValueError otherwise)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def meminfo_bytes(field: str) -> int:
    """``field`` of ``/proc/meminfo`` (``"MemTotal"``, ``"MemAvailable"``) in bytes; the
    physical memory where Linux does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
