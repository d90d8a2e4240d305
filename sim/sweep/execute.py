"""Running a sweep: resumable execution on local processes or a Dask cluster.

Each point is written atomically to ``DIR/runs/NAME/`` (:func:`sim.rundir.write_run`), so a
run directory holding ``summary.json`` is complete and a restarted sweep skips it.
``DIR/sweep.json`` records the points (values, hash of the resolved config) and
``DIR/sweep.toml`` the definition after ``--set``; a DIR made by another definition is
refused. ``DIR/results.csv`` is rebuilt from the run directories at the end.

The same sweep with other seeds (``--seeds N``, ``run.seeds``) is not another definition:
it extends DIR. Its grid without run.seed must be the same, every run both sweeps name must
have the same resolved config, and at least one run must be shared (else the base config
cannot be compared). Finished runs are reused as they are (a run of the same config under
another name, e.g. ``kind=bsp`` of a sweep without seeds for ``kind=bsp_seed=0``, is copied
byte for byte) and only the new seeds run. With fewer seeds than before, the runs of the
seeds left out stay in ``DIR/runs/`` (listed under ``kept`` in sweep.json, and reused if
they are asked for again) but results.csv, the table and the plots report the seeds asked
for only. sweep.json and sweep.toml then describe the sweep as last asked for.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import UserError
from sim.rundir import write_atomic
from sim.sweep.grid import TEMP_RUN, Sweep, load_sweep
from sim.training.validator import validate


@dataclass
class SweepReport:
    out: Path
    sweep: Sweep
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # name -> message
    rows: list[dict[str, Any]] = field(default_factory=list)
    results_csv: Path | None = None
    plots: list[Path] = field(default_factory=list)
    plot_notes: list[str] = field(default_factory=list)  # figures left out, and why


# ---- one point -----------------------------------------------------------------------------

def run_point(task: dict[str, Any]) -> dict[str, Any]:
    """Validate and simulate one point (in a worker process or on a Dask worker).

    With ``task["runs_dir"]`` the run directory is written here; without, the files come
    back to the caller. Never raises: a failure comes back as ``error``.
    """
    name = task["name"]
    try:
        from sim.rundir import write_run
        from sim.simulated.engine import simulate

        result = simulate(validate(task["data"], task["source"]))
        if not result.summary["complete"]:  # Ctrl-C in this process: the sweep stops, and
            raise KeyboardInterrupt  # the point is not kept (a rerun does it whole)
        files = result.files()
        if task.get("runs_dir"):
            write_run(Path(task["runs_dir"]) / name, files)
            files = None
        return {"name": name, "error": None, "files": files}
    except Exception as exc:  # reported per point; the sweep goes on
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f" (at {Path(frame.filename).name}:{frame.lineno})"
        error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}{where}"
        return {"name": name, "error": error, "files": None}


def _failure(name: str, error: str) -> dict[str, Any]:
    return {"name": name, "error": error, "files": None}


def _init_worker(parent_pid: int) -> None:
    """In each pool process: one BLAS thread per process, and exit if the sweep is killed."""
    import signal

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops the pool
    if sys.platform == "linux":  # die with the parent at once (PR_SET_PDEATHSIG = 1)
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    def watch() -> None:  # elsewhere (and as a fallback): notice within 0.2 s
        while os.getppid() == parent_pid:
            time.sleep(0.2)
        os._exit(1)  # orphaned: a half-written run stays a temp dir, never looks complete

    threading.Thread(target=watch, daemon=True).start()


# ---- executors: each yields run_point's outcomes as they finish ----------------------------

def default_jobs() -> int:
    """The CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def _local(tasks: list[dict[str, Any]], jobs: int) -> Iterator[dict[str, Any]]:
    if jobs == 1:  # in this process: no start-up cost, simplest to debug
        for task in tasks:
            yield run_point(task)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(min(jobs, len(tasks)),
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(os.getpid(),))
    finished = False
    try:
        futures = {pool.submit(run_point, task): task["name"] for task in tasks}
        for future in as_completed(futures):
            try:
                yield future.result()
            except Exception as exc:  # the process died (killed, out of memory, crash)
                yield _failure(futures[future], f"worker process died: {exc!r}")
        finished = True
    finally:
        if not finished:  # interrupted: stop the runs now (queued ones would still start)
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()  # a half-written run stays a temp dir
        pool.shutdown(wait=True, cancel_futures=True)


