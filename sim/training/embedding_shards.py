"""Where embedding-table rows live, and what a batch's sparse lookups cost per shard.

Pure (numpy only). A :class:`ShardMap` places every (table, row) and every column of a set
of tables on S shards, by one of TorchRec's sharding types (Ivchenko et al. 2022):

- ``row-hash``: row r of table t on shard ``splitmix64(t, r) mod S`` (row-wise, hashed: hot
  rows scatter over the shards);
- ``row-range``: each table's rows in S contiguous equal ranges (TorchRec's row-wise
  sharding); the lab's ids are Zipf ranks (id 0 the hottest), so the hot rows all load
  shard 0, which is the point of having it;
- ``table``: whole tables, greedily, largest (rows x dim) first onto the least-loaded shard
  (TorchRec's table-wise sharding with its greedy planner);
- ``column``: every row on every shard, each shard holding a contiguous block of columns
  (TorchRec's column-wise sharding).

For a batch's distinct ids per table it answers the rows each shard serves and the bytes of
a pull (ids out, rows back) and a push ((id, row gradient) pairs) per shard: bytes and server
CPU follow the ids touched, not key-range widths (which is how
:class:`sim.simulated.server.ParameterServer` splits a dense vector). The same map over W
workers is DLRM's model-parallel placement (Naumov et al. 2019): :meth:`ShardMap.alltoall_bytes`
gives its all-to-all of pooled embeddings. A worker-side cache of the hottest rows
(:func:`hottest_rows`, :func:`split_cached`) takes its hits off the pulls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sim.workloads.ctr import mix

_CHUNK = 1 << 20  # rows hashed at a time when a whole table is placed (bounds memory)


@dataclass(frozen=True)
class TableSpec:
    """An embedding table: ``rows`` ids, each a row of ``dim`` values.

    Raises ValueError naming ``rows`` or ``dim`` unless each is an integer >= 1.
    """

    rows: int
    dim: int

    def __post_init__(self) -> None:
        for name in ("rows", "dim"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"TableSpec {name}: expected an integer >= 1, got {value!r}")


def row_hash(table: int, ids: np.ndarray) -> np.ndarray:
    """The 64-bit hash of (table, id) for each id: splitmix64(splitmix64(table) xor id),
    the crossed features' :func:`sim.workloads.ctr.mix`. Fixed across runs and machines (no
    Python hash(), which is salted per process)."""
    return mix(table, np.asarray(ids))


# ---- the shardings: each answers where a table's rows and columns are --------------------

class _Sharding:
    """One sharding type over ``tables`` and ``shards``: whole rows on one shard each unless
    it overrides :meth:`counts` and :meth:`columns`."""

    def __init__(self, tables: Sequence[TableSpec], shards: int) -> None:
        self.tables, self.shards = tables, shards

    def owner(self, table: int, ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def columns(self, table: int) -> np.ndarray:
        """(S,) columns of each of the table's rows that a shard holds: row-wise and
        table-wise shards hold whole rows."""
        return np.full(self.shards, self.tables[table].dim, np.int64)

    def counts(self, table: int, ids: np.ndarray, weights: np.ndarray | None = None
               ) -> np.ndarray:
        """(S,) float: how many of ``ids`` (or their ``weights`` summed) each shard holds."""
        return np.bincount(self.owner(table, ids), weights, self.shards).astype(float)


class _RowHash(_Sharding):
    def owner(self, table: int, ids: np.ndarray) -> np.ndarray:
        return (row_hash(table, ids) % np.uint64(self.shards)).astype(np.int64)


class _RowRange(_Sharding):
    def __init__(self, tables: Sequence[TableSpec], shards: int) -> None:
        super().__init__(tables, shards)
        # np.array_split's ranges: the first rows % S shards one row longer
        self.ends = [_split_ends(t.rows, shards) for t in tables]

    def owner(self, table: int, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.ends[table], ids, side="right").astype(np.int64)


class _TableWise(_Sharding):
    def __init__(self, tables: Sequence[TableSpec], shards: int) -> None:
        super().__init__(tables, shards)
        # greedy: largest first (stable: equal sizes in table order), each onto the least
        # loaded shard, lowest index on ties (np.argmin's first minimum)
        sizes = np.array([t.rows * t.dim for t in tables], np.int64)
        load = np.zeros(shards, np.int64)
        self.placed = np.zeros(len(tables), np.int64)
        for t in np.argsort(-sizes, kind="stable"):
            s = int(np.argmin(load))
            self.placed[t], load[s] = s, load[s] + sizes[t]

    def owner(self, table: int, ids: np.ndarray) -> np.ndarray:
        return np.full(np.shape(ids), self.placed[table], np.int64)

    def columns(self, table: int) -> np.ndarray:
        out = np.zeros(self.shards, np.int64)
        out[self.placed[table]] = self.tables[table].dim
        return out

    def counts(self, table: int, ids: np.ndarray, weights: np.ndarray | None = None
               ) -> np.ndarray:
        out = np.zeros(self.shards)
        out[self.placed[table]] = np.size(ids) if weights is None else weights.sum()
        return out


class _ColumnWise(_Sharding):
    def owner(self, table: int, ids: np.ndarray) -> np.ndarray:
        raise ValueError("owner: under column sharding every row is on every shard that "
                         "holds some of its columns; see columns(table)")

    def columns(self, table: int) -> np.ndarray:
        return np.diff(_split_ends(self.tables[table].dim, self.shards), prepend=0)

    def counts(self, table: int, ids: np.ndarray, weights: np.ndarray | None = None
               ) -> np.ndarray:
        total = np.size(ids) if weights is None else weights.sum()
        return np.where(self.columns(table) > 0, float(total), 0.0)


SHARDINGS: dict[str, type[_Sharding]] = {
    "row-hash": _RowHash,
    "row-range": _RowRange,
    "table": _TableWise,
    "column": _ColumnWise,
}


def _split_ends(n: int, parts: int) -> np.ndarray:
    """End (exclusive) of each of np.array_split(range(n), parts)'s parts."""
    return np.cumsum([len(part) for part in np.array_split(np.arange(n), parts)])


