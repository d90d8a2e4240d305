"""Embedding rows on shards (sim/training/embedding_shards.py): rows served and bytes per
shard for each of TorchRec's sharding types, the Zipf load they carry, DLRM's all-to-all and
the hot-row cache, each against a formula or a hand count written out here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.training.embedding_shards import (
    SHARDINGS,
    ShardMap,
    TableSpec,
    cache_hit_rate,
    hottest_rows,
    load_max_over_mean,
    split_cached,
)
from sim.workloads.ctr import splitmix64

MASK = (1 << 64) - 1


def mix(x: int) -> int:
    """splitmix64 in Python integers (Vigna's reference: state + gamma, then the mix)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def hash_shard(table: int, row: int, shards: int) -> int:
    """Row-hash placement as documented: splitmix64(splitmix64(table) xor row) mod S."""
    return mix(mix(table) ^ row) % shards


def zipf(rows: int, s: float) -> np.ndarray:
    """P(row i) for i = 1..rows proportional to i^-s, stored as id i - 1."""
    p = np.arange(1, rows + 1, dtype=float) ** -s
    return p / p.sum()


def present(p: np.ndarray, draws: int) -> np.ndarray:
    """P(row in a batch of ``draws`` independent draws) = 1 - (1 - p)^B."""
    return 1.0 - (1.0 - p) ** draws


def ranges(rows: int, shards: int) -> list[np.ndarray]:
    return np.array_split(np.arange(rows), shards)


# ---- the hash ---------------------------------------------------------------------------

def test_splitmix64_matches_the_reference_outputs():
    """Seed 0's first output, and seed 1234567's first two (the state advancing by the
    gamma), as published with the reference implementation and rand_xoshiro's tests."""
    assert int(splitmix64(np.uint64(0))) == 0xE220A8397B1DCDAF
    first = splitmix64(np.array([1234567, 1234567 + 0x9E3779B97F4A7C15], np.uint64))
    assert first.tolist() == [6457827717110365317, 3203168211198807973]
    xs = np.array([0, 1, 2**63, MASK, 987654321], np.uint64)
    assert splitmix64(xs).tolist() == [mix(int(x)) for x in xs]


def test_row_hash_owner_is_splitmix_of_table_and_row():
    tables = [TableSpec(500, 4), TableSpec(300, 2)]
    m = ShardMap(tables, 7, "row-hash")
    for t, spec in enumerate(tables):
        ids = np.arange(spec.rows)
        assert m.owner(t, ids).tolist() == [hash_shard(t, r, 7) for r in range(spec.rows)]
    # tables hash apart: the same ids land differently
    assert m.owner(0, np.arange(300)).tolist() != m.owner(1, np.arange(300)).tolist()


# ---- Zipf load: simulated batches against the per-row expectation -----------------------

@pytest.mark.parametrize("sharding", ["row-range", "row-hash"])
def test_mean_rows_per_shard_of_simulated_zipf_batches_is_the_expectation(sharding):
    """Batches drawn here (B_t ids per table, Zipf(s_t)): the mean rows each shard serves
    is within 3 standard errors of sum over its rows of 1 - (1 - p_i)^B, computed here from
    the placement rule (array_split ranges, or the hash above)."""
    specs = [(TableSpec(1000, 4), 1.0, 64), (TableSpec(300, 2), 1.2, 32)]
    tables = [t for t, _, _ in specs]
    shards, batches = 4, 3000
    m = ShardMap(tables, shards, sharding)
    rng = np.random.default_rng(7)
    probs = [zipf(t.rows, s) for t, s, _ in specs]
    draws = [b for _, _, b in specs]
    ids = [rng.choice(t.rows, size=(batches, b), p=p)
           for (t, _, b), p in zip(specs, probs, strict=True)]
    served = np.array([m.rows_per_shard([np.unique(x[n]) for x in ids])
                       for n in range(batches)])
    expected = m.expected_rows_per_shard(probs, draws)
    own = np.zeros(shards)
    for t, (spec, p, b) in enumerate(zip(tables, probs, draws, strict=True)):
        q = present(p, b)
        if sharding == "row-range":
            for s, part in enumerate(ranges(spec.rows, shards)):
                own[s] += q[part].sum()
        else:
            for r in range(spec.rows):
                own[hash_shard(t, r, shards)] += q[r]
    np.testing.assert_allclose(expected, own, rtol=1e-12)
    mean, se = served.mean(0), served.std(0, ddof=1) / np.sqrt(batches)
    assert np.all(np.abs(mean - expected) <= 3 * se), (mean, expected, se)
    if sharding == "row-range":  # the hot rows, ids 0.., all on shard 0
        assert np.argmax(expected) == 0 and expected[0] > 2 * expected[1:].max()


def test_row_hash_imbalance_falls_toward_one_as_tables_grow_while_row_range_stays_high():
    """Zipf(1.0) and (1.2), B = 1024 draws, 8 shards: the expected max/mean under row-hash
    falls as V grows (1e3, 1e4, 1e5), within what a uniformly random placement's spread
    allows (4 standard deviations of a shard's load: var = (1/S)(1 - 1/S) sum q_i^2), while
    under row-range shard 0 keeps the hot head (well over 2x the mean)."""
    shards, draws = 8, 1024
    for s in (1.0, 1.2):
        hashed = []
        for rows in (1_000, 10_000, 100_000):
            p = zipf(rows, s)
            q = present(p, draws)
            by_hash = ShardMap([TableSpec(rows, 8)], shards, "row-hash")
            by_range = ShardMap([TableSpec(rows, 8)], shards, "row-range")
            e_hash = by_hash.expected_rows_per_shard([p], [draws])
            e_range = by_range.expected_rows_per_shard([p], [draws])
            np.testing.assert_allclose(e_hash.sum(), q.sum(), rtol=1e-12)
            spread = np.sqrt((1 / shards) * (1 - 1 / shards) * (q**2).sum()) / (q.sum() / shards)
            hashed.append(load_max_over_mean(e_hash))
            assert hashed[-1] - 1 <= 4 * spread
            head = [part.size for part in ranges(rows, shards)][0]
            assert load_max_over_mean(e_range) == pytest.approx(q[:head].sum() * shards / q.sum())
            assert load_max_over_mean(e_range) > 2.5
        assert hashed[0] > hashed[1] > hashed[2] and hashed[2] < 1.15, hashed


def test_load_max_over_mean():
    assert load_max_over_mean(np.array([1.0, 1.0, 1.0])) == 1.0
    assert load_max_over_mean(np.array([4.0, 0.0, 0.0, 0.0])) == 4.0
    assert load_max_over_mean(np.zeros(3)) == 1.0
    with pytest.raises(ValueError, match="rows_per_shard"):
        load_max_over_mean(np.array([-1.0, 2.0]))


# ---- placement and bytes, by hand ---------------------------------------------------------

TABLES = [TableSpec(10, 4), TableSpec(6, 3)]
BATCH = [np.array([0, 1, 7]), np.array([5])]  # distinct ids per table


def test_row_range_rows_and_bytes_by_hand():
    """S = 2: table 0 rows 0-4 | 5-9, table 1 rows 0-2 | 3-5; ids {0, 1, 7} and {5}: shard 0
    serves 2 rows of dim 4, shard 1 one of dim 4 and one of dim 3."""
    m = ShardMap(TABLES, 2, "row-range")
    assert m.owner(0, np.arange(10)).tolist() == [0] * 5 + [1] * 5
    assert m.owner(1, np.arange(6)).tolist() == [0] * 3 + [1] * 3
    assert m.rows_per_shard(BATCH).tolist() == [2, 2]
    request, reply = m.pull_bytes(BATCH, value_bytes=4, id_bytes=8)
    assert request.tolist() == [16, 16]
    assert reply.tolist() == [2 * 4 * 4, 4 * 4 + 3 * 4]
    assert m.push_bytes(BATCH, value_bytes=4, id_bytes=8).tolist() == [16 + 32, 16 + 28]
    # uneven ranges: array_split gives the first rows % S shards one more row
    m3 = ShardMap([TableSpec(7, 1)], 3, "row-range")
    assert m3.owner(0, np.arange(7)).tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert ShardMap([TableSpec(2, 1)], 4, "row-range").owner(0, np.arange(2)).tolist() == [0, 1]


def test_row_hash_rows_and_bytes_by_hand():
    """S = 3, owners from the hash written above; each row's bytes go to its owner."""
    m = ShardMap(TABLES, 3, "row-hash")
    rows, request, reply = np.zeros(3), np.zeros(3), np.zeros(3)
    for t, ids in enumerate(BATCH):
        for r in ids:
            s = hash_shard(t, int(r), 3)
            rows[s] += 1
            request[s] += 8
            reply[s] += TABLES[t].dim * 8
    assert m.rows_per_shard(BATCH).tolist() == rows.tolist()
    got_request, got_reply = m.pull_bytes(BATCH)
    assert got_request.tolist() == request.tolist() and got_reply.tolist() == reply.tolist()
    assert m.push_bytes(BATCH).tolist() == (request + reply).tolist()
    assert m.columns(0) == [4, 4, 4]


def test_table_wise_greedy_largest_first_onto_least_loaded():
    """Sizes 40, 18, 25, 4 on 2 shards: 40 -> 0; 25 -> 1; 18 -> 1 (25 < 40); 4 -> 0 (43 > 40).
    Equal sizes keep table order and go to the lowest least-loaded shard."""
    tables = [TableSpec(10, 4), TableSpec(6, 3), TableSpec(5, 5), TableSpec(2, 2)]
    m = ShardMap(tables, 2, "table")
    assert [int(m.owner(t, np.array([0]))[0]) for t in range(4)] == [0, 1, 1, 0]
    assert m.columns(1) == [0, 3] and m.columns(3) == [2, 0]
    batch = [np.array([1, 2]), np.array([0]), np.array([4, 3, 2]), np.array([1])]
    assert m.rows_per_shard(batch).tolist() == [3, 4]
    request, reply = m.pull_bytes(batch)
    assert request.tolist() == [3 * 8, 4 * 8]
    assert reply.tolist() == [(2 * 4 + 1 * 2) * 8, (1 * 3 + 3 * 5) * 8]
    ties = ShardMap([TableSpec(3, 2), TableSpec(2, 3), TableSpec(6, 1)], 2, "table")
    assert [int(ties.owner(t, np.array([0]))[0]) for t in range(3)] == [0, 1, 0]
    # more shards than tables: the rest hold nothing
    spare = ShardMap(TABLES, 4, "table")
    assert spare.rows_per_shard(BATCH).tolist() == [3, 1, 0, 0]


def test_column_split_puts_every_row_on_each_shard_holding_columns():
    """dim 4 over 3 shards: columns 2, 1, 1; dim 3: 1, 1, 1; dim 2 (< S): 1, 1, 0."""
    tables = [TableSpec(10, 4), TableSpec(6, 3), TableSpec(5, 2)]
    m = ShardMap(tables, 3, "column")
    assert [m.columns(t) for t in range(3)] == [[2, 1, 1], [1, 1, 1], [1, 1, 0]]
    batch = [np.array([0, 1, 7]), np.array([5]), np.array([0, 4])]
    assert m.rows_per_shard(batch).tolist() == [6, 6, 4]
    request, reply = m.pull_bytes(batch)
    assert request.tolist() == [6 * 8, 6 * 8, 4 * 8]
    assert reply.tolist() == [(3 * 2 + 1 + 2) * 8, (3 + 1 + 2) * 8, (3 + 1) * 8]
    with pytest.raises(ValueError, match="columns"):
        m.owner(0, np.array([1]))


@pytest.mark.parametrize("sharding", sorted(SHARDINGS))
def test_pull_and_push_bytes_sum_to_ids_times_row_bytes(sharding):
    """Summed over shards: each distinct id's row (dim x value_bytes) once and its id once
    per shard it goes to (one for whole rows; each shard holding columns, column-wise)."""
    rng = np.random.default_rng(3)
    tables = [TableSpec(50, 3), TableSpec(20, 8), TableSpec(90, 1), TableSpec(7, 5)]
    m = ShardMap(tables, 5, sharding)
    batch = [np.unique(rng.integers(0, t.rows, 30)) for t in tables]
    holders = [sum(c > 0 for c in m.columns(t)) if sharding == "column" else 1
               for t in range(len(tables))]
    ids = sum(b.size * h for b, h in zip(batch, holders, strict=True))
    values = sum(b.size * t.dim for b, t in zip(batch, tables, strict=True))
    request, reply = m.pull_bytes(batch, value_bytes=4, id_bytes=8)
    assert request.sum() == ids * 8 and reply.sum() == values * 4
    assert m.push_bytes(batch, value_bytes=4, id_bytes=8).sum() == ids * 8 + values * 4
    assert m.rows_per_shard(batch).sum() == ids
    assert np.all(m.pull_bytes([np.array([], np.int64)] * 4)[1] == 0)


# ---- DLRM's all-to-all over W workers -------------------------------------------------------

def alltoall_sums(m: ShardMap, batch_rows: list[int], bytes_: int) -> None:
    """Row j: owner j's pooled columns x every other worker's batch; column i: worker i's
    batch x the pooled columns of every other owner."""
    a = m.alltoall_bytes(batch_rows, bytes_)
    w = len(batch_rows)
    pooled = np.array([sum(m.columns(t)[j] for t in range(len(m.tables))) for j in range(w)])
    rows = np.array(batch_rows)
    assert np.all(np.diag(a) == 0)
    np.testing.assert_array_equal(a.sum(1), pooled * (rows.sum() - rows) * bytes_)
    np.testing.assert_array_equal(a.sum(0), rows * (pooled.sum() - pooled) * bytes_)


def test_alltoall_table_wise_by_hand():
    """Table 0 (dim 4) on worker 0, table 1 (dim 3) on worker 1; local batches 3 and 5:
    0 sends 1 its 5 samples' dim-4 vectors, 1 sends 0 its 3 samples' dim-3 vectors."""
    m = ShardMap(TABLES, 2, "table")
    a = m.alltoall_bytes([3, 5], value_bytes=4)
    assert a.tolist() == [[0, 5 * 4 * 4], [3 * 3 * 4, 0]]
    alltoall_sums(m, [3, 5], 4)


def test_alltoall_column_wise_by_hand():
    """W = 3: columns per worker of dims 4 and 3: (2 + 1, 1 + 1, 1 + 1)."""
    m = ShardMap(TABLES, 3, "column")
    a = m.alltoall_bytes([2, 3, 4])
    expected = [[0, 3 * 3 * 8, 4 * 3 * 8], [2 * 2 * 8, 0, 4 * 2 * 8], [2 * 2 * 8, 3 * 2 * 8, 0]]
    assert a.tolist() == expected
    alltoall_sums(m, [2, 3, 4], 8)


@pytest.mark.parametrize("sharding", ["row-hash", "row-range"])
def test_alltoall_row_wise_sends_partial_sums_of_every_field(sharding):
    """Row-wise: every owner sends each other worker partial pooled sums of both tables,
    batch x (4 + 3) x value_bytes, whatever rows it holds."""
    m = ShardMap(TABLES, 3, sharding)
    a = m.alltoall_bytes([2, 3, 4])
    assert a.tolist() == [[0 if i == j else b * 7 * 8 for i, b in enumerate([2, 3, 4])]
                          for j in range(3)]
    alltoall_sums(m, [2, 3, 4], 8)


def test_lookup_work_counts_every_occurrence_at_its_owner():
    m = ShardMap(TABLES, 2, "row-range")
    work = m.lookup_work([np.array([0, 0, 1, 9]), np.array([5, 5, 5])])
    assert work.ids.tolist() == [3, 4] and work.values.tolist() == [3 * 4, 4 + 3 * 3]
    col = ShardMap(TABLES, 3, "column").lookup_work([np.array([0, 0]), np.array([1])])
    assert col.ids.tolist() == [3, 3, 3] and col.values.tolist() == [2 * 2 + 1, 2 + 1, 2 + 1]


# ---- the hot-row cache ----------------------------------------------------------------------

def test_hottest_rows_by_hand_and_deterministic():
    """Counts: (0,3) 2, (0,1) 2, (0,2) 1, (1,0) 2, (1,5) 3, (1,7) 1. The top 3: (1,5); then
    of the three with 2, the lower table then the lower id: (0,1), (0,3)."""
    ids = [np.array([3, 3, 1, 1, 2]), np.array([0, 0, 5, 5, 5, 7])]
    top = hottest_rows(ids, 3)
    assert [t.tolist() for t in top] == [[1, 3], [5]]
    rng = np.random.default_rng(0)
    shuffled = [rng.permutation(x) for x in ids]
    assert [t.tolist() for t in hottest_rows(shuffled, 3)] == [[1, 3], [5]]
    assert [t.tolist() for t in hottest_rows(ids, 0)] == [[], []]
    assert [t.tolist() for t in hottest_rows(ids, 100)] == [[1, 2, 3], [0, 5, 7]]


def test_hottest_rows_are_the_most_frequent_against_counting():
    rng = np.random.default_rng(5)
    ids = [rng.choice(200, 400, p=zipf(200, 1.1)), rng.choice(50, 300, p=zipf(50, 0.7))]
    top = hottest_rows(ids, 25)
    counts = {(t, int(r)): int(c) for t, x in enumerate(ids)
              for r, c in zip(*np.unique(x, return_counts=True), strict=True)}
    ranked = sorted(counts, key=lambda k: (-counts[k], k[0], k[1]))[:25]
    assert [t.tolist() for t in top] == [sorted(r for tt, r in ranked if tt == t)
                                         for t in range(2)]


def test_split_cached_and_hit_rate():
    unique = [np.array([0, 1, 2, 3]), np.array([0, 5, 9])]
    cached = [np.array([1, 3]), np.array([5])]
    to_pull, hits = split_cached(unique, cached)
    assert [t.tolist() for t in to_pull] == [[0, 2], [0, 9]] and hits.tolist() == [2, 1]
    assert cache_hit_rate(hits, unique) == pytest.approx(3 / 7)
    none, zero = split_cached(unique, [np.array([], np.int64)] * 2)
    assert [t.tolist() for t in none] == [u.tolist() for u in unique] and zero.sum() == 0
    assert cache_hit_rate(zero, [np.array([], np.int64)]) == 0.0


# ---- bad arguments ---------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(st.integers(max_value=0))
def test_shards_below_one_raise_naming_shards(shards):
    with pytest.raises(ValueError, match="shards"):
        ShardMap(TABLES, shards, "row-hash")


@settings(max_examples=25, deadline=None)
@given(st.text(max_size=12).filter(lambda s: s not in SHARDINGS))
def test_unknown_sharding_raises_listing_the_known(name):
    with pytest.raises(ValueError, match="sharding: expected one of row-hash, row-range, "
                                         "table, column"):
        ShardMap(TABLES, 2, name)


def test_bad_arguments_raise_naming_them():
    for bad in ([], [(10, 4)], "tables", None):
        with pytest.raises(ValueError, match="tables"):
            ShardMap(bad, 2, "table")
    with pytest.raises(ValueError, match="rows"):
        TableSpec(0, 4)
    with pytest.raises(ValueError, match="dim"):
        TableSpec(4, 1.5)
    with pytest.raises(ValueError, match="shards"):
        ShardMap(TABLES, True, "table")
    m = ShardMap(TABLES, 2, "row-hash")
    with pytest.raises(ValueError, match="unique_ids"):
        m.rows_per_shard([np.array([1])])
    with pytest.raises(ValueError, match="unique_ids"):
        m.pull_bytes([np.array([10]), np.array([0])])
    with pytest.raises(ValueError, match="value_bytes"):
        m.push_bytes(BATCH, value_bytes=-1)
    with pytest.raises(ValueError, match="ids"):
        m.owner(1, np.array([-1]))
    with pytest.raises(ValueError, match="table"):
        m.owner(2, np.array([0]))
    with pytest.raises(ValueError, match="draws"):
        m.expected_rows_per_shard([zipf(10, 1.0), zipf(6, 1.0)], [4])
    with pytest.raises(ValueError, match="probabilities"):
        m.expected_rows_per_shard([zipf(9, 1.0), zipf(6, 1.0)], [4, 4])
    with pytest.raises(ValueError, match="batch_rows"):
        m.alltoall_bytes([1, 2, 3])
    with pytest.raises(ValueError, match="cache_rows"):
        hottest_rows(BATCH, -1)
    with pytest.raises(ValueError, match="cached"):
        split_cached(BATCH, [np.array([0])])
