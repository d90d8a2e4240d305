"""Click-through-rate rows for Wide & Deep models (Cheng et al. 2016): dense features,
multi-hot categorical ids per field, and the crossed ids of the wide part.

Two sources: :func:`synthetic` draws Zipf-popular ids and labels them with a planted Wide &
Deep model, so a learner can really lower the loss; :func:`read_criteo` reads the Criteo
display-advertising TSV format. :mod:`sim.workloads.datasets` wraps both as data sets.
:func:`zipf_probabilities` and :func:`expected_unique` give the ids a batch touches, which
the embedding traffic follows. Pure numpy; ids are hashed with splitmix64 (Steele, Lea and
Flood 2014), never Python's salted ``hash()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

# Rows handled at a time by the planted model: bounds its temporaries.
_CHUNK_ROWS = 4096


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no single truth value
class CtrRows:
    """Rows of a click-through-rate data set.

    ``dense`` (n, dense_features) float64; ``ids`` (n, fields, ids_per_field) int64, field
    f's in [0, vocab[f]); ``wide`` (n, fields - 1) int64 crossed ids in [0, cross_buckets).
    Raises ValueError when the arrays disagree on n or have the wrong rank or dtype.
    """

    dense: np.ndarray
    ids: np.ndarray
    wide: np.ndarray

    def __post_init__(self) -> None:
        if self.dense.ndim != 2 or self.ids.ndim != 3 or self.wide.ndim != 2:
            raise ValueError(f"CtrRows: expected dense (n, d), ids (n, f, k), wide (n, c); "
                             f"got {self.dense.shape}, {self.ids.shape}, {self.wide.shape}")
        if not len(self.dense) == len(self.ids) == len(self.wide):
            raise ValueError(f"CtrRows: row counts differ: dense {len(self.dense)}, "
                             f"ids {len(self.ids)}, wide {len(self.wide)}")
        if self.ids.dtype != np.int64 or self.wide.dtype != np.int64:
            raise ValueError(f"CtrRows: ids and wide must be int64, got {self.ids.dtype} "
                             f"and {self.wide.dtype}")

    def __len__(self) -> int:
        return len(self.dense)

    def __getitem__(self, rows: np.ndarray | slice) -> CtrRows:
        """The selected rows (an index array, a boolean mask or a slice), copied."""
        if isinstance(rows, slice):
            rows = np.arange(*rows.indices(len(self)))
        rows = np.asarray(rows)
        if rows.ndim != 1:
            raise IndexError(f"CtrRows: select rows with a 1-d index, got shape {rows.shape}")
        return CtrRows(self.dense[rows], self.ids[rows], self.wide[rows])

    @property
    def row_bytes(self) -> int:
        """Bytes of one row: its dense features, ids and crossed ids."""
        return sum(a.itemsize * int(np.prod(a.shape[1:]))
                   for a in (self.dense, self.ids, self.wide))


@dataclass(frozen=True)
class CtrShape:
    """The columns of CTR rows: ``fields`` categorical fields, field f's ids in
    [0, vocab[f]) with ``ids_per_field`` ids a row, ``fields - 1`` crossed ids in
    [0, cross_buckets), and ``dense_features`` dense columns.

    Raises ValueError for a vocab whose length is not ``fields`` or for sizes below 1
    (dense_features below 0).
    """

    fields: int
    vocab: tuple[int, ...]
    ids_per_field: int
    cross_buckets: int
    dense_features: int

    def __post_init__(self) -> None:
        if self.fields < 1 or self.ids_per_field < 1 or self.cross_buckets < 1:
            raise ValueError(f"ctr: fields ({self.fields}), ids_per_field "
                             f"({self.ids_per_field}) and cross_buckets "
                             f"({self.cross_buckets}) must be at least 1")
        if self.dense_features < 0:
            raise ValueError(f"ctr: dense_features must be >= 0, got {self.dense_features}")
        if len(self.vocab) != self.fields or min(self.vocab) < 1:
            raise ValueError(f"ctr: vocab needs {self.fields} sizes >= 1 (one per field), "
                             f"got {self.vocab}")

    @classmethod
    def of(cls, fields: int, vocab: tuple[int, ...], ids_per_field: int, cross_buckets: int,
           dense_features: int) -> CtrShape:
        """The shape with a one-entry ``vocab`` meaning the same size for every field."""
        vocab = tuple(int(v) for v in vocab)
        if len(vocab) == 1:
            vocab = vocab * fields
        return cls(fields, vocab, ids_per_field, cross_buckets, dense_features)


# ---- hashing ---------------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1, _MUL2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output for state ``x`` (uint64): x + golden gamma, then the variant-13
    finaliser of Stafford's Mix13 (Steele, Lea and Flood 2014), elementwise."""
    # uint64 arithmetic wraps mod 2^64, which the hash wants; numpy warns only for scalars
    with np.errstate(over="ignore"):
        z = np.asarray(x, np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MUL1
        z = (z ^ (z >> np.uint64(27))) * _MUL2
        return z ^ (z >> np.uint64(31))


def mix(*keys: np.ndarray | int) -> np.ndarray:
    """A 64-bit hash of a tuple of keys (broadcast, elementwise): h = splitmix64(k0), then
    h = splitmix64(h ^ k) for each further key. Negative ints are taken mod 2^64."""
    words = [np.asarray(k).astype(np.uint64) for k in keys]  # int64 -> two's complement
    h = splitmix64(words[0])
    for w in words[1:]:
        h = splitmix64(h ^ w)
    return h


def cross_ids(ids: np.ndarray, cross_buckets: int) -> np.ndarray:
    """The wide part's crossed ids, (n, fields - 1) int64 in [0, cross_buckets): for each
    consecutive field pair (f, f + 1), mix(f, first id of f, first id of f + 1) mod
    cross_buckets. ``ids`` is (n, fields, ids_per_field). Raises ValueError for
    cross_buckets < 1 or ids of another rank."""
    if cross_buckets < 1:
        raise ValueError(f"cross_ids: cross_buckets must be >= 1, got {cross_buckets}")
    if ids.ndim != 3:
        raise ValueError(f"cross_ids: expected ids (n, fields, ids_per_field), got {ids.shape}")
    n, fields = ids.shape[:2]
    out = np.empty((n, max(0, fields - 1)), np.int64)
    for f in range(fields - 1):
        h = mix(f, ids[:, f, 0], ids[:, f + 1, 0])
        out[:, f] = h % np.uint64(cross_buckets)
    return out


# ---- popularity ------------------------------------------------------------------------

def zipf_probabilities(vocab: int, s: float) -> np.ndarray:
    """(vocab,) probabilities of ids 0..vocab-1: id i - 1 has probability proportional to
    i^-s (s = 0: uniform). Raises ValueError for vocab < 1 or s < 0."""
    if vocab < 1 or s < 0:
        raise ValueError(f"zipf_probabilities: need vocab >= 1 and s >= 0, got {vocab}, {s}")
    weights = np.arange(1, vocab + 1, dtype=np.float64) ** -float(s)
    return weights / weights.sum()


def expected_unique(probabilities: np.ndarray, draws: int) -> float:
    """Expected number of distinct ids among ``draws`` independent draws with these
    probabilities: sum over ids of 1 - (1 - p_i)^draws."""
    if draws <= 0:
        return 0.0
    p = np.asarray(probabilities, np.float64)
    # -expm1(B log1p(-p)) = 1 - (1 - p)^B without cancellation for tiny p; p = 1 gives
    # log1p(-1) = -inf and a term of exactly 1, as it should
    with np.errstate(divide="ignore"):
        return float(-np.expm1(draws * np.log1p(-p)).sum())


def zipf_ids(vocab: int, s: float, shape: tuple[int, ...],
             rng: np.random.Generator) -> np.ndarray:
    """int64 ids of ``shape`` drawn independently (with replacement) from
    :func:`zipf_probabilities`, by inverse-CDF search: O(log vocab) a draw."""
    cdf = np.cumsum(zipf_probabilities(vocab, s))
    cdf /= cdf[-1]  # the last bound exactly 1: every uniform in [0, 1) lands below it
    return np.searchsorted(cdf, rng.random(shape), side="right").astype(np.int64)


# ---- synthetic rows and their planted model --------------------------------------------

# The planted model's sizes and scales, chosen so that margins are O(1): He-scaled hidden
# layer, a deep part of standard deviation about _DEEP_SCALE, a wide part of about
# _WIDE_SCALE, and a bias that puts the mean logit over the rows at _MEAN_LOGIT, so that
# clicks are the minority (about 30% of the rows; Criteo's Kaggle set has 26%).
_PLANTED_HIDDEN = 16
_DEEP_SCALE = 1.5
_WIDE_SCALE = 1.0
_MEAN_LOGIT = -1.0


@dataclass(frozen=True, eq=False)
class PlantedCtr:
    """The Wide & Deep model that labels synthetic rows: logit = bias + sum of ``wide`` at
    the row's crossed ids + out_w . relu(hidden_w x + hidden_b), x = concat(mean-pooled
    embedding of each field, dense)."""

    tables: tuple[np.ndarray, ...]  # field f: (vocab[f], dim)
    wide: np.ndarray                # (cross_buckets,)
    bias: float
    hidden_w: np.ndarray            # (hidden, fields * dim + dense_features)
    hidden_b: np.ndarray            # (hidden,)
    out_w: np.ndarray               # (hidden,)

    @classmethod
    def draw(cls, shape: CtrShape, dim: int, rng: np.random.Generator) -> PlantedCtr:
        """Random planted weights for ``shape`` with ``dim``-wide embeddings, bias 0."""
        tables = tuple(rng.standard_normal((v, dim)) for v in shape.vocab)
        crosses = max(1, shape.fields - 1)
        wide = rng.standard_normal(shape.cross_buckets) * (_WIDE_SCALE / np.sqrt(crosses))
        inputs = shape.fields * dim + shape.dense_features
        hidden_w = rng.standard_normal((_PLANTED_HIDDEN, inputs)) * np.sqrt(2.0 / inputs)
        out_w = rng.standard_normal(_PLANTED_HIDDEN) * (_DEEP_SCALE / np.sqrt(_PLANTED_HIDDEN))
        return cls(tables, wide, 0.0, hidden_w, np.zeros(_PLANTED_HIDDEN), out_w)

    def margin(self, rows: CtrRows) -> np.ndarray:
        """(n,) logits of the rows."""
        out = np.empty(len(rows))
        for start in range(0, len(rows), _CHUNK_ROWS):
            part = slice(start, start + _CHUNK_ROWS)
            ids = rows.ids[part]
            pooled = [table[ids[:, f, :]].mean(axis=1) for f, table in enumerate(self.tables)]
            x = np.concatenate([*pooled, rows.dense[part]], axis=1)
            hidden = np.maximum(x @ self.hidden_w.T + self.hidden_b, 0.0)
            out[part] = self.bias + self.wide[rows.wide[part]].sum(axis=1) + hidden @ self.out_w
        return out


def synthetic(shape: CtrShape, samples: int, zipf_exponent: float, embedding_dim: int,
              rng: np.random.Generator) -> tuple[CtrRows, np.ndarray, PlantedCtr]:
    """``samples`` rows, their int32 0/1 labels and the planted model that drew them.

    Dense features are standard normal; each field's ids are :func:`zipf_ids` (with
    replacement within a bag); labels are Bernoulli(sigmoid(planted margin)), the planted
    bias set so that the mean margin over the rows is -1 (about 30% clicks). Memory is
    linear in samples and in the vocab sizes. Raises ValueError for samples < 1,
    embedding_dim < 1 or zipf_exponent < 0.
    """
    if samples < 1 or embedding_dim < 1 or zipf_exponent < 0:
        raise ValueError(f"ctr-synthetic: need samples >= 1, embedding_dim >= 1 and "
                         f"zipf_exponent >= 0, got {samples}, {embedding_dim}, "
                         f"{zipf_exponent}")
    dense = rng.standard_normal((samples, shape.dense_features))
    ids = np.empty((samples, shape.fields, shape.ids_per_field), np.int64)
    for f, v in enumerate(shape.vocab):
        ids[:, f, :] = zipf_ids(v, zipf_exponent, (samples, shape.ids_per_field), rng)
    rows = CtrRows(dense, ids, cross_ids(ids, shape.cross_buckets))
    planted = PlantedCtr.draw(shape, embedding_dim, rng)
    margin = planted.margin(rows)
    # the ReLU layer's outputs are positive: their random mean would set the base rate
    bias = _MEAN_LOGIT - float(margin.mean())
    planted = replace(planted, bias=bias)
    click = 0.5 * (1.0 + np.tanh(0.5 * (margin + bias)))  # sigmoid, no overflow
    labels = (rng.random(samples) < click).astype(np.int32)
    return rows, labels, planted


# ---- the Criteo display-advertising format ---------------------------------------------

CRITEO_DENSE, CRITEO_FIELDS = 13, 26
_CRITEO_COLUMNS = 1 + CRITEO_DENSE + CRITEO_FIELDS
_INT = re.compile(r"-?[0-9]{1,18}")  # fits int64
_HEX = re.compile(r"[0-9a-fA-F]{1,16}")  # Criteo's are 8 digits; up to 64 bits accepted
# a whole valid line at once (the fast path; a miss is diagnosed column by column)
_LINE = re.compile(r"[01]" + r"\t(?:-?[0-9]{1,18})?" * CRITEO_DENSE
                   + r"\t[0-9a-fA-F]{0,16}" * CRITEO_FIELDS)


def criteo_shape(vocab: tuple[int, ...], cross_buckets: int) -> CtrShape:
    """The columns :func:`read_criteo` yields: 26 fields of one id, 13 dense features.
    Raises ValueError unless vocab has 1 or 26 sizes, each at least 2 (id 0 is "empty")."""
    shape = CtrShape.of(CRITEO_FIELDS, vocab, 1, cross_buckets, CRITEO_DENSE)
    if min(shape.vocab) < 2:
        raise ValueError(f"criteo: every field's vocab must be >= 2 (id 0 is the empty "
                         f"value), got {vocab}")
    return shape


def criteo_row_count(path: str | Path, max_rows: int) -> int:
    """Rows that :func:`read_criteo` reads from ``path`` (its lines, at most ``max_rows``),
    without parsing them. Raises ValueError if the file cannot be read."""
    count = 0
    with _open(path) as lines:
        for _ in lines:
            if count == max_rows:
                break
            count += 1
    return count


def read_criteo(path: str | Path, shape: CtrShape,
                max_rows: int) -> tuple[CtrRows, np.ndarray]:
    """The first ``max_rows`` lines of a Criteo display-advertising TSV file as rows and
    int32 labels. ``shape`` comes from :func:`criteo_shape`.

    A line is ``label \\t I1..I13 \\t C1..C26``: a 0/1 label, 13 integers and 26 hex
    tokens, any feature possibly empty. Dense: empty is 0, negatives are clipped to 0, then
    log(1 + x): DLRM's preprocessing (Naumov et al. 2019; its data_utils sets X_int < 0 to 0
    and its loader takes log(x + 1)). Categorical, field f: empty is id 0, a value v is
    1 + mix(f, v) mod (vocab[f] - 1), so hashed values never share the empty id. Raises
    ValueError naming the file (and the line and column) for a file that cannot be read,
    a wrong column count, a label other than 0/1, a non-integer dense value, a non-hex
    token, or fewer than 2 rows.
    """
    labels: list[int] = []
    dense: list[list[str]] = []
    cats: list[list[str]] = []
    with _open(path) as lines:
        for number, line in enumerate(lines, 1):
            if number > max_rows:
                break
            line = line.rstrip("\n")
            if not _LINE.fullmatch(line):
                raise ValueError(f"{path}:{number}: {_criteo_fault(line)}")
            cols = line.split("\t")
            labels.append(int(cols[0]))
            dense.append(cols[1:1 + CRITEO_DENSE])
            cats.append(cols[1 + CRITEO_DENSE:])
    if len(labels) < 2:
        raise ValueError(f"{path}: {len(labels)} rows; a data set needs at least 2")
    ints = np.array([[int(t) if t else 0 for t in row] for row in dense], np.int64)
    values = np.log1p(np.maximum(ints, 0).astype(np.float64))
    ids = np.empty((len(labels), CRITEO_FIELDS, 1), np.int64)
    for f in range(CRITEO_FIELDS):
        tokens = [row[f] for row in cats]
        present = np.array([bool(t) for t in tokens])
        raw = np.array([int(t, 16) if t else 0 for t in tokens], np.uint64)
        hashed = mix(f, raw) % np.uint64(shape.vocab[f] - 1)
        ids[:, f, 0] = np.where(present, hashed.astype(np.int64) + 1, 0)
    rows = CtrRows(values, ids, cross_ids(ids, shape.cross_buckets))
    return rows, np.array(labels, np.int32)


def _open(path: str | Path):
    """``path`` opened for reading text lines; undecodable bytes become U+FFFD so that
    the line they are on is reported. Raises ValueError naming the file."""
    try:
        return open(path, encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the Criteo file ({exc.strerror})") from exc


def _criteo_fault(line: str) -> str:
    """What is wrong with a line that the line pattern rejected."""
    cols = line.split("\t")
    if len(cols) != _CRITEO_COLUMNS:
        return (f"expected {_CRITEO_COLUMNS} tab-separated columns (label, "
                f"{CRITEO_DENSE} integers, {CRITEO_FIELDS} hex tokens), got {len(cols)}")
    if cols[0] not in ("0", "1"):
        return f"label {cols[0]!r} is not 0 or 1"
    for i, token in enumerate(cols[1:1 + CRITEO_DENSE], 1):
        if token and not _INT.fullmatch(token):
            return f"I{i} {token!r} is not an integer of at most 18 digits"
    for i, token in enumerate(cols[1 + CRITEO_DENSE:], 1):
        if token and not _HEX.fullmatch(token):
            return f"C{i} {token!r} is not a hex token of at most 16 digits"
    return "malformed line"  # not reached: every rule of the pattern is checked above
