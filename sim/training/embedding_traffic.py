"""What a wide-deep worker's pulls and pushes carry to each server shard, from the ids its
batch actually touches; pure (numpy), so both executors count the same bytes.

A pull asks each shard for the distinct rows of each table it owns (``embeddings.sharding``,
:class:`~sim.training.embedding_shards.ShardMap`) and gets back exactly those rows; a push
sends (id, row gradient) pairs. The dense part (the MLP) is split over the shards by equal
key ranges, as every model's parameters are. So a hot row loads the shard that owns it.

With ``embeddings.cache_rows``, each worker keeps the rows that occur most often in its own
training shard (counted once, before training) and pulls them only every
``strategy.staleness + 1`` pulls: in between it reads its copy, at most ``staleness``
updates old (the bounded staleness of SSP's client cache, Ho et al. 2013, applied to hot
rows as production recommendation servers do). Pushes always carry every touched row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.network.message_cost import REQUEST_BYTES
from sim.training.embedding_shards import (
    ShardMap,
    TableSpec,
    hottest_rows,
    load_max_over_mean,
    split_cached,
)

if TYPE_CHECKING:
    from sim.config import Config

ID_BYTES = 8  # an int64 row id
VALUE_BYTES = 8  # a float64 value of a row (the model's parameters)


@dataclass(frozen=True)
class Parts:
    """A message to or from the shards: bytes per shard (S,), and the table rows each
    shard's part carries (gathered or scattered by index at both ends) with their bytes."""

    request: np.ndarray  # worker -> shards
    reply: np.ndarray    # shards -> worker (zeros for a push)
    rows: np.ndarray     # table rows in each shard's part (a pull's reply, a push)
    row_bytes: np.ndarray  # their values' bytes

    @property
    def nbytes(self) -> float:
        return float(self.request.sum() + self.reply.sum())


class _Cache:
    """One worker's hot rows: which (per table) and their values as last pulled."""

    def __init__(self, rows: list[np.ndarray]) -> None:
        self.rows = rows
        self.values: list[np.ndarray] | None = None  # None: never pulled
        self.age = 0  # pulls since the last refresh

    def due(self, staleness: int) -> bool:
        return self.values is None or self.age > staleness


class EmbeddingTraffic:
    """Per-shard bytes of every worker's pulls and pushes, and what they add up to.

    ``model``: a model with tables (:class:`sim.workloads.wide_deep.WideDeep`); ``shards``:
    the server shards; ``worker_rows``: each worker's training rows
    (:class:`sim.workloads.ctr.CtrRows`), which pick its cached rows.
    """

    def __init__(self, model: Any, config: Config, shards: int,
                 worker_rows: Sequence[Any] = ()) -> None:
        self.model, self.shards = model, shards
        self.map = ShardMap([TableSpec(t.rows, t.dim) for t in model.tables], shards,
                            config.embeddings.sharding)
        dense = [len(p) for p in np.array_split(np.arange(model.size - model.dense_start),
                                                shards)]
        self.dense_bytes = np.array(dense, float) * VALUE_BYTES
        self.staleness = config.strategy.staleness
        self.caches = [_Cache(hottest_rows(_occurrences(model, rows), config.embeddings.cache_rows))
                       for rows in worker_rows] if config.embeddings.cache_rows else []
        self.served = np.zeros(shards)  # rows each shard served in pulls
        self.rows_pushed = 0.0  # table rows the pushes carried, summed over the shards
        self.pulls = self.pushes = 0
        self.unique_ids = self.hits = 0
        self.pull_bytes = self.push_bytes = 0.0
        self._request, self._reply, self._pushed = (np.zeros(shards) for _ in range(3))

    def pull(self, worker: int, X: Any) -> Parts:
        """What ``worker``'s pull for the batch ``X`` asks each shard (ids it owns, and a
        request header) and gets back (those rows, and the shard's part of the dense
        parameters); counted in the totals."""
        touched = self.model.touched(X)
        wanted = touched
        if self.caches:
            cache = self.caches[worker]
            if cache.due(self.staleness):  # refresh: the cached rows are pulled too
                wanted = [np.union1d(t, c) for t, c in zip(touched, cache.rows, strict=True)]
            else:
                wanted, hits = split_cached(touched, cache.rows)
                self.hits += int(hits.sum())
        served, values = self.map.served(wanted)
        ids, rows = served * ID_BYTES, values * VALUE_BYTES
        request = np.where(ids + self.dense_bytes > 0, REQUEST_BYTES + ids, 0.0)
        parts = Parts(request, rows + self.dense_bytes, served, rows)
        self.served += served
        self.pulls += 1
        self.unique_ids += sum(len(t) for t in touched)
        self.pull_bytes += parts.nbytes
        self._request += parts.request
        self._reply += parts.reply
        return parts

    def push(self, X: Any) -> Parts:
        """The (id, row gradient) pairs of batch ``X``'s touched rows, and the dense
        gradient, per shard; counted in the totals."""
        parts = self._pairs(self.model.touched(X))
        self.pushes += 1
        self.rows_pushed += float(parts.rows.sum())
        self.push_bytes += parts.nbytes
        self._pushed += parts.request
        return parts

    def read(self, worker: int, replica: np.ndarray) -> None:
        """``worker`` has just pulled into ``replica``: its cached rows there are replaced
        by its copy of them, or, when the pull refreshed them, its copy by them."""
        if not self.caches:
            return
        cache, tables = self.caches[worker], self.model.tables
        if cache.due(self.staleness):
            cache.values = [t.view(replica)[rows].copy()
                            for t, rows in zip(tables, cache.rows, strict=True)]
            cache.age = 0
        else:
            for table, rows, values in zip(tables, cache.rows, cache.values, strict=True):
                table.view(replica)[rows] = values
        cache.age += 1

    def union_push(self, batches: Sequence[Any]) -> Parts:
        """What a synchronous step updates on each shard: the union of the rows
        ``batches`` touched, as (id, row) pairs, and the dense part (``request``), and
        those rows and their values' bytes."""
        touched = [self.model.touched(X) for X in batches]
        return self._pairs([np.unique(np.concatenate(ids))
                            for ids in zip(*touched, strict=True)])

    def _pairs(self, rows: list[np.ndarray]) -> Parts:
        """(id, row) pairs of ``rows`` (distinct, per table) and the dense part, per shard."""
        served, values = self.map.served(rows)
        row_bytes = values * VALUE_BYTES
        return Parts(served * ID_BYTES + row_bytes + self.dense_bytes, np.zeros(self.shards),
                     served, row_bytes)

    def mean_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pull request, pull reply, push) bytes per shard of the mean pull and push."""
        pulls, pushes = max(1, self.pulls), max(1, self.pushes)
        return (self._request / pulls, self._reply / pulls, self._pushed / pushes)

    def summary(self) -> dict[str, Any]:
        """The summary.json keys (module docstring): per worker and step, means."""
        pulls, pushes = max(1, self.pulls), max(1, self.pushes)
        return {"unique_ids_per_step": self.unique_ids / pulls,
                "pull_bytes_per_step": self.pull_bytes / pulls,
                "push_bytes_per_step": self.push_bytes / pushes,
                "shard_load_max_over_mean": load_max_over_mean(self.served),
                "cache_hit_rate": self.hits / self.unique_ids if self.unique_ids else 0.0}


def _occurrences(model: Any, rows: Any) -> list[np.ndarray]:
    """Every id occurrence of each table (wide first) in a worker's training rows."""
    return [np.append(rows.wide.reshape(-1), model.cross_buckets)] + \
        [rows.ids[:, f, :].reshape(-1) for f in range(model.fields)]
