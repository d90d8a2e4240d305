"""Build a simulation from a resolved config, run it, and return its results.

Randomness: one ``SeedSequence(run.seed)`` is spawned into fixed streams (data, model
initialisation, workers' batches, compute times, codecs), so the same config and seed
always give the same run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from sim.config import Config, dump_config
from sim.kernels import NonFiniteError
from sim.network.runner import build_network
from sim.network.topology import place, topology_options
from sim.record import CountingEnvironment, Recorder
from sim.training.compression import make_codec
from sim.training.compute import ComputeModel
from sim.training.pipeline import LayerCosts
from sim.training.server import ParameterServer
from sim.training.strategies import STRATEGIES, Context
from sim.training.worker import Worker
from sim.workloads.datasets import DatasetSpec, make_dataset, shard
from sim.workloads.models import make_model
from sim.workloads.profiles import get_profile

TRACE_FLOWS = 2000  # flows shown on the trace's link tracks (the first ones of the run)


@dataclass
class Result:
    summary: dict[str, Any]
    metrics_csv: str
    trace: dict[str, Any]
    config_toml: str

    def files(self) -> dict[str, str]:
        """The run directory's files (name -> text), as :func:`sim.record.write_run` takes."""
        return {"config.toml": self.config_toml,
                "summary.json": json.dumps(self.summary, indent=2) + "\n",
                "metrics.csv": self.metrics_csv,
                "trace.json": json.dumps(self.trace)}


def _topology_kwargs(config: Config) -> dict[str, Any]:
    accepted = topology_options(config.cluster.topology)
    given = {"oversubscription": config.cluster.oversubscription,
             "hosts_per_leaf": config.cluster.hosts_per_leaf}
    return {k: v for k, v in given.items() if k in accepted}


def build(config: Config) -> tuple[CountingEnvironment, Context, Any]:
    """The environment, the strategy's context and the strategy, ready to start.

    With ``workload.numerics = false`` (a timing profile only) there is no data set and
    no parameter vector: the run simulates time alone.
    """
    cluster, workload, run = config.cluster, config.workload, config.run
    streams = np.random.SeedSequence(run.seed).spawn(5)
    data_rng, init_rng, codec_seed = (np.random.default_rng(streams[0]),
                                      np.random.default_rng(streams[1]),
                                      int(streams[4].generate_state(1)[0]))
    data, model = _workload(config, data_rng)
    layers = LayerCosts.from_profile(get_profile(workload.profile)) if workload.profile \
        else LayerCosts.from_model(model)
    strategy_cls = STRATEGIES[config.strategy.kind]
    servers = cluster.servers if strategy_cls.uses_servers else 0
    env = CountingEnvironment()
    options = {"topology": cluster.topology, "model": cluster.network,
               **_topology_kwargs(config)}
    network = build_network(env, cluster.fabric, cluster.workers + servers, **options)
    hosts = place(network.topology, cluster.workers + servers, cluster.placement)
    batch_rngs = [np.random.default_rng(s) for s in streams[2].spawn(cluster.workers)]
    shards = shard(data.n_train if data else 0, cluster.workers, workload.shard, data_rng)
    size = model.size if model else 0
    workers = [Worker(i, int(hosts[i]), shards[i], data, model, workload.batch, batch_rngs[i],
                      make_codec(config.strategy, size, codec_seed + i))
               for i in range(cluster.workers)]
    params = model.init(init_rng) if model else np.zeros(0)
    compute = ComputeModel(config.compute, layers.flops(workload.batch), cluster.workers,
                           int(streams[3].generate_state(1)[0]))
    recorder = Recorder(env, cluster.workers, run.iterations, run.eval_every, run.target_loss)
    server = ParameterServer(network, hosts[cluster.workers:], params.copy(), workload) \
        if servers else None
    ctx = Context(env, config, network, model, params, workers, compute, recorder, server,
                  layers, model is not None, {**options, "placement": cluster.placement})
    strategy = strategy_cls(ctx)
    if model is not None:
        recorder.evaluate = lambda: model.evaluate(strategy.model_of_record(), data.X_test,
                                                   data.y_test)
    return env, ctx, strategy


def _workload(config: Config, rng: np.random.Generator) -> tuple[Any, Any]:
    """(data set, model), or (None, None) for a timing-only run."""
    workload = config.workload
    if not workload.numerics:
        return None, None
    spec = DatasetSpec(workload.dataset, workload.samples, workload.features, workload.classes,
                       workload.separation, workload.noise, workload.nnz_per_row,
                       workload.zipf_exponent, workload.test_fraction)
    data = make_dataset(spec, rng)
    model = make_model(workload.model, data.features, data.classes,
                       hidden=tuple(workload.hidden), l2=workload.l2,
                       nnz_per_row=workload.nnz_per_row)
    return data, model


def simulate(config: Config, progress: Callable[[int, int], None] | None = None) -> Result:
    """Run the experiment; a diverged run (NaN/Inf) stops early with ``diverged: true``.

    ``progress(updates_done, updates_total)`` is called at every evaluation.
    """
    env, ctx, strategy = build(config)
    recorder = ctx.recorder
    recorder.on_eval = progress
    ctx.network.start_log(TRACE_FLOWS)
    started = time.perf_counter()
    strategy.start()
    recorder.evaluate_now()
    limit = config.run.time_limit_s
    until = recorder.done if limit is None else simpy.AnyOf(env, [recorder.done,
                                                                 env.timeout(limit)])
    try:
        env.run(until=until)
        if not recorder.finished:  # stopped by the time limit: evaluate where it stopped
            recorder.evaluate_now()
    except NonFiniteError:
        recorder.diverge()
    except RuntimeError as exc:  # SimPy: no events left before `done`
        raise RuntimeError(f"simulation stalled at t={env.now:.6g} s after "
                           f"{recorder.iteration} updates: {exc}") from None
    wall_s = time.perf_counter() - started
    summary = recorder.summary(config.run.seed, wall_s, env.events_processed,
                               strategy=config.strategy.kind, fabric=ctx.network.fabric.name,
                               workers_n=ctx.n, stragglers=ctx.compute.stragglers,
                               compute_time_s=ctx.compute.base_s, **strategy.summary_extra())
    trace = recorder.trace(ctx.network.flow_log, ctx.network.topology.link_name)
    return Result(summary, recorder.metrics_csv(), trace, dump_config(config))