class Lookups(NamedTuple):
    """An owner's lookups for a global batch: ids looked up, and values read (ids x the
    columns it holds of each), per owner."""

    ids: np.ndarray
    values: np.ndarray


class ShardMap:
    """``tables`` placed on ``shards`` shards by ``sharding`` (a key of :data:`SHARDINGS`).

    Raises ValueError naming ``tables`` (not a non-empty sequence of TableSpec),
    ``shards`` (not an integer >= 1) or ``sharding`` (unknown; the known ones listed).
    """

    def __init__(self, tables: Sequence[TableSpec], shards: int, sharding: str) -> None:
        if (isinstance(tables, str | bytes) or not isinstance(tables, Sequence) or not tables
                or not all(isinstance(t, TableSpec) for t in tables)):
            raise ValueError(f"tables: expected a non-empty sequence of TableSpec, "
                             f"got {tables!r}")
        if not _is_int(shards) or shards < 1:
            raise ValueError(f"shards: expected an integer >= 1, got {shards!r}")
        if sharding not in SHARDINGS:
            raise ValueError(f"sharding: expected one of {', '.join(SHARDINGS)}, "
                             f"got {sharding!r}")
        self.tables, self.shards, self.sharding = tuple(tables), int(shards), sharding
        self._placed = SHARDINGS[sharding](self.tables, self.shards)

    # ---- placement -------------------------------------------------------------------

    def owner(self, table: int, ids: np.ndarray) -> np.ndarray:
        """The shard (int64) of each of ``ids``, rows of table ``table``.

        Raises ValueError under column sharding (a row is on every shard that holds some of
        its columns: see :meth:`columns`), or naming ``table`` or ``ids`` when out of range.
        """
        return self._placed.owner(self._table(table), self._ids(table, ids, "ids"))

    def columns(self, table: int) -> list[int]:
        """Columns of each of table ``table``'s rows that each shard holds: under column
        sharding np.array_split(range(dim), S)'s sizes (a table with dim < S on its first dim
        shards only); under table sharding dim on the owner, 0 elsewhere; under a row
        sharding dim on every shard (each holds whole rows)."""
        return self._placed.columns(self._table(table)).tolist()

    # ---- a batch's rows and bytes per shard --------------------------------------------

    def rows_per_shard(self, unique_ids: Sequence[np.ndarray]) -> np.ndarray:
        """(S,) float: rows each shard serves for a batch whose distinct ids per table are
        ``unique_ids`` (under column sharding a row counts on every shard holding some of
        its columns). Raises ValueError naming ``unique_ids`` (one array per table, ids in
        range)."""
        ids = self._per_table(unique_ids, "unique_ids")
        return sum((self._placed.counts(t, i) for t, i in enumerate(ids)),
                   np.zeros(self.shards))

    def pull_bytes(self, unique_ids: Sequence[np.ndarray], value_bytes: int = 8,
                   id_bytes: int = 8) -> tuple[np.ndarray, np.ndarray]:
        """(request_bytes, reply_bytes), each (S,) float: the request to shard s carries the
        ids it serves (``id_bytes`` each), its reply their rows (the columns it holds x
        ``value_bytes`` each); 0 for a shard not involved. No message headers (the
        caller's). Raises ValueError naming ``unique_ids``, ``value_bytes`` or
        ``id_bytes``."""
        rows, values = self._rows_values(unique_ids, value_bytes, id_bytes)
        return rows * id_bytes, values * value_bytes

    def push_bytes(self, unique_ids: Sequence[np.ndarray], value_bytes: int = 8,
                   id_bytes: int = 8) -> np.ndarray:
        """(S,) float: bytes of the (id, row gradient) pairs each shard is sent for the
        rows it serves (as :meth:`pull_bytes`' request plus reply)."""
        rows, values = self._rows_values(unique_ids, value_bytes, id_bytes)
        return rows * id_bytes + values * value_bytes

    def _rows_values(self, unique_ids: Sequence[np.ndarray], value_bytes: int,
                     id_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, row values) each shard serves."""
        for name, value in (("value_bytes", value_bytes), ("id_bytes", id_bytes)):
            if not _is_int(value) or value < 0:
                raise ValueError(f"{name}: expected an integer >= 0, got {value!r}")
        return self._served(self._per_table(unique_ids, "unique_ids"))

    def served(self, unique_ids: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(rows, row values) each shard holds of a batch's distinct ids per table: what
        :meth:`rows_per_shard` and :meth:`pull_bytes` count, counted once. Raises
        ValueError naming ``unique_ids``."""
        return self._served(self._per_table(unique_ids, "unique_ids"))

    def _served(self, ids: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(rows, row values) each shard holds of ``ids`` (checked, one array per table)."""
        rows, values = np.zeros(self.shards), np.zeros(self.shards)
        for t, i in enumerate(ids):
            served = self._placed.counts(t, i)
            rows += served
            values += served * self._placed.columns(t)
        return rows, values

    def expected_rows_per_shard(self, probabilities: Sequence[np.ndarray],
                                draws: Sequence[int]) -> np.ndarray:
        """(S,) float: rows each shard is expected to serve for a batch drawing ``draws[t]``
        ids of table t independently with ``probabilities[t]`` (one per row): row i is in
        the batch with probability 1 - (1 - p_i)^B, summed over the rows a shard holds.

        Raises ValueError naming ``probabilities`` (one array of rows' length per table,
        each in [0, 1]) or ``draws`` (one integer >= 0 per table).
        """
        if len(probabilities) != len(self.tables):
            raise ValueError(f"probabilities: expected {len(self.tables)} arrays (one per "
                             f"table), got {len(probabilities)}")
        if len(draws) != len(self.tables) or not all(_is_int(b) and b >= 0 for b in draws):
            raise ValueError(f"draws: expected {len(self.tables)} integers >= 0, got {draws!r}")
        out = np.zeros(self.shards)
        for t, (spec, p, b) in enumerate(zip(self.tables, probabilities, draws, strict=True)):
            p = np.asarray(p, float)
            if p.shape != (spec.rows,) or not np.all((p >= 0) & (p <= 1)):
                raise ValueError(f"probabilities[{t}]: expected {spec.rows} values in [0, 1]")
            # 1 - (1 - p)^B without the cancellation of a small p
            present = -np.expm1(b * np.log1p(-np.minimum(p, 1.0 - 1e-300)))
            present[p >= 1] = 1.0 if b > 0 else 0.0
            for lo in range(0, spec.rows, _CHUNK):
                hi = min(lo + _CHUNK, spec.rows)
                out += self._placed.counts(t, np.arange(lo, hi), present[lo:hi])
        return out

    # ---- the same map over W workers: DLRM's all-to-all ----------------------------------

    def alltoall_bytes(self, batch_rows: Sequence[int], value_bytes: int = 8) -> np.ndarray:
        """(W, W) float, W = shards as workers: [j, i] the bytes owner j sends worker i in
        the forward all-to-all of pooled embeddings (DLRM, Naumov et al. 2019; TorchRec), for
        i's local batch of ``batch_rows[i]`` samples: ``batch_rows[i]`` x the pooled columns
        j holds x ``value_bytes``. Table-wise, j holds its tables' dims; column-wise, its
        columns of every table; row-wise, every rank sends partial pooled sums of every
        field (dim each), as TorchRec's row-wise sharding reduce-scatters them. The diagonal
        (a rank's own part) is 0; the backward (gradients of the pooled vectors) is the
        transpose. Raises ValueError naming ``batch_rows`` (W integers >= 0) or
        ``value_bytes``."""
        rows = np.asarray(batch_rows)
        if (rows.shape != (self.shards,) or rows.dtype.kind not in "iu"
                or np.any(rows < 0)):
            raise ValueError(f"batch_rows: expected {self.shards} integers >= 0 (one per "
                             f"worker), got {batch_rows!r}")
        if not _is_int(value_bytes) or value_bytes < 0:
            raise ValueError(f"value_bytes: expected an integer >= 0, got {value_bytes!r}")
        pooled = sum((self._placed.columns(t) for t in range(len(self.tables))),
                     np.zeros(self.shards, np.int64))
        out = np.outer(pooled, rows).astype(float) * value_bytes
        np.fill_diagonal(out, 0.0)
        return out

    def lookup_work(self, ids_per_table: Sequence[np.ndarray]) -> Lookups:
        """Each owner's lookups for a global batch whose ids (every occurrence, the bags of
        all workers) per table are ``ids_per_table``: the ids it looks up and the values it
        reads (ids x its columns of them), for the simulator to charge as CPU. Raises
        ValueError naming ``ids_per_table``."""
        return Lookups(*self._served(self._per_table(ids_per_table, "ids_per_table")))

    # ---- checks ------------------------------------------------------------------------

    def _table(self, table: int) -> int:
        if not _is_int(table) or not 0 <= table < len(self.tables):
            raise ValueError(f"table: expected an index in [0, {len(self.tables)}), "
                             f"got {table!r}")
        return int(table)

    def _ids(self, table: int, ids: np.ndarray, name: str) -> np.ndarray:
        """``ids`` as a flat integer array, each a row of table ``table``."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0
                         or ids.max() >= self.tables[table].rows):
            raise ValueError(f"{name}: table {table}'s ids must be integers in "
                             f"[0, {self.tables[table].rows})")
        return ids.astype(np.int64, copy=False)

    def _per_table(self, ids: Sequence[np.ndarray], name: str) -> list[np.ndarray]:
        if len(ids) != len(self.tables):
            raise ValueError(f"{name}: expected {len(self.tables)} arrays (one per table), "
                             f"got {len(ids)}")
        return [self._ids(t, i, name) for t, i in enumerate(ids)]


