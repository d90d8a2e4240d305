"""The one atomic writer: whole files or none, and with ``durable`` fsynced before and after
the rename (the real checkpoint writer's mode)."""

from __future__ import annotations

import os

import pytest

from sim.rundir import write_atomic


def test_plain_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    write_atomic(path, "old")
    assert write_atomic(path, b"new") == path
    assert path.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


@pytest.mark.parametrize("durable, expected", [(False, 0), (True, 2)])
def test_durable_write_fsyncs_the_file_and_its_directory(tmp_path, monkeypatch, durable,
                                                         expected):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    write_atomic(tmp_path / "ckpt", b"\x00state", durable=durable)
    assert len(synced) == expected
    assert (tmp_path / "ckpt").read_bytes() == b"\x00state"


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(tmp_path / "x", "data", durable=True)
    assert list(tmp_path.iterdir()) == []
