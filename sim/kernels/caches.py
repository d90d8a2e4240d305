"""The machine's cache sizes, which the fused kernels' blocks are chosen from.

Read once per process from the environment variable ``SGD_CACHE_SIZES``, else sysfs (cpu0's
caches), else :data:`DEFAULT_CACHES`. Block sizes never change a result.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class CacheSizes:
    """Bytes of one core's L1 data cache, its L2 and the last-level cache, and where they
    were read: ``"SGD_CACHE_SIZES"``, ``"sysfs"`` or ``"defaults"``."""

    l1d: int
    l2: int
    llc: int
    source: str

    def __str__(self) -> str:
        return (f"L1d {_kib(self.l1d)}, L2 {_kib(self.l2)}, LLC {_kib(self.llc)} "
                f"({self.source})")


def _kib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"


#: used where sysfs says nothing (not Linux, a container without /sys): small enough for any
#: current x86-64 or ARM server core, so blocks stay in cache; glibc's sysconf is not asked,
#: as it reads CPUID, which a hypervisor may report wrongly (256 MiB of L3 on a 32 MiB VM)
DEFAULT_CACHES = CacheSizes(32 << 10, 256 << 10, 8 << 20, "defaults")
SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)


def _bytes(text: str) -> int:
    """'48K', '2M', '2MiB', '32768' -> bytes; ValueError otherwise."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def _sysfs_caches(root: Path = SYSFS_CACHE) -> CacheSizes | None:
    """cpu0's L1 data, L2 and last-level cache from sysfs (``index*/{level,type,size}``);
    None when there is no L1 data or L2 entry. No L3: the L2 is the last level."""
    found: dict[int, int] = {}
    try:
        for index in sorted(root.glob("index[0-9]*")):
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            found[int((index / "level").read_text())] = _bytes((index / "size").read_text())
    except (OSError, ValueError):
        return None
    if not found.get(1) or not found.get(2):
        return None
    return CacheSizes(found[1], found[2], found[max(found)], "sysfs")


def _env_caches(value: str) -> CacheSizes:
    try:
        l1d, l2, llc = (_bytes(part) for part in value.split(","))
    except ValueError:
        l1d = 0
    if not 0 < l1d <= l2 <= llc:
        raise ValueError(f"SGD_CACHE_SIZES: expected 'L1d,L2,LLC' sizes, non-decreasing "
                         f"(e.g. '48K,2M,260M'), got {value!r}")
    return CacheSizes(l1d, l2, llc, "SGD_CACHE_SIZES")


@cache
def cache_sizes() -> CacheSizes:
    """The cache sizes the kernels' blocks are chosen from, read once per process: the
    environment variable ``SGD_CACHE_SIZES`` (``"L1d,L2,LLC"``, e.g. ``"48K,2M,260M"``) when
    set, else sysfs (cpu0's caches), else :data:`DEFAULT_CACHES`."""
    if os.environ.get("SGD_CACHE_SIZES"):
        return _env_caches(os.environ["SGD_CACHE_SIZES"])
    return _sysfs_caches() or DEFAULT_CACHES