def load_max_over_mean(rows_per_shard: np.ndarray) -> float:
    """Max over mean of the shards' loads (1 is balanced; S is all on one shard); 1.0 when
    no shard has any. Raises ValueError naming ``rows_per_shard`` (empty or negative)."""
    load = np.asarray(rows_per_shard, float)
    if load.ndim != 1 or load.size == 0 or np.any(load < 0):
        raise ValueError(f"rows_per_shard: expected a non-empty 1-d array >= 0, got {load!r}")
    mean = load.mean()
    return float(load.max() / mean) if mean > 0 else 1.0


# ---- a worker's cache of hot rows ------------------------------------------------------

def hottest_rows(ids_per_table: Sequence[np.ndarray], cache_rows: int) -> list[np.ndarray]:
    """Per table, the ids (sorted, int64) of the ``cache_rows`` (table, row) pairs that occur
    most often in ``ids_per_table`` (occurrences, over all tables together); ties go to the
    lower table, then the lower id, so the choice is deterministic. Fewer if fewer distinct
    pairs occur. Raises ValueError naming ``cache_rows`` (not an integer >= 0) or
    ``ids_per_table`` (not integers >= 0)."""
    if not _is_int(cache_rows) or cache_rows < 0:
        raise ValueError(f"cache_rows: expected an integer >= 0, got {cache_rows!r}")
    tables, rows, counts = [], [], []
    for t, ids in enumerate(ids_per_table):
        ids = np.asarray(ids).reshape(-1)
        if ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0):
            raise ValueError(f"ids_per_table: table {t}'s ids must be integers >= 0")
        unique, count = np.unique(ids.astype(np.int64), return_counts=True)
        tables.append(np.full(unique.size, t, np.int64))
        rows.append(unique)
        counts.append(count)
    table, row = np.concatenate(tables or [[]]), np.concatenate(rows or [[]])
    order = np.lexsort((row, table, -np.concatenate(counts or [[]])))[:cache_rows]
    kept_table, kept_row = table[order], row[order]
    return [np.sort(kept_row[kept_table == t]).astype(np.int64)
            for t in range(len(ids_per_table))]


