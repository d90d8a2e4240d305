"""What a run trains, for either executor: data, shards, model, initial parameters, and each
worker's batch stream, gradient buffer and codec, plus the compute-time model. No SimPy and
no MPI: the simulator (:func:`sim.simulated.engine.build_simulation`) and the real ranks
(:mod:`sim.real.executors`) both start from :func:`build_workload`.

Randomness: one ``SeedSequence(run.seed)`` is spawned into fixed streams (data, model
initialisation, workers' batches, compute times, codecs), so the same config and seed
always give the same workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.training.compression import Dense, make_codec
from sim.training.compute_model import ComputeModel
from sim.training.messages import LayerCosts
from sim.workloads.datasets import (
    Dataset,
    DatasetSpec,
    csr_rows,
    ctr_columns,
    dataset_shape,
    make_dataset,
    shard,
)
from sim.workloads.models import Model, make_model
from sim.workloads.precision import run_itemsize
from sim.workloads.timing_profiles import get_profile

if TYPE_CHECKING:
    from sim.config import Config


class Worker:
    """Worker ``index`` training on the rows ``shard`` (``host``: its network host, set by
    the simulator)."""

    def __init__(self, index: int, shard: np.ndarray, data: Dataset | None,
                 model: Model | None, batch: int, rng: np.random.Generator,
                 codec: Dense) -> None:
        self.index, self.host, self.shard = index, index, shard
        self.data, self.model, self.batch, self.rng, self.codec = data, model, batch, rng, codec
        self.grad = np.zeros(model.size if model is not None else 0)
        self.clock = 0  # iterations this worker has completed
        self._order = rng.permutation(shard)
        self._next = 0
        self._peeked: tuple[Any, np.ndarray] | None = None
        self.last_batch: tuple[Any, np.ndarray] | None = None

    @property
    def batch_bytes(self) -> int:
        """Bytes of the rows a batch gathers (0 without data)."""
        if self.data is None:
            return 0
        X = self.data.X_train
        if self.data.ctr is not None:  # dense features, ids and crossed ids of a row
            return self.batch * X.row_bytes
        if self.data.sparse:  # values and column indices of the rows' nonzeros
            per_row = X[0].size / max(1, X[2].size - 1)
            return int(self.batch * per_row * (X[0].itemsize + X[1].itemsize))
        return self.batch * X.shape[1] * X.itemsize

    def next_batch(self) -> tuple[Any, np.ndarray]:
        """The next ``batch`` rows of the shard, without replacement within an epoch (the
        one :meth:`peek_batch` showed, if it was called); :attr:`last_batch` keeps it."""
        if self._peeked is not None:
            batch, self._peeked = self._peeked, None
        else:
            batch = self._draw()
        self.last_batch = batch
        return batch

    def peek_batch(self) -> tuple[Any, np.ndarray]:
        """The batch :meth:`next_batch` will return next (what a pull for it asks for)."""
        if self._peeked is None:
            self._peeked = self._draw()
        return self._peeked

    def _draw(self) -> tuple[Any, np.ndarray]:
        if self._next + self.batch > len(self._order):
            self._order, self._next = self.rng.permutation(self.shard), 0
        rows = self._order[self._next:self._next + self.batch]
        self._next += self.batch
        X = csr_rows(self.data.X_train, rows) if self.data.sparse else self.data.X_train[rows]
        return X, self.data.y_train[rows]

    def gradient(self, params: np.ndarray) -> float:
        """Mini-batch loss; the gradient at ``params`` is left in :attr:`grad`."""
        X, y = self.next_batch()
        loss, _ = self.model.loss_grad(params, X, y, out=self.grad)
        return loss


@dataclass
class Workload:
    """Everything a run trains on; ``data`` and ``model`` are None for a timing profile."""

    config: Config
    data: Dataset | None
    model: Model | None
    params: np.ndarray  # the initial parameters (empty for a timing profile)
    workers: list[Worker]
    compute: ComputeModel
    layers: LayerCosts  # per-layer FLOPs and gradient bytes (of the model or a profile)

    @property
    def n(self) -> int:
        return len(self.workers)

    @property
    def numerics(self) -> bool:
        """False: timing only (a profile, no data and no parameters)."""
        return self.model is not None


def build_workload(config: Config) -> Workload:
    """The workload of a resolved config (``sim.config.Config``)."""
    cluster, workload, run = config.cluster, config.workload, config.run
    streams = np.random.SeedSequence(run.seed).spawn(5)
    data_rng, init_rng, codec_seed = (np.random.default_rng(streams[0]),
                                      np.random.default_rng(streams[1]),
                                      int(streams[4].generate_state(1)[0]))
    data, model = _data_and_model(config, data_rng)
    item = run_itemsize(config)  # bytes per element: the run's precision, one place
    layers = LayerCosts.from_profile(get_profile(workload.profile), item) if workload.profile \
        else LayerCosts.from_model(model or shaped_model(config), item)
    batch_rngs = [np.random.default_rng(s) for s in streams[2].spawn(cluster.workers)]
    shards = shard(data.n_train if data else 0, cluster.workers, workload.shard, data_rng)
    size = model.size if model else 0
    workers = [Worker(i, shards[i], data, model, workload.batch, batch_rngs[i],
                      make_codec(config.strategy, size, codec_seed + i))
               for i in range(cluster.workers)]
    params = model.init(init_rng) if model else np.zeros(0)
    # a compute time stream per rank: with [parallel], each of a replica's stages and shards
    # draws its own (with one stage and one shard, ranks are the workers)
    ranks = cluster.workers * config.parallel.pipeline * config.parallel.tensor
    compute = ComputeModel.of_layers(config.compute, layers, workload.batch, ranks,
                                     int(streams[3].generate_state(1)[0]))
    return Workload(config, data, model, params, workers, compute, layers)


def shaped_model(config: Config) -> Model:
    """``config``'s model built from its data set's shape, no data made: what a timing-only
    run of a model without a profile times (its layers' FLOPs and bytes)."""
    w = config.workload
    _, features, classes, _ = dataset_shape(w.dataset, w.samples, w.features, w.classes)
    return make_model(w.model, features, classes, **model_options(config))


def model_options(config: Config) -> dict[str, Any]:
    """The model's keyword options from ``config`` (a click-through-rate data set's
    columns: Criteo's own for its files)."""
    w = config.workload
    fields, ids_per_field, _ = ctr_columns(w.dataset, w.fields, w.ids_per_field, w.features)
    return {"hidden": tuple(w.hidden), "l2": w.l2, "nnz_per_row": w.nnz_per_row,
            "fields": fields, "vocab": w.vocab if isinstance(w.vocab, int) else tuple(w.vocab),
            "embedding_dim": w.embedding_dim, "cross_buckets": w.cross_buckets,
            "pooling": w.pooling, "ids_per_field": ids_per_field}


def _data_and_model(config: Config, rng: np.random.Generator) -> tuple[Any, Any]:
    """(data set, model), or (None, None) for a timing-only run."""
    workload = config.workload
    if not workload.numerics:
        return None, None
    options = model_options(config)
    spec = DatasetSpec(workload.dataset, workload.samples, workload.features, workload.classes,
                       workload.separation, workload.noise, workload.nnz_per_row,
                       workload.zipf_exponent, workload.test_fraction,
                       fields=options["fields"], vocab=_as_tuple(workload.vocab),
                       ids_per_field=options["ids_per_field"],
                       cross_buckets=workload.cross_buckets,
                       embedding_dim=workload.embedding_dim)
    data = make_dataset(spec, rng)
    model = make_model(workload.model, data.features, data.classes, **options)
    return data.labelled_as(model.label_dtype), model


def _as_tuple(vocab: int | list[int]) -> tuple[int, ...]:
    return (vocab,) if isinstance(vocab, int) else tuple(vocab)
