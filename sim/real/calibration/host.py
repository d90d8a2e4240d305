"""This machine's CPU costs besides gradients, as a host profile
(:class:`sim.training.host_costs.HostProfile`, ``cluster.host = "calibrated:PATH"``).

Each cost is measured through the real runner's own code path, over several sizes, and
``time = constant + bytes / rate`` is fitted by least squares on relative errors:

* copy: ``Worker.next_batch`` (the numpy row gather real ranks time as ``data``) for several
  batch sizes and two row widths, from data sets larger than the caches, fitted as
  ``constant + rows x row_s + bytes / rate`` (a random access per row, then streaming);
* update: ``sim.training.rules.SGD.step`` (``sim.kernels.sgd_update``), the replicas' and the
  server's step; bytes are the parameters';
* reduce: ``sim.kernels.sum_into``, what an allreduce round and a synchronous server do with
  what arrived;
* message: 2 MPI ranks, one sending back to back as a parameter-server worker pushes (pack
  the header, ``sim.kernels.copy`` the payload, ``Isend``, wait), the other receiving as the
  server does (:mod:`sim.real.calibration.netbench`, mode ``message``): the constant is
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
  (:mod:`sim.real.calibration.reload_bench`): ``reload_base_s``, ``reload_s`` and
  ``reload_tau_s``.
* serving: the real server's rules, store and log per push, step and pull, beyond their
  kernels (:mod:`sim.real.calibration.serve_bench`): ``serve_apply_s``, ``serve_push_s``,
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

import dataclasses
import multiprocessing
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sim.real.calibration.reload_bench import FEATURES, fit_both, measure_reload
from sim.real.calibration.serve_bench import fit_serving, measure_serving
from sim.training.host_costs import HostProfile, save_host_profile

SLICE_S = 3e-3  # not measured (see sim.training.host_costs's epyc-core preset)
MAX_ERROR = 0.10  # a fit whose error is larger gets a warning
BUSY_LOAD = 0.5  # 1-minute load average above which other processes use the CPU
# gathers: row counts per row width (features), from data sets of GATHER_DATA_BYTES at least
GATHER = {256: [16, 64, 256, 1024, 4096], 4096: [4, 16, 64, 256]}
GATHER_QUICK = {256: [16, 256, 2048], 4096: [4, 64]}
GATHER_DATA_BYTES = 64 << 20
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


def fit(nbytes: list[float], seconds: list[float]) -> dict[str, Any]:
    """``time = constant_s + bytes / rate_Bps`` by least squares on relative errors."""
    n, t = np.array(nbytes, float), np.array(seconds, float)
    A = np.column_stack([np.ones_like(n), n]) / t[:, None]
    (constant, inverse), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if inverse <= 0:  # no growth with size: a rate through the largest point
        constant, inverse = 0.0, float(t[-1] / n[-1])
    if constant < 0:  # a rate through the origin, fitted on relative errors
        constant, inverse = 0.0, float(np.sum(n / t) / np.sum((n / t) ** 2))
    errors = (constant + n * inverse) / t - 1
    return {"constant_s": float(constant), "rate_Bps": 1.0 / float(inverse),
            "max_error": float(np.abs(errors).max()),
            "rms_error": float(np.sqrt(np.mean(errors ** 2))),
            "samples": [{"bytes": int(b), "seconds": float(s), "error": float(e)}
                        for b, s, e in zip(n, t, errors, strict=True)]}


def measure_copy(quick: bool, min_time_s: float) -> tuple[list[float], list[float],
                                                         list[float]]:
    """The gather of ``Worker.next_batch`` for several batch sizes and two row widths, from
    data sets larger than the caches (as real ones are): (rows, bytes, seconds)."""
    from sim.training.validator import validate
    from sim.training.workload import build_workload

    rows, nbytes, seconds = [], [], []
    for features, counts in (GATHER_QUICK if quick else GATHER).items():
        samples = max(GATHER_DATA_BYTES // (features * 8), 2 * max(counts) + 1024)
        config = validate({"cluster": {"workers": 1}, "workload": {
            "model": "logreg", "features": features, "samples": samples,
            "batch": max(counts)}}, "host calibration")
        worker = build_workload(config).workers[0]
        for batch in counts:
            worker.batch = batch
            seconds.append(median_s(worker.next_batch, min_time_s))
            rows.append(float(batch))
            nbytes.append(float(worker.batch_bytes))
    return rows, nbytes, seconds


def fit_gather(rows: list[float], nbytes: list[float],
               seconds: list[float]) -> dict[str, Any]:
    """``time = constant_s + rows x row_s + bytes / rate_Bps`` by least squares on relative
    errors; a term that comes out negative is dropped and the rest fitted again."""
    r, n, t = (np.array(x, float) for x in (rows, nbytes, seconds))
    columns = {"constant_s": np.ones_like(t), "row_s": r, "inverse": n}
    kept = list(columns)
    while True:
        A = np.column_stack([columns[k] for k in kept]) / t[:, None]
        values = dict(zip(kept, np.linalg.lstsq(A, np.ones_like(t), rcond=None)[0],
                          strict=True))
        negative = [k for k in kept if values[k] < 0]
        if not negative or len(kept) == 1:
            break
        kept.remove(min(negative, key=lambda k: values[k]))
    coef = {k: max(float(values.get(k, 0.0)), 0.0) for k in columns}
    predicted = coef["constant_s"] + r * coef["row_s"] + n * coef["inverse"]
    errors = predicted / t - 1
    return {"constant_s": coef["constant_s"], "row_s": coef["row_s"],
            "rate_Bps": 1.0 / coef["inverse"] if coef["inverse"] > 0 else float("inf"),
            "max_error": float(np.abs(errors).max()),
            "rms_error": float(np.sqrt(np.mean(errors ** 2))),
            "samples": [{"rows": int(k), "bytes": int(b), "seconds": float(s),
                         "error": float(e)} for k, b, s, e in zip(r, n, t, errors, strict=True)]}


ROW_FITS = ("copy", "table", "table_step")  # fitted with a cost per row
TABLE_ROWS = [64, 256, 1024, 4096]  # rows of a message or a step
TABLE_ROWS_QUICK = [64, 1024]
TABLE_DIMS = (4, 16)  # row widths (columns)


def measure_table_rows(quick: bool, min_time_s: float) -> dict[str, tuple[list[float], ...]]:
    """An embedding table's rows gathered into a message by their ids, and a sparse step of
    them, through the real runner's code (:class:`~sim.real.executors.table_shards.
    ShardLayout` ``read`` and ``step_mean_rows``), for several row counts and widths, from
    tables of 8 x 50,000 rows (larger than the caches, as real ones are): {"table": (rows,
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
    from sim.real.calibration.suite import netbench
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


def beyond_wire_Bps(message_Bps: float, fabric_Bps: float) -> float:
    """The per-byte rate a message costs the CPU beyond the wire's ``fabric_Bps`` (a
    back-to-back stream of messages runs at ``message_Bps`` overall); inf when the wire
    explains it all."""
    extra = 1.0 / message_Bps - 1.0 / fabric_Bps
    return 1.0 / extra if extra > 0 else float("inf")


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


def eager_limit(sizes: list[int], half_rtt: list[float]) -> float:
    """The size after which the ping-pong steps up (the MPI library switching from eager to
    rendezvous): the largest rise from the two sizes up to it to the two after it (each
    side's worst, so one slow sample makes no step), if over 1 us and 3 times the median
    rise between neighbours; else inf."""
    t = np.asarray(half_rtt)
    rises = {k: t[k + 1:k + 3].min() - t[max(k - 1, 0):k + 1].max()
             for k in range(len(t) - 2)}
    k = max(rises, key=rises.get)
    if rises[k] > max(1e-6, 3 * float(np.median(np.diff(t)))):
        return float(sizes[k])
    return float("inf")


def per_excess_rank(excess: list[int], seconds: list[float]) -> dict[str, Any]:
    """Least squares of ``seconds = rate x excess`` (through 0: no delay when every rank has
    a core): the rate and each point's relative error."""
    e, t = np.asarray(excess, float), np.asarray(seconds, float)
    rate = max(float(e @ t / (e @ e)), 0.0)
    errors = [(rate * x / y - 1) if y > 0 else 0.0 for x, y in zip(e, t, strict=True)]
    return {"per_rank_s": rate, "errors": errors, "max_error": max(map(abs, errors))}


def linear_in_excess(excess: list[int], seconds: list[float]) -> dict[str, Any]:
    """Least squares of ``seconds = base + rate x excess`` (both >= 0): the nap itself,
    then the competition per rank beyond the cores; each point's relative error."""
    e, t = np.asarray(excess, float), np.asarray(seconds, float)
    rate, base = np.polyfit(e, t, 1)
    if base < 0:
        return {**per_excess_rank(excess, seconds), "base_s": 0.0}
    rate = max(float(rate), 0.0)
    base = float(t.mean() - rate * e.mean())
    errors = [((base + rate * x) / y - 1) if y > 0 else 0.0 for x, y in zip(e, t, strict=True)]
    return {"base_s": base, "per_rank_s": rate, "errors": errors,
            "max_error": max(map(abs, errors))}


def measure_rendezvous(quick: bool) -> dict[str, Any]:
    """How late a napping rank on a shared host notices a message, and what a message
    beyond the eager limit adds, per rank beyond the cores
    (:mod:`sim.real.calibration.netbench` modes ``pingpong``, spinning, and ``notice`` with
    cores + 1, cores + 2 and 2 cores + 1 ranks waiting by napping), fitted by
    :func:`fit_notice`."""
    from sim.real.calibration.suite import netbench

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


def fit_notice(measured: dict[str, Any]) -> dict[str, Any]:
    """:func:`measure_rendezvous`'s timings with their fits: the eager limit from the
    ping-pong; ``notice_base_s`` + ``notice_s`` per rank beyond the cores from the small
    message's delay less the ping-pong's; ``rendezvous_s`` per rank from what the large
    one adds beyond the ping-pong's growth."""
    pp, excess, noticed = (measured["pingpong_half_rtt_s"], measured["excess_ranks"],
                           measured["noticed_s"])
    limit = eager_limit(EAGER_SIZES, pp[:-1])
    notices = [max(got[0] - pp[0], 0.0) for got in noticed]
    # what the large message adds beyond the wire's own growth
    handshakes = [max((got[1] - got[0]) - (pp[-1] - pp[0]), 0.0) for got in noticed]
    notice = linear_in_excess(excess, notices)
    handshake = per_excess_rank(excess, handshakes)
    return {"notice_s": notice["per_rank_s"], "notice_base_s": notice["base_s"],
            "rendezvous_bytes": limit,
            "rendezvous_s": (handshake["per_rank_s"]
                             if limit < measured["notice_sizes"][1] else 0.0),
            "notice_fit": notice, "rendezvous_fit": handshake, **measured}


def measure_wait_share(quick: bool) -> dict[str, Any]:
    """What ranks waiting for messages take from work on their core, spinning and napping
    (:mod:`sim.real.calibration.netbench` mode ``share``: one core, one rank working, k
    waiting): work runs ``1 + k x share`` times slower than alone, ``share`` fitted over
    k = 1, 2 by least squares."""
    from sim import kernels as K
    from sim.real.calibration.suite import netbench

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


def fit_share(waiters: list[int], slowdowns: list[float]) -> dict[str, Any]:
    """Least squares of ``slowdown = 1 + share x waiters`` (share >= 0): the share and
    each point's relative error."""
    k, f = np.asarray(waiters, float), np.asarray(slowdowns, float)
    share = max(float(k @ (f - 1) / (k @ k)), 0.0)
    errors = ((1 + share * k) / f - 1).tolist()
    return {"share": share, "slowdowns": f.tolist(), "errors": errors,
            "max_error": max(map(abs, errors))}


def busy_warning(load: float, cpu_s: float, wall_s: float) -> list[str]:
    """Warnings when other processes were using the CPU."""
    out = []
    if load > BUSY_LOAD:
        out.append(f"warning: the 1-minute load average was {load:.2f} before calibrating "
                   "(other processes were using the CPU); the host profile may be slow")
    if wall_s > 0 and cpu_s < 0.8 * wall_s:
        out.append(f"warning: the measuring process got {cpu_s / wall_s:.0%} of a core "
                   f"({cpu_s:.2f} s CPU in {wall_s:.2f} s); other processes were using "
                   "the CPU")
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


def calibrate_host(path: Path, quick: bool = False, wait: str = "auto",
                   fabric_overhead_s: float = 0.0, fabric_Bps: float = float("inf"),
                   concurrency: int = 1, repeats: int | None = None) -> list[str]:
    """Measure, fit and write the host profile to ``path``; the lines to print (fits with
    their errors, warnings, and the config line).

    ``fabric_overhead_s``: the o of the fabric profile calibrated with it, which the
    simulator adds to every message's CPU (:func:`sim.training.host_costs.cpu_costs`); the
    measured per-message constant includes it, so ``message_s`` is the rest. Likewise
    ``fabric_Bps``, its bandwidth, is taken out of the messages' per-byte time: what is left
    is ``message_Bps``. ``concurrency``: gather, update and sum are timed in this many
    processes at once (as ``sim calibrate --concurrency`` times the kernels).
    ``repeats``: the whole measurement is taken this many times, one after another, and
    the profile is fitted to each timed point's median over them
    (:func:`median_measurement`); None: :data:`REPEATS`, 1 when ``quick``. Raises
    ValueError for ``repeats`` < 1."""
    if repeats is None:
        repeats = 1 if quick else REPEATS
    if repeats < 1:
        raise ValueError(f"host calibration: repeats must be >= 1, got {repeats}")
    path.parent.mkdir(parents=True, exist_ok=True)
    load = load_average()
    taken = [measure_host(quick, wait, concurrency) for _ in range(repeats)]
    m = median_measurement(taken)
    each = [host_profile(t, fabric_overhead_s, fabric_Bps) for t in taken]
    profile = each[0] if repeats == 1 else dataclasses.replace(
        host_profile(m, fabric_overhead_s, fabric_Bps),
        source=f"{each[0].source}; fitted to each point's median over {repeats} calibrations")
    lines = [summary_line(profile, fabric_overhead_s), *fit_lines(m["fits"]),
             *step_and_wait_lines(profile, m), *reload_lines(profile, m["reload"]),
             serving_line(profile, m["serving"]), *repeat_lines(each, profile)]
    warnings = busy_warning(load, m["cpu_s"], m["wall_s"]) + fit_warnings(m)
    save_host_profile(path, profile, fits=m["fits"], step=m["step"], poll=m["poll"],
                      rendezvous=m["rendezvous"], share=m["share"], reload=m["reload"],
                      serving=m["serving"],
                      measured_through=measured_through(concurrency, m["reload"]),
                      load_average=load,
                      cpu_fraction=m["cpu_s"] / m["wall_s"] if m["wall_s"] else None,
                      fabric_overhead_s=fabric_overhead_s, fabric_Bps=fabric_Bps,
                      quick=quick, concurrency=concurrency,
                      repeats=[numbers(p) for p in each])
    return lines + warnings + [f'  cluster.host = "calibrated:{path}"']


def numbers(profile: HostProfile) -> dict[str, float]:
    """The profile's measured numbers by field (its name, source and unset fields left
    out)."""
    return {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)
            if isinstance(getattr(profile, f.name), (int, float))}


def _median(values: Any) -> Any:
    """The element-wise median of equal-shaped lists (or numbers), as plain floats."""
    return np.median(np.asarray(values, float), axis=0).tolist()


def median_measurement(taken: list[dict[str, Any]]) -> dict[str, Any]:
    """One measurement of :func:`measure_host`'s shape whose every timed point (a fit's
    sample, a ping-pong or notice delay, a slowdown, a reload's extra time, a server
    round) is the median of ``taken``'s, fitted again as each repeat was: a fit of medians,
    so that parameters fitted together (a line's constant and slope) stay a pair. A single
    measurement is returned as it is."""
    if len(taken) == 1:
        return taken[0]
    first = taken[0]
    fits = {name: _median_fit(name, [t["fits"][name] for t in taken]) for name in first["fits"]}
    step = {**first["step"], "step_s": _median([t["step"]["step_s"] for t in taken]),
            "iteration_s": _median([t["step"]["iteration_s"] for t in taken])}
    poll = {**first["poll"], **{k: _median([t["poll"][k] for t in taken])
                                for k in ("poll_s", "p10_s", "p90_s")}}
    rendezvous = fit_notice({**{k: first["rendezvous"][k] for k in (
        "pingpong_sizes", "cores", "excess_ranks", "notice_sizes", "work_s")},
        **{k: _median([t["rendezvous"][k] for t in taken])
           for k in ("pingpong_half_rtt_s", "noticed_s")}})
    share = {**first["share"], "unit_alone_s": _median([t["share"]["unit_alone_s"]
                                                         for t in taken])}
    for wait in ("spin", "sleep"):
        share[wait] = fit_share(first["share"]["waiters"],
                                _median([t["share"][wait]["slowdowns"] for t in taken]))
    reload = {**first["reload"], "warm_s": _median([t["reload"]["warm_s"] for t in taken]),
              **fit_both(first["reload"]["gaps_s"],
                         _median([t["reload"]["extra_s"] for t in taken]),
                         _median([t["reload"]["spin_extra_s"] for t in taken]))}
    points = [{**p, **{k: _median([t["serving"]["points"][i][k] for t in taken])
                       for k in ("round_s", "kernels_s")}}
              for i, p in enumerate(first["serving"]["points"])]
    serving = fit_serving(points, _median([t["serving"]["pulls_s"] for t in taken]))
    return {"fits": fits, "step": step, "poll": poll, "rendezvous": rendezvous,
            "share": share, "reload": reload, "serving": serving,
            "cpu_s": sum(t["cpu_s"] for t in taken), "wall_s": sum(t["wall_s"] for t in taken)}


def _median_fit(name: str, fitted: list[dict[str, Any]]) -> dict[str, Any]:
    """The fit ``name`` (copy, update, ...) again on its samples' median seconds."""
    samples = fitted[0]["samples"]
    seconds = _median([[s["seconds"] for s in f["samples"]] for f in fitted])
    nbytes = [s["bytes"] for s in samples]
    if name in ROW_FITS:
        return fit_gather([s["rows"] for s in samples], nbytes, seconds)
    return fit(nbytes, seconds)


def repeat_lines(profiles: list[HostProfile], median: HostProfile) -> list[str]:
    """With more than one repeat: every number whose repeats differ by more than 20%, as
    the profile's (fitted to the medians) and the repeats' range."""
    if len(profiles) == 1:
        return []
    lines = [f"  repeats  {len(profiles)}: every point above is the median of the repeats' "
             "and each fit is to the medians; numbers whose repeats differ by more than 20% "
             "(the profile's, the repeats' range):"]
    each = [numbers(p) for p in profiles]
    for name, value in numbers(median).items():
        seen = [found[name] for found in each if name in found]
        low, high = min(seen), max(seen)
        if high > 1.2 * low or (low == 0 < high):
            lines.append(f"    {name:<20} {value:.4g} ({low:.4g} .. {high:.4g})")
    return lines


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
    measured["serving"] = measure_serving(fits, quick)
    return measured


def host_profile(m: dict[str, Any], fabric_overhead_s: float,
                 fabric_Bps: float) -> HostProfile:
    """The profile of :func:`measure_host`'s measurements, field by field; the message's
    constant and rate less the fabric's own (see :func:`calibrate_host`)."""
    fits, poll, rendezvous, reload = m["fits"], m["poll"], m["rendezvous"], m["reload"]
    return HostProfile(
        name=f"calibrated-{platform.node()}",
        copy_Bps=fits["copy"]["rate_Bps"],
        update_Bps=fits["update"]["rate_Bps"],
        reduce_Bps=fits["reduce"]["rate_Bps"],
        message_s=max(fits["message"]["constant_s"] - fabric_overhead_s, 0.0),
        step_s=max(m["step"]["step_s"], 0.0),
        slice_s=SLICE_S,
        poll_spin_s=poll["poll_spin_s"],
        poll_s=poll["poll_s"],
        message_Bps=beyond_wire_Bps(fits["message"]["rate_Bps"], fabric_Bps),
        copy_call_s=fits["copy"]["constant_s"],
        copy_row_s=fits["copy"]["row_s"],
        update_call_s=fits["update"]["constant_s"],
        reduce_call_s=fits["reduce"]["constant_s"],
        source=f"sim calibrate: host costs through the real runner's code paths; "
               f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} CPUs",
        notice_s=rendezvous["notice_s"],
        rendezvous_bytes=rendezvous["rendezvous_bytes"],
        rendezvous_s=rendezvous["rendezvous_s"],
        spin_share=m["share"]["spin"]["share"],
        nap_share=m["share"]["sleep"]["share"],
        notice_base_s=rendezvous["notice_base_s"],
        reload_s=reload["reload_s"],
        reload_tau_s=reload["reload_tau_s"],
        reload_base_s=reload["reload_base_s"],
        reload_spin_base_s=reload["reload_spin_base_s"],
        table_call_s=fits["table"]["constant_s"],
        table_row_s=fits["table"]["row_s"],
        table_Bps=fits["table"]["rate_Bps"],
        table_step_call_s=fits["table_step"]["constant_s"],
        table_step_row_s=fits["table_step"]["row_s"],
        table_step_Bps=fits["table_step"]["rate_Bps"],
        unique_call_s=fits["unique"]["constant_s"],
        unique_id_s=1.0 / fits["unique"]["rate_Bps"],
        serve_apply_s=m["serving"]["serve_apply_s"],
        serve_push_s=m["serving"]["serve_push_s"],
        serve_step_s=m["serving"]["serve_step_s"],
        serve_pull_s=m["serving"]["serve_pull_s"])


def measured_through(concurrency: int, reload: dict[str, Any]) -> dict[str, str]:
    """How each cost was measured, in words (kept in the profile)."""
    return {
        "copy": f"sim.training.workload.Worker.next_batch (numpy row gather), "
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
        "message": "2 MPI ranks (sim.real.calibration.netbench, mode message): pack + "
                   "sim.kernels.copy + Isend + wait as sim.real.executors.ps pushes, "
                   f"Irecv + wait as its server receives; each size's fastest of "
                   f"{MESSAGE_LAUNCHES} launches",
        "step": "a real asp run (1 worker, 1 server): summary loop_s per update, the "
                "worker's time between its timed spans",
        "poll": "sim.real.executors.rank_clock: one nap of a sleeping waiter (time.sleep of "
                "POLL_SLEEP_S, timer slack tightened) and its wake-up, median; the spin "
                "before napping is the waiter's SPIN_BEFORE_NAP_S",
        "rendezvous": f"sim.real.calibration.netbench: a spinning ping-pong over "
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
        "share": f"sim.real.calibration.netbench mode share: ranks pinned to one core, one "
                 f"running {SHARE_UNIT_S * 1e3:.0f} ms units of sim.kernels.sum_into while "
                 f"{SHARE_WAITERS} others wait in sim.real.executors.rank_clock.Waiter "
                 f"(spinning, then napping); the mean unit against the unit alone",
        "reload": f"sim.real.calibration.reload_bench: {reload['steps']} steps of "
                  f"Worker.next_batch + SGD.step + sim.kernels.copy of a message (logistic "
                  f"regression, {FEATURES} features), warm and right after sleeps of "
                  f"{', '.join(f'{g * 1e3:g}' for g in reload['gaps_s'])} ms; the median "
                  f"extra time fitted as reload_base_s + reload_s x (1 - exp(-gap / "
                  f"reload_tau_s)); and right after spinning as long (a loop polling the "
                  f"clock): reload_spin_base_s, the median extra less that curve",
        "serving": "sim.real.calibration.serve_bench: sim.real.executors.ps.ServerProtocol "
                   "(the real server's rules, store and log, no MPI) of asp and bsp-ps with "
                   "1, 2 and 4 workers, rounds of a push from every worker and their pulls, "
                   "median; less the kernels the simulator charges (update, reduce, copy "
                   "fits)"}


def summary_line(profile: HostProfile, fabric_overhead_s: float) -> str:
    """The profile's rates and constants on one line."""
    return (f"host: copy {profile.copy_Bps / 1e9:.2f} GB/s, update "
            f"{profile.update_Bps / 1e9:.2f} GB/s, reduce {profile.reduce_Bps / 1e9:.2f} GB/s,"
            f" message {profile.message_s * 1e6:.2f} us + bytes / "
            f"{profile.message_Bps / 1e9:.2f} GB/s"
            + (f" (+ the fabric's o {fabric_overhead_s * 1e6:.2f} us)" if fabric_overhead_s
               else "")
            + f", step {profile.step_s * 1e6:.2f} us, slice {profile.slice_s * 1e3:.0f} ms"
              " (not measured)")


def fit_lines(fits: dict[str, dict[str, Any]]) -> list[str]:
    """Each size fit with its errors, then its samples."""
    lines = []
    for name, f in fits.items():
        per_row = f" + rows x {f['row_s'] * 1e6:.3f} us" if "row_s" in f else ""
        lines.append(f"  {name:<8} {f['constant_s'] * 1e6:8.2f} us{per_row} + bytes / "
                     f"{f['rate_Bps'] / 1e9:6.2f} GB/s   fit error max {f['max_error']:.1%}"
                     f" rms {f['rms_error']:.1%}")
        for s in f["samples"]:
            rows = f" ({s['rows']} rows)" if "rows" in s else ""
            lines.append(f"    {s['bytes']:>10} B{rows} {s['seconds'] * 1e6:11.2f} us  "
                         f"{s['error']:+.1%}")
    return lines


def step_and_wait_lines(profile: HostProfile, m: dict[str, Any]) -> list[str]:
    """The step, the poll, the notice and rendezvous, and the waiters' shares."""
    step, poll, rendezvous, share = m["step"], m["poll"], m["rendezvous"], m["share"]
    lines = [f"  step     {step['step_s'] * 1e6:8.2f} us per update (asp, "
             f"{step['iterations']} updates, {step['iteration_s'] * 1e6:.1f} us each)",
             f"  poll     {poll['poll_s'] * 1e6:8.2f} us per nap of a sleeping waiter "
             f"(asked {poll['nap_requested_s'] * 1e6:.0f} us; 10-90%: "
             f"{poll['p10_s'] * 1e6:.1f}-{poll['p90_s'] * 1e6:.1f} us), after "
             f"{poll['poll_spin_s'] * 1e6:.0f} us of spinning"]
    limit = profile.rendezvous_bytes
    lines.append(f"  notice   {profile.notice_base_s * 1e6:8.2f} us + "
                 f"{profile.notice_s * 1e6:.2f} us per rank beyond the cores for a "
                 f"napping rank to have a message, fit error max "
                 f"{rendezvous['notice_fit']['max_error']:.1%}; eager limit "
                 + ("none found" if limit == float("inf") else f"{limit:.0f} B")
                 + f", rendezvous +{profile.rendezvous_s * 1e6:.2f} us per rank beyond the "
                 f"cores, fit error max {rendezvous['rendezvous_fit']['max_error']:.1%}")
    for wait, name in (("spin", "spin_share"), ("sleep", "nap_share")):
        fit_ = share[wait]
        lines.append(f"  {name:<9}{fit_['share']:7.2f}    work beside k waiting ranks "
                     f"({wait}) runs 1 + k x {fit_['share']:.2f} times slower: measured "
                     + ", ".join(f"k={k}: {f:.2f}x" for k, f in zip(
                         share["waiters"], fit_["slowdowns"], strict=True))
                     + f", fit error max {fit_['max_error']:.1%}")
    return lines


def reload_lines(profile: HostProfile, reload: dict[str, Any]) -> list[str]:
    """The reload transient's fit and its points."""
    return [f"  reload   {profile.reload_base_s * 1e6:8.2f} us + "
            f"{profile.reload_s * 1e6:.2f} us x (1 - exp(-gap / "
            f"{profile.reload_tau_s * 1e3:.2f} ms)) more for the first work after a gap: "
            "measured " + ", ".join(
                f"{g * 1e3:g} ms: {e * 1e6:+.0f} us" for g, e in zip(
                    reload["gaps_s"], reload["extra_s"], strict=True))
            + f", fit error max {reload['max_error']:.1%}",
            f"  reload_spin {profile.reload_spin_base_s * 1e6:5.2f} us + the same curve "
            "after spinning as long: measured " + ", ".join(
                f"{g * 1e3:g} ms: {e * 1e6:+.0f} us" for g, e in zip(
                    reload["gaps_s"], reload["spin_extra_s"], strict=True))
            + f", fit error max {reload['spin_max_error']:.1%}"]


def serving_line(profile: HostProfile, serving: dict[str, Any]) -> str:
    """A parameter server's own code per push, step and pull (``profile``'s), and the fit's
    error (``serving``: the measurement printed)."""
    return (f"  serve    {profile.serve_apply_s * 1e6:8.2f} us a push applied (asp), "
            f"{profile.serve_push_s * 1e6:.2f} us a push kept and "
            f"{profile.serve_step_s * 1e6:.2f} us a step closed (bsp-ps), "
            f"{profile.serve_pull_s * 1e6:.2f} us a pull, beyond their kernels; fit error "
            f"max {serving['max_error']:.1%}")


def fit_warnings(m: dict[str, Any]) -> list[str]:
    """A warning for every fit off by more than MAX_ERROR: the size fits, the waiters'
    shares, the reload, and notice and rendezvous."""
    warnings = []
    for name, f in m["fits"].items():
        if f["max_error"] > MAX_ERROR:
            warnings.append(f"warning: the {name} fit is off by up to {f['max_error']:.0%} "
                            f"(over {MAX_ERROR:.0%}); its rate is a rough one")
    for wait, name in (("spin", "spin_share"), ("sleep", "nap_share")):
        fit_ = m["share"][wait]
        if fit_["max_error"] > MAX_ERROR:
            warnings.append(f"warning: the {name} fit is off by up to "
                            f"{fit_['max_error']:.0%} (over {MAX_ERROR:.0%})")
    reload = m["reload"]
    if reload["max_error"] > MAX_ERROR:
        warnings.append(f"warning: the reload fit is off by up to {reload['max_error']:.0%} "
                        f"(over {MAX_ERROR:.0%})")
    for name in ("notice", "rendezvous"):
        fit_ = m["rendezvous"][f"{name}_fit"]
        if fit_["max_error"] > MAX_ERROR:
            warnings.append(f"warning: the {name} fit is off by up to "
                            f"{fit_['max_error']:.0%} (over "
                            f"{MAX_ERROR:.0%}): the delay does not grow in proportion to "
                            "the ranks beyond the cores here")
    return warnings
