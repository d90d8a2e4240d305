"""``python -m sim list [WHAT]``: the registries, so users know the names configs accept."""

from __future__ import annotations

import argparse
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim import names
from sim.errors import UserError

WIDTH = 92  # experiment descriptions are wrapped to this many columns


def _first_line(obj: object) -> str:
    """The docstring's first paragraph as one line: its first line alone may stop
    mid-sentence."""
    paragraph = inspect.cleandoc(obj.__doc__ or "").split("\n\n")[0]
    return " ".join(paragraph.split())


def fabrics() -> list[str]:
    from sim.network.fabrics import REGISTRY
    from sim.network.message_cost import alpha_s

    return [f"{name:<10} {f.bandwidth_Bps / 1e9:6.2f} GB/s  alpha {alpha_s(f) * 1e6:5.1f} us  "
            f"({f.source})" for name, f in REGISTRY.items()]


def transports() -> list[str]:
    from sim.network.transports import REGISTRY

    def us(value: float | None) -> str:
        return "fabric's" if value is None else f"{value * 1e6:.1f} us"

    return [f"{name:<5} o {us(t.overhead_s):<9} rpc {t.rpc_s * 1e6:4.1f} us  "
            f"window {t.window_bytes:g} B  ({t.source})" for name, t in REGISTRY.items()]


def host_links() -> list[str]:
    from sim.network.host_links import REGISTRY
    from sim.network.message_cost import alpha_s

    return [f"{name:<13} {f.bandwidth_Bps / 1e9:6.1f} GB/s a direction  "
            f"alpha {alpha_s(f) * 1e6:4.1f} us  ({f.source})" for name, f in REGISTRY.items()]


def strategies() -> list[str]:
    from sim.training.strategies import STRATEGIES

    return [f"{name:<10} {row.summary}" for name, row in STRATEGIES.items()]


def models() -> list[str]:
    from sim.workloads.models import MODELS

    return [f"{name:<14} {_first_line(cls)}" for name, cls in MODELS.items()]


def profiles() -> list[str]:
    """Each timing profile's parameters and GEMM FLOPs per sample (forward, and forward +
    backward) and its source."""
    from sim.workloads.timing_profiles import PROFILES

    rows = []
    for name, build in PROFILES.items():
        p = build()
        step = p.forward_flops + sum(p.backward_flops(i) for i in range(len(p.layers)))
        rows.append((name, f"{p.params / 1e6:.2f}", f"{p.forward_flops / 1e9:.2f}",
                     f"{step / 1e9:.2f}", p.source))
    # columns as wide as their widest cell: gpt-1t's 12550538.68 GFLOP and
    # gpipe-transformer-48 overflowed fixed widths and shifted their lines
    w = [max(len(row[i]) for row in rows) for i in range(4)]
    return [f"{n:<{w[0]}} {m:>{w[1]}} M params  {f:>{w[2]}} GFLOP forward, {s:>{w[3]}} "
            f"forward+backward per sample ({src})" for n, m, f, s, src in rows]


def _first_sentence(obj: object) -> str:
    """The docstring's first sentence (up to the first full stop before a space)."""
    line = _first_line(obj)
    return line.split(". ", 1)[0].removesuffix(".") + "."


def datasets() -> list[str]:
    """The named data sets, then the families named by a prefix and an argument
    (``criteo:PATH``), written as a config names them."""
    from sim.workloads.datasets import DATASET_FAMILIES, DATASETS

    return ([f"{name:<16} {_first_line(fn)}" for name, fn in DATASETS.items()]
            + [f"{family.usage:<16} {_first_sentence(family.build)}"
               for family in DATASET_FAMILIES.values()])


def collectives() -> list[str]:
    from sim.network.collectives import REGISTRY

    # the kind says where a name goes: strategy.collective takes an allreduce,
    # strategy.allgather an allgather
    return [f"{name:<28} {cls.kind:<9} {_first_line(cls)}" for name, cls in REGISTRY.items()]


