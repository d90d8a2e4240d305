"""The reproduction suite: published figures, the lab's value for each, and the error.

One TOML file per paper in ``experiments/papers/``. Its tables, top to bottom:

``[paper]``
    ``title``, ``authors``, ``year``, ``where`` (arXiv id or venue): who measured.
``[base]``
    An experiment config in the lab's own keys (``[base.cluster]``, ``[base.workload]``,
    ...), timing only (``workload.numerics = false``). Every row starts from it.
``[calibration]`` (optional)
    ``parameter``: the one config key fitted (e.g. ``compute.gemm_efficiency``); ``row``:
    the figure row whose published value it is fitted to, which must be the paper's own
    single-device or single-node baseline; ``bracket = [lo, hi]``: the interval the root
    finder searches; ``source``: where the baseline value is printed. The parameter is solved
    (Brent's method) so that the lab's value of that one row equals its published value; no
    other row is used. Without the table nothing is fitted (papers that print only ratios).
``[[figure]]`` (one per published value)
    ``id`` (unique in the file), ``quantity`` (:data:`sim.papers.quantities.QUANTITIES`),
    ``published`` (the paper's value, in the quantity's unit: seconds, a fraction, a ratio;
    left out for a reference row, one that ratios are taken against but that the paper does
    not print, e.g. the 1 of a normalised table or a 1-GPU run read only as a base),
    ``source`` (table or figure; "read from Fig. N, +-x" for a value read off a plot),
    ``set = {"cluster.workers" = 64, ...}`` (dotted keys over ``[base]``: this row's
    config), ``relative_to`` (the id of the row a ratio is taken against; required by ratio
    quantities, refused by the others), ``note`` (optional; one that starts "beyond" is a
    closed form the row cannot reach, shown as its explanation) and ``explain =
    {parameter, bracket, mechanism}`` (optional): a row the lab misses by more than 15% is
    explained by searching ``parameter``, a dotted key standing for the ``mechanism`` the lab
    lacks, over ``bracket`` for the value at which the row would match; the value measures
    how large the missing mechanism must be, and the row's own result is left as it ran.

The error of a row is lab / published - 1. The calibration row is shown but left out of the
median and worst |error| (it is 0 by construction).
"""
