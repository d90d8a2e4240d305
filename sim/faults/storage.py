"""Where checkpoints go: storage presets with their sources, and the time of a write or read.

A checkpoint of ``n`` bytes split over ``k`` writers (rank 0 alone for an allreduce, every
shard its part for a parameter server) takes

    latency_s + max(n / k / write_Bps, n / aggregate_Bps)

each writer streaming its part at its own rate, all of them together at most at the
storage's aggregate rate (a shared file system's servers, not the client link). A read is
the same with ``read_Bps``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sim.calibrated import load_profile, write_profile

PROFILE_FORMAT = "sgd-lab.storage-profile/1"


@dataclass(frozen=True)
class Storage:
    """One storage target. Raises ValueError for a non-positive rate or a negative latency."""

    name: str
    write_Bps: float  # one writer, bytes/s
    read_Bps: float  # one reader, bytes/s
    latency_s: float  # per file written or read (open, create, commit)
    aggregate_Bps: float = math.inf  # all writers (or readers) together, bytes/s
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("write_Bps", "read_Bps", "aggregate_Bps"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"{name}: expected a positive number of bytes/s, got {value!r}")
        if not (isinstance(self.latency_s, int | float) and 0 <= self.latency_s < math.inf):
            raise ValueError(f"latency_s: expected seconds >= 0, got {self.latency_s!r}")

    def write_s(self, nbytes: float, writers: int = 1) -> float:
        """Seconds to write ``nbytes`` split evenly over ``writers`` in parallel."""
        return self._move_s(nbytes, writers, self.write_Bps)

    def read_s(self, nbytes: float, readers: int = 1) -> float:
        """Seconds to read ``nbytes`` back, split evenly over ``readers``."""
        return self._move_s(nbytes, readers, self.read_Bps)

    def _move_s(self, nbytes: float, streams: int, rate_Bps: float) -> float:
        if nbytes <= 0:
            return 0.0
        return self.latency_s + max(nbytes / streams / rate_Bps, nbytes / self.aggregate_Bps)


STORAGE: dict[str, Storage] = {
    # Intel SSD DC P4500 4 TB (PCIe 3.0 x4 NVMe), Lenovo ThinkSystem product guide's
    # table of Intel's specifications: sequential write 1.8 GB/s, read 3.2 GB/s, sequential
    # write latency 13 us, read 10 us (the larger of the two is charged per file)
    "nvme": Storage("nvme", write_Bps=1.8e9, read_Bps=3.2e9, latency_s=13e-6,
                    source="Intel SSD DC P4500 4 TB datasheet (Lenovo product guide)"),
    # Lustre, Dell Storage for HPC with Intel EE for Lustre white paper (IOR, 24 OSTs):
    # a single client writes 948 MB/s and reads 806 MB/s; all clients together peak at
    # 6.2 GB/s writing (N-to-1). The per-file latency (an MDS round trip to create, one to
    # close) is not in the paper: 1 ms is an assumption.
    "shared-fs": Storage("shared-fs", write_Bps=948e6, read_Bps=806e6, latency_s=1e-3,
                         aggregate_Bps=6.2e9,
                         source="Dell Storage for HPC with Intel EE for Lustre (IOR); "
                                "latency assumed"),
    # Amazon S3, AWS "Performance design patterns for Amazon S3": 85-90 MB/s per
    # connection (one connection per writer here), 100-200 ms to the first byte; S3 scales
    # with connections, so no aggregate limit
    "object-store": Storage("object-store", write_Bps=88e6, read_Bps=88e6, latency_s=0.15,
                            source="AWS, Performance design patterns for Amazon S3"),
}

_FIELDS = {f.name for f in fields(Storage)} - {"name", "source"}
# what `sim calibrate` records beside the fields: each fit's latency, and the samples
MEASUREMENTS = {"write_latency_s", "read_latency_s", "points"}


def get_storage(spec: str | dict[str, Any]) -> Storage:
    """A preset by name, ``calibrated:PATH`` (a JSON profile: ``format``
    "sgd-lab.storage-profile/1", the table's keys, ``source``), or a table {write_Bps,
    read_Bps, latency_s, aggregate_Bps}. Raises ValueError naming an unknown preset or
    key, a bad value or an unreadable profile."""
    if isinstance(spec, str):
        return load_profile(spec, STORAGE, Storage, PROFILE_FORMAT, what="storage profile",
                            preset="storage", measurements=MEASUREMENTS,
                            defaults=lambda path: {"name": "calibrated",
                                                   "source": f"calibrated: {path}"})
    return _from_table(spec)


def save_storage_profile(path: str | Path, storage: Storage, **extra: Any) -> None:
    """Write a profile that ``checkpoint.storage = "calibrated:PATH"`` reads (``extra``: how
    it was measured; its keys are :data:`MEASUREMENTS`)."""
    write_profile(Path(path), storage, PROFILE_FORMAT, **extra)


def _from_table(spec: dict[str, Any]) -> Storage:
    extra = sorted(set(spec) - _FIELDS)
    if extra:
        raise ValueError(f"table: unknown key {extra[0]!r} (expected "
                         f"{', '.join(sorted(_FIELDS))})")
    missing = sorted({"write_Bps", "read_Bps", "latency_s"} - set(spec))
    if missing:
        raise ValueError(f"table: missing key {missing[0]!r}")
    return Storage("custom", **spec, source="config table")