def topologies() -> list[str]:
    from sim.network.topology import TOPOLOGIES

    return [f"{name:<11} {_first_line(cls)}" for name, cls in TOPOLOGIES.items()]


def devices() -> list[str]:
    from sim.training.compute_model import DEVICES
    from sim.workloads.precision import ITEMSIZE

    def peaks(d: Any) -> str:
        known = [f"{p} {d.peak(p) / 1e12:g}" for p in ITEMSIZE if d.peak(p) is not None]
        return f"  peaks {', '.join(known)} TFLOP/s" if known else ""

    return [f"{name:<9} {d.flops_per_s / 1e12:8.3f} TFLOP/s  +{d.overhead_s * 1e6:.1f} us/step"
            + (f"  {d.memory_bytes / 2**30:g} GiB" if d.memory_bytes else "")
            + (f"  {d.memory_Bps / 1e9:g} GB/s" if d.memory_Bps else "")
            + peaks(d) + f" ({d.source})" for name, d in DEVICES.items()]


def clusters() -> list[str]:
    from sim.training.clusters import CLUSTERS

    return [f"{name:<20} {c.ranks_per_host:>2} x {c.device:<10} {c.host_link:<13} "
            f"{c.nics_per_host} x {c.fabric:<8} ({c.source})" for name, c in CLUSTERS.items()]


def _rate(bps: float, infinite: str, digits: str = ".1f") -> str:
    """Bytes/s as GB/s, or ``infinite``."""
    return infinite if bps == float("inf") else f"{bps / 1e9:{digits}} GB/s"


def hosts() -> list[str]:
    from sim.training.host_costs import HOSTS

    return [f"{name:<10} copy {_rate(h.copy_Bps, 'free')}, update {_rate(h.update_Bps, 'free')}"
            f", reduce {_rate(h.reduce_Bps, 'free')}, {h.message_s * 1e6:.1f} us/message, "
            f"{h.step_s * 1e6:.1f} us/step ({h.source})" for name, h in HOSTS.items()]


def storage() -> list[str]:
    from sim.faults.storage import STORAGE

    return [f"{name:<13} write {_rate(s.write_Bps, 'no limit', '.3g')}, read "
            f"{_rate(s.read_Bps, 'no limit', '.3g')}, {s.latency_s * 1e3:.3g} ms per file, "
            f"all writers {_rate(s.aggregate_Bps, 'no limit', '.3g')} ({s.source})"
            for name, s in STORAGE.items()]


def description(path: Path) -> str:
    """A config's description: its leading comment block, as one paragraph."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.removeprefix("#").strip())
    return " ".join(filter(None, lines))


def experiments() -> list[str]:
    """Each experiment's name (what `run`, `sweep` and `real` accept) and its whole
    description, wrapped under it."""
    found = names.experiments()
    lines = []
    for name, path in found.items():
        lines.append(name)
        lines += textwrap.wrap(description(path), WIDTH, initial_indent="    ",
                               subsequent_indent="    ", break_on_hyphens=False)
    return lines or ["(none here: the experiment configs are in the repository's "
                     "experiments/; run from a clone)"]


LISTS: dict[str, Callable[[], list[str]]] = {
    "fabrics": fabrics, "transports": transports, "host-links": host_links,
    "strategies": strategies, "models": models, "profiles": profiles,
    "datasets": datasets,
    "collectives": collectives, "topologies": topologies, "devices": devices,
    "clusters": clusters,
    "hosts": hosts, "storage": storage, "experiments": experiments,
}


def list_name(text: str) -> str:
    """``text`` if it names a list; else UserError suggesting the closest one."""
    if text not in LISTS:
        raise UserError(names.unknown("list", text, sorted(LISTS)))
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", nargs="?", type=list_name, metavar="WHAT",
                        help=f"one list (default: all): {', '.join(sorted(LISTS))}")


def main(args: argparse.Namespace) -> int:
    for name in [args.what] if args.what else LISTS:
        print(f"{name}:")
        print("\n".join(f"  {line}" for line in LISTS[name]()))
    return 0
