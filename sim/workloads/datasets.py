"""Datasets: seeded synthetic dense, sparse and click-through-rate data, digits shipped by
scikit-learn, and Criteo click logs read from a file the user names (``criteo:PATH``).

Every generator takes a :class:`DatasetSpec` and a ``numpy.random.Generator`` and
returns a :class:`Dataset` with a held-out split. Labels are class ids (int32); the model
that trains on them says which label type its kernels take (:meth:`Dataset.labelled_as`).
Click-through-rate data sets hold :class:`~sim.workloads.ctr.CtrRows` (dense features,
categorical ids, crossed ids) and say their columns in :attr:`Dataset.ctr`. Nothing is
downloaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from sim.names import unknown
from sim.workloads import ctr
from sim.workloads.ctr import CtrRows, CtrShape


@dataclass(frozen=True)
class DatasetSpec:
    """What to generate. ``features`` and ``samples`` are ignored by shipped data sets."""

    name: str = "gaussian"
    samples: int = 4096           # train + test rows
    features: int = 64
    classes: int = 2
    separation: float = 2.0       # distance scale between class means (gaussian)
    noise: float = 1.0            # per-feature standard deviation (gaussian)
    nnz_per_row: int = 20         # active features per row (sparse)
    zipf_exponent: float = 1.1    # feature frequency ~ rank^-a (sparse)
    test_fraction: float = 0.2
    # click-through-rate data (ctr-synthetic; criteo:PATH uses vocab and cross_buckets):
    # features is the number of dense features, zipf_exponent the ids' popularity exponent
    fields: int = 8               # categorical fields
    vocab: tuple[int, ...] = (1000,)  # ids per field: one size for all fields, or one each
    ids_per_field: int = 1        # ids a row has in each field (multi-hot bags)
    cross_buckets: int = 4096     # buckets of the wide part's crossed ids
    embedding_dim: int = 8        # of the planted model that labels ctr-synthetic rows


@dataclass
class Dataset:
    """Train and held-out rows. Dense: ``X`` is (n, d). Sparse: ``X`` is a CSR triple.
    Click-through-rate: ``X`` is :class:`CtrRows`, ``ctr`` its columns, ``features`` its
    dense features (rows are selected as ``X[rows]``, like dense ones)."""

    X_train: np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray] | CtrRows
    y_train: np.ndarray
    X_test: np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray] | CtrRows
    y_test: np.ndarray
    features: int
    classes: int
    sparse: bool = False
    ctr: CtrShape | None = None

    @property
    def n_train(self) -> int:
        return len(self.y_train)

    def labelled_as(self, dtype: np.dtype) -> Dataset:
        """This data set with its labels as ``dtype`` (float64 0/1 for binary models,
        int32 class ids for multiclass ones); the rows are shared, not copied."""
        return replace(self, y_train=self.y_train.astype(dtype, copy=False),
                       y_test=self.y_test.astype(dtype, copy=False))


def _split(n: int, test_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    order = rng.permutation(n)
    n_test = max(1, int(round(n * test_fraction)))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


# Rows handled at a time when a data set is built in place: bounds the temporary copies.
_CHUNK_ROWS = 4096


def _dense(X: np.ndarray, y: np.ndarray, classes: int, spec: DatasetSpec,
           rng: np.random.Generator) -> Dataset:
    """Split ``X`` (which this takes over: its training rows are moved up in place, so the
    data set exists once) into training and held-out rows."""
    train, test = _split(len(y), spec.test_fraction, rng)
    labels = y.astype(np.int32)
    X_test = np.ascontiguousarray(X[test])
    return Dataset(_keep_rows(X, train), labels[train], X_test, labels[test], X.shape[1],
                   classes)


def _keep_rows(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``X[rows]`` for sorted distinct ``rows``, made in ``X``'s own memory when it owns it
    (row i comes from row rows[i] >= i: moving them up in order overwrites nothing still
    needed), then shrunk to fit; a copy otherwise."""
    if not (X.flags.owndata and X.flags.c_contiguous and X.flags.writeable):
        return np.ascontiguousarray(X[rows])
    for start in range(0, len(rows), _CHUNK_ROWS):
        chunk = rows[start:start + _CHUNK_ROWS]
        X[start:start + len(chunk)] = X[chunk]
    X.resize((len(rows), *X.shape[1:]), refcheck=False)  # no view of X exists yet
    return X


