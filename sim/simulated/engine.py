"""Build a simulation from a resolved config, run it, and return its results.

:func:`build_simulation` puts the SimPy side (environment, network, hosts, servers,
recorder, the strategy's processes) around :func:`sim.training.workload.build_workload`,
which real ranks use alone.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import simpy

from sim.config import Cluster, Config, dump_config
from sim.kernels import NonFiniteError
from sim.network.fabrics import get_fabric
from sim.network.message_cost import wire_fabric
from sim.network.network_builder import (
    build_network,
    endpoint_machines,
    nic_ports,
    with_host_link,
)
from sim.network.topology import place, topology_options
from sim.network.transports import get_transport
from sim.recorder import Recorder
from sim.simulated.hosts import Hosts
from sim.simulated.recovery import build_recovery
from sim.simulated.replayed import MeasuredTimes, Replay
from sim.simulated.server import ParameterServer
from sim.simulated.strategies.base import Context, Strategy
from sim.trace import worker_track
from sim.training.config_warnings import config_warnings
from sim.training.embedding_traffic import EmbeddingTraffic
from sim.training.host_costs import CpuCosts, cpu_costs, load_host
from sim.training.parallel_plan import Plan, build_plan, rank_track, splits
from sim.training.rank_memory import memory_summary
from sim.training.store import ParameterStore
from sim.training.strategies import make_rules, row_of
from sim.training.workload import Workload, build_workload


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


@dataclass
class Result:
    summary: dict[str, Any]
    metrics_csv: str
    trace: dict[str, Any]
    config_toml: str

    def files(self) -> dict[str, str]:
        """The run directory's files (name -> text), as :func:`sim.rundir.write_run` takes."""
        return {"config.toml": self.config_toml,
                "summary.json": json.dumps(self.summary, indent=2) + "\n",
                "metrics.csv": self.metrics_csv,
                "trace.json": json.dumps(self.trace)}


class Simulation(NamedTuple):
    """A simulation ready to start: ``strategy.start()``, then run ``env`` until ``ctx.done``."""

    env: CountingEnvironment
    ctx: Context
    strategy: Strategy


def _topology_kwargs(config: Config) -> dict[str, Any]:
    accepted = topology_options(config.cluster.topology)
    given = {"oversubscription": config.cluster.oversubscription,
             "hosts_per_leaf": config.cluster.hosts_per_leaf}
    return {k: v for k, v in given.items() if k in accepted}


def _shared_nics(cluster: Cluster, machines: Sequence[int]) -> dict[str, Any]:
    """The topology's ``ports`` when a host's ranks share cluster.nics_per_host NICs (none:
    every rank its own NIC, no option)."""
    if cluster.nics_per_host is None:
        return {}
    return {"ports": nic_ports(machines, cluster.nics_per_host).tolist()}


