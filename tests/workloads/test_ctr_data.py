"""Click-through-rate data: Zipf ids and the distinct ids a batch touches, crossed ids, the
planted Wide & Deep labels, CtrRows, and the Criteo TSV reader."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from sim.workloads import ctr
from sim.workloads.ctr import CtrRows, CtrShape, cross_ids, expected_unique, zipf_probabilities
from sim.workloads.datasets import DatasetSpec, dataset_shape, make_dataset

MASK = (1 << 64) - 1


def ref_splitmix64(x: int) -> int:
    """SplitMix64's output for state x, in Python ints (Steele, Lea and Flood 2014)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def ref_mix(*keys: int) -> int:
    h = ref_splitmix64(keys[0] & MASK)
    for k in keys[1:]:
        h = ref_splitmix64(h ^ (k & MASK))
    return h


def shape(fields=2, vocab=(100,), k=1, buckets=64, dense=2) -> CtrShape:
    return CtrShape.of(fields, vocab, k, buckets, dense)


# ---- popularity and distinct ids ---------------------------------------------------------

def test_zipf_probabilities_and_expected_unique_against_closed_forms():
    assert np.allclose(zipf_probabilities(5, 0), 0.2)
    harmonic = sum(1 / i for i in range(1, 11))
    assert np.allclose(zipf_probabilities(10, 1.0), [1 / (i * harmonic) for i in range(1, 11)])
    p = zipf_probabilities(3, 1.2)
    assert expected_unique(p, 0) == 0 and expected_unique(p, 1) == pytest.approx(1)
    assert expected_unique(np.array([1.0, 0.0]), 50) == 1 and expected_unique([1.0], 0) == 0
    # B = 4 draws of 3 ids, every sequence enumerated
    exact = sum(math.prod(p[list(seq)]) * len(set(seq))
                for seq in itertools.product(range(3), repeat=4))
    assert expected_unique(p, 4) == pytest.approx(exact, rel=1e-12)
    with pytest.raises(ValueError):
        zipf_probabilities(0, 1.0)
    with pytest.raises(ValueError):
        zipf_probabilities(10, -0.5)


@pytest.mark.parametrize(("s", "vocab", "k", "batch"), [
    (0.0, 1000, 1, 256), (0.6, 5000, 4, 128), (1.0, 20000, 2, 512), (1.2, 100000, 1, 1024),
    (1.2, 500, 8, 64)])
def test_distinct_ids_of_a_batch_match_expected_unique(s, vocab, k, batch):
    batches = 200
    rows, _, _ = ctr.synthetic(shape(vocab=(vocab,), k=k), batches * batch, s, 4,
                               np.random.default_rng(3))
    field = rows.ids[:, 1, :].reshape(batches, batch * k)  # consecutive rows are iid
    counts = np.array([len(np.unique(b)) for b in field])
    expected = expected_unique(zipf_probabilities(vocab, s), batch * k)
    standard_error = counts.std(ddof=1) / np.sqrt(batches)
    assert abs(counts.mean() - expected) < 3 * standard_error, (counts.mean(), expected)
    assert standard_error < 0.01 * expected  # the check can tell a few percent apart


@pytest.mark.parametrize("s", [0.0, 0.6, 1.0, 1.2])
def test_id_frequencies_follow_zipf_probabilities_per_field(s):
    vocab = (200, 50, 1000)
    spec = DatasetSpec("ctr-synthetic", samples=60000, features=3, fields=3, vocab=vocab,
                       ids_per_field=2, zipf_exponent=s, test_fraction=0.1)
    data = make_dataset(spec, np.random.default_rng(1))
    assert data.ctr == CtrShape(3, vocab, 2, 4096, 3)
    for f, v in enumerate(vocab):
        ids = data.X_train.ids[:, f, :].ravel()
        assert ids.min() >= 0 and ids.max() < v
        counts, p = np.bincount(ids, minlength=v), zipf_probabilities(v, s)
        assert stats.chisquare(counts, len(ids) * p).pvalue > 1e-3
        # the head rows (id 0 the hottest) within 4 binomial standard errors
        head, n = slice(0, 10), len(ids)
        se = np.sqrt(n * p[head] * (1 - p[head]))
        assert np.all(np.abs(counts[head] - n * p[head]) < 4 * se)


# ---- data sets ---------------------------------------------------------------------------

