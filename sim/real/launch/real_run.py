"""A real run from the parent's side: spec, network, launch, and the run directory.

:func:`run_real` checks the command's options and asks the validator whether real runs
support the config (:func:`sim.training.validator.validate_real`; the ranks never check it
again), sets up the network (shared memory, or an emulated one), launches the ranks once
per repeat with a :class:`~sim.real.executors.rank_spec.RankSpec` and writes what rank 0
returned with the result
contract of :mod:`sim.recorder`: ``OUT/`` is a run directory, or with ``repeat > 1`` holds
``r0/``, ``r1/``, ... (each a run directory), the resolved ``config.toml`` and
``repeats.json`` (iteration time of each repeat). Everything lands atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.config import Config, dump_config
from sim.errors import UserError
from sim.progress import handled
from sim.real.executors.rank_clock import WAIT_MODES
from sim.real.executors.rank_sched import SCHEDS, fifo_refused
from sim.real.executors.rank_spec import RankSpec
from sim.real.launch.emulate import Emulation, EmulationError, parse_rate
from sim.real.launch.launcher import Job, launch
from sim.real.launch.other_load import OtherLoad
from sim.real.launch.relaunch import read_records, run_elastic, run_restarting
from sim.results import iteration_s
from sim.rundir import atomic_dir, check_out_dir, write_run
from sim.training.validator import RealRun, validate_real

IMPLS = ("schedule", "mpi")


@dataclass
class RealOptions:
    net: str = "shm"  # shm, or emulate:RATE
    impl: str = "schedule"  # allreduce: the simulator's schedule, or MPI's
    wait: str = "auto"  # spin, sleep, or auto (sleep when ranks outnumber cores)
    timeout_s: float = 1800.0
    hang_s: float = 60.0
    repeat: int = 1
    sched: str = "default"  # how ranks share cores: Linux's default, or fifo (rank_sched)


def parse_net(text: str) -> float | None:
    """``shm`` -> None; ``emulate:RATE`` -> the rate in bits/s. Raises UserError."""
    if text == "shm":
        return None
    kind, _, rate = text.partition(":")
    if kind != "emulate" or not rate:
        raise UserError(f"--net {text!r}: expected shm or emulate:RATE (e.g. emulate:1gbit)")
    try:
        return parse_rate(rate)
    except ValueError as exc:
        raise UserError(f"--net {text!r}: {exc}") from None


def check_options(options: RealOptions) -> None:
    parse_net(options.net)
    if options.impl not in IMPLS:
        raise UserError(f"--allreduce {options.impl!r}: expected one of {', '.join(IMPLS)}")
    if options.wait not in ("auto", *WAIT_MODES):
        raise UserError(f"--wait {options.wait!r}: expected auto, spin or sleep")
    if options.repeat < 1 or options.timeout_s <= 0 or options.hang_s <= 0:
        raise UserError("--repeat, --timeout and --hang-timeout must be positive")
    if options.sched not in SCHEDS:
        raise UserError(f"--sched {options.sched!r}: expected one of {', '.join(SCHEDS)}")
    if options.sched != "default" and options.wait == "spin":
        raise UserError(f"--wait spin: ranks under --sched {options.sched} wait by polling "
                        "and napping (a spinning real-time rank keeps its core)")


def sched_unsupported(real: RealRun) -> str | None:
    """Why ``real``'s ranks cannot keep to a discipline other than the default (None: they
    can): restarts and gRPC wait in blocking calls (MPI's barriers, gRPC's threads)."""
    if real.recovery is not None:
        return "not with [faults] / [checkpoint] (their restarts wait in MPI's barriers)"
    if real.transport != "mpi":
        return "not with cluster.transport = grpc (its threads wait on their own)"
    return None


def check_sched(options: RealOptions, real: RealRun) -> RealOptions:
    """``options`` with the discipline the ranks can have: ``fifo`` falls back to the
    default scheduler, with one warning line on stderr, where this machine refuses
    SCHED_FIFO. Raises UserError where the run's ranks cannot keep to it (their restarts'
    and gRPC's waits block in MPI or in gRPC's own threads)."""
    if options.sched == "default":
        return options
    unsupported = sched_unsupported(real)
    if unsupported:
        raise UserError(f"--sched {options.sched}: {unsupported}")
    refused = fifo_refused()
    if refused is None:
        return options
    print(f"warning: --sched {options.sched}: {refused}; running under the default "
          "scheduler", file=sys.stderr)
    return replace(options, sched="default")


def wait_mode(choice: str, ranks: int, kernels: bool = True, sched: str = "default") -> str:
    """``auto``: spin in MPI, unless ranks outnumber cores while gradients are real kernels
    (``kernels``): then a waiting rank polls and naps, leaving the CPU to computing ones.
    Under a ``sched`` other than the default every wait polls and naps.

    With ``compute.time_s`` a gradient is mostly a sleep, so spinning waiters take no CPU
    from it, and spinning gives faster steps than polling (docs/measurements/hosts.md)."""
    if choice != "auto":
        return choice
    if sched != "default":
        return "sleep"
    return "spin" if ranks <= (os.cpu_count() or 1) or not kernels else "sleep"


@contextlib.contextmanager
def network(net: str, ranks: int) -> Iterator[Emulation | None]:
    """The emulated network for ``ranks`` ranks (None for shared memory), removed after."""
    rate = parse_net(net)
    if rate is None:
        yield None
        return
    try:
        emulation = Emulation(ranks, rate).__enter__()
    except EmulationError as exc:
        raise UserError(f"--net {net}: {exc}") from None
    try:
        yield emulation
    finally:
        emulation.close()


def terminated_cleanly() -> contextlib.AbstractContextManager[None]:
    """Turn SIGTERM into SystemExit, so that cleanup (finally blocks) runs."""
    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return handled((signal.SIGTERM,), handler)


def run_once(config: Config, real: RealRun, options: RealOptions,
             emulation: Emulation | None, repeat: int = 0, argv: list[str] | None = None,
             faults: dict[str, Any] | None = None,
             records: dict[str, Any] | None = None) -> dict[str, str]:
    """Launch the ranks once; the run's files (name -> text) as rank 0 wrote them.

    ``real``: what :func:`~sim.training.validator.validate_real` said of ``config``;
    ``faults``: the spec's failure and checkpoint part (:mod:`sim.real.launch.relaunch`);
    ``records`` is filled with what the job left for the runner, also when it failed."""
    ranks = real.ranks
    with tempfile.TemporaryDirectory(prefix="sgd-real-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        spec = RankSpec(config, work, work / "result.json", options.net, real.transport,
                        options.impl, wait_mode(options.wait, ranks,
                                                config.compute.time_s is None, options.sched),
                        repeat, faults, options.sched)
        (work / "spec.json").write_text(spec.to_json())
        job = Job(argv or [sys.executable, "-m", "sim.real.executors.rank", "--spec",
                           str(work / "spec.json")], ranks, work,
                  env=emulation.env if emulation else {},
                  prefix=emulation.prefix if emulation else None,
                  timeout_s=options.timeout_s, hang_s=options.hang_s,
                  manager="gforker" if (faults or {}).get("elastic") else "hydra")
        try:
            launch(job)
        finally:
            if records is not None:
                records.update(read_records(work))
        return json.loads((work / "result.json").read_text())


def write_repeats(out: Path, config: Config, runs: list[dict[str, str]],
                  checkpoints: Path | None = None) -> None:
    """OUT/r0, OUT/r1, ... plus config.toml and repeats.json, renamed into place at once
    (with ``checkpoints``: each repeat's checkpoints, ``checkpoints/r<i>``, in its own)."""
    with atomic_dir(out) as tmp:
        summaries = []
        for i, files in enumerate(runs):
            write_run(tmp / f"r{i}", files)
            move_checkpoints(checkpoints and checkpoints / f"r{i}", tmp / f"r{i}")
            summaries.append(json.loads(files["summary.json"]))
        (tmp / "config.toml").write_text(dump_config(config))
        times = [iteration_s(s) for s in summaries]
        (tmp / "repeats.json").write_text(json.dumps(
            {"repeats": len(runs), "iteration_s": times,
             "time_to_target_s": [s.get("time_to_target_s") for s in summaries]},
            indent=2) + "\n")


def write_single(out: Path, files: dict[str, str], checkpoints: Path | None) -> None:
    """The run directory, with ``OUT/checkpoints`` if the run wrote any."""
    with atomic_dir(out) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text)
        move_checkpoints(checkpoints and checkpoints / "r0", tmp)


