"""No pickle in files a real run reads back: records and killed ranks' logs are npz + JSON.

A tampered or foreign file where a record or log is read is refused naming the file, and
never executed; what is saved reads back exactly (types, dtypes, float bits)."""

from __future__ import annotations

import io
import json
import math
import pickle  # only to craft the hostile files these tests refuse
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from sim.real.executors import checkpoint as ckpt
from sim.real.executors import fault_injection as fi
from sim.real.executors.assemble import RankLog
from sim.recorder import UpdateRecord

SIM = Path(__file__).resolve().parents[2] / "sim"


def same(a, b) -> bool:
    """Equal, of the same types all the way down, arrays and floats to the bit."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return (a.dtype == b.dtype and a.dtype.str == b.dtype.str and a.shape == b.shape
                and a.flags.f_contiguous == b.flags.f_contiguous
                and a.tobytes("A") == b.tobytes("A"))
    if isinstance(a, np.generic):
        return a.dtype.str == b.dtype.str and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return (list(a) == list(b) and all(same(k, j) for k, j in zip(a, b, strict=True))
                and all(same(a[k], b[k]) for k in a))
    if isinstance(a, (RankLog, UpdateRecord)):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return a == b


ODD_FLOATS = [0.0, -0.0, 0.1 + 0.2, 5e-324, -1.7976931348623157e308, math.inf, -math.inf,
              math.nan, struct.unpack(">d", bytes.fromhex("fff8000000000123"))[0]]


def full_log() -> RankLog:
    rng = np.random.default_rng(7)
    log = RankLog(3)
    log.spans = [(3, "compute", 0.0, 0.125), (3, "wire", 0.125, 1 / 3)]
    log.updates = [(0.5, UpdateRecord(-1, 1, 0, 0, 2.302585092994046, 32)),
                   (0.75, UpdateRecord(2, 7, 5, 2, np.float64(1 / 7), 16, clock_gap=3))]
    log.snapshots = {0: rng.normal(size=5), 10: rng.normal(size=5).astype(np.float32)}
    log.kernel_s = [1e-6, 2.5e-5, 1 / 3]
    log.messages, log.diverged = 12, True
    log.steps = [([("compute", 0.0, 0.1), ("update", 0.1, 0.2)], 0.1, 0.2, np.float64(0.7)),
                 ([], 0.3, 0.4, math.nan)]
    log.extra = {"dead_workers": [1], "found_dead_s": {"1": 0.25}, "none": None,
                 "nested": {"t": (1, (2, [3.5]))}}
    log.cursor, log.loop_s = 0.4, 0.0375
    log.labels, log.track = {0: "F3"}, "rank 3: replica 1, stage 0, shard 1"
    return log


def value_of_every_kind() -> dict:
    return {
        "floats": ODD_FLOATS, "ints": [0, -1, 2**70, True, False], "text": "é\n\"x\"",
        "tuple_vs_list": ((1, 2), [1, 2], ()), "none": None,
        1: "an int key", (2, "b"): "a tuple key", None: "a None key", 2.5: "a float key",
        "arrays": [np.arange(6, dtype=np.int64).reshape(2, 3), np.zeros(0),
                   np.asfortranarray(np.arange(6.0).reshape(2, 3)),
                   np.array([1.5, -0.0, np.nan], dtype=">f8"), np.array([True, False]),
                   np.array([1, 2], dtype=np.uint16), np.float32(3.25) * np.ones((1, 1, 2)),
                   np.array(2.5)],
        "scalars": [np.float64(0.1), np.float32(0.1), np.int32(-4), np.bool_(True)],
        "log": full_log(),
    }


def test_every_kind_of_value_round_trips_exactly():
    original = value_of_every_kind()
    back = ckpt.decode_record(ckpt.encode_record(original))
    assert same(back, original)
    assert same(back["log"], full_log())


def test_the_restart_records_round_trip_exactly(tmp_path):
    rng = np.random.default_rng(3)
    piece = {"steps": [([("compute", 0.0, 0.1), ("checkpoint", 0.2, 0.3)], 0.1, 0.25,
                        2.0 / 3.0)],
             "snapshots": {10: rng.normal(size=4)}, "kernel_s": [1e-5, 3e-5], "messages": 4}
    ckpt.save_record(tmp_path, 10, 1, piece)
    assert [p.name for p in tmp_path.iterdir()] == ["log-000000010-r1.npz"]
    assert ckpt.record_updates(tmp_path, 1, 10) == [10]
    (back,) = ckpt.load_records(tmp_path, 1, [10])
    assert same(back, piece)


def test_a_killed_ranks_log_round_trips_exactly(tmp_path):
    fi.write_log(tmp_path, 3, full_log())
    assert fi.log_path(tmp_path, 3).name == "rank3.log.npz"
    assert same(fi.dead_log(tmp_path, 3), full_log())
    fi.write_log(tmp_path, 0, None)  # a bsp rank leaves no log of its own
    assert fi.dead_log(tmp_path, 0) is None
    assert fi.dead_log(tmp_path, 1) is None  # none left


class Exploit:
    """Unpickling this creates the marker file: the code in a hostile pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def hostile_files(marker: Path) -> dict[str, bytes]:
    payload = pickle.dumps({"steps": [], "trap": Exploit(marker)})
    buffer = io.BytesIO()
    np.savez(buffer, record=np.array([Exploit(marker)], dtype=object))  # an object array
    object_npz = buffer.getvalue()
    return {"pickle": payload, "pickle protocol 0": pickle.dumps(Exploit(marker), 0),
            "object array": object_npz}