def test_ctr_synthetic_is_seeded_split_and_shaped():
    spec = DatasetSpec("ctr-synthetic", samples=1000, features=5, fields=4, vocab=(30,),
                       ids_per_field=3, cross_buckets=128, zipf_exponent=1.0)
    a, b = (make_dataset(spec, np.random.default_rng(5)) for _ in range(2))
    for x, y in ((a.X_train, b.X_train), (a.X_test, b.X_test)):
        assert all(np.array_equal(getattr(x, n), getattr(y, n)) for n in ("dense", "ids", "wide"))
    assert np.array_equal(a.y_train, b.y_train) and np.array_equal(a.y_test, b.y_test)
    other = make_dataset(spec, np.random.default_rng(6))
    assert not np.array_equal(a.X_train.ids, other.X_train.ids)
    assert (len(a.X_train), len(a.X_test)) == (800, 200) == (a.n_train, len(a.y_test))
    assert a.X_train.dense.shape == (800, 5) and a.X_train.ids.shape == (800, 4, 3)
    assert a.X_train.wide.shape == (800, 3)
    assert (a.features, a.classes, a.sparse) == (5, 2, False) and a.y_train.dtype == np.int32
    assert dataset_shape("ctr-synthetic", 1000, 5, 7) == (1000, 5, 2, False)
    # held-out rows are other rows than the training rows; together they are all rows
    rows, labels, _ = ctr.synthetic(a.ctr, 1000, 1.0, spec.embedding_dim,
                                    np.random.default_rng(5))
    dense = np.concatenate([a.X_train.dense, a.X_test.dense])
    assert len(np.unique(dense[:, 0])) == 1000
    order, mine = np.argsort(rows.dense[:, 0]), np.argsort(dense[:, 0])
    assert np.array_equal(rows.dense[order], dense[mine])
    assert np.array_equal(labels[order], np.concatenate([a.y_train, a.y_test])[mine])


@pytest.mark.parametrize(("fields", "vocab", "k", "dense", "s"), [
    (8, 1000, 1, 13, 1.0), (2, 100000, 3, 4, 0.0), (4, 500, 2, 0, 1.2), (1, 50, 1, 8, 0.6)])
def test_planted_model_labels_are_learnable(fields, vocab, k, dense, s):
    """A learner that found the planted model would beat both a coin and the base rate."""
    rows, y, planted = ctr.synthetic(shape(fields, (vocab,), k, 4096, dense), 40000, s, 8,
                                     np.random.default_rng(2))
    margin = planted.margin(rows)
    assert 0.5 < margin.std() < 3  # O(1) margins
    p = 1 / (1 + np.exp(-margin))
    loss = -np.mean(y * np.log(p) + (1 - y) * np.log1p(-p))
    base = y.mean()
    base_loss = -(base * np.log(base) + (1 - base) * np.log(1 - base))
    assert loss < np.log(2) - 0.1 and loss < base_loss - 0.05, (loss, base_loss)
    assert 0.2 < base < 0.4  # clicks are the minority (mean logit -1: about 30%)
    # the labels were drawn from p: their sum is within 4 standard errors of p's
    assert abs(y.sum() - p.sum()) < 4 * np.sqrt(np.sum(p * (1 - p)))


def test_ctr_settings_are_checked():
    with pytest.raises(ValueError, match="vocab"):
        CtrShape.of(3, (10, 20), 1, 8, 1)
    with pytest.raises(ValueError, match="fields"):
        CtrShape.of(0, (10,), 1, 8, 1)
    with pytest.raises(ValueError, match="zipf_exponent"):
        ctr.synthetic(shape(), 10, -1.0, 4, np.random.default_rng(0))


# ---- CtrRows -----------------------------------------------------------------------------

def test_ctr_rows_select_copies_of_rows():
    rng = np.random.default_rng(0)
    rows = CtrRows(rng.standard_normal((10, 3)), rng.integers(0, 9, (10, 4, 2)),
                   rng.integers(0, 5, (10, 3)))
    assert len(rows) == 10 and rows.row_bytes == 8 * (3 + 4 * 2 + 3)
    pick = np.array([7, 2, 2, 9])
    part = rows[pick]
    assert len(part) == 4 and part.row_bytes == rows.row_bytes
    for name in ("dense", "ids", "wide"):
        assert np.array_equal(getattr(part, name), getattr(rows, name)[pick])
    part.ids[0] = -1  # a copy: the data set is untouched
    assert rows.ids[7].min() >= 0
    assert np.array_equal(rows[2:5].dense, rows.dense[2:5])
    assert np.array_equal(rows[rows.dense[:, 0] > 0].ids, rows.ids[rows.dense[:, 0] > 0])
    sliced = rows[0:3]
    sliced.dense[0] = 99.0
    assert rows.dense[0, 0] != 99.0
    with pytest.raises(IndexError):
        rows[np.zeros((2, 2), np.int64)]
    with pytest.raises(ValueError, match="row counts"):
        CtrRows(rows.dense[:3], rows.ids, rows.wide)
    with pytest.raises(ValueError, match="int64"):
        CtrRows(rows.dense, rows.ids.astype(np.int32), rows.wide)


# ---- crossed ids -------------------------------------------------------------------------

