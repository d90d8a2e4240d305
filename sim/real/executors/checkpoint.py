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

No file a run reads back is a pickle (unpickling a tampered or foreign file runs its code).
A record (a piece beside a checkpoint, ``log-UPDATE-rRANK.npz``, or a killed rank's log,
``rankR.log.npz``) is an uncompressed .npz read with ``allow_pickle=False``::

    record        uint8: UTF-8 JSON {"format": "sgd-lab record 1", "value": <value>}
    a0, a1, ...   the arrays the value holds, each with its dtype, shape and bytes

``<value>`` is plain JSON where JSON is exact and a one-key tagged object where it is not:
``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}`` (keys of any type),
``{"array": "aN"}`` (an ndarray), ``{"scalar": "aN"}`` (a numpy scalar: a 0-d member),
``{"f64": "<16 hex digits>"}`` (a NaN or infinity: its IEEE bits, big-endian) and
``{"object": NAME, "fields": {...}}`` for the dataclasses in :data:`RECORD_CLASSES` only.
Finite floats are JSON numbers (Python writes the shortest text that reads back to the same
bits). :func:`read_record` refuses anything else (not a zip, no ``record`` member, another
format, an unknown tag or class, an object array) with :class:`BadRecord`, naming the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import struct
import zipfile
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.real.executors.assemble import RankLog
from sim.recorder import UpdateRecord
from sim.rundir import write_atomic

MAGIC = b"SGDCKPT 1\n"
FORMAT = "npz"
PATTERN = "ckpt-*.sgd"


class CorruptCheckpoint(ValueError):
    """A checkpoint file that cannot be trusted (truncated, checksum mismatch, bad header)."""


class BadRecord(CorruptCheckpoint):
    """A record file (a log piece or a killed rank's log) that is not in the record layout."""


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


# ---- records: the lab's logs, as npz and JSON -------------------------------------------

RECORD_FORMAT = "sgd-lab record 1"
RECORD_DOC = "record"
RECORD_CLASSES: dict[str, type] = {"RankLog": RankLog, "UpdateRecord": UpdateRecord}
_ZIP_MAGIC = b"PK\x03\x04"
_UNREADABLE = (ValueError, KeyError, TypeError, IndexError, AttributeError, OSError,
               EOFError, RecursionError, NotImplementedError, zipfile.BadZipFile,
               struct.error)


def encode_record(value: Any) -> bytes:
    """``value`` in the record layout (the module's docstring); raises TypeError on a value
    it cannot hold exactly (an object array, a class not in :data:`RECORD_CLASSES`)."""
    arrays: dict[str, np.ndarray] = {}

    def member(array: np.ndarray) -> str:
        if array.dtype.hasobject:
            raise TypeError("cannot record an object array")
        key = f"a{len(arrays)}"
        arrays[key] = array
        return key

    def enc(v: Any) -> Any:
        kind = type(v)
        if v is None or kind in (bool, int, str):
            return v
        if kind is float:
            return v if math.isfinite(v) else {"f64": struct.pack(">d", v).hex()}
        if kind is np.ndarray:
            return {"array": member(v)}
        if isinstance(v, np.generic):
            return {"scalar": member(np.asarray(v))}
        if kind is list:
            return [enc(x) for x in v]
        if kind is tuple:
            return {"tuple": [enc(x) for x in v]}
        if kind is dict:
            return {"dict": [[enc(k), enc(x)] for k, x in v.items()]}
        if is_dataclass(v) and RECORD_CLASSES.get(kind.__name__) is kind:
            return {"object": kind.__name__,
                    "fields": {f.name: enc(getattr(v, f.name)) for f in fields(v)}}
        raise TypeError(f"cannot record a {kind.__name__}")

    doc = json.dumps({"format": RECORD_FORMAT, "value": enc(value)}, allow_nan=False)
    buffer = io.BytesIO()
    np.savez(buffer, **{RECORD_DOC: np.frombuffer(doc.encode(), dtype=np.uint8)},
             **arrays)
    return buffer.getvalue()


