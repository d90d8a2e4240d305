"""Checkpoint files of real runs: written atomically, checksummed, the newest valid one read.

A file is a header line, a JSON line and a payload::

    SGDCKPT 1
    {"format": "npz", "length": <payload bytes>, "sha256": "<hex of the payload>"}
    <payload: an uncompressed .npz>

It is written to a temporary file in the same directory, flushed and fsynced, then renamed
over its name (``os.replace``) and the directory fsynced: a reader sees the whole file or
none. :func:`load_latest` takes the newest file of a directory whose length and checksum
hold; a truncated or corrupt newer one is skipped with one line saying so, and the one
before it is used.

A checkpoint (:class:`Saved`) holds what resumes a bsp run exactly: the update count, the
parameters, the momentum buffer (if any) and how many mini-batches each worker has drawn
(the streams are fast-forwarded by that many, :func:`skip_batches`): the training state, as
a training job saves it. The lab's record of the updates before it (each rank's losses and
time spans) is beside it, a piece per rank and checkpoint holding what that rank logged
since its last one (:func:`save_record`, :func:`load_records`): no rank waits for the
others' logs, and the timed checkpoint is the training state's write alone.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim.rundir import write_atomic

MAGIC = b"SGDCKPT 1\n"
FORMAT = "npz"
PATTERN = "ckpt-*.sgd"


class CorruptCheckpoint(ValueError):
    """A checkpoint file that cannot be trusted (truncated, checksum mismatch, bad header)."""


@dataclass
class Saved:
    """The state a checkpoint resumes (arrays in float64)."""

    update: int
    params: np.ndarray
    velocity: np.ndarray | None = None
    batches: list[int] = field(default_factory=list)  # mini-batches each worker has drawn
    meta: dict[str, Any] = field(default_factory=dict)  # JSON: times, counts


def path_for(directory: Path, update: int) -> Path:
    return Path(directory) / f"ckpt-{update:09d}.sgd"


# ---- the container: header, checksum, atomic write ---------------------------------------

def write_file(path: Path, payload: bytes, fmt: str = FORMAT) -> Path:
    """Write ``payload`` to ``path`` atomically with its length and sha256; returns
    ``path``. Raises OSError (the temporary file is removed)."""
    path = Path(path)
    header = json.dumps({"format": fmt, "length": len(payload),
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode() + b"\n"
    return write_atomic(path, MAGIC + header + payload, durable=True)


def read_file(path: Path) -> tuple[str, bytes]:
    """(format, payload) of a checkpoint file; raises CorruptCheckpoint saying what is
    wrong, OSError if it cannot be read."""
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        raise CorruptCheckpoint("not a checkpoint file (bad magic line)")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise CorruptCheckpoint("truncated in its header")
    try:
        header = json.loads(data[len(MAGIC):end])
        fmt, length, digest = header["format"], int(header["length"]), header["sha256"]
    except (ValueError, KeyError, TypeError):
        raise CorruptCheckpoint("unreadable header") from None
    payload = data[end + 1:]
    if len(payload) != length:
        raise CorruptCheckpoint(f"truncated: {len(payload)} of {length} payload bytes")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CorruptCheckpoint("checksum mismatch (sha256 of the payload)")
    return fmt, payload


# ---- checkpoints: state in, state out -----------------------------------------------------

def save(directory: Path, saved: Saved) -> Path:
    """Write ``saved`` as ``directory``'s checkpoint of its update; returns the path."""
    arrays = {"params": saved.params,
              "batches": np.asarray(saved.batches, dtype=np.int64),
              "meta": np.frombuffer(json.dumps({"update": saved.update, **saved.meta})
                                    .encode(), dtype=np.uint8)}
    if saved.velocity is not None:
        arrays["velocity"] = saved.velocity
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    Path(directory).mkdir(parents=True, exist_ok=True)
    return write_file(path_for(directory, saved.update), buffer.getvalue())


def load(path: Path) -> Saved:
    """The checkpoint at ``path``; raises CorruptCheckpoint or OSError."""
    fmt, payload = read_file(path)
    if fmt != FORMAT:
        raise CorruptCheckpoint(f"format {fmt!r}, expected {FORMAT!r}")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes())
            velocity = z["velocity"].copy() if "velocity" in z.files else None
            return Saved(int(meta.pop("update")), z["params"].copy(), velocity,
                         [int(b) for b in z["batches"]], meta)
    except (ValueError, KeyError, OSError) as exc:  # a valid checksum over a bad archive
        raise CorruptCheckpoint(f"unreadable payload ({exc})") from None


def load_latest(directory: Path) -> tuple[Saved | None, list[str]]:
    """The newest valid checkpoint of ``directory`` (None if there is none) and one line
    per newer file that was skipped, saying why."""
    notes: list[str] = []
    for path in sorted(Path(directory).glob(PATTERN), reverse=True):
        try:
            return load(path), notes
        except (CorruptCheckpoint, OSError) as exc:
            notes.append(f"checkpoint {path.name} skipped: {exc}; using an older one")
    return None, notes


def record_path(directory: Path, update: int, rank: int) -> Path:
    return Path(directory) / f"log-{update:09d}-r{rank}.pkl"


def save_record(directory: Path, update: int, rank: int, piece: Any) -> None:
    """Rank ``rank``'s log since its last checkpoint, beside checkpoint ``update``: written
    through a rename, not fsynced (a killed process's writes survive it; this is the lab's
    record, not training state)."""
    write_atomic(record_path(directory, update, rank), pickle.dumps(piece))


def record_updates(directory: Path, rank: int, upto: int) -> list[int]:
    """The checkpoints up to update ``upto`` that rank ``rank`` left a record beside."""
    found = (int(p.name.split("-")[1]) for p in Path(directory).glob(f"log-*-r{rank}.pkl"))
    return sorted(u for u in found if u <= upto)


def load_records(directory: Path, rank: int, updates: list[int]) -> list[Any]:
    """Rank ``rank``'s pieces of the checkpoints ``updates``, in that order. Raises
    CorruptCheckpoint naming a piece that is missing or unreadable."""
    pieces = []
    for update in updates:
        path = record_path(directory, update, rank)
        try:
            pieces.append(pickle.loads(path.read_bytes()))
        except (OSError, pickle.UnpicklingError, EOFError) as exc:
            raise CorruptCheckpoint(f"{path.name}: the record of checkpoint {update} is "
                                    f"unreadable ({exc})") from None
    return pieces


def skip_batches(worker: Any, count: int) -> None:
    """Advance ``worker``'s mini-batch stream by ``count`` batches, exactly as ``count``
    calls of ``Worker.next_batch`` do, without gathering rows (tests check the two agree)."""
    for _ in range(count):
        if worker._next + worker.batch > len(worker._order):
            worker._order, worker._next = worker.rng.permutation(worker.shard), 0
        worker._next += worker.batch