def test_splitmix64_matches_the_published_generator_and_a_python_reference():
    assert int(ctr.splitmix64(np.uint64(0))) == 0xE220A8397B1DCDAF  # seed 0, first output
    keys = np.array([0, 1, 2**63, MASK, 123456789], np.uint64)
    assert [int(h) for h in ctr.splitmix64(keys)] == [ref_splitmix64(int(k)) for k in keys]


def test_cross_ids_hash_consecutive_field_pairs():
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 2**40, (500, 4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the wrapping arithmetic warns about nothing
        wide = cross_ids(ids, 1000)
    assert wide.shape == (500, 3) and wide.dtype == np.int64
    assert wide.min() >= 0 and wide.max() < 1000
    assert np.array_equal(wide, cross_ids(ids.copy(), 1000))
    expected = [[ref_mix(f, int(r[f, 0]), int(r[f + 1, 0])) % 1000 for f in range(3)]
                for r in ids[:20]]
    assert wide[:20].tolist() == expected
    assert np.array_equal(cross_ids(ids[:, :, :1], 1000), wide)  # only the first id counts
    assert cross_ids(ids[:, :1], 1000).shape == (500, 0)
    # equal pairs collide; the field position is part of the key
    same = np.array([[[3], [5], [3], [5]], [[3], [5], [7], [7]]], np.int64)
    crossed = cross_ids(same, 2**40)
    assert crossed[0, 0] == crossed[1, 0]
    assert crossed[0, 0] != crossed[0, 2] and crossed[0, 1] != crossed[1, 1]


def test_cross_ids_of_uniform_ids_fill_buckets_uniformly():
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 1000, (100000, 3, 1))
    wide = cross_ids(ids, 64)
    for f in range(2):
        assert stats.chisquare(np.bincount(wide[:, f], minlength=64)).pvalue > 1e-3
    # distinct pairs land in as many buckets as independent uniform draws would fill
    pairs = np.stack(np.meshgrid(np.arange(50), np.arange(40)), axis=-1).reshape(-1, 2, 1)
    occupied = len(np.unique(cross_ids(pairs, 4096)))
    expected = expected_unique(np.full(4096, 1 / 4096), len(pairs))  # 2000 pairs: ~1602
    assert abs(occupied - expected) < 4 * 15  # the occupancy's sd is about 15 here


# ---- Criteo ------------------------------------------------------------------------------

def criteo_line(label="1", ints=None, cats=None) -> str:
    ints = ints if ints is not None else [str(i) for i in range(13)]
    cats = cats if cats is not None else [f"{i:08x}" for i in range(26)]
    return "\t".join([label, *ints, *cats])


def expected_id(field: int, token: str, vocab: int) -> int:
    return 0 if not token else 1 + ref_mix(field, int(token, 16)) % (vocab - 1)


def test_criteo_reader_reads_values_exactly(tmp_path):
    ints = ["", "0", "5", "-2", "1", "", "100", "7", "", "3", "2", "-1", "65535"]
    cats = ["68fd1e64", "", "80e26c9b", "FB936136", "", *[f"{i:08x}" for i in range(21)]]
    lines = [criteo_line("0", ints, cats), criteo_line("1"), criteo_line("1", cats=cats),
             criteo_line("0")]
    path = tmp_path / "day.tsv"
    path.write_text("\n".join(lines) + "\n")
    vocab = (1000,)
    rows, labels = ctr.read_criteo(path, ctr.criteo_shape(vocab, 512), max_rows=3)
    assert labels.tolist() == [0, 1, 1] and labels.dtype == np.int32
    # DLRM's preprocessing: empty is 0, negatives are clipped to 0, then log(1 + x); to the
    # last bit but one (numpy's vectorised log1p differs from libm's by an ulp on some CPUs:
    # AMD EPYC, 2026-11-27), while a misread integer moves it by far more
    raw = [0, 0, 5, 0, 1, 0, 100, 7, 0, 3, 2, 0, 65535]
    np.testing.assert_array_max_ulp(rows.dense[0], [math.log1p(x) for x in raw], maxulp=1)
    np.testing.assert_array_max_ulp(rows.dense[1], [math.log1p(x) for x in range(13)],
                                    maxulp=1)
    assert rows.ids.shape == (3, 26, 1)
    assert rows.ids[0, :, 0].tolist() == [expected_id(f, t, 1000) for f, t in enumerate(cats)]
    assert rows.ids[0, 1, 0] == rows.ids[0, 4, 0] == 0  # empty tokens
    assert np.array_equal(rows.ids[0], rows.ids[2])  # the same tokens, the same ids
    assert rows.ids[:, :, 0][rows.ids[:, :, 0] > 0].min() >= 1 and rows.ids.max() < 1000
    assert np.array_equal(rows.wide, cross_ids(rows.ids, 512))
    # one vocab size per field
    sizes = tuple(range(2, 28))
    rows, _ = ctr.read_criteo(path, ctr.criteo_shape(sizes, 512), max_rows=10)
    assert len(rows) == 4 and np.all(rows.ids[:, :, 0] < np.array(sizes))
    assert rows.ids[1, 0, 0] == 1  # vocab 2: every present value is id 1


