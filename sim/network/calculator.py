"""``python -m sim collective``: the time of one collective on a simulated fabric.

Prints the simulated time, the closed-form alpha-beta time, algorithm bandwidth
(algbw = S / t) and bus bandwidth (busbw = algbw * 2(p-1)/p for allreduce, (p-1)/p for
allgather, 1 for broadcast: nccl-tests' doc/PERFORMANCE.md), and the bandwidth lower bound
busbw-factor * S / B, where B is what one host can inject (one NIC's link on a switched
topology). ``--bytes`` is each rank's vector n; for an allgather that is each rank's
contribution (MPI_Allgather's sendcount), and S = p n is the gathered vector (nccl-tests'
size); otherwise S = n.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TypeVar

from sim.errors import UserError
from sim.network.fabrics import REGISTRY as FABRICS

T = TypeVar("T")

# topology option -> the flag that sets it
_TOPOLOGY_FLAGS = {"oversubscription": "--oversubscription", "hosts_per_leaf": "--hosts-per-leaf",
                   "nics_per_host": "--nics-per-host"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fabric", default="ib-hdr",
                        help=f"preset ({', '.join(FABRICS)}) or calibrated:PATH (default ib-hdr)")
    parser.add_argument("--algo", default="ring",
                        help="ring, rabenseifner, recursive-doubling, tree, broadcast, ps, "
                             "ring-allgather or recursive-doubling-allgather (default ring)")
    parser.add_argument("--workers", type=int, default=64, help="ranks p (default 64)")
    parser.add_argument("--bytes", dest="size", default="100MB",
                        help="size of the vector, e.g. 100MB, 1GiB, 4096, 1e6; an allgather: "
                             "each rank's contribution (default 100MB)")
    parser.add_argument("--topology", default="star",
                        help="star, leaf-spine (= fat-tree) or ring (default star)")
    parser.add_argument("--oversubscription", type=float,
                        help="leaf-spine: leaf down/up capacity ratio (default 1)")
    parser.add_argument("--hosts-per-leaf", type=int, help="leaf-spine: hosts per leaf (16)")
    parser.add_argument("--nics-per-host", type=int, help="star, leaf-spine: NICs per host (1)")
    parser.add_argument("--placement", default="block",
                        help="ranks on hosts: block or round-robin over leaves (default block)")
    parser.add_argument("--servers", type=int, help="parameter servers for --algo ps (1)")
    parser.add_argument("--alpha", type=float,
                        help="custom fabric: end-to-end cost of one message (s)")
    parser.add_argument("--bandwidth", type=float,
                        help="custom fabric: link bandwidth (bytes/s)")
    parser.add_argument("--model", default="flow", help="flow (default) or analytical")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def main(args: argparse.Namespace) -> int:
    result = calculate(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


def calculate(args: argparse.Namespace) -> dict[str, Any]:
    """Run the collective described by the parsed arguments; raises UserError on bad input."""
    from sim.network.collectives import get_collective
    from sim.network.fabrics import describe, get_fabric
    from sim.network.runner import MODELS, run_alone
    from sim.network.topology import PLACEMENTS
    from sim.network.units import parse_bytes

    p = _require(args.workers >= 1, "--workers", "expected at least 1 worker", args.workers)
    nbytes = _user("--bytes", parse_bytes, args.size)
    _require(nbytes >= 1, "--bytes", "expected at least 1 byte", args.size)
    _require(args.alpha is None or args.alpha >= 0, "--alpha", "expected seconds >= 0",
             args.alpha)
    _require(args.bandwidth is None or args.bandwidth > 0, "--bandwidth",
             "expected bytes/s > 0", args.bandwidth)
    fabric = _user("--fabric", get_fabric, args.fabric).with_overrides(args.alpha, args.bandwidth)
    algo = _user("--algo", get_collective, args.algo)
    if args.servers is not None:
        _require(algo.name == "ps", "--servers", "only --algo ps has servers", args.algo)
        algo = _user("--servers", get_collective, "ps", servers=args.servers)
    _require(args.model in MODELS, "--model", f"expected one of {', '.join(MODELS)}",
             args.model)
    _require(args.placement in PLACEMENTS, "--placement",
             f"expected one of {', '.join(PLACEMENTS)}", args.placement)
    options = _topology_options(args)
    time_s, network = run_alone(algo, p=p, nbytes=nbytes, fabric=fabric, topology=args.topology,
                                model=args.model, placement=args.placement, **options)
    closed_s = algo.closed_form_s(p, nbytes, fabric.alpha_s(), fabric.beta_s_per_byte)
    total = algo.total_bytes(p, nbytes)  # nccl-tests' S: p n for an allgather
    algbw = total / time_s if time_s > 0 else None
    return {
        "algo": algo.name, "collective": algo.kind, "workers": p,
        "servers": getattr(algo, "servers", None),
        "bytes": nbytes, "total_bytes": total, "fabric": describe(fabric),
        "topology": args.topology, "topology_options": options, "placement": args.placement,
        "model": args.model,
        "time_s": time_s, "closed_form_s": closed_s,
        "lower_bound_s": algo.lower_bound_s(p, nbytes, network.topology.injection_Bps()),
        "algbw_Bps": algbw,
        "busbw_Bps": None if algbw is None else algbw * algo.bus_factor(p),
        "bus_factor": algo.bus_factor(p), "messages": network.messages_delivered,
    }


def render(result: dict[str, Any]) -> str:
    """The human-readable report of :func:`calculate`'s result."""
    from sim.network.units import format_bytes, format_rate, format_seconds

    fabric = result["fabric"]
    where = result["topology"] + "".join(f", {k}={v}" for k, v in
                                         result["topology_options"].items())
    servers = f" and {result['servers']} servers" if result["servers"] else ""
    size = format_bytes(result["bytes"])
    if result["total_bytes"] != result["bytes"]:  # an allgather: n from each rank, S = p n
        size += f" from each rank ({format_bytes(result['total_bytes'])} gathered)"

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