def decode_record(data: bytes) -> Any:
    """The value of a record's bytes; raises BadRecord saying what is wrong. Never
    unpickles: numpy reads the members with ``allow_pickle=False``."""
    if not data.startswith(_ZIP_MAGIC):
        raise BadRecord("not a record (not an npz archive)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            if RECORD_DOC not in z.files:
                raise BadRecord(f"not a record (no {RECORD_DOC})")
            doc = z[RECORD_DOC]
            if doc.dtype != np.uint8 or doc.ndim != 1:
                raise BadRecord(f"not a record ({RECORD_DOC} is not UTF-8 bytes)")
            top = json.loads(doc.tobytes().decode(), parse_constant=_no_constant)
            if not isinstance(top, dict) or top.get("format") != RECORD_FORMAT:
                found = top.get("format") if isinstance(top, dict) else None
                raise BadRecord(f"format {found!r}, expected {RECORD_FORMAT!r}")
            return _decode(top["value"], z)
    except BadRecord:
        raise
    except _UNREADABLE as exc:
        raise BadRecord(f"unreadable record ({type(exc).__name__}: {exc})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode(v: Any, z: Any) -> Any:
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) is list:
        return [_decode(x, z) for x in v]
    if type(v) is not dict or len(v) not in (1, 2):
        raise BadRecord(f"unknown value {str(v)[:60]!r}")
    tag = next(iter(v))
    if len(v) == 1 and tag == "tuple" and type(v[tag]) is list:
        return tuple(_decode(x, z) for x in v[tag])
    if len(v) == 1 and tag == "dict" and type(v[tag]) is list:
        return {_decode(k, z): _decode(x, z) for k, x in v[tag]}
    if len(v) == 1 and tag in ("array", "scalar") and v[tag] in z.files \
            and v[tag] != RECORD_DOC:
        array = z[v[tag]]
        return array if tag == "array" else array[()]
    if len(v) == 1 and tag == "f64" and type(v[tag]) is str and len(v[tag]) == 16:
        return struct.unpack(">d", bytes.fromhex(v[tag]))[0]
    if set(v) == {"object", "fields"} and type(v["fields"]) is dict:
        cls = RECORD_CLASSES.get(v["object"])
        if cls is None:
            raise BadRecord(f"unknown class {str(v['object'])[:60]!r}")
        return cls(**{name: _decode(x, z) for name, x in v["fields"].items()})
    raise BadRecord(f"unknown value {str(v)[:60]!r}")


def write_record(path: Path, value: Any) -> Path:
    """Write ``value`` to ``path`` in the record layout, through a rename (not fsynced)."""
    return write_atomic(Path(path), encode_record(value))


def read_record(path: Path) -> Any:
    """The value of the record file ``path``; raises BadRecord naming the file, OSError if
    it cannot be read."""
    path = Path(path)
    try:
        return decode_record(path.read_bytes())
    except BadRecord as exc:
        raise BadRecord(f"{path.name}: {exc}") from None


def record_path(directory: Path, update: int, rank: int) -> Path:
    return Path(directory) / f"log-{update:09d}-r{rank}.npz"


def save_record(directory: Path, update: int, rank: int, piece: Any) -> None:
    """Rank ``rank``'s log since its last checkpoint, beside checkpoint ``update``: written
    through a rename, not fsynced (a killed process's writes survive it; this is the lab's
    record, not training state)."""
    write_record(record_path(directory, update, rank), piece)


def record_updates(directory: Path, rank: int, upto: int) -> list[int]:
    """The checkpoints up to update ``upto`` that rank ``rank`` left a record beside."""
    found = (int(p.name.split("-")[1]) for p in Path(directory).glob(f"log-*-r{rank}.npz"))
    return sorted(u for u in found if u <= upto)


def load_records(directory: Path, rank: int, updates: list[int]) -> list[Any]:
    """Rank ``rank``'s pieces of the checkpoints ``updates``, in that order. Raises
    CorruptCheckpoint naming a piece that is missing or unreadable."""
    pieces = []
    for update in updates:
        path = record_path(directory, update, rank)
        try:
            pieces.append(decode_record(path.read_bytes()))
        except (OSError, BadRecord) as exc:
            raise BadRecord(f"{path.name}: the record of checkpoint {update} is "
                            f"unreadable ({exc})") from None
    return pieces


def skip_batches(worker: Any, count: int) -> None:
    """Advance ``worker``'s mini-batch stream by ``count`` batches, exactly as ``count``
    calls of ``Worker.next_batch`` do, without gathering rows (tests check the two agree)."""
    for _ in range(count):
        if worker._next + worker.batch > len(worker._order):
            worker._order, worker._next = worker.rng.permutation(worker.shard), 0
        worker._next += worker.batch
