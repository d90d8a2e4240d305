"""This machine's CPU costs besides gradients, measured for a host profile
(:class:`sim.training.host_costs.HostProfile`, ``cluster.host = "calibrated:PATH"``).

Each cost is measured through the real runner's own code path, over several sizes, and
``time = constant + bytes / rate`` is fitted by least squares on relative errors
(:mod:`sim.calibration.fit_host`; the lines printed: :mod:`sim.calibration.host_report`):

* copy: ``Worker.next_batch`` (the numpy row gather real ranks time as ``data``) for several
  batch sizes and two row widths, from data sets of 4 times the last-level cache (STREAM's
  rule, so the rows come from memory as a run's do), fitted as
  ``constant + rows x row_s + bytes / rate`` (a random access per row, then streaming);
* update: ``sim.training.rules.SGD.step`` (``sim.kernels.sgd_update``), the replicas' and the
  server's step; bytes are the parameters';
* reduce: ``sim.kernels.sum_into``, what an allreduce round and a synchronous server do with
  what arrived;
* message: 2 MPI ranks, one sending back to back as a parameter-server worker pushes (pack
  the header, ``sim.kernels.copy`` the payload, ``Isend``, wait), the other receiving as the
  server does (:mod:`sim.calibration.netbench`, mode ``message``): the constant is
  ``message_s``, the per-byte rate is reported beside ``copy_Bps``;
* step: a real ``asp`` run (one worker, one server): the time between a worker's timed spans
  (its loop's Python code, ``loop_s`` in the summary) per update is ``step_s``.

* notice and rendezvous: a napping rank on a host whose ranks outnumber its cores, receiving
  as the server does from workers that compute and push as a run's workers do (netbench mode
  ``notice``): how late it has a small message
  (``notice_base_s + notice_s`` per rank beyond the cores), the eager limit
  (``rendezvous_bytes``, the spinning ping-pong's biggest step) and what a message beyond
  it adds (``rendezvous_s``: LogGPS's synchronisation of long messages, Ino, Fujimoto and
  Hagihara 2001, waiting on both ends' polls).
* waiting ranks' share of a core: ranks pinned to one core, one working, k waiting for it
  as real ranks wait (netbench mode ``share``): work runs ``1 + k x share`` slower
  (``spin_share`` for spinning waiters, ``nap_share`` for napping ones).
* reload: a step's host work warm and right after sleeps of 0.1-20 ms
  (:mod:`sim.calibration.reload_bench`): ``reload_base_s``, ``reload_s`` and
  ``reload_tau_s``.
* message reload: an allreduce between 2 ranks back to back and after 0.1-5 ms of their
  own work (:mod:`sim.calibration.message_reload_bench`): ``message_reload_s`` and
  ``message_reload_tau_s``.
* serving: the real server's rules, store and log per push, step and pull, beyond their
  kernels (:mod:`sim.calibration.serve_bench`): ``serve_apply_s``, ``serve_push_s``,
  ``serve_step_s`` and ``serve_pull_s``.

``slice_s`` (the scheduler's time slice when ranks share a core) is not measured: 3 ms.
The profile keeps every fit's parameters, its errors and the raw samples.

A full calibration takes all of this :data:`REPEATS` times and fits each cost to each timed
point's median over the repeats: on this shared machine the small constants (the server's
code, the notice, the waiters' shares, the reload's base) moved by 2-10 times between
calibrations minutes apart, while real runs reproduce to about 5%
(docs/measurements/hosts.md).
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibration.fit_host import ROW_FITS, fit, fit_gather, fit_notice, fit_share
from sim.calibration.measure_fabric import netbench
from sim.calibration.message_reload_bench import measure as measure_message_reload
from sim.calibration.reload_bench import FEATURES, measure_reload
from sim.calibration.serve_bench import measure_serving
from sim.machine import last_level_cache_bytes, meminfo_bytes

# gathers: row counts per row width (features), from data sets of gather_data_bytes()
GATHER = {256: [16, 64, 256, 1024, 4096], 4096: [4, 16, 64, 256]}
GATHER_QUICK = {256: [16, 256, 2048], 4096: [4, 64]}
GATHER_DATA_BYTES = 64 << 20  # the least data set, where Linux does not say the cache
# McCalpin's STREAM rule: arrays of at least 4 times the caches, so that what is timed comes
# from memory. A 64 MB set sat in the 480 MB cache of one of the lab's machines, where a
# run's 190 MB set did not: gathers ran at 12.7 GB/s there against 9.0 GB/s from 1 GB
CACHE_MULTIPLE = 4
VECTOR_BYTES = [24_000, 96_000, 384_000, 1_536_000, 6_144_000]
VECTOR_BYTES_QUICK = [24_000, 384_000, 1_536_000]
MESSAGE_BYTES = [64, 4096, 65536, 393_216, 1_572_864]
MESSAGE_BYTES_QUICK = [64, 65536, 1_048_576]
MESSAGE_LAUNCHES = 3
# ping-pong sizes that bracket the MPI library's eager limit (MPICH on shared memory: 7-9 KB
# here), and a message beyond it to time the rendezvous with
EAGER_SIZES = list(range(1024, 16385, 1024))
RENDEZVOUS_PROBE_BYTES = 32768
NOTICE_WORK_S = 100e-6  # each sender's CPU between messages: a sub-millisecond gradient
SHARE_UNIT_S = 1e-3  # a unit of work beside waiting ranks: a few of their polls long
SHARE_WAITERS = [1, 2]  # waiting ranks on the working rank's core
REPEATS = 3  # a full calibration's repeats, fitted to each point's median (--quick: 1)

def median_s(call: Callable[[], Any], min_time_s: float) -> float:
    """Median seconds of ``call()``, timed in batches of calls lasting ~0.2 ms at least."""
    for _ in range(3):
        call()
    start = time.perf_counter()
    call()
    one = max(time.perf_counter() - start, 1e-7)
    batch = max(1, int(2e-4 / one))
    samples, spent = [], 0.0
    while spent < min_time_s or len(samples) < 7:
        start = time.perf_counter()
        for _ in range(batch):
            call()
        elapsed = time.perf_counter() - start
        samples.append(elapsed / batch)
        spent += elapsed
    return float(np.median(samples))


def gather_data_bytes() -> int:
    """Bytes of the data set a process times gathers from: :data:`CACHE_MULTIPLE` times the
    last-level cache, at least :data:`GATHER_DATA_BYTES`, and at most an eighth of the
    available memory over the cores (each core's process holds its own)."""
    cache = last_level_cache_bytes() or 0
    room = meminfo_bytes("MemAvailable") // (8 * (os.cpu_count() or 1))
    return max(GATHER_DATA_BYTES, min(CACHE_MULTIPLE * cache, room))


def gather_worker(features: int, data_bytes: int) -> Any:
    """A worker whose ``next_batch`` gathers from ``data_bytes`` of rows of ``features``
    float64s. They are ones: the values do not change a gather's time, and writing them
    places every page, where zeros would map one shared page."""
    from sim.training.compression import Dense
    from sim.training.workload import Worker
    from sim.workloads.datasets import Dataset

    rows = data_bytes // (features * 8)
    X = np.ones((rows, features))
    data = Dataset(X, np.zeros(rows), X[:1], np.zeros(1), features, 2)
    return Worker(0, np.arange(rows), data, None, 1, np.random.default_rng(0), Dense(0, None, 0))


def measure_copy(quick: bool, min_time_s: float) -> tuple[list[float], list[float],
                                                         list[float]]:
    """The gather of ``Worker.next_batch`` for several batch sizes and two row widths, from
    data sets of :func:`gather_data_bytes` (larger than the caches, as real ones are):
    (rows, bytes, seconds)."""
    rows, nbytes, seconds = [], [], []
    data_bytes = gather_data_bytes()
    for features, counts in (GATHER_QUICK if quick else GATHER).items():
        worker = gather_worker(features, data_bytes)  # >= 64 MB: thousands of batches
        for batch in counts:
            worker.batch = batch
            seconds.append(median_s(worker.next_batch, min_time_s))
            rows.append(float(batch))
            nbytes.append(float(worker.batch_bytes))
        del worker  # one data set at a time
    return rows, nbytes, seconds

TABLE_ROWS = [64, 256, 1024, 4096]  # rows of a message or a step
TABLE_ROWS_QUICK = [64, 1024]
TABLE_DIMS = (4, 16)  # row widths (columns)

def measure_table_rows(quick: bool, min_time_s: float) -> dict[str, tuple[list[float], ...]]:
    """An embedding table's rows gathered into a message by their ids, and a sparse step of
    them, through the real runner's code (:class:`~sim.real.executors.table_shards.
    ShardLayout` ``read`` and ``step_mean_rows``), for several row counts and widths, from
    tables of 8 x 50,000 rows (12 and 49 MiB of parameters at the two widths: within the
    480 MB last-level cache of one of the lab's machines, as the validation's tables are,
    where a large table's rows come from memory at ``copy``'s rate): {"table": (rows,
    bytes, seconds), "table_step": (rows, bytes, seconds)}."""
    found: dict[str, tuple[list[float], ...]] = {"table": ([], [], []),
                                                 "table_step": ([], [], [])}
    rng = np.random.default_rng(0)
    for dim in TABLE_DIMS:
        tables = _TableBench(dim, rng)
        for rows in TABLE_ROWS_QUICK if quick else TABLE_ROWS:
            for name, run in tables.runs(rows, rng).items():
                found[name][0].append(float(rows))
                found[name][1].append(float(rows * dim * 8))
                found[name][2].append(median_s(run, min_time_s))
    return found


class _TableBench:
    """A wide-deep model's tables of 50,000 rows of ``dim`` on one shard."""

    def __init__(self, dim: int, rng: np.random.Generator) -> None:
        from sim.real.executors.table_shards import ShardLayout
        from sim.training.rules import SGD
        from sim.training.validator import validate
        from sim.training.workload import shaped_model

        config = validate({"cluster": {"workers": 1}, "workload": {
            "model": "wide-deep", "dataset": "ctr-synthetic", "vocab": 50000,
            "embedding_dim": dim}}, "host calibration")
        model = shaped_model(config)
        self.dim, self.layout = dim, ShardLayout(model, 1, "row-hash", split_dense=True)
        self.params = rng.standard_normal(model.size) * 0.01
        self.sgd, self.total = SGD(self.params, config), np.zeros(model.size)
        self.block = len(self.layout.blocks) - 1  # the embedding tables

    def runs(self, rows: int, rng: np.random.Generator) -> dict[str, Any]:
        """{name: a call timing it} for ``rows`` distinct random rows."""
        from sim.real.executors.table_shards import step_mean_rows

        block = self.layout.blocks[self.block]
        picked = np.sort(rng.choice(block.rows, rows, replace=False)).astype(np.int64)
        ids, out = picked + block.first, np.empty(rows * self.dim)
        values = np.full((rows, self.dim), 1e-3)
        layout, params, sgd, total, b = (self.layout, self.params, self.sgd, self.total,
                                         self.block)
        return {"table": lambda: layout.read(params, ids, out),
                "table_step": lambda: step_mean_rows(layout, sgd, total,
                                                     [[(b, picked, values)]], 1e-3)}

UNIQUE_BATCHES = [16, 64, 256, 1024]  # rows of a batch whose distinct ids are found
UNIQUE_BATCHES_QUICK = [16, 256, 1024]

def measure_unique(quick: bool, min_time_s: float) -> tuple[list[float], list[float]]:
    """A batch's distinct ids (every table's), as a worker finds them before a pull
    (:meth:`WideDeep.touched` on a batch it has not seen), for several batch sizes: (ids,
    seconds)."""
    import dataclasses

    from sim.training.validator import validate
    from sim.training.workload import build_workload

    config = validate({"cluster": {"workers": 1}, "workload": {
        "model": "wide-deep", "dataset": "ctr-synthetic", "vocab": 50000, "samples": 4096,
        "ids_per_field": 2, "batch": 16}}, "host calibration")
    workload = build_workload(config)
    model, rows = workload.model, workload.data.X_train
    ids, seconds = [], []
    for batch in UNIQUE_BATCHES_QUICK if quick else UNIQUE_BATCHES:
        X = rows[np.arange(batch)]
        ids.append(float(X.ids.size + X.wide.size))
        # a copy of the batch each time: the model remembers the rows of batches it saw
        seconds.append(median_s(lambda x=X: model.touched(dataclasses.replace(x)),
                                min_time_s))
    return ids, seconds


def measure_update(quick: bool, min_time_s: float) -> tuple[list[float], list[float]]:
    """``SGD.step`` (the runs' update, with the default momentum) over several sizes."""
    from sim.training.rules import SGD
    from sim.training.validator import validate

    config = validate({}, "host calibration")
    nbytes, seconds = [], []
    for size in VECTOR_BYTES_QUICK if quick else VECTOR_BYTES:
        sgd, grad = SGD(np.zeros(size // 8), config), np.full(size // 8, 1e-3)
        seconds.append(median_s(lambda s=sgd, g=grad: s.step(g, 1e-3), min_time_s))
        nbytes.append(float(size))
    return nbytes, seconds


def measure_reduce(quick: bool, min_time_s: float) -> tuple[list[float], list[float]]:
    """``sim.kernels.sum_into`` over several sizes."""
    from sim import kernels as K

    nbytes, seconds = [], []
    for size in VECTOR_BYTES_QUICK if quick else VECTOR_BYTES:
        acc, part = np.zeros(size // 8), np.full(size // 8, 1e-9)
        seconds.append(median_s(lambda a=acc, b=part: K.sum_into(a, b), min_time_s))
        nbytes.append(float(size))
    return nbytes, seconds


def measure_messages(quick: bool, wait: str) -> tuple[list[float], list[float]]:
    """Back-to-back messages between 2 ranks, sent and received as ps.py does: each size's
    fastest of ``MESSAGE_LAUNCHES`` launches (one disturbed launch made the 1.5 MB message
    5x slower here, and other runs' messages are not)."""
    from sim.real.launch.real_run import wait_mode

    sizes = MESSAGE_BYTES_QUICK if quick else MESSAGE_BYTES
    spec = {"mode": "message", "sizes": sizes, "reps": 20 if quick else 100,
            "wait": wait_mode(wait, 2)}
    launches = [netbench(spec, 2, None)["seconds"] for _ in range(MESSAGE_LAUNCHES)]
    return [float(s) for s in sizes], np.min(launches, axis=0).tolist()


def measure_step(quick: bool, wait: str) -> dict[str, Any]:
    """The per-update loop time of a real asp run (1 worker, 1 server)."""
    from sim.real.launch.real_run import RealOptions, run_real
    from sim.training.validator import validate

    iterations = 200 if quick else 1000
    config = validate({"cluster": {"workers": 1}, "strategy": {"kind": "asp"},
                       "workload": {"model": "logreg", "features": 32, "samples": 1000,
                                    "batch": 16},
                       "run": {"iterations": iterations, "eval_every": iterations}},
                      "host calibration")
    with tempfile.TemporaryDirectory(prefix="sgd-calibrate-step-") as tmp:
        summary = run_real(config, Path(tmp) / "run", RealOptions(wait=wait))[0]
    per_update = {k: summary[f"{k}_s"] / iterations
                  for k in ("compute", "data", "update", "overhead", "wire", "wait")}
    return {"step_s": summary["loop_s"] / iterations, "iterations": iterations,
            "iteration_s": summary["sim_time_s"] / iterations, "per_update_s": per_update}


def measure_poll(quick: bool) -> dict[str, Any]:
    """How often a sleeping waiter polls: one nap of the real runner's waiter
    (``time.sleep(POLL_SLEEP_S)`` with the timer slack real ranks set) and the wake-up after
    it, as its median duration."""
    from sim.real.executors.rank_clock import POLL_SLEEP_S, SPIN_BEFORE_NAP_S, tighten_timer_slack

    tighten_timer_slack()
    naps = []
    for _ in range(300 if quick else 2000):
        start = time.perf_counter()
        time.sleep(POLL_SLEEP_S)
        naps.append(time.perf_counter() - start)
    return {"poll_s": float(np.median(naps)), "poll_spin_s": SPIN_BEFORE_NAP_S,
            "nap_requested_s": POLL_SLEEP_S, "p10_s": float(np.percentile(naps, 10)),
            "p90_s": float(np.percentile(naps, 90))}


def measure_rendezvous(quick: bool) -> dict[str, Any]:
    """How late a napping rank on a shared host notices a message, and what a message
    beyond the eager limit adds, per rank beyond the cores
    (:mod:`sim.calibration.netbench` modes ``pingpong``, spinning, and ``notice`` with
    cores + 1, cores + 2 and 2 cores + 1 ranks waiting by napping), fitted by
    :func:`fit_notice`."""
    reps = 30 if quick else 150
    sizes = [*EAGER_SIZES, RENDEZVOUS_PROBE_BYTES]
    pp = netbench({"mode": "pingpong", "sizes": sizes, "reps": reps, "wait": "spin"},
                  2, None)["seconds"]
    cores = os.cpu_count() or 1
    small, large = EAGER_SIZES[0], RENDEZVOUS_PROBE_BYTES
    excess = sorted({1, 2, cores + 1})
    noticed = [netbench({"mode": "notice", "sizes": [small, large], "reps": reps,
                         "wait": "sleep", "work_s": NOTICE_WORK_S}, cores + e, None)["seconds"]
               for e in excess]
    return fit_notice({"pingpong_sizes": sizes, "pingpong_half_rtt_s": pp, "cores": cores,
                       "excess_ranks": excess, "notice_sizes": [small, large],
                       "noticed_s": noticed, "work_s": NOTICE_WORK_S})


def measure_wait_share(quick: bool) -> dict[str, Any]:
    """What ranks waiting for messages take from work on their core, spinning and napping
    (:mod:`sim.calibration.netbench` mode ``share``: one core, one rank working, k
    waiting): work runs ``1 + k x share`` times slower than alone, ``share`` fitted over
    k = 1, 2 by least squares."""
    from sim import kernels as K
    total, part = np.zeros(2048), np.ones(2048)
    calls = max(1, round(SHARE_UNIT_S / median_s(lambda: K.sum_into(total, part), 0.02)))
    reps = 30 if quick else 200
    spec = {"mode": "share", "calls": calls, "reps": reps}
    alone = netbench({**spec, "wait": "spin"}, 1, None)["seconds"][0]
    out: dict[str, Any] = {"unit_alone_s": alone, "calls": calls, "waiters": SHARE_WAITERS}
    for wait in ("spin", "sleep"):
        out[wait] = fit_share(SHARE_WAITERS, [
            netbench({**spec, "wait": wait}, k + 1, None)["seconds"][0] / alone
            for k in SHARE_WAITERS])
    return out


def load_average() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def measure_vectors(quick: bool, min_time_s: float) -> dict[str, Any]:
    """Gather, update and sum, one after another in this process: (bytes, seconds) each,
    and the fraction of a core the process got."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    points = {"copy": measure_copy(quick, min_time_s),
              "update": measure_update(quick, min_time_s),
              "reduce": measure_reduce(quick, min_time_s),
              **measure_table_rows(quick, min_time_s),
              "unique": measure_unique(quick, min_time_s)}
    wall_s = time.perf_counter() - wall0
    return {"points": points, "cpu_fraction": (time.process_time() - cpu0) / wall_s,
            "wall_s": wall_s}


def _measure_vectors_child(args: tuple[bool, float]) -> dict[str, Any]:
    return measure_vectors(*args)


def measure_vectors_together(quick: bool, min_time_s: float,
                             concurrency: int) -> dict[str, Any]:
    """:func:`measure_vectors` in ``concurrency`` processes at once (all cores busy, as in a
    run with a rank per core: they share caches and memory bandwidth); times averaged over
    the processes, the smallest core fraction kept."""
    if concurrency <= 1:
        return measure_vectors(quick, min_time_s)
    # spawned, not forked: a fork copies this process's threads' locks (a progress bar's
    # monitor, BLAS), and a child holding one never exits (seen as a hung calibration)
    with multiprocessing.get_context("spawn").Pool(concurrency) as pool:
        each = pool.map(_measure_vectors_child, [(quick, min_time_s)] * concurrency)
    points = {name: (*sizes, np.mean([e["points"][name][-1] for e in each], axis=0).tolist())
              for name, (*sizes, _) in each[0]["points"].items()}
    return {"points": points, "cpu_fraction": min(e["cpu_fraction"] for e in each),
            "wall_s": max(e["wall_s"] for e in each)}


def measure_host(quick: bool, wait: str, concurrency: int) -> dict[str, Any]:
    """Every measurement of a host profile, one after another: ``fits`` of copy, update,
    reduce and message; ``step``, ``poll``, ``rendezvous``, ``share`` and ``reload``; the
    vectors' CPU and wall time (``cpu_s``, ``wall_s``)."""
    vectors = measure_vectors_together(quick, 0.02 if quick else 0.1, concurrency)
    fits = {name: (fit_gather if name in ROW_FITS else fit)(*points)
            for name, points in vectors["points"].items()}
    measured: dict[str, Any] = {"fits": fits,
                                "cpu_s": vectors["cpu_fraction"] * vectors["wall_s"],
                                "wall_s": vectors["wall_s"]}
    fits["message"] = fit(*measure_messages(quick, wait))
    measured["step"] = measure_step(quick, wait)
    measured["poll"] = measure_poll(quick)
    measured["rendezvous"] = measure_rendezvous(quick)
    measured["share"] = measure_wait_share(quick)
    measured["reload"] = measure_reload(quick)
    measured["message_reload"] = measure_message_reload(quick)
    measured["serving"] = measure_serving(fits, quick)
    return measured


def measured_through(concurrency: int, reload: dict[str, Any]) -> dict[str, str]:
    """How each cost was measured, in words (kept in the profile)."""
    return {
        "copy": f"sim.training.workload.Worker.next_batch (numpy row gather) from rows of "
                f"{CACHE_MULTIPLE} x the last-level cache (measure_host.gather_data_bytes), "
                f"{concurrency} process(es) at once",
        "update": f"sim.training.rules.SGD.step -> sim.kernels.sgd_update, {concurrency} "
                  "process(es) at once",
        "reduce": f"sim.kernels.sum_into, {concurrency} process(es) at once",
        "table": f"sim.real.executors.table_shards.ShardLayout.read of a wide-deep "
                 f"table's rows by id, {concurrency} process(es) at once",
        "table_step": f"sim.real.executors.table_shards.step_mean_rows (one push's rows: "
                      f"their mean and Adagrad step), {concurrency} process(es) at once",
        "unique": f"sim.workloads.wide_deep.WideDeep.touched on a batch not seen before (its "
                  f"'bytes' are ids), {concurrency} process(es) at once",
        "message": "2 MPI ranks (sim.calibration.netbench, mode message): pack + "
                   "sim.kernels.copy + Isend + wait as sim.real.executors.ps pushes, "
                   f"Irecv + wait as its server receives; each size's fastest of "
                   f"{MESSAGE_LAUNCHES} launches",
        "step": "a real asp run (1 worker, 1 server): summary loop_s per update, the "
                "worker's time between its timed spans",
        "poll": "sim.real.executors.rank_clock: one nap of a sleeping waiter (time.sleep of "
                "POLL_SLEEP_S, timer slack tightened) and its wake-up, median; the spin "
                "before napping is the waiter's SPIN_BEFORE_NAP_S",
        "rendezvous": f"sim.calibration.netbench: a spinning ping-pong over "
                      f"{EAGER_SIZES[0]}-{EAGER_SIZES[-1]} B (the eager limit: where it "
                      f"steps up) and {RENDEZVOUS_PROBE_BYTES} B; then cores + 1, cores + 2 "
                      f"and 2 cores + 1 ranks napping as sim.real.executors.rank_clock.Waiter "
                      f"does, "
                      f"rank 1 serving and every other rank a worker sending it a message "
                      f"after each {NOTICE_WORK_S * 1e6:.0f} us of CPU and waiting for its "
                      f"answer: "
                      f"the mean time to have a {EAGER_SIZES[0]} B message less the "
                      f"ping-pong's is fitted as notice_base_s + notice_s per rank beyond "
                      f"the cores, what a {RENDEZVOUS_PROBE_BYTES} B one adds beyond the "
                      f"ping-pong's growth as rendezvous_s per rank beyond the cores",
        "share": f"sim.calibration.netbench mode share: ranks pinned to one core, one "
                 f"running {SHARE_UNIT_S * 1e3:.0f} ms units of sim.kernels.sum_into while "
                 f"{SHARE_WAITERS} others wait in sim.real.executors.rank_clock.Waiter "
                 f"(spinning, then napping); the mean unit against the unit alone",
        "reload": f"sim.calibration.reload_bench: {reload['steps']} steps of "
                  f"Worker.next_batch + SGD.step + sim.kernels.copy of a message (logistic "
                  f"regression, {FEATURES} features), warm and right after sleeps of "
                  f"{', '.join(f'{g * 1e3:g}' for g in reload['gaps_s'])} ms; the median "
                  f"extra time fitted as reload_base_s + reload_s x (1 - exp(-gap / "
                  f"reload_tau_s)); and right after spinning as long (a loop polling the "
                  f"clock): reload_spin_base_s, the median extra less that curve",
        "message_reload": "sim.calibration.message_reload_bench: 2 MPI ranks, the real "
                          "executor's ring allreduce of 16 and 3,000 float64 back to back "
                          "and after 0.1-5 ms of each rank's own work on a 1 MiB array; "
                          "the mean extra per allreduce fitted as message_reload_s x (1 - "
                          "exp(-work / message_reload_tau_s))",
        "serving": "sim.calibration.serve_bench: sim.real.executors.ps.ServerProtocol "
                   "(the real server's rules, store and log, no MPI) of asp and bsp-ps with "
                   "1, 2 and 4 workers, rounds of a push from every worker and their pulls, "
                   "median; less the kernels the simulator charges (update, reduce, copy "
                   "fits)"}