def gaussian(spec: DatasetSpec, rng: np.random.Generator) -> Dataset:
    """Gaussian mixture: one mean per class on a sphere of radius ``separation``."""
    means = rng.standard_normal((spec.classes, spec.features))
    means *= spec.separation / np.linalg.norm(means, axis=1, keepdims=True)
    y = rng.integers(0, spec.classes, spec.samples)
    # means[y] + noise * z, built in place a block of rows at a time (the same bits: the
    # sum is commutative) so that no temporary as large as the data set is made
    X = rng.standard_normal((spec.samples, spec.features))
    X *= spec.noise
    for start in range(0, spec.samples, _CHUNK_ROWS):
        X[start:start + _CHUNK_ROWS] += means[y[start:start + _CHUNK_ROWS]]
    return _dense(X, y, spec.classes, spec, rng)


def digits(spec: DatasetSpec, rng: np.random.Generator) -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1797 rows, 64 features, 10 classes), in [0, 1]."""
    from sklearn.datasets import load_digits  # shipped with the package: no download

    data = load_digits()
    return _dense(data.data / 16.0, data.target, 10, spec, rng)


def sparse_powerlaw(spec: DatasetSpec, rng: np.random.Generator) -> Dataset:
    """Click-style binary data: feature frequencies follow a power law, labels a logistic model.

    Each row activates ``nnz_per_row`` distinct features drawn with probability
    proportional to rank^-zipf_exponent; a hidden weight vector makes the labels learnable.
    """
    d, k = spec.features, min(spec.nnz_per_row, spec.features)
    popularity = np.arange(1, d + 1, dtype=np.float64) ** -spec.zipf_exponent
    cdf = np.cumsum(popularity / popularity.sum())
    feature_of_rank = rng.permutation(d)
    rows = [np.sort(feature_of_rank[_distinct_draws(cdf, k, rng)])
            for _ in range(spec.samples)]
    indices = np.concatenate(rows).astype(np.int64)
    indptr = np.arange(0, spec.samples * k + 1, k, dtype=np.int64)
    data = np.ones(len(indices))
    w_true = rng.standard_normal(d) * spec.separation / np.sqrt(k)
    margin = np.add.reduceat(w_true[indices], indptr[:-1])
    y = (rng.random(spec.samples) < 1 / (1 + np.exp(-margin))).astype(np.int32)
    train, test = _split(spec.samples, spec.test_fraction, rng)
    return Dataset(csr_rows((indptr, indices, data), train), y[train],
                   csr_rows((indptr, indices, data), test), y[test], d, 2, sparse=True)


def _distinct_draws(cdf: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct ranks drawn in turn with probabilities given by ``cdf``, repeats skipped.

    This is successive sampling without replacement (what ``Generator.choice(...,
    replace=False, p=...)`` does) at O(k log d) a row instead of O(d).
    """
    chosen = np.zeros(0, np.int64)
    while len(chosen) < k:
        draws = np.searchsorted(cdf, rng.random(4 * k), side="right").clip(max=len(cdf) - 1)
        merged = np.concatenate([chosen, draws])
        _, first = np.unique(merged, return_index=True)
        chosen = merged[np.sort(first)][:k]
    return chosen


