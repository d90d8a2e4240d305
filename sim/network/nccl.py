"""nccl-tests' conventions for size sweeps: sizes, data types, counts, the results table.

As NVIDIA/nccl-tests has them (``src/common.cu``, ``src/util.cu``, each collective's
``GetCollByteCount`` and ``GetBw``, ``doc/PERFORMANCE.md``):

* sizes run min, min f, min f^2, ... while <= max (``-b``, ``-e``, ``-f``); the suffixes
  K, M and G are binary (1K = 1024);
* a size of S bytes is S // itemsize elements of the data type (``-d``, default float);
  an allgather's count is each rank's and an alltoall's what a rank sends each rank, both
  (elements // p) rounded down to 16 bytes' worth of elements, so small ones report size
  0, as nccl-tests prints them;
* algbw = S / t and busbw = algbw x the collective's bus factor, in GB/s (1e9 bytes/s),
  S being the result on one rank (p x the count for an allgather, and for an alltoall,
  where it is also what a rank sends);
* the table: size (B), count (elements), type, time (us), algbw, busbw (GB/s), numbers in
  nccl-tests' widths (7 and 6 characters, two decimals while they fit), and the average
  busbw below it.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Any

from sim.network.collective_alone import run_alone
from sim.network.collectives import Collective
from sim.network.fabrics import Fabric
from sim.network.message_cost import alpha_s, beta_s
from sim.network.units import parse_bytes

# nccl-tests' -d names -> bytes per element
DATATYPES: dict[str, int] = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8,
                             "uint64": 8, "half": 2, "float": 4, "double": 8, "bfloat16": 2}

# collective kind -> the count argument of one call, from (elements, itemsize, ranks)
CALL_COUNTS: dict[str, Callable[[int, int, int], int]] = {
    "allreduce": lambda elements, itemsize, p: elements,
    "broadcast": lambda elements, itemsize, p: elements,
    "allgather": lambda elements, itemsize, p: (elements // p) & ~(16 // itemsize - 1),
    # src/alltoall.cu: paramcount = (count / nranks) & -(16 / eltSize), to each peer
    "alltoall": lambda elements, itemsize, p: (elements // p) & ~(16 // itemsize - 1),
}

_NCCL_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KkMmGg])\s*$")
_BINARY = {"k": 2**10, "m": 2**20, "g": 2**30}


def parse_size(text: str) -> int:
    """``"1G"`` -> 2**30 (nccl-tests' binary K, M, G), else as :func:`parse_bytes`
    (``"1MB"`` -> 10**6, ``"1MiB"`` -> 2**20). Raises ValueError."""
    match = _NCCL_SIZE.match(text)
    if match is None:
        try:
            return parse_bytes(text)
        except ValueError:
            raise ValueError(f"expected a size like 8, 64K, 4M or 1G (binary, as nccl-tests), "
                             f"or with a unit as 100MB or 1GiB, got {text!r}") from None
    value = float(match.group(1)) * _BINARY[match.group(2).lower()]
    if value != round(value):
        raise ValueError(f"expected a whole number of bytes, got {text!r} = {value} bytes")
    return int(value)


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """nccl-tests' sizes: min_bytes x factor^k while <= max_bytes. Raises ValueError."""
    if min_bytes < 1 or factor < 2:
        raise ValueError(f"need min_bytes >= 1 and factor >= 2, got {min_bytes}, {factor}")
    out = []
    size = min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def call_count(kind: str, size_bytes: int, itemsize: int, p: int) -> int:
    """The count argument (elements) of a ``kind`` collective that nccl-tests runs for
    ``size_bytes`` on p ranks."""
    return CALL_COUNTS[kind](size_bytes // itemsize, itemsize, p)


@dataclass(frozen=True)
class Point:
    """One size of one algorithm on one fabric: a table row and a ``collective.csv`` row."""

    fabric: str
    algorithm: str
    collective: str
    workers: int
    topology: str
    model: str
    size_bytes: int  # nccl-tests' size S: the result on one rank
    count: int  # the call's count argument (elements; each rank's for an allgather, to each
    #             rank for an alltoall)
    type: str
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    closed_form_us: float  # the algorithm's alpha-beta time on one idle switch
    injection_GBps: float  # what one host can send: no busbw exceeds it


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Point))


def bandwidths_GBps(size_bytes: int, time_s: float, bus_factor: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s; 0 for a size of 0 (nothing moved, whatever the time)."""
    algbw = size_bytes / time_s / 1e9 if size_bytes else 0.0
    return algbw, algbw * bus_factor


def csv_text(points: Sequence[Point]) -> str:
    """``collective.csv``: a header of :data:`COLUMNS` and a row per point."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(astuple(point) for point in points)
    return out.getvalue()


def report(points: Sequence[Point]) -> str:
    """nccl-tests' table, one block per fabric and algorithm, in the points' order."""
    blocks: dict[tuple[str, str], list[Point]] = {}
    for point in points:
        blocks.setdefault((point.fabric, point.algorithm), []).append(point)
    return "\n\n".join(_block(block) for block in blocks.values())


def number(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals, then one, then none, then an exponent, so
    the number fits ``width`` characters."""
    for decimals in (2, 1, 0):
        text = f"{value:{width}.{decimals}f}"
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"


def _block(points: Sequence[Point]) -> str:
    first = points[0]
    name = " ".join(dict.fromkeys((first.algorithm, first.collective)))  # not "broadcast" twice
    lines = [f"# {name} on {first.fabric}: {first.workers} ranks, {first.topology} topology, "
             f"{first.model} model", "#",
             _header("size", "count", "type", "time", "algbw", "busbw"),
             _header("(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)")]
    lines += [f"{p.size_bytes:12d}  {p.count:12d}  {p.type:>8}  {number(p.time_us, 7)}  "
              f"{number(p.algbw_GBps, 6)}  {number(p.busbw_GBps, 6)}" for p in points]
    average = sum(p.busbw_GBps for p in points) / len(points)
    lines.append(f"# {'Avg bus bandwidth':<20} : {average:g}")
    return "\n".join(lines)


def _header(*cells: str) -> str:
    """A header line in nccl-tests' widths, aligned with the rows below it."""
    widths = (10, 12, 8, 7, 6, 6)
    return "# " + "  ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths, strict=True))


def measure_point(algo: Collective, fabric: Fabric, p: int, size: int, datatype: str,
                  where: dict[str, Any]) -> Point:
    """One row: nccl-tests' count for ``size`` bytes, timed without data (no buffers).
    ``where``: topology, model and their options, as :func:`run_alone` takes them."""
    itemsize = DATATYPES[datatype]
    count = call_count(algo.kind, size, itemsize, p)
    nbytes = count * itemsize  # each rank's vector (a block, for an allgather or alltoall)
    time_s, network = run_alone(algo, p=p, nbytes=nbytes, fabric=fabric, **where)
    size_bytes = int(algo.total_bytes(p, nbytes))
    algbw, busbw = bandwidths_GBps(size_bytes, time_s, algo.bus_factor(p))
    closed_s = algo.closed_form_s(p, nbytes, alpha_s(fabric), beta_s(fabric))
    return Point(fabric=fabric.name, algorithm=algo.name, collective=algo.kind,
                 workers=p, topology=where["topology"], model=where["model"],
                 size_bytes=size_bytes, count=count, type=datatype, time_us=time_s * 1e6,
                 algbw_GBps=algbw, busbw_GBps=busbw, closed_form_us=closed_s * 1e6,
                 injection_GBps=network.topology.injection_Bps() / 1e9)