def move_checkpoints(directory: Path | None, run: Path) -> None:
    if directory is not None and directory.is_dir():
        os.replace(directory, run / "checkpoints")


def checkpoint_root(out: Path) -> Path:
    """Where a run's checkpoints go while it runs: beside ``out`` (a reader never takes
    ``out`` for a finished run), moved into it at the end."""
    return out.parent / f".{out.name}.checkpoints-{os.getpid()}"


def run_faulty(config: Config, real: RealRun, options: RealOptions,
               emulation: Emulation | None, repeat: int, directory: Path) -> dict[str, str]:
    """One repeat under ``[faults]`` / ``[checkpoint]``: restarted or elastic, as
    ``real.recovery`` says."""
    def launch(faults: dict[str, Any], records: dict[str, Any]) -> dict[str, str]:
        return run_once(config, real, options, emulation, repeat, faults=faults,
                        records=records)

    if real.recovery == "restart":
        return run_restarting(config, directory, launch)
    return run_elastic(config, launch)


def run_real(config: Config, out: Path, options: RealOptions,
             progress: Any = None) -> list[dict[str, Any]]:
    """Run ``config`` for real ``options.repeat`` times into ``out``; the summaries.

    Raises UserError (bad input, network not available) or RunFailed (a rank failed).
    """
    check_options(options)
    real = validate_real(config, options.net)
    options = check_sched(options, real)
    check_out_dir(out)
    runs = []
    root = checkpoint_root(out) if real.recovery == "restart" else None
    try:
        with terminated_cleanly(), network(options.net, real.ranks) as emulation:
            for repeat in range(options.repeat):
                with OtherLoad() as load:
                    files = run_once(config, real, options, emulation, repeat) \
                        if real.recovery is None else run_faulty(
                            config, real, options, emulation, repeat,
                            root / f"r{repeat}" if root else Path())
                summary = json.loads(files["summary.json"])
                summary["other_load"] = load.fraction  # CPU share other processes took
                files["summary.json"] = json.dumps(summary, indent=2) + "\n"
                runs.append(files)
                if progress:
                    progress(repeat, json.loads(runs[-1]["summary.json"]))
        if options.repeat == 1:
            write_single(out, runs[0], root)
        else:
            write_repeats(out, config, runs, root)
    finally:
        if root is not None:  # moved into the run directory, or the run failed
            shutil.rmtree(root, ignore_errors=True)
    return [json.loads(files["summary.json"]) for files in runs]