def foreign_files() -> dict[str, bytes]:
    def npz(doc: object, **arrays) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, record=np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8),
                 **arrays)
        return buffer.getvalue()

    good = ckpt.encode_record({"steps": [1.5]})
    tag = ckpt.RECORD_FORMAT
    return {
        "empty": b"", "text": b"not a record", "truncated": good[: len(good) // 2],
        "a checkpoint": ckpt.MAGIC + b"{}\n",
        "no record member": npz_of(a0=np.zeros(2)),
        "another format": npz({"format": "sgd-lab record 0", "value": 1}),
        "no format": npz({"value": 1}),
        "an unknown tag": npz({"format": tag, "value": {"call": "os.system"}}),
        "an unknown class": npz({"format": tag, "value": {"object": "Popen", "fields": {}}}),
        "a missing array": npz({"format": tag, "value": {"array": "a7"}}),
        "an unknown field": npz({"format": tag,
                                 "value": {"object": "RankLog", "fields": {"x": 1}}}),
        "NaN in the JSON": npz_raw(b'{"format": "' + tag.encode() + b'", "value": NaN}'),
    }


def npz_of(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def npz_raw(doc: bytes) -> bytes:
    return npz_of(record=np.frombuffer(doc, dtype=np.uint8))


@pytest.mark.parametrize("name", sorted(hostile_files(Path("m"))))
def test_a_hostile_record_is_refused_naming_it_and_never_run(tmp_path, name):
    marker = tmp_path / "pwned"
    data = hostile_files(marker)[name]
    ckpt.save_record(tmp_path, 10, 0, {"steps": []})
    ckpt.record_path(tmp_path, 20, 0).write_bytes(data)
    with pytest.raises(ckpt.CorruptCheckpoint, match=r"log-000000020-r0\.npz: the record of "
                                                     r"checkpoint 20 is unreadable"):
        ckpt.load_records(tmp_path, 0, ckpt.record_updates(tmp_path, 0, 20))
    assert not marker.exists()


@pytest.mark.parametrize("name", sorted(hostile_files(Path("m"))))
def test_a_hostile_log_of_a_killed_rank_is_refused_naming_it_and_never_run(tmp_path, name):
    marker = tmp_path / "pwned"
    (tmp_path / "rank1.log.npz").write_bytes(hostile_files(marker)[name])
    with pytest.raises(ckpt.BadRecord, match=r"^rank1\.log\.npz: "):
        fi.dead_log(tmp_path, 1)
    assert not marker.exists()


def test_a_pickle_inside_a_valid_checkpoint_container_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "pwned"
    path = ckpt.write_file(ckpt.path_for(tmp_path, 30), pickle.dumps(Exploit(marker)))
    with pytest.raises(ckpt.CorruptCheckpoint, match="unreadable payload"):
        ckpt.load(path)
    assert ckpt.load_latest(tmp_path)[0] is None
    assert not marker.exists()


FOREIGN = ["empty", "text", "truncated", "a checkpoint", "no record member", "another format",
           "no format", "an unknown tag", "an unknown class", "a missing array",
           "an unknown field", "NaN in the JSON"]


@pytest.mark.parametrize("name", FOREIGN)
def test_a_foreign_or_damaged_record_is_refused_in_one_line_naming_it(tmp_path, name):
    path = tmp_path / "rank2.log.npz"
    files = foreign_files()
    assert sorted(files) == sorted(FOREIGN)
    path.write_bytes(files[name])
    with pytest.raises(ckpt.BadRecord) as caught:
        fi.dead_log(tmp_path, 2)
    assert str(caught.value).startswith("rank2.log.npz: ")
    assert "\n" not in str(caught.value)


def test_a_log_file_holding_something_else_is_refused(tmp_path):
    ckpt.write_record(fi.log_path(tmp_path, 2), {"not": "a log"})
    with pytest.raises(ckpt.BadRecord, match="rank2.log.npz: holds a dict"):
        fi.dead_log(tmp_path, 2)


def test_what_a_record_cannot_hold_exactly_is_refused_when_written(tmp_path):
    for value in (np.array([object()], dtype=object), object(), {1, 2}, Exploit(tmp_path)):
        with pytest.raises(TypeError):
            ckpt.encode_record({"x": value})


def test_sim_never_unpickles():
    """No module of sim imports pickle or lets numpy unpickle (mpi4py's messages between
    live ranks are not files)."""
    banned = re.compile(r"^\s*(import|from)\s+(c?pickle|dill|cloudpickle|marshal|shelve)\b"
                        r"|pickle\.loads?\(|allow_pickle\s*=\s*True|torch\.load\(",
                        re.MULTILINE)
    found = [f"{path.relative_to(SIM.parent)}: {m.group(0).strip()}"
             for path in sorted(SIM.rglob("*.py"))
             for m in banned.finditer(path.read_text(encoding="utf-8"))]
    assert found == []
