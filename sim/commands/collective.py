"""``python -m sim collective``: one collective, or a sweep like nccl-tests', on simulated fabrics.

One collective (the default) prints the simulated time, the closed-form alpha-beta time,
algorithm bandwidth (algbw = S / t) and bus bandwidth (busbw = algbw * 2(p-1)/p for
allreduce, (p-1)/p for allgather and alltoall, 1 for broadcast: nccl-tests'
doc/PERFORMANCE.md), and the bandwidth lower bound busbw-factor * S / B, where B is what one
host can inject (one NIC's link on a switched topology). ``--bytes`` is each rank's vector
n; for an allgather that is each rank's contribution (MPI_Allgather's sendcount), and
S = p n is the gathered vector (nccl-tests' size); for an alltoall it is what a rank sends
to each rank (MPI_Alltoall's sendcount), and S = p n is all a rank sends (nccl-tests'
alltoall size); otherwise S = n.

A sweep (any of ``--min-bytes``, ``--max-bytes``, ``--factor``, ``--algorithms``,
``--datatype``, ``--out``, or several comma-separated fabrics) times every nccl-tests size
from ``--min-bytes`` to ``--max-bytes`` for every algorithm on every fabric and prints
nccl-tests' table per algorithm and fabric (:mod:`sim.network.nccl`: sizes are S, counts and
rounding as nccl-tests'); ``--out DIR`` writes ``collective.csv`` and the busbw-against-size
plot (:mod:`sim.plots.collective_sweep`). Every point is timed without data: the collective runs
its schedule given only p and the byte count (no buffers), so its rounds carry offsets and
lengths, never payloads, and a 1 GiB point allocates nothing of its size; the analytical
model costs each point O(1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sim.errors import UserError
from sim.names import unknown
from sim.network import nccl
from sim.network.fabrics import REGISTRY as FABRICS

if TYPE_CHECKING:
    from sim.network.collectives import Collective
    from sim.network.fabrics import Fabric

T = TypeVar("T")

# topology option -> the flag that sets it
_TOPOLOGY_FLAGS = {"oversubscription": "--oversubscription", "hosts_per_leaf": "--hosts-per-leaf",
                   "nics_per_host": "--nics-per-host"}
# options that make the command a sweep (argparse dests); so do several fabrics
_SWEEP_OPTIONS = ("min_bytes", "max_bytes", "factor", "algorithms", "datatype", "out")
_SWEEP_DEFAULTS = {"min_bytes": "8", "max_bytes": "1G", "factor": "2", "datatype": "float"}
_LARGEST_BYTES = 2**40  # far past any collective worth timing; keeps counts inside int64
CSV_NAME = "collective.csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fabric", default="ib-hdr",
                        help=f"preset ({', '.join(FABRICS)}) or calibrated:PATH; several, "
                             "comma-separated, make a sweep (default ib-hdr)")
    parser.add_argument("--algo",
                        help="ring, rabenseifner, recursive-doubling, tree, broadcast, ps, "
                             "ring-allgather, recursive-doubling-allgather, "
                             "pairwise-alltoall or bruck-alltoall (default ring)")
    parser.add_argument("--workers", type=int, default=64, help="ranks p (default 64)")
    parser.add_argument("--bytes", dest="size",
                        help="size of the vector, e.g. 100MB, 1GiB, 4096, 1e6; an allgather: "
                             "each rank's contribution; an alltoall: what a rank sends to "
                             "each rank (default 100MB)")
    parser.add_argument("--topology", default="star",
                        help="star, leaf-spine (= fat-tree) or ring (default star)")
    parser.add_argument("--oversubscription", type=float,
                        help="leaf-spine: leaf down/up capacity ratio (default 1)")
    parser.add_argument("--hosts-per-leaf", type=int, help="leaf-spine: hosts per leaf (16)")
    parser.add_argument("--nics-per-host", type=int, help="star, leaf-spine: NICs per host (1)")
    parser.add_argument("--placement", default="block",
                        help="ranks on hosts: block or round-robin over leaves (default block)")
    parser.add_argument("--servers", type=int, help="parameter servers of the ps algorithm (1)")
    parser.add_argument("--alpha", type=float,
                        help="custom fabric: end-to-end cost of one message (s)")
    parser.add_argument("--bandwidth", type=float,
                        help="custom fabric: link bandwidth (bytes/s)")
    parser.add_argument("--model", default="flow", help="flow (default) or analytical")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (a sweep: a list, one object per row)")
    sweep = parser.add_argument_group(
        "sweep like nccl-tests", "sizes S as nccl-tests counts them (an allgather's is the "
        "gathered vector, an alltoall's all a rank sends); K, M, G are binary (1K = 1024), "
        "kB/MB/GB decimal")
    sweep.add_argument("--min-bytes", metavar="SIZE",
                       help="smallest size, nccl-tests' -b (default 8)")
    sweep.add_argument("--max-bytes", metavar="SIZE",
                       help="largest size, nccl-tests' -e (default 1G)")
    sweep.add_argument("--factor", metavar="N",
                       help="each size is N times the last, an integer >= 2; nccl-tests' -f "
                            "(default 2)")
    sweep.add_argument("--algorithms", metavar="LIST",
                       help="comma-separated algorithms, collectives (allreduce, allgather, "
                            "alltoall, broadcast: all their algorithms) or all (default: "
                            "--algo)")
    sweep.add_argument("--datatype", metavar="TYPE",
                       help=f"element type of the count column, nccl-tests' -d: "
                            f"{', '.join(nccl.DATATYPES)} (default float)")
    sweep.add_argument("--out", metavar="DIR", type=Path,
                       help=f"write DIR/{CSV_NAME} and the busbw plot DIR/collective.* "
                            "(sim/plots/collective_sweep.py)")


def main(args: argparse.Namespace) -> int:
    if _sweeping(args):
        return _main_sweep(args)
    result = calculate(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


def _main_sweep(args: argparse.Namespace) -> int:
    """Print the sweep (nccl-tests' tables, or JSON rows) and write --out's files."""
    points = sweep(args)
    written = _write(points, args.out) if args.out is not None else []
    print(json.dumps([asdict(p) for p in points], indent=2) if args.json
          else nccl.report(points))
    if written:  # beside JSON on stdout, the note goes to stderr
        print(f"wrote {', '.join(map(str, written))}",
              file=sys.stderr if args.json else sys.stdout)
    return 0


def calculate(args: argparse.Namespace) -> dict[str, Any]:
    """Run the collective described by the parsed arguments; raises UserError on bad input."""
    from sim.network.collective_alone import time_collective
    from sim.network.units import parse_bytes

    p = _require(args.workers >= 1, "--workers", "expected at least 1 worker", args.workers)
    size = args.size or "100MB"
    nbytes = _user("--bytes", parse_bytes, size)
    _require(nbytes >= 1, "--bytes", "expected at least 1 byte", size)
    (fabric,) = _fabrics(args)
    (algo,) = _algorithms(args, [args.algo or "ring"])
    where = _where(args)
    result = time_collective(algo, p, nbytes, fabric, where)
    head = ("algo", "collective", "workers", "servers", "bytes", "total_bytes", "fabric")
    return {**{key: result.pop(key) for key in head}, "topology": args.topology,
            "topology_options": {k: v for k, v in where.items() if k in _TOPOLOGY_FLAGS},
            "placement": args.placement, "model": args.model, **result}


def sweep(args: argparse.Namespace) -> list[nccl.Point]:
    """Every size for every algorithm on every fabric, in that nesting (fabric outermost).

    Checks every option before timing anything; raises UserError naming the bad one.
    """
    p = _require(args.workers >= 2, "--workers", "a sweep needs at least 2 ranks",
                 args.workers)
    _require(args.size is None, "--bytes", "a sweep takes --min-bytes and --max-bytes "
             "(nccl-tests' sizes) instead", args.size)
    sizes = _sweep_sizes(args)
    datatype = args.datatype or _SWEEP_DEFAULTS["datatype"]
    if datatype not in nccl.DATATYPES:
        raise UserError(f"--datatype: {unknown('data type', datatype, nccl.DATATYPES)}")
    fabrics = _fabrics(args)
    algos = _algorithms(args, _algorithm_names(args))
    where = _where(args)
    _require(args.out is None or not args.out.exists() or args.out.is_dir(), "--out",
             "expected a directory", str(args.out))
    return [nccl.measure_point(algo, fabric, p, size, datatype, where)
            for fabric in fabrics for algo in algos for size in sizes]


def render(result: dict[str, Any]) -> str:
    """The human-readable report of :func:`calculate`'s result."""
    from sim.network.units import format_bytes, format_rate, format_seconds

    fabric = result["fabric"]
    where = result["topology"] + "".join(f", {k}={v}" for k, v in
                                         result["topology_options"].items())
    servers = f" and {result['servers']} servers" if result["servers"] else ""
    size = format_bytes(result["bytes"])
    total = format_bytes(result["total_bytes"])
    if result["collective"] == "allgather":  # n from each rank, S = p n
        size += f" from each rank ({total} gathered)"
    elif result["collective"] == "alltoall":  # n from each rank to each rank, S = p n
        size += f" from each rank to each ({total} sent by each)"

    def rate(value: float | None) -> str:
        return "n/a (zero time)" if value is None else format_rate(value)

    return "\n".join([
        f"{result['algo']} {result['collective']} of {size} over "
        f"{result['workers']} workers{servers}",
        f"  fabric {fabric['name']}: {format_rate(fabric['bandwidth_Bps'])} per link, "
        f"alpha {format_seconds(fabric['alpha_s'])}; {where}, {result['model']} model",
        f"  simulated time   {format_seconds(result['time_s'])}",
        f"  closed form      {format_seconds(result['closed_form_s'])}  (alpha-beta, one switch)",
        f"  lower bound      {format_seconds(result['lower_bound_s'])}  "
        f"({result['bus_factor']:.4g} S / B)",
        f"  algbw            {rate(result['algbw_Bps'])}  (S / t, S = "
        f"{format_bytes(result['total_bytes'])})",
        f"  busbw            {rate(result['busbw_Bps'])}",
        f"  messages         {result['messages']} simulated (none in the analytical model)",
    ])


# ---- the sweep ---------------------------------------------------------------------------

def _sweeping(args: argparse.Namespace) -> bool:
    return any(getattr(args, name) is not None for name in _SWEEP_OPTIONS) \
        or "," in args.fabric


def _sweep_sizes(args: argparse.Namespace) -> list[int]:
    """nccl-tests' sizes from --min-bytes, --max-bytes and --factor (defaults 8, 1G, 2)."""
    def size(flag: str, dest: str) -> int:
        text = getattr(args, dest) or _SWEEP_DEFAULTS[dest]
        value = _user(flag, nccl.parse_size, text)
        _require(1 <= value <= _LARGEST_BYTES, flag,
                 f"expected 1 byte to {_LARGEST_BYTES} bytes (1 TiB)", text)
        return value

    low, high = size("--min-bytes", "min_bytes"), size("--max-bytes", "max_bytes")
    _require(low <= high, "--min-bytes", f"expected at most --max-bytes ({high} bytes)",
             args.min_bytes or _SWEEP_DEFAULTS["min_bytes"])
    factor_text = args.factor or _SWEEP_DEFAULTS["factor"]
    factor = _user("--factor", _integer, factor_text)
    _require(factor >= 2, "--factor", "expected an integer >= 2", factor_text)
    return nccl.sizes(low, high, factor)


def _algorithm_names(args: argparse.Namespace) -> list[str]:
    """--algorithms expanded: a collective kind or ``all`` names its registered algorithms."""
    from sim.network.collectives import REGISTRY

    if args.algorithms is None:
        return [args.algo or "ring"]
    _require(args.algo is None, "--algorithms",
             "give --algo or --algorithms, not both", args.algorithms)
    kinds: dict[str, list[str]] = {"all": list(REGISTRY)}
    for name, cls in REGISTRY.items():
        kinds.setdefault(cls.kind, []).append(name)
    items = [item.strip() for item in args.algorithms.split(",")]
    _require(all(items), "--algorithms", "expected comma-separated names", args.algorithms)
    for item in items:
        if item not in kinds and item not in REGISTRY:
            raise UserError(f"--algorithms: "
                            f"{unknown('algorithm or collective', item, [*REGISTRY, *kinds])}")
    return list(dict.fromkeys(name for item in items for name in kinds.get(item, [item])))


def _write(points: list[nccl.Point], out_dir: Path) -> list[Path]:
    """``collective.csv`` (atomically), then the plot drawn from it; the paths written."""
    from sim.plots.collective_sweep import plot_collectives
    from sim.plots.style import out_dir_ready
    from sim.rundir import write_atomic

    path = write_atomic(out_dir_ready(out_dir) / CSV_NAME, nccl.csv_text(points))
    return [path, *plot_collectives(path, out_dir)]


# ---- options shared by one collective and a sweep ------------------------------------------

def _fabrics(args: argparse.Namespace) -> list[Fabric]:
    """The --fabric list (comma-separated) with --alpha / --bandwidth applied to each."""
    from sim.network.fabrics import get_fabric

    _require(args.alpha is None or args.alpha >= 0, "--alpha", "expected seconds >= 0",
             args.alpha)
    _require(args.bandwidth is None or args.bandwidth > 0, "--bandwidth",
             "expected bytes/s > 0", args.bandwidth)
    specs = list(dict.fromkeys(spec.strip() for spec in args.fabric.split(",")))
    _require(all(specs), "--fabric", "expected comma-separated fabrics", args.fabric)
    return [_user("--fabric", get_fabric, spec).with_overrides(args.alpha, args.bandwidth)
            for spec in specs]


def _algorithms(args: argparse.Namespace, names: list[str]) -> list[Collective]:
    """The named algorithms; ``--servers`` goes to ps, the only one that takes it."""
    from sim.network.collectives import get_collective

    flag = "--algo" if args.algorithms is None else "--algorithms"
    algos = [_user(flag, get_collective, name) for name in names]
    if args.servers is None:
        return algos
    _require("ps" in names, "--servers", "only the ps algorithm has servers", args.servers)
    return [_user("--servers", get_collective, "ps", servers=args.servers)
            if algo.name == "ps" else algo for algo in algos]


def _where(args: argparse.Namespace) -> dict[str, Any]:
    """run_alone's network options: topology (and its options), model, placement."""
    from sim.network.network_builder import MODELS
    from sim.network.topology import PLACEMENTS

    _require(args.model in MODELS, "--model", f"expected one of {', '.join(MODELS)}",
             args.model)
    _require(args.placement in PLACEMENTS, "--placement",
             f"expected one of {', '.join(PLACEMENTS)}", args.placement)
    options = _topology_options(args)
    return {"topology": args.topology, "model": args.model, "placement": args.placement,
            **options}


def _topology_options(args: argparse.Namespace) -> dict[str, Any]:
    """The topology options given on the command line, checked against the topology."""
    from sim.network.topology import topology_options

    accepted = _user("--topology", topology_options, args.topology)
    options = {}
    for option, flag in _TOPOLOGY_FLAGS.items():
        value = getattr(args, option)
        if value is None:
            continue
        if option not in accepted:
            raise UserError(f"{flag}: topology {args.topology!r} does not take it")
        lowest = 1.0 if option == "oversubscription" else 1
        _require(value >= lowest, flag, f"expected a value >= {lowest}", value)
        options[option] = value
    return options


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def _require(condition: bool, flag: str, expected: str, value: Any) -> Any:
    if not condition:
        raise UserError(f"{flag}: {expected}, got {value!r}")
    return value


def _user(flag: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a library function; its ValueError becomes a UserError naming the flag."""
    try:
        return call(*args, **kwargs)
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None
