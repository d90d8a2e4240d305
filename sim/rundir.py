"""The run directory on disk: what makes one, and writing it so that nothing is half-written.

A run directory holds ``config.toml`` (the resolved config), ``summary.json``,
``metrics.csv`` (tidy rows: one per update and one per evaluation, each with ``time_s``)
and ``trace.json`` (Chrome trace event format, built by :mod:`sim.trace`). :func:`write_run`
writes them into a temporary directory beside the target and renames it into place, so a
killed run leaves nothing that looks complete. :func:`write_atomic` does the same for one
file; with ``durable=True`` it also fsyncs the file and its directory (checkpoints).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sim.errors import UserError

RUN_FILES = ("config.toml", "summary.json")  # what makes a directory a run directory


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run's files (config.toml and summary.json)."""
    return all((path / name).is_file() for name in RUN_FILES)


def check_out_dir(out: Path, replace: bool = False) -> None:
    """Refuse to run into a directory that already holds files (results are never replaced)
    unless ``replace`` and it holds a run (never an arbitrary directory)."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not replace:
        raise UserError(f"{out}: already exists and is not empty; choose another --out "
                        "(or --force to replace the run there)")
    if not out.is_dir() or not is_run_dir(out):
        raise UserError(f"{out}: --force replaces only a run directory (config.toml and "
                        "summary.json); this is not one")


@contextmanager
def atomic_dir(out: Path, replace: bool = False) -> Iterator[Path]:
    """A temporary directory beside ``out``, renamed to ``out`` when the block ends well.

    Raises UserError when ``out`` already holds files (with ``replace``: unless it holds a
    run, which is removed only once the new one is in place); on an error nothing is left.
    """
    check_out_dir(out, replace)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if out.exists() and any(out.iterdir()):
            os.replace(out, old)  # a run (checked above): kept until the new one is in
        elif out.exists():
            out.rmdir()  # empty: rename needs the name free
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def write_atomic(path: Path, data: str | bytes, durable: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file beside it and a rename, so a
    reader never sees a half-written file; returns ``path``. With ``durable`` the file is
    fsynced before the rename and its directory after it, so the new content also survives
    a crash of the machine (checkpoints). Raises OSError (nothing is left behind)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
            if durable:
                f.flush()
                os.fsync(f.fileno())  # the data is on disk before the name points at it
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        _fsync_dir(path.parent)  # and the rename itself
    return path


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory: the rename still holds
        pass
    finally:
        os.close(fd)


def write_run(out: Path, files: dict[str, str], replace: bool = False) -> None:
    """Write ``files`` (name -> text) as the run directory ``out``, atomically.

    Raises UserError when ``out`` already holds files (with ``replace``: other than a run).
    """
    with atomic_dir(out, replace) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text)


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "summary.json").read_text())