def connect(address: str) -> Any:
    """A ``distributed.Client`` for ``--scheduler ADDRESS``. Raises UserError."""
    try:
        from distributed import Client
        from distributed.comm import get_address_host_port, parse_address
        from distributed.comm.registry import get_backend
    except ImportError:
        raise UserError("--scheduler: needs the 'distributed' package "
                        "(pip install distributed)") from None
    try:  # checked first: a Client that fails to parse the address hangs at exit
        scheme = parse_address(address)[0]
        get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            get_address_host_port(address)
    except ValueError as exc:
        raise UserError(f"--scheduler {address}: {exc}; expected e.g. tcp://host:8786") from None
    try:
        return Client(address, timeout="20s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserError(f"--scheduler {address}: cannot connect: {exc}") from None


def _dask(tasks: list[dict[str, Any]], client: Any) -> Iterator[dict[str, Any]]:
    """Points on a Dask cluster; files come back and are written here (no shared disk)."""
    from distributed import as_completed

    futures = {client.submit(run_point, {**task, "runs_dir": None}, pure=False,
                             key=f"sweep-{task['name']}-{uuid.uuid4().hex[:8]}"): task["name"]
               for task in tasks}
    try:
        for future in as_completed(futures, loop=client.loop):
            try:
                yield future.result()
            except Exception as exc:  # the worker died (KilledWorker, lost connection)
                yield _failure(futures[future], f"on the Dask cluster: {exc!r}")
    finally:
        client.cancel(list(futures))


# ---- the sweep directory -------------------------------------------------------------------

def _saved(out: Path) -> dict[str, Any] | None:
    """DIR/sweep.json, or None where DIR holds none. Raises UserError when unreadable."""
    path = out / "sweep.json"
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
        for p in [*saved["points"], *saved.get("kept", [])]:
            if not isinstance(p["name"], str) or not isinstance(p["values"], dict) \
                    or not isinstance(p["config_sha256"], str):
                raise TypeError(f"a point of {p!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); choose another --out") from None
    return saved


def _configurations(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points' values without run.seed, each once, in point order."""
    out: list[dict[str, Any]] = []
    for p in points:
        config = {k: v for k, v in p["values"].items() if k != "run.seed"}
        if config not in out:
            out.append(config)
    return out


def _check_out(out: Path, manifest: dict[str, Any]) -> None:
    """``out`` must be absent, empty, or made by this same sweep (with any seeds)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory; choose another --out")
    saved = _saved(out)
    if saved is None:
        if any(p.name != ".lock" for p in out.iterdir()):
            raise UserError(f"{out}: exists, is not empty and holds no sweep.json; "
                            f"choose another --out")
        return
    new = json.loads(json.dumps(manifest["points"], default=str))
    old = [(p["name"], p["values"]) for p in saved["points"]]
    pairs = [(p["name"], p["values"]) for p in new]
    if old != pairs and _configurations(saved["points"]) != _configurations(new):
        i = next((i for i, (a, b) in enumerate(zip(old, pairs, strict=False)) if a != b),
                 min(len(old), len(pairs)))
        theirs, ours = (x[i][0] if i < len(x) else "none" for x in (old, pairs))
        raise UserError(f"{out}: holds a different sweep (its point {i + 1} is {theirs}, here "
                        f"{ours}); choose another --out or remove it")
    known = {p["name"]: p for p in [*saved.get("kept", []), *saved["points"]]}
    changed = [p["name"] for p in new if p["name"] in known and
               (known[p["name"]]["config_sha256"] != p["config_sha256"]
                or known[p["name"]]["values"] != p["values"])]
    if changed:
        raise UserError(f"{out}: same grid but run {changed[0]} has a different config (the "
                        f"base config, a --set override, SGD_LAB_QUICK or sim changed); choose "
                        f"another --out")
    hashes = {p["config_sha256"] for p in known.values()}
    if not any(p["config_sha256"] in hashes for p in new):
        raise UserError(f"{out}: same grid but none of its runs has the config of a run here "
                        f"(the base config, a --set override, the seeds or sim changed); "
                        f"choose another --out")


def _merged(saved: dict[str, Any] | None, manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest``, with the runs of ``saved`` it leaves out listed under ``kept``."""
    if saved is None:
        return manifest
    names = {p["name"] for p in manifest["points"]}
    kept = {p["name"]: p for p in [*saved.get("kept", []), *saved["points"]]
            if p["name"] not in names}
    return {**manifest, "kept": list(kept.values())} if kept else manifest


def _reuse(out: Path, sweep: Sweep, saved: dict[str, Any] | None) -> list[str]:
    """Copy finished runs of ``saved`` to the names of this sweep's unfinished points with
    the same resolved config (byte for byte, through a temp dir and a rename); their names."""
    if saved is None:
        return []
    by_hash: dict[str, str] = {}
    for p in [*saved.get("kept", []), *saved["points"]]:
        if is_complete(out, p["name"]):
            by_hash.setdefault(p["config_sha256"], p["name"])
    copied = []
    for point in sweep.points:
        source = by_hash.get(point.config_sha256)
        if source is None or source == point.name or is_complete(out, point.name):
            continue
        target = out / "runs" / point.name
        tmp = target.with_name(f".{point.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(out / "runs" / source, tmp)
        if target.exists():
            shutil.rmtree(target)  # not complete: a leftover, not a finished run
        os.replace(tmp, target)
        copied.append(point.name)
    return copied


def prepare(out: Path, sweep: Sweep) -> Any:
    """Create (or check) DIR, save the definition, clear half-written runs, copy reusable
    runs to new names; returns the open lock file, which keeps other sweeps out of DIR
    until it is closed."""
    import fcntl

    manifest = sweep.manifest()
    _check_out(out, manifest)
    out.mkdir(parents=True, exist_ok=True)
    lock = open(out / ".lock", "w")  # closed by the caller
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise UserError(f"{out}: another sweep is running into it") from None
    try:
        _check_out(out, manifest)  # again, now that no other sweep can change it
        saved = _saved(out)
        (out / "runs").mkdir(exist_ok=True)
        for entry in (out / "runs").iterdir():
            if TEMP_RUN.match(entry.name):  # left by a killed sweep
                shutil.rmtree(entry, ignore_errors=True)
        _reuse(out, sweep, saved)
        merged = json.loads(json.dumps(_merged(saved, manifest), default=str))
        if saved is None or any(saved.get(k) != merged.get(k) for k in ("points", "kept")):
            # new, or the same sweep with other seeds: the definition as asked now
            import tomli_w

            write_atomic(out / "sweep.toml", tomli_w.dumps(sweep.definition))
            write_atomic(out / "sweep.json", json.dumps(merged, indent=1) + "\n")
    except BaseException:
        lock.close()
        raise
    return lock


def is_complete(out: Path, name: str) -> bool:
    return (out / "runs" / name / "summary.json").is_file()


def _csv_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | list | dict):  # as in JSON: true, [1,2]
        return "" if value is None else json.dumps(value, separators=(",", ":"))
    return repr(value) if isinstance(value, float) else value


def write_results(out: Path, sweep: Sweep,
                  failed: dict[str, str] | None = None) -> tuple[Path, list[dict[str, Any]]]:
    """DIR/results.csv in point order: the run's name, the swept keys, run.seed, ``error``
    (blank, or why the point failed: ``failed`` maps names to messages) and the summary's
    scalars of the complete run directories. Returns its path and the finished rows."""
    failed = failed or {}
    columns = ["run", *(k for k in sweep.keys if k != "run.seed"), "run.seed", "error"]
    rows, lines = [], []
    for point in sweep.points:
        keys = {"run": point.name, **point.values, "run.seed": point.seed}
        if is_complete(out, point.name):
            summary = json.loads((out / "runs" / point.name / "summary.json").read_text())
            scalars = {k: v for k, v in summary.items() if not isinstance(v, list | dict)}
            columns += [k for k in scalars if k not in columns]
            rows.append({**keys, **scalars})
            lines.append(rows[-1])
        elif point.name in failed:
            lines.append({**keys, "error": failed[point.name]})
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([_csv_value(line.get(c)) for c in columns] for line in lines)
    write_atomic(out / "results.csv", text.getvalue())
    return out / "results.csv", rows


# ---- the whole sweep -----------------------------------------------------------------------

def run_sweep(path: str | Path, out: str | Path, overrides: list[str] | None = None,
              jobs: int | None = None, scheduler: str | None = None, plots: bool = True,
              progress: bool = True, seeds: int | None = None,
              quick: bool = False) -> SweepReport:
    """Run (or finish) the sweep of config ``path`` into ``out``; ``seeds``: N seeds per
    point from run.seed (replacing run.seeds); ``quick``: in the reduced form of
    :mod:`sim.quick`. Raises UserError.

    On a finished sweep with more seeds, only the new seeds run and the finished runs are
    reused; with fewer, only those seeds are reported (the module docstring says how).
    Failed points are in ``report.failed``; the finished ones are kept and in results.csv.
    """
    out = Path(out)
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs: expected at least 1, got {jobs}")
    sweep = load_sweep(path, overrides, seeds, quick)
    _check_out(out, sweep.manifest())  # before connecting or creating anything
    report = SweepReport(out, sweep)
    todo = any(not is_complete(out, p.name) for p in sweep.points)
    client = connect(scheduler) if scheduler and todo else None
    try:
        lock = prepare(out, sweep)
        try:
            pending = [p for p in sweep.points if not is_complete(out, p.name)]
            report.skipped = [p.name for p in sweep.points if is_complete(out, p.name)]
            tasks = [{"name": p.name, "data": p.data, "runs_dir": str(out / "runs"),
                      "source": f"{sweep.source}: sweep point {p.name}"} for p in pending]
            if tasks:
                outcomes = (_dask(tasks, client) if client
                            else _local(tasks, jobs or default_jobs()))
                _consume(out, outcomes, report, len(sweep.points), progress)
            report.results_csv, report.rows = write_results(out, sweep, report.failed)
        finally:
            lock.close()
    finally:
        if client is not None:
            client.close()
    if plots and report.rows:
        from sim.plots import plot_sweep

        report.plots = [Path(p) for p in plot_sweep(out, report.plot_notes)]
    return report


def _consume(out: Path, outcomes: Iterator[dict[str, Any]], report: SweepReport, total: int,
             progress: bool) -> None:
    from tqdm import tqdm

    bar = tqdm(total=total, initial=len(report.skipped), unit="run", desc="sweep",
               file=sys.stderr, disable=not progress, dynamic_ncols=True)
    with bar:
        for outcome in outcomes:
            name = outcome["name"]
            if outcome["error"] is None and outcome["files"] is not None:
                from sim.rundir import write_run

                try:  # a Dask result: written here
                    write_run(out / "runs" / name, outcome["files"])
                except (OSError, UserError) as exc:
                    outcome["error"] = f"writing {out / 'runs' / name}: {exc}"
            if outcome["error"] is None:
                report.ran.append(name)
            else:
                report.failed[name] = outcome["error"]
                bar.write(f"failed: {name}: {outcome['error']}", file=sys.stderr)
            bar.update()
