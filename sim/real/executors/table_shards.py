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

Consecutive tables of one width lie end to end in the flat vector, so they are one *block*
of rows (wide-deep: the wide part, then every embedding table); reads, writes and steps go
a block at a time, a few numpy calls whatever the number of tables, as a production server
keeps its rows in one store rather than a loop over tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from sim.training.embedding_shards import ShardMap, TableSpec


class Block(NamedTuple):
    """Consecutive tables of one width: flat [start, stop) as rows of ``dim``; its rows are
    the global ids [first, first + rows)."""

    start: int
    stop: int
    dim: int
    first: int
    rows: int

    def view(self, flat: np.ndarray) -> np.ndarray:
        return flat[self.start:self.stop].reshape(-1, self.dim)


def blocks_of(tables: Sequence[Any]) -> list[Block]:
    """The runs of consecutive tables with the same width."""
    out: list[Block] = []
    first = 0
    for t in tables:
        last = out[-1] if out else None
        if last is not None and last.dim == t.dim and last.stop == t.params.start:
            out[-1] = last._replace(stop=t.params.stop, rows=last.rows + t.rows)
        else:
            out.append(Block(t.params.start, t.params.stop, t.dim, first, t.rows))
        first += t.rows
    return out


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
        self.blocks = blocks_of(self.tables)
        self.block_firsts = np.array([b.first for b in self.blocks], np.int64)
        # each table's row -> its shard, looked up per batch (hashing on every batch costs
        # more than the lookups); every table's rows on each shard, for poisoning and merging
        self.owner = [self.map.owner(t, np.arange(table.rows))
                      for t, table in enumerate(self.tables)]
        self.owned = [[np.flatnonzero(owner == s) for owner in self.owner]
                      for s in range(shards)]
        self.owner_of = np.concatenate(self.owner)  # by global id
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
        ids = np.concatenate([r + self.offsets[t] for t, r in enumerate(rows)])
        owners = self.owner_of[ids]
        return [ids[owners == s] for s in range(self.shards)]

    def blocks_in(self, ids: np.ndarray) -> list[tuple[int, np.ndarray, slice]]:
        """For sorted global ``ids``: (block, its rows, where their values lie in a run of
        the rows' values laid end to end), for each block with some."""
        bounds = np.searchsorted(ids, [*self.block_firsts, self.offsets[-1]])
        out, at = [], 0
        for i, block in enumerate(self.blocks):
            lo, hi = bounds[i], bounds[i + 1]
            if hi > lo:
                width = int(hi - lo) * block.dim
                out.append((i, ids[lo:hi] - block.first, slice(at, at + width)))
                at += width
        return out

    def values(self, ids: np.ndarray) -> int:
        """Values (float64) of the rows ``ids`` name."""
        t = np.searchsorted(self.offsets, ids, side="right") - 1
        return int(self.dims[t].sum())

    def read(self, params: np.ndarray, ids: np.ndarray, out: np.ndarray) -> int:
        """Write the rows ``ids`` of ``params`` into ``out`` end to end; values written."""
        at = 0
        for b, rows, where in self.blocks_in(ids):
            out[where] = self.blocks[b].view(params)[rows].reshape(-1)
            at = where.stop
        return at

    def write(self, params: np.ndarray, ids: np.ndarray, values: np.ndarray) -> None:
        """The rows ``ids`` of ``params`` become ``values`` (laid end to end)."""
        for b, rows, where in self.blocks_in(ids):
            self.blocks[b].view(params)[rows] = values[where].reshape(len(rows), -1)

    def block_of(self, table: int) -> tuple[int, int]:
        """(the block holding table ``table``, the block's row where the table starts)."""
        b = int(np.searchsorted(self.block_firsts, self.offsets[table], side="right") - 1)
        return b, int(self.offsets[table] - self.blocks[b].first)

    def to_blocks(self, per_table: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> RowGrads:
        """Rows of tables (table, its sorted rows, their (u, dim) values), tables in order,
        as rows of blocks (block, its sorted rows, their values)."""
        parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for t, rows, values in per_table:
            b, start = self.block_of(t)
            parts.setdefault(b, []).append((rows + start, values))
        return [(b, np.concatenate([r for r, _ in got]), np.concatenate([v for _, v in got]))
                for b, got in parts.items()]

    def max_rows(self, batch: int) -> int:
        """The most distinct rows one batch of ``batch`` samples can touch (every table)."""
        model = self.model
        wide = min(self.tables[0].rows, batch * max(model.fields - 1, 0) + 1)
        return wide + sum(min(t.rows, batch * model.ids_per_field) for t in self.tables[1:])


RowGrads = list[tuple[int, np.ndarray, np.ndarray]]  # per block: (block, rows, (u, dim) grads)


def step_mean_rows(layout: ShardLayout, sgd: Any, total: np.ndarray,
                   grads: Sequence[RowGrads], lr: float) -> None:
    """Step the rows that ``grads`` (one list per worker, in worker order; rows of blocks,
    :meth:`ShardLayout.blocks_in`) carry by their mean over the workers, with ``sgd``'s row
    optimizer (:class:`~sim.training.rules.SGD`'s ``tables``). The mean is summed in the
    order given, then scaled by 1 / len(grads), in ``total`` (a full-size scratch vector,
    written at those rows only): the arithmetic of :meth:`sim.training.rules.Rules.mean` and
    of a bsp allreduce's mean on a flat gradient whose untouched rows are zeros (x + 0 is
    x), so each row gets the same bits."""
    union: dict[int, list[np.ndarray]] = {}
    for worker in grads:
        for b, rows, _ in worker:
            union.setdefault(b, []).append(rows)
    rows_of = {b: np.unique(np.concatenate(parts)) for b, parts in union.items()}
    for b, rows in rows_of.items():
        layout.blocks[b].view(total)[rows] = 0.0
    for worker in grads:
        for b, rows, values in worker:
            layout.blocks[b].view(total)[rows] += values
    scale = 1.0 / len(grads)
    for b, rows in sorted(rows_of.items()):
        block = layout.blocks[b]
        view = block.view(total)
        mean = view[rows] * scale
        sgd.tables.step_block(block.start, block.stop, block.dim, rows, mean, lr)
