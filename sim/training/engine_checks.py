"""Where ``run.engine = "steady"`` (:mod:`sim.simulated.steady_state`) gives the event
engine's results: the one line of each config it refuses. Run by
:func:`sim.training.validator.validate` among its checks."""

from __future__ import annotations

from sim.config import Config
from sim.network.fabrics import get_fabric
from sim.network.host_links import get_host_link
from sim.network.transports import get_transport
from sim.training.host_costs import cpu_costs, load_host
from sim.training.parallel_plan import splits
from sim.training.strategies import STRATEGIES, row_of


def _steady() -> str:
    """The strategies run.engine = "steady" runs, as a sentence names them."""
    return " and ".join(name for name, row in STRATEGIES.items() if row.simulated_steady)


def steady_refusals(c: Config) -> list[tuple[bool, str]]:
    """(refused, the one line) for what run.engine = "steady" does not cover (:mod:`sim.
    simulated.steady_state`): it runs one tensor shard of a bsp plan with constant compute
    on an ideal host for all: anything that makes shards or ranks differ, or that would put
    a tensor allreduce on a link other traffic uses, or links whose rate moves."""
    cl, par, comp = c.cluster, c.parallel, c.compute
    costs = cpu_costs(load_host(cl.host), get_fabric(cl.fabric), get_transport(cl.transport))
    alone = get_host_link(cl.host_link) is not None and cl.ranks_per_host == par.tensor \
        and not cl.rank_hosts
    return [
        (row_of(c).simulated_steady is None or not splits(c),
         f"runs {_steady()} on a [parallel] plan (strategy {c.strategy.kind!r}"
         + ("" if splits(c) else ", no stages, shards or microbatches") + ")"),
        (c.workload.numerics, "is timing only: set workload.numerics = false"),
        (comp.distribution != "constant",
         f"needs compute.distribution = 'constant' (got {comp.distribution!r})"),
        (comp.straggler_fraction > 0 or bool(comp.slowdowns),
         "needs every rank alike: no compute.straggler_fraction or compute.slowdowns"),
        (c.faults.enabled, "does not model failures (faults.failures, faults.mtbf_s)"),
        (get_fabric(cl.fabric).shaped, "prices a link at one rate, not token buckets (burst_s)"),
        (c.checkpoint.every_steps is not None or c.checkpoint.every_s is not None,
         "does not model checkpoints (checkpoint.every_steps, checkpoint.every_s)"),
        (costs.charged, f"needs CPU-free messages: cluster.host = 'ideal' and a transport "
                        f"that charges no CPU (host {cl.host!r}, transport {cl.transport!r})"),
        (c.run.time_limit_s is not None,
         "does not stop at run.time_limit_s (a tensor allreduce is one span there, its "
         "rounds in the event engine: a step cut mid-way would count differently)"),
        (par.dp_overlap, "does not overlap the data-parallel allreduce with backward "
                         "(parallel.dp_overlap)"),
        # one shard: every rank's messages are sent (mirrored or run), NICs shared as they are
        (par.tensor > 1 and cl.nics_per_host is not None
         and cl.nics_per_host < cl.ranks_per_host,
         f"with parallel.tensor = {par.tensor} needs every rank its own NIC "
         f"(cluster.nics_per_host = {cl.nics_per_host} for {cl.ranks_per_host} ranks a host: "
         "the shards' messages would share one)"),
        (cl.topology != "star",
         f"needs cluster.topology = 'star' (non-blocking: the shards' traffic shares no link; "
         f"got {cl.topology!r})"),
        (par.tensor > 1 and not alone,
         f"with parallel.tensor = {par.tensor} needs each tensor group alone on a host's "
         f"link: cluster.host_link set, cluster.ranks_per_host = {par.tensor}, no "
         "cluster.rank_hosts (else a tensor allreduce shares ports with pipeline or "
         "data-parallel messages, and timing it alone would be wrong)"),
    ]


def check_engine(c: Config) -> None:
    """run.engine = "steady" only where it gives the event engine's results."""
    if c.run.engine == "events":
        return
    for refused, why in steady_refusals(c):
        if refused:
            raise ValueError(f"run.engine: 'steady' {why}")