def csr_rows(csr: tuple[np.ndarray, np.ndarray, np.ndarray],
             rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR triple of the selected rows, in the given order."""
    indptr, indices, data = csr
    rows = np.asarray(rows, np.int64)
    lengths = indptr[rows + 1] - indptr[rows]
    new_indptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=new_indptr[1:])
    # entry j of the new rows comes from its row's start plus its offset within the row
    take = np.repeat(indptr[rows] - new_indptr[:-1], lengths) + np.arange(new_indptr[-1])
    return new_indptr, np.ascontiguousarray(indices[take]), np.ascontiguousarray(data[take])


def ctr_shape(spec: DatasetSpec) -> CtrShape:
    """The click-through-rate columns ``spec`` asks for (``features`` dense features);
    raises ValueError for a bad vocab or size."""
    return CtrShape.of(spec.fields, spec.vocab, spec.ids_per_field, spec.cross_buckets,
                       spec.features)


def ctr_synthetic(spec: DatasetSpec, rng: np.random.Generator) -> Dataset:
    """Click-through-rate rows: Zipf-popular ids per field, labels from a planted Wide & Deep.

    Ids of field f are 0..vocab[f]-1, id i - 1 with probability proportional to
    i^-zipf_exponent, ``ids_per_field`` a row (with replacement); dense features are
    standard normal; labels are Bernoulli(sigmoid(logit)) of a random Wide & Deep model
    (Cheng et al. 2016) over them (:func:`sim.workloads.ctr.synthetic`).
    """
    shape = ctr_shape(spec)
    rows, labels, _ = ctr.synthetic(shape, spec.samples, spec.zipf_exponent,
                                    spec.embedding_dim, rng)
    return _ctr(rows, labels, shape, spec, rng)


def criteo(path: str, spec: DatasetSpec, rng: np.random.Generator) -> Dataset:
    """The first ``samples`` lines of a Criteo display-advertising TSV file (13 dense
    features, 26 categorical fields hashed into ``vocab`` ids; :func:`ctr.read_criteo`).
    Raises ValueError naming the file and line of a bad one."""
    shape = ctr.criteo_shape(spec.vocab, spec.cross_buckets)
    rows, labels = ctr.read_criteo(path, shape, spec.samples)
    return _ctr(rows, labels, shape, spec, rng)


def _ctr(rows: CtrRows, labels: np.ndarray, shape: CtrShape, spec: DatasetSpec,
         rng: np.random.Generator) -> Dataset:
    train, test = _split(len(labels), spec.test_fraction, rng)
    return Dataset(rows[train], labels[train], rows[test], labels[test],
                   shape.dense_features, 2, ctr=shape)


DATASETS: dict[str, Callable[[DatasetSpec, np.random.Generator], Dataset]] = {
    "gaussian": gaussian,
    "digits": digits,
    "sparse-powerlaw": sparse_powerlaw,
    "ctr-synthetic": ctr_synthetic,
}


@dataclass(frozen=True)
class DatasetFamily:
    """Data sets named by a prefix and an argument (``criteo:PATH``): ``build(argument,
    spec, rng)`` makes one, ``shape(argument, samples, features, classes)`` says its
    (rows, features, classes, sparse) without making it."""

    build: Callable[[str, DatasetSpec, np.random.Generator], Dataset]
    shape: Callable[[str, int, int, int], tuple[int, int, int, bool]]
    usage: str  # how the name is written, for error messages


DATASET_FAMILIES: dict[str, DatasetFamily] = {
    "criteo:": DatasetFamily(
        criteo,
        lambda path, samples, _f, _c: (ctr.criteo_row_count(path, samples),
                                       ctr.CRITEO_DENSE, 2, False),
        "criteo:PATH"),
}


def dataset_family(name: str) -> tuple[DatasetFamily, str] | None:
    """(family, argument) of a name like ``criteo:PATH``, or None for a plain name."""
    for prefix, family in DATASET_FAMILIES.items():
        if name.startswith(prefix):
            return family, name[len(prefix):]
    return None


def ctr_dataset(name: str) -> bool:
    """Whether ``name`` gives click-through-rate rows (:class:`~sim.workloads.ctr.CtrRows`)."""
    return name == "ctr-synthetic" or dataset_family(name) is not None


def ctr_columns(name: str, fields: int, ids_per_field: int,
                dense_features: int) -> tuple[int, int, int]:
    """(fields, ids per field, dense features) of a click-through-rate data set: the
    config's for ctr-synthetic, Criteo's own for its files."""
    if dataset_family(name) is not None:
        return ctr.CRITEO_FIELDS, 1, ctr.CRITEO_DENSE
    return fields, ids_per_field, dense_features


def known_dataset(name: str) -> bool:
    """Whether ``name`` is a registered data set or a family's prefixed name."""
    return name in DATASETS or dataset_family(name) is not None


DIGITS_SHAPE = (1797, 64, 10)  # rows, features, classes of sklearn's load_digits


def dataset_shape(name: str, samples: int, features: int,
                  classes: int) -> tuple[int, int, int, bool]:
    """(rows, features, classes, sparse) that ``name`` yields for these settings. For
    ``criteo:PATH`` the rows are counted in the file (at most ``samples``); raises
    ValueError if it cannot be read."""
    if (family := dataset_family(name)) is not None:
        return family[0].shape(family[1], samples, features, classes)
    if name == "digits":
        return (*DIGITS_SHAPE, False)
    if name == "sparse-powerlaw":
        return samples, features, 2, True
    if name == "ctr-synthetic":
        return samples, features, 2, False
    return samples, features, classes, False


def make_dataset(spec: DatasetSpec, rng: np.random.Generator) -> Dataset:
    """Build the named data set; raises KeyError listing the known names."""
    if (family := dataset_family(spec.name)) is not None:
        return family[0].build(family[1], spec, rng)
    if spec.name not in DATASETS:
        usages = [f.usage for f in DATASET_FAMILIES.values()]
        raise KeyError(unknown("dataset", spec.name, sorted(DATASETS) + usages))
    return DATASETS[spec.name](spec, rng)


def shard(n: int, workers: int, mode: str, rng: np.random.Generator) -> list[np.ndarray]:
    """Row indices of each worker's shard: ``contiguous`` blocks or a ``shuffled`` split."""
    order = np.arange(n) if mode == "contiguous" else rng.permutation(n)
    if mode not in ("contiguous", "shuffled"):
        raise ValueError(f"shard mode: expected 'contiguous' or 'shuffled', got {mode!r}")
    return [np.sort(part) for part in np.array_split(order, workers)]