def split_cached(unique_ids: Sequence[np.ndarray], cached: Sequence[np.ndarray]
                 ) -> tuple[list[np.ndarray], np.ndarray]:
    """(to_pull, hits): per table the distinct ids not in the cache (in their order), and
    (F,) int64 how many were in it. ``cached``: per table sorted ids (:func:`hottest_rows`).
    Raises ValueError naming ``cached`` (not one array per table)."""
    if len(cached) != len(unique_ids):
        raise ValueError(f"cached: expected {len(unique_ids)} arrays (one per table), "
                         f"got {len(cached)}")
    to_pull, hits = [], np.zeros(len(unique_ids), np.int64)
    for t, (ids, held) in enumerate(zip(unique_ids, cached, strict=True)):
        ids, held = np.asarray(ids).reshape(-1), np.asarray(held).reshape(-1)
        at = np.minimum(np.searchsorted(held, ids), max(held.size - 1, 0))
        hit = held[at] == ids if held.size else np.zeros(ids.size, bool)
        to_pull.append(ids[~hit])
        hits[t] = int(hit.sum())
    return to_pull, hits


def cache_hit_rate(hits: np.ndarray, unique_ids: Sequence[np.ndarray]) -> float:
    """Hits over the distinct ids looked up (0.0 when none were)."""
    looked = sum(np.size(ids) for ids in unique_ids)
    return float(np.sum(hits)) / looked if looked else 0.0


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
