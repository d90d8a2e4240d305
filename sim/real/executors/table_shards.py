"""Which part of a wide-deep model each rank of a real run holds, and the wire format of
sparse rows; pure (numpy), shared by :mod:`sim.real.executors.ps_tables` (server shards)
and :mod:`sim.real.executors.bsp_tables` (tables split over the workers, all-to-all).

A rank keeps a full-size copy of the flat parameter vector but holds, and reads and writes,
only its part: the table rows the :class:`~sim.training.embedding_shards.ShardMap` gives it
and its part of the dense parameters (the MLP). Everything else is NaN in its copy, so a
read of a row it does not hold would show in the numbers. At evaluation points each rank
snapshots its copy and :meth:`ShardLayout.merge` puts the model of record together from
the parts.

A row is named on the wire by a *global id*: the row's index in the concatenation of every
table's rows (wide part first), an int64, so one sorted array of ids names rows of every
table and a message needs no per-table lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sim.training.embedding_shards import ShardMap, TableSpec


class ShardLayout:
    """``model``'s tables placed on ``shards`` shards by ``sharding`` (a row sharding or
    ``table``: every shard holds whole rows), its dense part split in equal key ranges
    (``split_dense``, as :class:`~sim.training.embedding_traffic.EmbeddingTraffic` counts it)
    or held by every shard."""

    def __init__(self, model: Any, shards: int, sharding: str, split_dense: bool) -> None:
        self.model, self.shards = model, shards
        self.tables = list(model.tables)
        self.map = ShardMap([TableSpec(t.rows, t.dim) for t in self.tables], shards, sharding)
        self.offsets = np.cumsum([0] + [t.rows for t in self.tables]).astype(np.int64)
        self.dims = np.array([t.dim for t in self.tables], np.int64)
        # each table's row -> its shard, looked up per batch (hashing on every batch costs
        # more than the lookups); every table's rows on each shard, for poisoning and merging
        self.owner = [self.map.owner(t, np.arange(table.rows))
                      for t, table in enumerate(self.tables)]
        self.owned = [[np.flatnonzero(owner == s) for owner in self.owner]
                      for s in range(shards)]
        start, size = model.dense_start, model.size
        if split_dense:
            ends = np.cumsum([len(p) for p in np.array_split(np.arange(size - start),
                                                             shards)]) + start
            self.dense = [(int(lo), int(hi)) for lo, hi in
                          zip([start, *ends[:-1]], ends, strict=True)]
        else:
            self.dense = [(start, size)] * shards

    # ---- a rank's part --------------------------------------------------------------

    def own(self, params: np.ndarray, shard: int) -> np.ndarray:
        """A copy of ``params`` with NaN everywhere but ``shard``'s part."""
        out = np.full_like(params, np.nan)
        for table, rows in zip(self.tables, self.owned[shard], strict=True):
            table.view(out)[rows] = table.view(params)[rows]
        lo, hi = self.dense[shard]
        out[lo:hi] = params[lo:hi]
        return out

    def merge(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The full vector from every shard's copy (``parts[s]``), each read in its part."""
        out = np.full_like(parts[0], np.nan)
        for s, part in enumerate(parts):
            for table, rows in zip(self.tables, self.owned[s], strict=True):
                table.view(out)[rows] = table.view(part)[rows]
            lo, hi = self.dense[s]
            out[lo:hi] = part[lo:hi]
        return out

    # ---- rows on the wire -------------------------------------------------------------

    def split(self, rows: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per shard, the global ids (sorted int64) of ``rows`` (distinct rows per table,
        each sorted) that it holds."""
        owners = [self.owner[t][r] for t, r in enumerate(rows)]
        return [np.concatenate([r[o == s] + self.offsets[t]
                                for t, (r, o) in enumerate(zip(rows, owners, strict=True))])
                for s in range(self.shards)]

    def tables_of(self, ids: np.ndarray) -> list[tuple[int, np.ndarray, slice]]:
        """For sorted global ``ids``: (table, its rows, where their values lie in a block of
        the rows' values laid end to end), for each table with some."""
        t = np.searchsorted(self.offsets, ids, side="right") - 1
        bounds = np.searchsorted(t, np.arange(len(self.tables) + 1))
        out, at = [], 0
        for i in range(len(self.tables)):
            lo, hi = bounds[i], bounds[i + 1]
            if hi > lo:
                width = int(hi - lo) * int(self.dims[i])
                out.append((i, ids[lo:hi] - self.offsets[i], slice(at, at + width)))
                at += width
        return out

    def values(self, ids: np.ndarray) -> int:
        """Values (float64) of the rows ``ids`` name."""
        t = np.searchsorted(self.offsets, ids, side="right") - 1
        return int(self.dims[t].sum())

    def read(self, params: np.ndarray, ids: np.ndarray, out: np.ndarray) -> int:
        """Write the rows ``ids`` of ``params`` into ``out`` end to end; values written."""
        at = 0
        for t, rows, where in self.tables_of(ids):
            out[where] = self.tables[t].view(params)[rows].reshape(-1)
            at = where.stop
        return at

    def write(self, params: np.ndarray, ids: np.ndarray, values: np.ndarray) -> None:
        """The rows ``ids`` of ``params`` become ``values`` (laid end to end)."""
        for t, rows, where in self.tables_of(ids):
            self.tables[t].view(params)[rows] = values[where].reshape(len(rows), -1)

    def max_rows(self, batch: int) -> int:
        """The most distinct rows one batch of ``batch`` samples can touch (every table)."""
        model = self.model
        wide = min(self.tables[0].rows, batch * max(model.fields - 1, 0) + 1)
        return wide + sum(min(t.rows, batch * model.ids_per_field) for t in self.tables[1:])


RowGrads = list[tuple[int, np.ndarray, np.ndarray]]  # per table: (table, rows, (u, dim) grads)


def step_mean_rows(layout: ShardLayout, sgd: Any, total: np.ndarray,
                   grads: Sequence[RowGrads], lr: float) -> None:
    """Step the rows that ``grads`` (one list per worker, in worker order) carry by their
    mean over the workers, with ``sgd``'s row optimizer (:class:`~sim.training.rules.SGD`'s
    ``tables``). The mean is summed in the order given, then scaled by 1 / len(grads), in
    ``total`` (a full-size scratch vector, written at those rows only): the arithmetic of
    :meth:`sim.training.rules.Rules.mean` and of a bsp allreduce's mean on a flat gradient
    whose untouched rows are zeros (x + 0 is x), so each row gets the same bits."""
    union: dict[int, list[np.ndarray]] = {}
    for worker in grads:
        for t, rows, _ in worker:
            union.setdefault(t, []).append(rows)
    rows_of = {t: np.unique(np.concatenate(parts)) for t, parts in union.items()}
    for t, rows in rows_of.items():
        layout.tables[t].view(total)[rows] = 0.0
    for worker in grads:
        for t, rows, values in worker:
            layout.tables[t].view(total)[rows] += values
    scale = 1.0 / len(grads)
    for t, rows in sorted(rows_of.items()):
        view = layout.tables[t].view(total)
        view[rows] *= scale
        sgd.tables.step_rows(t, rows, view[rows], lr)