def test_criteo_through_make_dataset_and_dataset_shape(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(criteo_line(str(i % 2)) for i in range(30)) + "\n")
    name = f"criteo:{path}"
    assert dataset_shape(name, 20, 99, 7) == (20, 13, 2, False)
    assert dataset_shape(name, 1000, 99, 7) == (30, 13, 2, False)
    data = make_dataset(DatasetSpec(name, samples=20, vocab=(64,), cross_buckets=32,
                                    test_fraction=0.25), np.random.default_rng(0))
    assert (data.n_train, len(data.y_test), data.features, data.classes) == (15, 5, 13, 2)
    assert data.ctr == CtrShape(26, (64,) * 26, 1, 32, 13) and not data.sparse
    assert isinstance(data.X_train, CtrRows) and data.X_train.wide.max() < 32
    with pytest.raises(KeyError, match="criteo:PATH"):
        make_dataset(DatasetSpec("criteo"), np.random.default_rng(0))


@pytest.mark.parametrize(("bad", "message"), [
    (criteo_line()[:-9], "columns"),
    (criteo_line() + "\t", "columns"),
    ("", "columns"),
    (criteo_line(label="2"), "label '2'"),
    (criteo_line(label=""), "label ''"),
    (criteo_line(ints=["1.5", *["1"] * 12]), "I1 '1.5'"),
    (criteo_line(ints=[*["1"] * 12, " 4"]), "I13 ' 4'"),
    (criteo_line(ints=["1" * 19, *["1"] * 12]), "I1"),
    (criteo_line(cats=["zz12ab34", *["1"] * 25]), "C1 'zz12ab34'"),
    (criteo_line(cats=[*["1"] * 25, "0x1f"]), "C26 '0x1f'"),
    (criteo_line(cats=["1" * 17, *["1"] * 25]), "C1"),
    (criteo_line(cats=["ab\u00e9", *["1"] * 25]), "C1"),
])
def test_criteo_reader_names_the_file_and_line_of_a_bad_line(tmp_path, bad, message):
    path = tmp_path / "bad.tsv"
    path.write_text("\n".join([criteo_line(), criteo_line("0"), bad, criteo_line()]) + "\n")
    with pytest.raises(ValueError, match=f"bad.tsv:3: .*{message}"):
        ctr.read_criteo(path, ctr.criteo_shape((100,), 64), max_rows=10)
    rows, _ = ctr.read_criteo(path, ctr.criteo_shape((100,), 64), max_rows=2)  # not reached
    assert len(rows) == 2


def test_criteo_reader_rejects_missing_short_files_and_bad_vocab(tmp_path):
    with pytest.raises(ValueError, match="nowhere.tsv"):
        ctr.read_criteo(tmp_path / "nowhere.tsv", ctr.criteo_shape((10,), 8), 5)
    with pytest.raises(ValueError, match="nowhere.tsv"):
        dataset_shape(f"criteo:{tmp_path / 'nowhere.tsv'}", 5, 1, 2)
    one = tmp_path / "one.tsv"
    one.write_text(criteo_line() + "\n")
    with pytest.raises(ValueError, match="one.tsv: 1 rows"):
        ctr.read_criteo(one, ctr.criteo_shape((10,), 8), 5)
    with pytest.raises(ValueError, match="vocab"):
        ctr.criteo_shape((1,), 8)
    with pytest.raises(ValueError, match="vocab"):
        ctr.criteo_shape((10, 10), 8)


@settings(max_examples=60, deadline=None)
@given(value=st.integers(-(10**18) + 1, 10**18 - 1),
       token=st.integers(0, MASK).map(lambda v: f"{v:x}"),
       column=st.integers(0, 12), field=st.integers(0, 25))
def test_criteo_reader_parses_any_integer_and_hex_token(tmp_path_factory, value, token,
                                                        column, field):
    ints, cats = ["1"] * 13, ["a"] * 26
    ints[column], cats[field] = str(value), token
    path = tmp_path_factory.mktemp("c") / "x.tsv"
    path.write_text(criteo_line("1", ints, cats) + "\n" + criteo_line("0") + "\n")
    rows, _ = ctr.read_criteo(path, ctr.criteo_shape((977,), 64), 2)
    np.testing.assert_array_max_ulp(rows.dense[0, column], math.log1p(max(value, 0)),
                                    maxulp=1)  # numpy's log1p: within an ulp of libm's
    assert rows.ids[0, field, 0] == expected_id(field, token, 977)
