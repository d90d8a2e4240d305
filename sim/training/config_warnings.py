"""A config's warnings: settings that are valid but do nothing in this run.

Said before a run (``sim run``, ``sim sweep``), never refused: the config passed the
validator (:mod:`sim.training.validator`); each check here returns one line naming the key,
why it has no effect and what would give it one, or None.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.config import Config, Embeddings, Strategy
from sim.network.fabrics import Fabric, get_fabric
from sim.network.message_cost import path_window_Bps
from sim.network.transports import REGISTRY, Transport, get_transport
from sim.training.host_costs import HostProfile, cpu_costs, load_host
from sim.training.strategies import STRATEGIES, row_of
from sim.workloads.models import MODELS


def _one_leaf(c: Config) -> str | None:
    cluster = c.cluster
    hosts = cluster.workers + row_of(c).server_ranks(c)
    if cluster.topology in ("leaf-spine", "fat-tree") and cluster.oversubscription != 1 \
            and hosts <= cluster.hosts_per_leaf:
        return (f"cluster.oversubscription = {cluster.oversubscription:g} has no effect: "
                f"all {hosts} hosts sit under one leaf (cluster.hosts_per_leaf = "
                f"{cluster.hosts_per_leaf}); lower hosts_per_leaf to spread them over leaves")
    return None


def _unused_allgather(c: Config) -> str | None:
    s = c.strategy
    gathering = [name for name, row in STRATEGIES.items() if row.gathers_compressed]
    if s.allgather != Strategy().allgather and (not row_of(c).gathers_compressed
                                                 or s.compression == "none"):
        return (f"strategy.allgather = {s.allgather!r} has no effect: only "
                f"{' and '.join(gathering)} with "
                f"strategy.compression gathers compressed gradients (here {s.kind!r} with "
                f"compression {s.compression!r})")
    return None


def _lone_host_link(c: Config) -> str | None:
    cluster = c.cluster
    if cluster.host_link == "none":
        return None
    ranks = row_of(c).ranks(c)
    placed = list(cluster.rank_hosts) or [r // cluster.ranks_per_host for r in range(ranks)]
    if len(set(placed)) == len(placed):
        return (f"cluster.host_link = {cluster.host_link!r} has no effect: every rank is on "
                "a host of its own (set cluster.ranks_per_host or cluster.rank_hosts)")
    return None


def _unused_embeddings(c: Config) -> str | None:
    changed = [f"embeddings.{key}" for key, value in c.embeddings.model_dump().items()
               if value != getattr(Embeddings(), key)]
    if changed and not MODELS[c.workload.model].tabular:
        return (f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: "
                f"workload.model {c.workload.model!r} has no embedding tables (wide-deep has)")
    return None


def _selective_without_attention(c: Config) -> str | None:
    if c.parallel.recompute == "selective" and c.workload.profile is None:
        return (f"parallel.recompute = \"selective\" has no effect: {c.workload.model!r} has "
                "no attention to recompute (a transformer profile has; \"full\" recomputes "
                "an MLP's stages)")
    return None


def _shards_without_servers(c: Config) -> str | None:
    if c.cluster.shard_by == "keys":
        return None
    unused = f"cluster.shard_by = {c.cluster.shard_by!r} has no effect"
    if not row_of(c).server_ranks(c):
        return f"{unused}: strategy {c.strategy.kind!r} has no parameter servers"
    if MODELS[c.workload.model].tabular and c.embeddings.placement == "ps":
        return (f"{unused}: {c.workload.model!r} with its tables on the servers sends each "
                "shard the rows and dense part its own traffic accounting says")
    return None


def _why_pulls_are_two_sided(c: Config) -> str | None:
    """Why this run's pulls (if any) would not read the servers one-sidedly over a
    transport that can (a shard's CPU answers them), or None where they would."""
    row = row_of(c)
    if not row.server_ranks(c):
        serving = [name for name, other in STRATEGIES.items() if other.uses_servers]
        return (f"{c.strategy.kind!r} pulls from no parameter server (the strategies that "
                f"do: {', '.join(serving)})")
    if row.held_pulls:
        return (f"{c.strategy.kind!r}'s pull is a request each shard holds until the step "
                "closes and then answers, two-sided by design")
    if MODELS[c.workload.model].tabular:
        return ("a pull of table rows is a request each shard answers by gathering the "
                "rows asked for")
    return None


def _unused_one_sided_pulls(c: Config) -> str | None:
    transport = get_transport(c.cluster.transport)
    if transport.one_sided_pulls and (why := _why_pulls_are_two_sided(c)):
        return f"cluster.transport = {transport.name!r}: its one-sided pulls have no effect: {why}"
    return None


def _what_a_message_costs(c: Config, transport: Transport, fabric: Fabric,
                          host: HostProfile) -> tuple[Any, ...]:
    """Everything of ``transport`` that this run's messages pay on its ``fabric`` and
    ``host``: the CPU at each end (nothing where the ranks pay none), the frames and the
    window's bound; how pulls and pushes to a server behave only where there is a server."""
    costs = cpu_costs(host, fabric, transport)
    cpu = replace(costs.message, transport_charged=False) if costs.charged else None
    if cpu is not None and _why_pulls_are_two_sided(c):
        cpu = replace(cpu, one_sided_pulls=False)
    if cpu is not None and not row_of(c).server_ranks(c):
        cpu = replace(cpu, answered_calls=False)
    framing = (transport.header_bytes, transport.frame_bytes, transport.frame_payload_bytes)
    return cpu, framing, path_window_Bps(transport, fabric)


def _transport_like_another(c: Config) -> str | None:
    transport = get_transport(c.cluster.transport)
    fabric, host = get_fabric(c.cluster.fabric), load_host(c.cluster.host)  # read once
    mine = _what_a_message_costs(c, transport, fabric, host)
    same = [name for name, other in REGISTRY.items()
            if name != transport.name and _what_a_message_costs(c, other, fabric, host) == mine]
    if same:
        return (f"cluster.transport = {transport.name!r} costs what {same[0]!r} costs on "
                f"fabric {fabric.name!r} with host {c.cluster.host!r}: this run's results "
                f"equal a run over {same[0]!r}")
    return None


WARNINGS = [_one_leaf, _unused_allgather, _lone_host_link, _unused_embeddings,
            _selective_without_attention, _shards_without_servers, _unused_one_sided_pulls,
            _transport_like_another]


def config_warnings(config: Config) -> list[str]:
    """What in ``config`` is valid but has no effect, one line each."""
    return list(warnings_by_check(config).values())


def warnings_by_check(config: Config) -> dict[str, str]:
    """:func:`config_warnings` keyed by the check that found each (so a sweep can tell the
    same finding at several points apart from different ones)."""
    return {check.__name__: text for check in WARNINGS if (text := check(config))}


def common_warnings(configs: list[Config]) -> list[str]:
    """The warnings that hold at every one of ``configs`` (a sweep's points), each as the
    first point words it: a setting of the experiment's that some points use (wide-deep's
    embedding placement in a sweep that also runs logistic regression) is not a mistake."""
    found = [warnings_by_check(c) for c in configs]
    if not found:
        return []
    return [text for name, text in found[0].items() if all(name in f for f in found[1:])]