def rank_hosts(cluster: Cluster, ranks: int) -> list[int]:
    """The host of every rank (workers, then servers)."""
    return list(cluster.rank_hosts) or [r // cluster.ranks_per_host for r in range(ranks)]


def build_hosts(env: simpy.Environment, config: Config, ranks: int,
                costs: CpuCosts, workers: int | None = None) -> Hosts:
    """The cores of the cluster's hosts, with every rank placed on one; the ranks after
    the first ``workers`` (default cluster.workers) are servers, waiting for messages."""
    cluster = config.cluster
    workers = cluster.workers if workers is None else workers
    placed = rank_hosts(cluster, ranks)
    shared = any(placed.count(h) > cluster.cores for h in set(placed))
    # auto, as `sim real` chooses: spin unless ranks share cores with real kernels (with
    # compute.time_s a gradient is a sleep, and spinning waiters take no CPU from it)
    kernels = config.compute.time_s is None
    spin = cluster.wait == "spin" or (cluster.wait == "auto" and not (shared and kernels))
    # under fifo every wait naps, as `sim real --sched fifo` makes its ranks' waits
    spin = spin and cluster.sched == "default"
    host, message = costs.host, costs.message
    if message.reload_s > 0:  # the transport's own path, measured with it
        host = replace(host, message_reload_s=message.reload_s,
                       message_reload_tau_s=message.reload_tau_s)
    return Hosts(env, placed, cluster.cores, host, spin,
                 idle_waiters=range(workers, ranks), sched=cluster.sched)


def _traffic(config: Config, workload: Workload, servers: int) -> EmbeddingTraffic | None:
    """The per-shard accounting of a model whose tables live on the servers, else None."""
    model = workload.model
    if model is None or not model.tables or not servers \
            or config.embeddings.placement != "ps":
        return None
    rows = [workload.data.X_train[w.shard] for w in workload.workers] \
        if config.embeddings.cache_rows else []
    return EmbeddingTraffic(model, config, servers, rows)


def build_simulation(config: Config, plan: Plan | None = None) -> Simulation:
    """The environment, the strategy's context and the strategy, ready to start.

    With ``workload.numerics = false`` (a timing profile only) there is no data set and
    no parameter vector: the run simulates time alone. A config with [parallel] stages,
    shards or microbatches runs its parallelism plan (``plan``, default
    :func:`~sim.training.parallel_plan.build_plan`'s) on the strategy's model-parallel
    class; giving ``plan`` runs that class even for a config that splits nothing (the tests
    compare it with the plain one). ``config`` passed the validator
    (:func:`sim.training.validator.validate`), which refuses a split the simulator cannot
    run.
    """
    cluster, run = config.cluster, config.run
    split = plan is not None or splits(config)
    if split and plan is None:
        plan = build_plan(config)
    workload = build_workload(config)
    rules = make_rules(config)
    row = row_of(config)
    strategy_cls = row.simulated_class(split, run.engine)
    workers = row.worker_ranks(config)  # the ranks that compute: replicas x stages x shards
    servers = row.server_ranks(config)
    env = CountingEnvironment()
    machines = tuple(rank_hosts(cluster, workers + servers))
    options = {"topology": cluster.topology, "model": cluster.network,
               **_topology_kwargs(config), **_shared_nics(cluster, machines)}
    fabric = get_fabric(cluster.fabric)
    transport = get_transport(cluster.transport)
    costs = cpu_costs(load_host(cluster.host), fabric, transport)
    fabric = wire_fabric(fabric, costs.charged)  # o is paid on the cores or on the wire
    network = build_network(env, fabric, workers + servers, transport=transport, **options)
    hosts = place(network.topology, workers + servers, cluster.placement)
    # ranks of one host talk over its host link (none: over the fabric, as any two ranks)
    network = with_host_link(network, cluster.host_link,
                             endpoint_machines(hosts, machines, workers + servers))
    for w in workload.workers:
        w.host = int(hosts[w.index])
    recorder = Recorder(lambda: env.now, workers, run.iterations,
                        rules.evaluates_after, run.target_loss, run.samples)
    done = env.event()
    recorder.on_done = done.succeed
    cores = build_hosts(env, config, workers + servers, costs, workers)
    server = ParameterServer(network, hosts[workers:],
                             ParameterStore(rules, workload.params.copy()),
                             cores, workers, recorder.notes) if servers else None
    if server is not None and cluster.shard_by != "keys":
        server.deal_layers(workload.layers.grad_bytes, cluster.shard_by)
    ctx = Context(env, config, network, workload, rules, recorder, done, server,
                  {**options, "placement": cluster.placement,
                   "host_link": cluster.host_link, "machines": machines},
                  cores, costs, plan=plan,
                  placed=hosts, traffic=_traffic(config, workload, servers))
    strategy = strategy_cls(ctx)
    model, data = workload.model, workload.data
    if model is not None:
        recorder.evaluate = lambda: model.evaluate(strategy.model_of_record(), data.X_test,
                                                   data.y_test)
    ctx.recovery = build_recovery(ctx, strategy)
    return Simulation(env, ctx, strategy)


def simulate(config: Config,
             progress: Callable[[int, float, int], None] | None = None,
             plan: Plan | None = None, measured: MeasuredTimes | None = None) -> Result:
    """Run the experiment; a diverged run (NaN/Inf) stops early with ``diverged: true``.

    ``progress(updates_done, simulated_s, samples_used)`` is called after every update. A
    KeyboardInterrupt (Ctrl-C; :class:`sim.progress.Stopped` for SIGTERM too) stops the run
    where it is: the result is what it reached, with ``complete: false`` and ``stopped_by``.
    ``plan``: as :func:`build_simulation` takes it. ``measured``: a real run's times to
    replay instead of the modelled compute, data and update (:mod:`sim.simulated.replayed`).
    """
    env, ctx, strategy = build_simulation(config, plan)
    ranks = ctx.plan.ranks if ctx.plan is not None else None  # a split replica's ranks
    worker_name = worker_track if ranks is None else lambda w: rank_track(ranks[w])
    if measured is not None:
        tracks = [worker_name(r) for r in range(len(ctx.compute.rngs))]
        ctx.replay = ctx.compute.replay = Replay(measured, tracks, config.run.seed)
        if measured.off_core:  # its steps already hold their waits for a core
            ctx.compute.on_host = False
    recovery = ctx.recovery
    recorder = ctx.recorder
    recorder.on_update = progress
    ctx.network.start_log(config.run.trace_flows, tuple(config.run.trace_window_s or
                                                        (0.0, math.inf)),
                          config.run.trace_samples)
    started = time.perf_counter()
    stopped_by = None
    try:
        strategy.start()
        recorder.evaluate_now()
        limit = config.run.time_limit_s
        stop = None if limit is None else (env.timeout(limit) if recovery is None
                                           else recovery.limit(limit))
        until = ctx.done if stop is None else simpy.AnyOf(env, [ctx.done, stop])
        env.run(until=until)
        if not recorder.finished:  # stopped by the time limit: evaluate where it stopped
            recorder.evaluate_now()
    except NonFiniteError:
        recorder.diverge()
    except KeyboardInterrupt as exc:  # the metrics so far are kept; no evaluation now
        stopped_by = getattr(exc, "signal_name", "SIGINT")
    except RuntimeError as exc:  # SimPy: no events left before `done`
        raise RuntimeError(f"simulation stalled at t={env.now:.6g} s after "
                           f"{recorder.iteration} updates: {exc}") from None
    wall_s = time.perf_counter() - started
    extra = {} if stopped_by is None else {"stopped_by": stopped_by}
    if notes := config_warnings(config):  # options that change nothing, said where it lasts
        extra["notes"] = notes
    if recovery is not None:
        extra.update(recovery.finish())
    if ctx.replay is not None:
        extra["replayed"] = ctx.replay.summary()
    summary = recorder.summary(config.run.seed, wall_s, env.events_processed,
                               complete=stopped_by is None, reduced=config.run.reduced,
                               strategy=config.strategy.kind, fabric=ctx.network.fabric.name,
                               transport=ctx.network.transport.name,
                               workers_n=ctx.n, stragglers=ctx.compute.stragglers,
                               slowdowns=ctx.compute.slowdown_windows,
                               compute_time_s=ctx.compute.base_s, **extra,
                               **memory_summary(config, ctx.compute.device.memory_bytes,
                                                ctx.plan),
                               **strategy.summary_extra(),
                               **(ctx.traffic.summary() if ctx.traffic else {}))
    trace = recorder.trace(ctx.network.flow_log, ctx.network.topology.link_name, worker_name)
    if recovery is not None:
        trace = recovery.trace(trace)
    return Result(summary, recorder.metrics_csv(), trace, dump_config(config))
