"""Pieces every selector shares, and the contract a selector keeps.

The selector contract
---------------------
A selection method is one module of :mod:`bioqpfs.selectors` with one public function and one
``register(...)`` line in :mod:`bioqpfs._registry`::

    register("name", "bioqpfs.selectors.module", "function", "one-line description (paper)",
             family="qpfs" | "spec_cmi" | "clustering" | "baseline")

``family`` names the :mod:`bioqpfs.estimators` class that serves the method (nothing is guessed from
the name).  The function

1. has the signature ``function(X, y, *, n_genes=None, <its parameters>, random_state=0,
   feature_names=None)`` -- every parameter keyword-only with its published default; ``random_state``
   is accepted (and validated) also by deterministic methods;
2. declares its parameters with :func:`bioqpfs._validation.parameter_constraints`
   (:class:`~bioqpfs._validation.Options` for choices, :class:`~bioqpfs._validation.Interval` for
   ranges), so that a bad value fails before any work on every face and every path;
3. starts with :func:`prepare` (validated X: dense float or canonical CSR/CSC, never modified; the
   class codes; the constant genes), checks ``n_genes`` with ``check_n_genes``, warns about the
   constant genes with :func:`warn_constant` and leaves them out of the optimisation; resolves
   ``preselected=`` (forced genes: names or indices) with :func:`resolve_preselected`, ranks them first in
   the given order and chooses the rest given them (its docstring says how: the conditioned problem);
4. gets its measures here -- :func:`info_table` (the codes, discretised once, with class weights),
   :func:`information_relevance` (F = I(X; C)), :func:`similarity_and_relevance` (Q and F) -- and
   never from a private name of :mod:`bioqpfs.measures` elsewhere; a method that discretises decides the rule once
   with :func:`discretization_rule` on the matrix it discretises, passes that rule to these helpers and records it
   as ``params["discretization_used"]`` (what :func:`bioqpfs.pl.redundancy` draws Q with); refuses uninformative
   labels with :func:`bioqpfs._selection.check_informative`; a method with a batch-aware form takes ``batch=``,
   ``batch_weights=``, ``batch_discretization=`` (docstring :data:`bioqpfs._docs.BATCH_DOC`), validates them with
   :func:`check_batch` and passes the :class:`Batches` to these helpers (``batch=``), which then stratify every
   measure; :func:`bioqpfs.select` refuses ``batch`` for a method without the parameter; a method whose class
   relevance is one vector F takes hierarchical labels (a 2-D ``y``, coarse to fine) with ``groupby_weights=``
   (docstrings :data:`bioqpfs._docs.Y_HIERARCHY_DOC`, :data:`bioqpfs._docs.HIERARCHY_DOC`): :func:`check_levels`
   before :func:`prepare` gives the finest level and the :class:`Levels`, which the relevance helpers take
   (``levels=``) to return F = sum_l v_l F(C_l); :func:`prepare` refuses a 2-D ``y`` for every other method;
5. ranks with the one tie rule (:func:`weights_and_ranking` / :func:`bioqpfs._selection.rank_by_weight`:
   weight, then relevance F, then index; constant genes last) and returns a
   :class:`bioqpfs.Selection` with ``params`` (what was used, resolved defaults included) and
   ``diagnostics`` (solver state, timings; plain types only, so they survive h5ad and R).

Every face (``select``, ``tl``, the CLI, sklearn, R, ``evaluate``) then works with the new method.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .. import measures
from .._kernels import correlation as _corr
from .._kernels import discretize as _disc
from .._kernels import information as _info
from .._kernels.counting_dask import class_sums, is_dask_array
from .._kernels.discretize_dask import nonzero_counts, prefetch_quantile_edges
from .._selection import rank_by_weight
from .._validation import (
    check_base,
    check_labels,
    check_matrix,
    dense_labels,
    describe_indices,
    gene_list,
    gene_positions,
    memory_guard,
    output_guard,
    sample_names_of,
    user_stacklevel,
)

SIMILARITIES = ("mi", "correlation")
RELEVANCES = ("mi", "hall", "mst", "mst_cpx")



def prepare(X, y, feature_names=None):
    """Validate (X, y); return (X, y_codes, classes, constant_mask).

    ``y`` is one level of labels: hierarchical labels (2-D, several columns) are refused with a message naming
    the methods that take them (:func:`check_levels` turns them into the finest level first).

    Constant genes: :func:`bioqpfs._kernels.correlation.constant_columns` (a relative tolerance, so that the
    round-off of the mean of a constant gene does not count).

    When X is a pandas DataFrame and y a Series, y is matched to the rows by index
    (see :func:`bioqpfs._validation.check_labels`).
    """
    names = sample_names_of(X)
    if label_levels(y) > 1:
        from .._registry import hierarchy_methods

        raise ValueError(f"y has {label_levels(y)} columns (hierarchical labels, coarse to fine), but this method "
                         "takes one level of labels (it has no class-relevance vector to sum over levels); pass "
                         "the finest level alone (y[:, -1], groupby='<finest column>'), or use a method that takes "
                         f"hierarchical labels: {', '.join(hierarchy_methods())}")
    X = check_matrix(X, feature_names=feature_names)
    y_codes, classes = check_labels(y, X.shape[0], name="y", sample_names=names)
    if classes.size == X.shape[0]:
        raise ValueError(f"every class of y has a single sample ({classes.size} samples, {classes.size} classes): "
                         "nothing tells a class difference from sample noise, so any panel would be meaningless "
                         "(every gene's information about the classes is its own entropy); selection needs "
                         "replicates, at least two samples in some class")
    # scaled: no overflow/underflow for extreme genes; kept for the rest of the call (the mean +- sd thresholds)
    mean, ss, _ = _corr.shared_column_moments(X)
    constant = _corr.constant_columns(mean, ss, X.shape[0])
    return X, y_codes, classes, constant


def label_levels(y):
    """Columns of a 2-D ``y`` (hierarchical labels), 1 for 1-D labels.

    A 2-D ``y`` of one row, shape (1, n_samples), is one row of labels, not n_samples levels: 1, as
    :func:`bioqpfs._validation.check_labels` reads it (it flattens a row or a column of labels alike).
    """
    shape = getattr(y, "shape", None)
    if shape is None:
        shape = np.shape(np.asarray(y, dtype=object)) if isinstance(y, (list, tuple)) else ()
    return int(shape[1]) if len(shape) == 2 and shape[0] != 1 else 1


class Levels:
    """Validated hierarchical labels (:func:`check_levels`): what the relevance sums over.

    Attributes
    ----------
    codes : list of ndarray of int, the class codes of every sample at each level, coarse to fine
    classes : list of ndarray, the labels of each level in code order
    names : list of str, the level names (the DataFrame columns, else ``"level 0"``, ``"level 1"`` ...)
    weights : ndarray of float, v_l (non-negative, sum 1)
    """

    def __init__(self, codes, classes, names, weights):
        self.codes, self.classes, self.names, self.weights = codes, classes, names, weights

    def params(self):
        """The ``params`` entries recording the levels (plain types)."""
        return dict(groupby_levels=[str(n) for n in self.names], groupby_weights=[float(v) for v in self.weights])


def single_class_levels(classes):
    """Positions of the levels holding a single class (``classes``: each level's classes), the finest excepted."""
    return [i for i, k in enumerate(classes[:-1]) if len(k) == 1]


def warn_single_class_levels(columns, classes, single, stacklevel=2):
    """The one warning that levels of a single class (:func:`single_class_levels`) are left out."""
    warnings.warn(f"y level(s) {', '.join(repr(str(columns[i])) for i in single)} hold a single class "
                  f"({', '.join(repr(classes[i][0]) for i in single)}) in these samples, so they carry no "
                  "information; they are left out and the other levels' weights renormalised",
                  UserWarning, stacklevel=stacklevel + 1)


def check_levels(y, X, groupby_weights=None, *, warn=True):
    """The one validation of hierarchical labels (every method that takes them): ``(y_finest, Levels or None)``.

    ``y`` of shape (n_samples, n_levels) -- a 2-D array or a DataFrame, columns coarse to fine -- is
    hierarchical; 1-D labels (or a single column) are the plain case and give ``(y, None)``, so the method runs
    exactly as without levels.  The levels must be nested: every class of a level lies within one class of
    the level before it (each cell type in one lineage); a class that sits in two coarser classes is an error
    naming it.  ``groupby_weights`` (v_l, one per level, non-negative, not all zero) are normalised to sum 1
    so that F = sum_l v_l I(X; C_l) stays on the scale of one MI; default ``1 / L`` (see :func:`level_sum`).
    ``X`` is the caller's matrix (a DataFrame's index matches a DataFrame ``y`` by sample name, as for 1-D
    labels).  Returns the finest level (as given: a Series stays a Series) for :func:`prepare`.  A coarser level
    holding a single class carries no information: it is left out (with a warning unless ``warn=False``) and the
    other weights renormalised.
    """
    import pandas as pd

    y = dense_labels(y)
    n_levels = label_levels(y)
    if n_levels > 1:
        frame = y if isinstance(y, pd.DataFrame) else None
        columns = list(frame.columns) if frame is not None else [f"level {i}" for i in range(n_levels)]
        arr = None if frame is not None else np.asarray(y, dtype=object)
        cols = [frame[c] if frame is not None else arr[:, i] for i, c in enumerate(columns)]
    else:
        cols, columns = [y], ["labels"]
    if groupby_weights is None:
        weights = np.full(n_levels, 1.0 / n_levels)
    else:
        try:
            weights = np.asarray(groupby_weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"groupby_weights must be a list of numbers, one per level, got {groupby_weights!r}") \
                from None
        if weights.shape != (n_levels,):
            raise ValueError(f"groupby_weights has {weights.size} value(s) but the labels have {n_levels} level(s) "
                             f"({', '.join(map(str, columns))}); give one weight per level, coarse to fine")
        if not np.isfinite(weights).all() or (weights < 0).any() or not weights.sum() > 0:
            raise ValueError(f"groupby_weights must be finite, non-negative and not all zero, got {weights.tolist()}")
        weights = weights / weights.sum()
    if n_levels == 1:
        return cols[0], None
    names = sample_names_of(X)
    codes, classes = [], []
    for i, (column, values) in enumerate(zip(columns, cols)):
        # a coarser level may hold one class (the data subset to one lineage); the finest needs two
        c, k = check_labels(values, X.shape[0], name=f"y level {column!r}", sample_names=names,
                            min_classes=2 if i == n_levels - 1 else 1)
        codes.append(np.asarray(c, dtype=np.int64))
        classes.append(k)
    for i in range(1, n_levels):  # nested: each class of level i within one class of level i - 1
        pairs = np.unique(codes[i] * len(classes[i - 1]) + codes[i - 1])
        fine, coarse = pairs // len(classes[i - 1]), pairs % len(classes[i - 1])
        split = np.flatnonzero(np.bincount(fine) > 1)
        if split.size:
            f = split[0]
            raise ValueError(
                f"the levels are not nested: class {classes[i][f]!r} of level {columns[i]!r} lies in "
                f"{(fine == f).sum()} classes of level {columns[i - 1]!r} "
                f"({', '.join(repr(classes[i - 1][c]) for c in coarse[fine == f][:5])})"
                f"{f' (and {split.size - 1} other class(es) alike)' if split.size > 1 else ''}; give the levels "
                "coarse to fine with every finer class inside one coarser class, e.g. make the fine labels unique "
                "per coarse class ('lineage/cell_type')")
    single = single_class_levels(classes)
    if single:  # I(X; C_l) = 0 for every gene: the level would only shrink F by its weight
        if warn:
            warn_single_class_levels(columns, classes, single, stacklevel=3)
        kept = [i for i in range(n_levels) if i not in single]
        if not weights[kept].sum() > 0:
            raise ValueError(f"groupby_weights gives weight only to level(s) of a single class "
                             f"({', '.join(repr(str(columns[i])) for i in single)}); give the level(s) "
                             f"{', '.join(repr(str(columns[i])) for i in kept)} a positive weight")
        codes, classes = [codes[i] for i in kept], [classes[i] for i in kept]
        columns, weights = [columns[i] for i in kept], weights[kept] / weights[kept].sum()
    return cols[-1], Levels(codes, classes, [str(c) for c in columns], weights)


def level_sum(relevance_of, y_codes, levels=None):
    """F = sum_l v_l r(C_l): a class relevance ``relevance_of(codes)`` summed over the levels of hierarchical
    labels (:class:`Levels`), or ``relevance_of(y_codes)`` without levels.

    For nested levels C_1 (coarse) ... C_L (fine) and the information, the chain rule gives
    ``I(X; C_l) = sum_{k <= l} I(X; C_k | C_{k-1})``, so F = sum_k (v_k + ... + v_L) I(X; C_k | C_{k-1}): what a
    gene tells about the classes of level k within level k - 1 counts with the weights of level k and of every
    finer level.  With the default v_l = 1 / L the between-lineage information of a two-level hierarchy counts
    fully and the within-lineage information half (the finest level alone counts both fully).
    """
    if levels is None:
        return relevance_of(y_codes)
    return sum(v * relevance_of(c) for v, c in zip(levels.weights, levels.codes))


def warn_constant(constant, feature_names):
    """Warn about constant genes (weight 0, ranked last), pointing at the user's line whichever face called."""
    idx = np.flatnonzero(constant)
    if idx.size:
        warnings.warn(
            f"{idx.size} constant gene(s) carry no information and get weight 0, ranked last (a preselected one "
            f"stays where it was put): "
            f"{describe_indices(idx, feature_names)}",
            UserWarning,
            stacklevel=user_stacklevel(),
        )


def resolve_preselected(preselected, m, feature_names=None, n_genes=None, constant=None):
    """The one validation of ``preselected=`` (every method): forced genes as an int array, in the given order.

    Parameters
    ----------
    preselected : None, str, int or sequence of str / int
        Gene names (looked up in ``feature_names``, case-sensitive) or integer indices; one name or index
        alone is a list of one.  Mixed names and indices are read as names.
    m : int
        The number of genes of X.
    feature_names : sequence of str, optional
    n_genes : int, optional
        The panel size: it must hold every forced gene (``n_genes < len(preselected)`` is an error, never a
        silent drop of forced genes).
    constant : bool array, optional
        The constant genes: a forced constant gene is kept (ranked where the user put it) with a warning that
        it carries no information and so cannot steer the rest of the panel.

    Returns
    -------
    ndarray of int
        Indices into X; empty for ``None`` or ``[]`` (the method then runs exactly as without the option).

    Raises
    ------
    ValueError
        A name not among the genes (named), a name occurring more than once in ``feature_names``
        (ambiguous: make the names unique, e.g. ``adata.var_names_make_unique()``, or pass integer indices),
        an index out of range, a gene listed twice, all genes forced, or more forced genes than ``n_genes``.
    TypeError
        ``preselected`` is not a list of names or indices.
    """
    if preselected is None:
        return np.zeros(0, dtype=np.int64)
    items = gene_list(preselected, "preselected")
    if not items:
        return np.zeros(0, dtype=np.int64)
    idx = gene_positions(items, feature_names, m, "preselected")
    if idx.size >= m:
        raise ValueError(f"all {m} genes are preselected; nothing is left to optimise")
    if n_genes is not None and n_genes < idx.size:
        raise ValueError(f"n_genes={n_genes} but {idx.size} genes are preselected, and every preselected gene must "
                         f"be in the panel; ask for n_genes >= {idx.size} or preselect fewer genes")
    if constant is not None and np.asarray(constant)[idx].any():
        warnings.warn(f"preselected gene(s) {describe_indices(idx[np.asarray(constant)[idx]], feature_names)} are "
                      "constant across samples: they stay in the panel where you put them but carry no information, "
                      "so they do not steer the choice of the other genes", UserWarning, stacklevel=user_stacklevel())
    return idx


def weights_and_ranking(m_total, keep, x, F, constant, preselected):
    """Scatter solver weights ``x`` and relevance ``F`` (over the kept genes) back to all genes and rank.

    Ranking: the preselected genes first (in the given order), then the other kept genes by weight
    with ties broken by F (QPFS section 2.3, step 8), then the constant genes.
    Returns ``(weights, F_all, ranking)``.
    """
    weights = np.zeros(m_total)
    weights[keep] = x
    F_all = np.zeros(m_total)
    F_all[keep] = F
    rest = np.setdiff1d(keep, preselected)
    const_rest = np.setdiff1d(np.flatnonzero(constant), preselected)
    ranking = np.concatenate([preselected, rank_by_weight(weights, F_all, candidates=rest), const_rest])
    return weights, F_all, ranking.astype(np.int64)


def preselected_record(preselected, feature_names):
    """``params`` entry recording the forced genes (names when known, else indices); ``{}`` without any."""
    if not len(preselected):
        return {}
    return dict(preselected=[int(i) for i in preselected] if feature_names is None
                else [str(feature_names[i]) for i in preselected])


def forced_first(ranking, preselected):
    """``ranking`` with the forced genes moved to the front, in their given order (the rest keep their order):
    what every method that ranks by a score unaffected by the forced set (MaxRel, random) returns."""
    preselected = np.asarray(preselected, dtype=np.int64)
    if not preselected.size:
        return np.asarray(ranking, dtype=np.int64)
    rest = np.asarray(ranking, dtype=np.int64)
    return np.concatenate([preselected, rest[~np.isin(rest, preselected)]])


#: values of ``batch_weights``: w_b = n_b / N ("size", the conditional information given the batch) or 1 / B
BATCH_WEIGHTS = ("size", "equal")
#: values of ``batch_discretization``: thresholds computed within each batch, or once on all samples
BATCH_DISCRETIZATIONS = ("per_batch", "global")

class Batches:
    """Validated batches of the samples (:func:`check_batch`): what the measures below stratify by.

    Attributes
    ----------
    codes : ndarray of int, batch of every sample, ``0..B-1``
    names : ndarray, the batch labels in code order
    sizes : ndarray of int, n_b
    weights : ndarray of float, w_b (sum 1): ``n_b / N`` (``"size"``) or ``1 / B`` (``"equal"``)
    weighting, discretization : str, the options used
    """

    def __init__(self, codes, names, weighting, discretization):
        self.codes, self.names = codes, names
        self.sizes = np.bincount(codes, minlength=len(names))
        self.weighting, self.discretization = weighting, discretization
        self.weights = self.sizes / self.sizes.sum() if weighting == "size" else np.full(len(names), 1.0 / len(names))

    def params(self):
        """The ``params`` entries recording the batch settings (plain types)."""
        return dict(batch=True, n_batches=int(len(self.names)), batch_weights=self.weighting,
                    batch_discretization=self.discretization)


def check_batch(batch, X, *, batch_weights="size", batch_discretization="per_batch"):
    """The one validation of ``batch=`` (every method that takes it); ``None`` without batches.

    ``X`` is the caller's matrix (a DataFrame's index matches a Series ``batch`` by sample name, as for the
    labels).  Missing values, a wrong length or a 2-D batch are errors naming the problem; a batch of a single
    sample gets a warning (it has no within-batch spread: every measure within it is 0).
    """
    if batch_weights not in BATCH_WEIGHTS:
        raise ValueError(f"batch_weights must be one of {BATCH_WEIGHTS}, got {batch_weights!r}")
    if batch_discretization not in BATCH_DISCRETIZATIONS:
        raise ValueError(f"batch_discretization must be one of {BATCH_DISCRETIZATIONS}, got {batch_discretization!r}")
    if batch is None:
        return None
    codes, names = check_labels(batch, X.shape[0], name="batch", min_classes=1, sample_names=sample_names_of(X),
                                check_continuous=False)
    codes = np.asarray(codes, dtype=np.int64)
    out = Batches(codes, names, batch_weights, batch_discretization)
    if X.shape[0] > 1 and len(names) == X.shape[0]:  # sample ids or a continuous covariate, not batches
        raise ValueError(f"batch gives every sample a batch of its own ({len(names)} distinct values for "
                         f"{X.shape[0]} samples, e.g. {', '.join(str(v) for v in names[:3])}): pass the batch "
                         "(donor, run, plate) of every sample, not a sample id or a continuous covariate")
    tiny = names[out.sizes < 2]
    if tiny.size:
        warnings.warn(f"batch(es) {', '.join(map(str, tiny[:5]))} have a single sample: no within-batch spread, so "
                      "they add nothing to the batch-aware measures; merge them with another batch or drop them",
                      UserWarning, stacklevel=user_stacklevel())
    return out


def _single_class_batches(batch, codes):
    """Whether every batch holds samples of a single class of ``codes``."""
    pairs = np.unique(np.column_stack([batch.codes, np.asarray(codes)]), axis=0)
    return np.bincount(pairs[:, 0], minlength=len(batch.names)).max() < 2


def check_batch_crosses_classes(batch, y_codes, levels=None):
    """Refuse batches that are confounded with the labels: every batch holds a single class.

    Batch-aware measures compare the classes *within* each batch (``sum_b w_b I_b``, within-batch
    standardisation), so when no batch holds two classes there is nothing left to compare and every
    relevance would be 0 -- the user would get "no gene carries information" with no hint that the batch
    is the cause.  A typical case: ``batch_key`` names the donor in a case/control study, each donor
    being a case or a control.  ``batch`` is a :class:`Batches` (or ``None``: nothing to check).
    ``levels`` (:class:`Levels`, hierarchical labels; ``y_codes`` is the finest): a coarser level confounded with
    the batch is warned about, since its relevance is then 0 for every gene and its weight only shrinks F.
    """
    if batch is None:
        return
    if levels is not None:
        confounded = [str(name) for name, codes in zip(levels.names[:-1], levels.codes[:-1])
                      if np.unique(codes).size > 1 and _single_class_batches(batch, codes)]
        if confounded:
            warnings.warn(f"every batch holds a single class of level(s) {', '.join(map(repr, confounded))}: "
                          "batch-aware measures compare the classes within each batch, so these levels carry no "
                          "information for any gene and their groupby_weights only shrink the relevance; drop them "
                          "from the labels, or give a batch that crosses them", UserWarning,
                          stacklevel=user_stacklevel())
    if _single_class_batches(batch, y_codes):
        shown = ", ".join(repr(str(batch.names[b])) for b in range(min(3, len(batch.names))))  # not np.int64(0)
        raise ValueError(f"every batch holds samples of a single class (batches {shown}"
                         f"{', ...' if len(batch.names) > 3 else ''}): the batch is confounded with the labels, and "
                         "batch-aware measures compare the classes within each batch, so nothing is left to compare; "
                         "drop the batch (batch=None / batch_key=None), or give a batch that crosses the classes "
                         "(e.g. the sequencing run rather than the donor)")


def discretization_rule(X, discretization):
    """The rule ``discretization`` stands for on X, the matrix a selector discretises (its non-constant genes, where
    it leaves the constant ones out): ``"auto"`` decided once
    (:func:`bioqpfs._kernels.discretize.resolve_discretization`; a pass counting the zeros of a Dask X), any other
    value unchanged.  The selector passes the rule to
    :func:`info_table` / :func:`discretized` and records it as ``params["discretization_used"]``, so that what is
    recorded is what was applied: "auto" decided again later, on another matrix (the whole ``.X`` after
    ``mask_var``, or the panel's columns), can come out another way."""
    return _disc.resolve_discretization(X, discretization)


def gene_labels(feature_names, genes):
    """How messages name the columns ``genes`` of X (a selector's non-constant genes, say): their names, else
    their positions in X (not in the subset, which the user never sees)."""
    return np.asarray(genes) if feature_names is None else np.asarray(feature_names)[genes]


def discretized(X, discretization, n_bins, y_codes, batch=None, genes=None):
    """``(codes, n_levels)`` of X (:func:`bioqpfs._kernels.discretize.codes`); with ``batch`` (per-batch
    discretisation) the same rule applied to each batch's samples separately, so that thresholds follow the
    batch (a gene shifted by batch gets the same codes in every batch).  ``genes``: how messages name X's columns
    (:func:`gene_labels`; default their positions in X)."""
    if batch is None or batch.discretization == "global" or discretization is None:
        return _disc.codes(X, discretization, n_bins=n_bins, y_codes=y_codes, feature_names=genes)
    rule = _disc.resolve_discretization(X, discretization)
    if is_dask_array(X):  # lazy codes, chunk by chunk, each batch's thresholds from its own rows
        from .._kernels.discretize_dask import dask_group_codes

        return dask_group_codes(X, rule, batch.codes, n_bins=n_bins)
    codes = np.zeros(X.shape, dtype=np.uint8)
    levels = np.ones(X.shape[1], dtype=np.int64)
    for b in range(len(batch.names)):
        rows = np.flatnonzero(batch.codes == b)
        if rows.size < 2:  # a single sample has no spread (and carries no information): one level
            continue
        y_rows = None if y_codes is None else np.asarray(y_codes)[rows]  # read by "mdl" alone; None: no labels
        c, lev = _disc.codes(X[rows], rule, n_bins=n_bins, y_codes=y_rows)
        codes[rows] = c
        levels = np.maximum(levels, lev)
    return codes, levels


def info_table(X, y_codes, *, discretization, n_bins, class_weight=None, grouped=False, batch=None, genes=None):
    """The code table every MI-based selector counts from: X discretised once, with the class-weighted
    sample weights of ``class_weight`` (None or "balanced"; :func:`bioqpfs._kernels.information.class_sample_weights`)
    and, when ``grouped``, the samples grouped by class (for the class-conditional kinds).  ``batch``
    (:class:`Batches`): discretised per batch (:func:`discretized`) and stratified by batch, so that every
    measure of the table is ``sum_b w_b I_b`` (:class:`bioqpfs._kernels.information.CodeTable` ``strata=``), with
    ``class_weight="balanced"`` the classes balanced within every batch.  ``genes``: how messages name X's columns
    (:func:`gene_labels`)."""
    codes, levels = discretized(X, discretization, n_bins, y_codes, batch, genes)
    weights = _info.class_sample_weights(y_codes, class_weight, None if batch is None else batch.codes)
    return _info.CodeTable(codes, levels, groups=y_codes if grouped else None, weights=weights,
                           strata=None if batch is None else batch.codes,
                           strata_weights=None if batch is None else batch.weights)


def sorted_class_order(classes):
    """Positions of ``classes`` in sorted order of the labels: by value when they compare (numbers, text; text
    that is all numbers, as a CSV column, a scanpy leiden column or an R factor of ids gives, by its numeric
    value, so ``"10"`` comes after ``"2"`` as 10 after 2), else by their text."""
    values = np.asarray(classes, dtype=object)
    try:
        numbers = [float(v) for v in values]  # numeric text: the same order as the numbers themselves
    except (TypeError, ValueError):
        numbers = None
    if numbers is not None and all(np.isfinite(numbers)):
        return np.asarray(sorted(range(values.size), key=lambda i: numbers[i]), dtype=np.int64)
    try:
        return np.asarray(sorted(range(values.size), key=lambda i: values[i]), dtype=np.int64)
    except TypeError:  # labels of mixed types
        return np.asarray(sorted(range(values.size), key=lambda i: str(values[i])), dtype=np.int64)


def within_batch_standardized(X, batch):
    """X with every gene centred and scaled within each batch, batch b scaled by ``sqrt(w_b N / n_b)``: the
    Pearson correlation of the result is ``sum_b w_b r_b``, the weighted within-batch correlation (dense
    float64).  A gene constant within a batch is 0 there, and its correlations are renormalised over the batches
    where it varies: ``sum_b w_b r_b / sqrt(W_i W_j)``, ``W_i`` the weight of the batches where gene i varies (two
    genes correlated 1 wherever one of them varies are fully redundant, not half; a gene expressed in one batch
    only is compared where it is).  A Dask X gives a lazy Dask array with its chunks: every
    batch's mean and sd from two passes over X in all (:func:`bioqpfs._kernels.discretize_dask.dask_group_scaled_moments`),
    every chunk centred and scaled by its samples' batches."""
    if is_dask_array(X):
        return _dask_within_batch_standardized(X, batch)
    n, m = X.shape
    # X as dense float64, the result and one batch's rows, standardised in place (their squares by column blocks)
    memory_guard(3 * 8 * n * m + min(8 * n * m, _corr.MOMENT_BLOCK_BYTES),
                 f"the {n} x {m} dense within-batch standardised copy of X (|correlation| or Hall's relevance with "
                 "batches)", ["similarity='mi' with relevance='mi' (counted without a dense copy)",
                                             "genes", "pass X as a Dask array chunked by samples (standardised "
                                                      "chunk by chunk)"])
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    out = np.zeros_like(X)
    for b in range(len(batch.names)):
        rows = np.flatnonzero(batch.codes == b)
        xb = X[rows]
        xb -= xb.mean(axis=0)
        sd = np.empty(m)
        # a column's sum runs down the rows whatever the block: the same bits as the whole-matrix formula
        for j0, j1 in _corr.column_blocks(xb, _corr.MOMENT_BLOCK_BYTES):
            sd[j0:j1] = np.sqrt((xb[:, j0:j1] ** 2).mean(axis=0))
        np.divide(xb, sd, out=xb, where=sd > 0)
        xb[:, sd <= 0] = 0.0
        xb *= np.sqrt(batch.weights[b] * n / rows.size)
        out[rows] = xb
    return out


def _dask_within_batch_standardized(X, batch):
    import dask.array as da
    from dask.base import tokenize

    from .._kernels.counting_dask import sample_chunked
    from .._kernels.discretize_dask import dask_group_scaled_moments
    from .._validation import CHECKED_CHUNKS

    X = sample_chunked(X)
    n, m = X.shape
    codes = np.asarray(batch.codes, dtype=np.int64)
    n_batches = len(batch.names)
    mean, ss, s = dask_group_scaled_moments(X, codes, n_batches)  # of X / s: no overflow at any scale
    sizes = np.bincount(codes, minlength=n_batches).astype(np.float64)
    means, inv_sds = mean * s, np.zeros((n_batches, m))
    for b in np.flatnonzero(sizes):
        sd = np.sqrt(ss[b] / sizes[b]) * s[b]
        inv_sds[b] = np.divide(np.sqrt(batch.weights[b] * n / sizes[b]), sd, out=np.zeros(m), where=sd > 0)
    G = da.from_array(codes[:, None], chunks=(X.chunks[0], 1))
    # dense float64 chunks, as the meta says: named as checked, so that validating it again adds no layer (and the
    # passes memoized for it are reused)
    return da.map_blocks(_chunk_within_batch, X, G, means=means, inv_sds=inv_sds, dtype=np.float64,
                         chunks=X.chunks, meta=np.empty((0, 0)),
                         name=f"{CHECKED_CHUNKS}within-batch-{tokenize(X, codes, means, inv_sds)}")


def _chunk_within_batch(x, g, *, means, inv_sds):
    x = np.asarray(x.toarray() if hasattr(x, "toarray") else x, dtype=np.float64)
    g = np.asarray(g).ravel()
    return (x - means[g]) * inv_sds[g]


def information_relevance(table, y_codes, base, levels=None):
    """F_i = I(X_i; C) of the genes of ``table`` (its weights, e.g. class-balanced, included), in ``base``;
    with hierarchical labels (:class:`Levels`) F_i = sum_l v_l I(X_i; C_l) (:func:`level_sum`), the table's
    sample weights (those of the finest level) kept for every level."""
    if levels is None:
        return _info.class_relevance(table, y_codes) / np.log(base)
    return level_sum(lambda c: _info.class_relevance(table.regrouped(c)), y_codes, levels) / np.log(base)


def similarity_guard(r, m, dtype, similarity, working_bytes=0, remedies=("genes", "nystrom", "ikm")):
    """Refuse an ``r x m`` redundancy matrix (and the caller's ``working_bytes`` beside it) that would not fit in
    memory, naming what a selector can change (:func:`~bioqpfs._validation.output_guard`; a selector picks rows
    and dtype itself; ``remedies``: those its caller can follow)."""
    output_guard(r, m, dtype, "mutual information" if similarity == "mi" else "correlation", list(remedies),
                 extra_bytes=working_bytes)


def similarity_and_relevance(X, y_codes, *, similarity, relevance, discretization, n_bins, base, need_full=True,
                             rows=None, dtype=np.float64, class_weight=None, working_bytes=0, batch=None,
                             levels=None, genes=None):
    """Redundancy Q (|Pearson| or MI) and relevance F of the genes of X -- the one place selectors get them.

    ``relevance`` is a kind ("mi", "hall", "mst", "mst_cpx") or a precomputed vector; the defaults follow
    the QPFS paper (section 2.1): MI redundancy with MI relevance, correlation with Hall's relevance.
    Q is the whole matrix (``need_full``), only ``rows`` of it (Nystrom), or None; ``dtype`` float32
    halves it at genome scale.  ``class_weight="balanced"`` weighs every class equally in Q and F (MI only).
    ``working_bytes``: the memory the caller needs on top of Q (e.g. its solver), so that the guard
    refuses the whole operation before Q is computed rather than after.  ``batch`` (:class:`Batches`): MI
    measures ``sum_b w_b I_b`` (:func:`info_table`), |Pearson| and Hall's relevance on the genes standardised
    within each batch (:func:`within_batch_standardized`); the MST relevances refuse it.  ``levels``
    (:class:`Levels`, hierarchical labels): F = sum_l v_l F(C_l) (:func:`level_sum`) for every relevance kind;
    Q and the class weights use the finest level ``y_codes``; a precomputed vector refuses it.
    ``genes``: how messages name X's columns (:func:`gene_labels`).
    Returns ``(Q, F, relevance_name, code_table_or_None)``."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r}; choose one of {SIMILARITIES}")
    base = check_base(base)
    if relevance is None:
        relevance = "mi" if similarity == "mi" else "hall"
    table = None
    if class_weight is not None and not (similarity == "mi" and (not isinstance(relevance, str) or relevance == "mi")):
        _info.class_sample_weights(y_codes, class_weight)  # a bad value is named first
        raise ValueError(f"class_weight={class_weight!r} applies to the information measures (similarity='mi', "
                         f"relevance='mi'), not to similarity={similarity!r} with relevance={relevance!r}")
    if similarity == "mi" or (isinstance(relevance, str) and relevance == "mi"):
        table = info_table(X, y_codes, discretization=discretization, n_bins=n_bins, class_weight=class_weight,
                           batch=batch, genes=genes)
    if batch is not None and (similarity == "correlation" or relevance in ("hall", "mst", "mst_cpx")):
        if relevance in ("mst", "mst_cpx"):
            raise ValueError(f"relevance={relevance!r} has no batch-aware form; use relevance='mi' or 'hall' with "
                             "batch=, or correct the batch effect first")
        if len(batch.weights) > 1:  # one batch: the plain correlation, bit for bit (standardising moved last bits)
            X = within_batch_standardized(X, batch)
    m = X.shape[1]
    Q = None
    if need_full or rows is not None:
        similarity_guard(m if rows is None else len(rows), m, dtype, similarity, working_bytes)
        if similarity == "mi":
            Q = _info.pairwise_information(table, None, "mi", rows=rows, base=base, dtype=dtype)
        else:
            Q = _corr.abs_pearson(X, rows=rows, dtype=dtype)
    if isinstance(relevance, str):
        if relevance == "mi":
            F = information_relevance(table, y_codes, base, levels)
        elif relevance in ("hall", "mst", "mst_cpx"):  # the continuous-data relevances of measures.relevance
            F = level_sum(lambda c: measures.relevance(X, c, kind=relevance, base=base), y_codes, levels)
        else:
            raise ValueError(f"unknown relevance {relevance!r}; choose one of {RELEVANCES} or pass a vector")
    else:
        if levels is not None:
            raise ValueError("a precomputed relevance vector with hierarchical labels: the levels would be ignored; "
                             "pass relevance='mi' (or another kind) to sum it over the levels, or 1-D labels")
        F = np.asarray(relevance, dtype=np.float64)
        if F.shape != (m,):
            raise ValueError(f"relevance vector has shape {F.shape}; expected ({m},), one value per gene")
        if not np.isfinite(F).all() or (F < 0).any():
            raise ValueError("relevance vector must be finite and non-negative")
        relevance = "user"
    return Q, np.asarray(F, dtype=np.float64), relevance, table


def one_vs_rest_relevance(table, y_codes, n_classes, *, class_weight, base):
    """F[c, i] = I(X_i; 1[C = c]): the information of each gene about "class c or not", for every class c.

    The count of every (class, gene, bin), ``n_cga`` (the class-wise margins of the codes of ``table``, from its
    counting backend), gives for class c the 2 x L table of gene i, (n_cia, n_ia - n_cia), and the MI of
    that table.  ``class_weight="balanced"`` weighs the two sides equally (each sample of c by N / (2 n_c), each
    other sample by N / (2 (N - n_c)): the binary-label rule of
    :func:`bioqpfs._kernels.information.class_sample_weights`), so a type of 8 cells is as visible as one of
    240; ``None`` counts every sample once.  Returns ``(C, M)`` in ``base``.
    """
    y_codes = np.asarray(y_codes, dtype=np.int64)
    _info.class_sample_weights(y_codes, class_weight)  # a bad value is named here
    if table.strata is not None:  # batches: sum_b w_b F_b, each batch's samples counted alone
        # every (class, batch)'s counts of every bin in one pass over the codes
        margins = table.stratum_margins(y_codes, weighted=False)
        return sum(w * _one_vs_rest(margins[:, b], y_codes[table.strata == b], n_classes, class_weight)
                   for b, w in enumerate(table.strata_weights)) / np.log(base)
    # the per-class counts of every bin are the margins of the codes grouped by class (its counting backend)
    margins = type(table.backend)(table.backend.native_codes, n_bins=table.n_bins, groups=y_codes).margins()
    return _one_vs_rest(margins, y_codes, n_classes, class_weight) / np.log(base)


def _one_vs_rest(margins, y_codes, n_classes, class_weight):
    """F[c, i] of :func:`one_vs_rest_relevance` of one (unstratified) sample set, in nats, from the unweighted
    per-class margins of its codes ``(C', genes, n_bins - 1)`` (``C' <= n_classes``)."""
    sizes = np.bincount(y_codes, minlength=n_classes).astype(np.float64)
    counts = _class_bin_counts(margins, sizes)
    pooled = counts.sum(axis=0)
    F = np.zeros((n_classes, margins.shape[1]))
    for c in range(n_classes):
        w = _one_vs_rest_weights(sizes, c, class_weight)
        if w is not None:
            F[c] = _info.mi_of_joint_counts(np.stack([counts[c] * w[0], (pooled - counts[c]) * w[1]]))
    return F


class ClassLevelCounts:
    """The count of every (class, batch) in every level of every gene of X under one discretisation rule: the
    tables the per-class relevance bins and the pair-order information read.

    A sparse X in memory with an equal-frequency rule (:data:`bioqpfs._kernels.discretize.SORTED_RULES`) and one
    set of codes for all samples (no batches, or ``batch.discretization="global"``) is counted from its sorted
    columns (:class:`bioqpfs._kernels.discretize.SparseLevelCounts`: no codes matrix, and the sort shared with the
    other rules of the call under :func:`bioqpfs._kernels.discretize.sharing_sorted_columns`); anything else (dense
    or Dask X, per-batch codes, given codes) from its codes (:func:`discretized`) by the counting backend
    (:func:`bioqpfs._kernels.information.stratum_margins`).  Both give the same integer counts.

    ``use_sorted=False`` counts from the codes whatever X is (the reference of ``benchmarks/bench_mi.py --levels``).

    Attributes
    ----------
    sizes : ndarray of float64, shape (B, C), the samples of every class in every batch
    width : int, L, the levels of the widest gene (at least 2)
    """

    def __init__(self, X, rule, n_bins, y_codes, n_classes, batch=None, *, use_sorted=True):
        self.y_codes = np.asarray(y_codes, dtype=np.int64)
        self.n_classes, self.n_batches = n_classes, 1 if batch is None else len(batch.weights)
        self.strata = np.zeros(self.y_codes.size, dtype=np.int64) if batch is None else \
            np.asarray(batch.codes, dtype=np.int64)
        self.sizes = np.stack([np.bincount(self.y_codes[self.strata == b], minlength=n_classes)
                               for b in range(self.n_batches)]).astype(np.float64)
        one_code_set = batch is None or batch.discretization == "global"
        if use_sorted and sp.issparse(X) and rule in _disc.SORTED_RULES and one_code_set:
            self._sorted = _disc.SparseLevelCounts(X, rule, n_bins)
            self.width = self._sorted.width
        else:
            self._sorted = None
            self._codes, levels = discretized(X, rule, n_bins, self.y_codes, batch)
            self.width = max(2, int(np.max(levels))) if np.size(levels) else 2

    def counts(self, genes=None, first=0, last=None):
        """``(last - first, B, M_genes, L)``: the samples of every class ``first..last-1`` (default all) and batch in
        every level of every gene of ``genes`` (a slice, default all), float64."""
        C, B = self.n_classes, self.n_batches
        last = C if last is None else last
        genes = slice(None) if genes is None else genes
        if self._sorted is not None:  # a (class, batch) pair is one label
            out = self._sorted.counts(self.y_codes * B + self.strata, C * B, genes, first * B, last * B)
            return out.reshape(last - first, B, *out.shape[1:])
        codes, y, strata = self._codes, self.y_codes, self.strata
        if (first, last) != (0, C):  # these classes' rows only
            rows = np.flatnonzero((y >= first) & (y < last))
            codes, y, strata = codes[rows], y[rows], strata[rows]
        margins = _info.stratum_margins(codes[:, genes], self.width, y - first, strata, B, n_classes=last - first)
        return np.stack([_class_bin_counts(margins[:, b], self.sizes[b, first:last]) for b in range(B)], axis=1)

    def pooled(self):
        """``(B, M, L)``: every batch's samples in every level of every gene, float64."""
        B = self.n_batches
        if self._sorted is not None:
            return self._sorted.pooled()[None] if B == 1 else self._sorted.counts(self.strata, B)
        margins = _info.stratum_margins(self._codes, self.width, None, self.strata, B)[0]
        return np.stack([_class_bin_counts(margins[b][None], self.sizes[b].sum()[None])[0] for b in range(B)])


def _class_bin_counts(margins, sizes):
    """``(C, M, L)``: the count of every class in every bin of every gene, from the per-class margins
    ``(C', M, L - 1)`` of the codes (the last bin implicit; classes beyond ``C' <= C`` hold no sample) and the
    class sizes ``(C,)``."""
    C, k = sizes.size, min(margins.shape[0], sizes.size)
    counts = np.zeros((C, margins.shape[1], margins.shape[2] + 1))
    counts[:k, :, :-1] = margins[:k]
    counts[:k, :, -1] = sizes[:k, None] - margins[:k].sum(axis=2)
    return counts


def _one_vs_rest_weights(sizes, c, class_weight):
    """``(w_in, w_out)``, the weight of a sample of class c and of any other sample in the "c or not" table
    (``class_weight="balanced"``: both sides weigh N / 2; the binary-label rule of
    :func:`bioqpfs._kernels.information.class_sample_weights`), or None when class c is absent or alone (within
    a batch): no information."""
    n = sizes.sum()
    if sizes[c] == 0 or sizes[c] == n:
        return None
    return (1.0, 1.0) if class_weight is None else (n / (2 * sizes[c]), n / (2 * (n - sizes[c])))


#: ``relevance_bins`` of :func:`bioqpfs.qpfs_cover`: the one-vs-rest relevance from the codes shared with Q
#: (``"shared"``) or from bins of its own, equal-frequency under the weights it is counted with (``"per_class"``)
RELEVANCE_BINS = ("shared", "per_class")
#: the equal-frequency rules whose bins ``relevance_bins="per_class"`` re-weighs (mean +- sd and MDL are not)
EQUAL_FREQUENCY_RULES = ("quantile", "zero_quantile")
#: fine equal-frequency bins of every gene from which each class's own bins are merged
FINE_BINS = 32


def per_class_bin_relevance(X, y_codes, n_classes, *, rule, n_bins, class_weight, base, batch=None,
                            fine_bins=FINE_BINS):
    """F[c, i] = I(X_i^(c); 1[C = c]) with each class's own equal-frequency bins (``relevance_bins="per_class"``).

    :func:`one_vs_rest_relevance` counts class c against the rest with class-balanced weights (c as heavy as all
    the others) but codes every gene with bins that are equal-frequency over *all* samples.  For a rare type
    that is high on a gene expressed everywhere (pbmc68k_reduced: HNRNPA1 in 13 CD34+ progenitors of 700 cells,
    AUROC 0.99) the zero_quantile cut sits at the median of all detected values, so half of the other cells
    fall with the type and the gene looks weak (0.34 bits), while an on/off gene detected in a few of the type's
    cells wins (EGFL7: 0.49 bits, AUROC 0.85).  Here the bins of class c's problem are equal-frequency under the
    weights that problem is counted with: the same rule (``"zero_quantile"``: zeros, then ``n_bins - 1`` bins of
    the detected values; ``"quantile"``: ``n_bins`` bins), each cut at the weighted quantile ``q`` of
    the gene's values, class c weighing half: the boundary between sorted values whose weighted share of the
    values below it is nearest to ``q`` (the lowest such boundary on ties).  The cuts are resolved on a grid:
    every gene is first coded into ``fine_bins`` equal-frequency bins of the same rule
    (:func:`bioqpfs._kernels.discretize.codes`), their counts per class come from the counting backend (one pass;
    a Dask X chunk by chunk), and each class merges them at the boundaries between fine bins nearest to its
    weighted quantiles (exactly the cuts above when every distinct value has a fine bin of its own).  Then F[c] is the MI of the merged 2 x L tables, weighted as in
    :func:`one_vs_rest_relevance`.  With ``batch``, ``sum_b w_b F_b``, each batch's bins and counts its own
    (``batch.discretization="global"``: the fine codes are global).  At least 8 fine bins per coarse bin (at most
    255, the codes' limit).  Returns ``(C, M)`` in ``base``.
    Chosen by ``benchmarks/bench_panels.py`` (README "Panel quality")."""
    y_codes = np.asarray(y_codes, dtype=np.int64)
    _info.class_sample_weights(y_codes, class_weight)  # a bad value is named here
    fine_bins = relevance_fine_bins(n_bins, fine_bins)
    n_batches = 1 if batch is None else len(batch.weights)
    # the counts of every (class, batch) in every fine bin, twice (the backend's and ours), and one class's tables
    memory_guard(8 * (2 * n_classes * n_batches + 8) * X.shape[1] * fine_bins,
                 f"the per-class relevance bins' counts ({n_classes} classes x {n_batches} batches x {X.shape[1]} "
                 f"genes x {fine_bins} fine bins)", ["relevance_bins='shared' (the bins of Q)", "genes"])
    # every (class, batch)'s counts in every fine bin: one pass over the fine codes or the sorted columns
    source = ClassLevelCounts(X, rule, fine_bins, y_codes, n_classes, batch)
    counts = source.counts()
    zero_rule = rule == "zero_quantile"
    if zero_rule and batch is None:  # whether a gene has a zero: its non-zero count (a Dask X's from the first pass)
        has_zeros = (nonzero_counts(X) < X.shape[0])[None, :]
    elif zero_rule:  # each (class, batch)'s detected values per gene: one pass over X
        detected = class_sums(_detected(X), y_codes * n_batches + source.strata, n_classes * n_batches)
        has_zeros = detected.reshape(n_classes, n_batches, -1).sum(axis=0) < source.sizes.sum(axis=1)[:, None]
    else:
        has_zeros = np.zeros((n_batches, X.shape[1]), dtype=bool)
    F = np.zeros((n_classes, X.shape[1]))
    weights = np.ones(1) if batch is None else batch.weights
    for b, w_b in enumerate(weights):
        sizes = source.sizes[b]
        has_zero = has_zeros[b]
        F += w_b * _per_class_bins(counts[:, b], sizes, has_zero, n_bins, class_weight)
    return F / np.log(base)


def relevance_fine_bins(n_bins, fine_bins=FINE_BINS):
    """The fine bins of :func:`per_class_bin_relevance`: at least 8 per coarse bin, at most 255 (the codes' limit)."""
    return min(_disc.MAX_LEVELS, max(int(fine_bins), 8 * int(n_bins)))


def prefetch_recipe_edges(X, rule, n_bins, *, per_class_bins, pair_order):
    """On a Dask X, the equal-frequency edges the default recipe will ask for -- Q's ``n_bins`` of ``rule``, the
    per-class relevance's fine bins (``per_class_bins``) and the pair order's 255 levels of all values
    (``pair_order``) -- searched in one set of passes over X instead of one search each
    (:func:`bioqpfs._kernels.discretize_dask.prefetch_quantile_edges`; the same edges).  Nothing for other X or
    rules."""
    if not is_dask_array(X) or rule not in EQUAL_FREQUENCY_RULES:
        return
    zero = rule == "zero_quantile"
    requests = [(n_bins, zero)] + [(relevance_fine_bins(n_bins), zero)] * per_class_bins
    prefetch_quantile_edges(X, requests + [(_disc.MAX_LEVELS, False)] * pair_order)


#: the relevance F_c of :func:`bioqpfs.qpfs_cover`'s per-class problems: the one-vs-rest MI (``"mi"``), the
#: mean of it and the pair-order information against the rest (``"mi_order"``, :func:`pair_order_information`)
#: or against the rest and the nearest class (``"mi_order_nearest"``, ``nearest=True``), or ``"auto"``:
#: ``"mi_order_nearest"`` where every class has bins of its own (``relevance_bins="per_class"`` on
#: equal-frequency codes: single-cell data under the recipe), else ``"mi_order"``
CLASS_RELEVANCES = ("mi", "mi_order", "mi_order_nearest", "auto")


def pair_order_information(X, y_codes, n_classes, *, base, batch=None, rule="quantile", nearest=False):
    """F[c, i] = I(Z; [X_i of the class-c sample > X_i of the other]): the pair-order information of gene i.

    Draw one sample of class c and one of the other samples, and present them in random order; Z (one fair bit)
    says which of the two is the class-c sample.  Gene i's only evidence is which of the two values is higher,
    which points to the class-c sample with probability A = AUROC_c,i (ties count one half; the Mann-Whitney
    statistic divided by n_c (n - n_c), the rank-sum test of scanpy's Wilcoxon markers).  That is a binary
    symmetric channel, so::

        F[c, i] = ln 2 - H_2(A_c,i),    H_2(p) = -p ln p - (1 - p) ln(1 - p)

    0 for a gene whose values do not depend on the class and ln 2 (one bit, H(Z)) for a perfect marker, high or
    low in c.  It is an information about class c in the same unit as the MI of the QPFS problem, from the ranks
    only: unlike the MI of three mean +- sd bins it sees the whole order, and it weighs class c and the rest
    equally whatever their sizes (the pair is one of each), as ``class_weight="balanced"`` does.

    The ranks come from counts: every gene is coded into ``MAX_LEVELS`` (255) equal-frequency bins
    (``rule="quantile"``; ``None``: X holds integer codes, used as they are) by
    :func:`bioqpfs._kernels.discretize.codes`, their counts per (class, batch) from the counting backend in one
    pass (sparse, a Dask X chunk by chunk, cupy), and ``A = sum_j n_c,j (m_<j + m_j / 2) / (n_c m)`` over the
    bins j, with ``m_<j`` the other samples in the bins below and ``m_j`` in bin j: values sharing a bin count as
    ties.  With at most 255 samples (every microarray set; per batch with per-batch bins) each distinct value has
    its own bin and A is exact; beyond, it is the AUROC of 255 ordered levels, where distinct values closer than
    one level may share a bin (4 values over 3,000 samples, two of them held by one sample each: 5e-7 off) (zeros take their share of the levels:
    ``"zero_quantile"`` codes would not keep the order of negative values).  With ``batch``, ``sum_b w_b F_b``,
    each batch's A from its own samples (and its own bins with ``batch.discretization="per_batch"``).  Returns
    ``(C, M)`` in ``base``.

    ``nearest=True``: F[c, i] is the mean of that and the same information with the other sample drawn from the
    class nearest to c on gene i, the class d that out-ranks c most often: ``ln 2 - H_2(min_{d != c} A_cd,i)``
    (A_cd the AUROC of class c against class d alone).  Against the rest, a gene high in c and in one small
    neighbour d (a monocyte gene, for CD14+ against CD16+ monocytes) scores almost as high as one high in c alone;
    against the nearest class only the second does (A_cd near 1/2).  Like the rest term it is symmetric: a gene
    far higher in d than in c (A_cd near 0) tells that pair apart too.  With ``batch``, A_cd is
    ``sum_b w_b A_cd,b / sum_b w_b`` over the batches holding both classes, and a class d sharing no batch with c
    is left out of the minimum (0 when none is left).  The counts are then taken a block of genes at a time for all
    classes (:data:`PAIR_ORDER_BLOCK_BYTES`), and every pair of classes costs ``L`` multiply-adds per gene (a
    batched GEMM: C^2 M L in all).
    Chosen by ``benchmarks/bench_panels.py`` (README "Panel quality")."""
    y_codes = np.asarray(y_codes, dtype=np.int64)
    if nearest:
        return _rest_and_nearest_order_information(X, y_codes, n_classes, batch, rule) / np.log(base)
    n_batches = 1 if batch is None else len(batch.weights)
    levels_max, m = _disc.MAX_LEVELS, X.shape[1]
    # in memory, the classes' counts are taken a group of classes at a time (each group's rows read once; the
    # pooled counts in one more pass), so that many cell types x many genes fit: 12 bytes per (class, batch,
    # gene, level) held (the backend's float32 counts and their float64 copy); a Dask X: all classes in one pass
    in_memory = not is_dask_array(X)
    per_class = 12 * n_batches * m * levels_max
    group = max(1, PAIR_ORDER_GROUP_BYTES // per_class) if in_memory else n_classes
    group = min(group, n_classes)
    memory_guard((12 * (group + (group < n_classes)) * n_batches + 8 * 8) * m * levels_max,
                 f"the pair-order information's counts ({group} classes x {n_batches} batches x {m} "
                 f"genes x {levels_max} levels)", ["relevance='mi' (no pair-order information)", "genes"])
    source = ClassLevelCounts(X, rule, levels_max, y_codes, n_classes, batch)
    F = np.zeros((n_classes, m))
    weights = np.ones(1) if batch is None else batch.weights
    sizes = source.sizes
    pooled = source.pooled()  # (B, M, L): every batch's samples in every level
    for g0 in range(0, n_classes, group):
        g1 = min(n_classes, g0 + group)
        counts = source.counts(first=g0, last=g1)  # this group's classes: (g1 - g0, B, M, L)
        for b, w_b in enumerate(weights):
            for c in range(g0, g1):
                n_in, n_out = sizes[b][c], sizes[b].sum() - sizes[b][c]
                if n_in == 0 or n_out == 0:  # class c absent or alone in this batch: no pair, no information
                    continue
                inside = counts[c - g0, b]  # one class at a time: (M, L)
                F[c] += w_b * _order_information(inside, pooled[b] - inside, n_in, n_out)
    return np.maximum(F, 0.0) / np.log(base)


def _order_information(inside, outside, n_in, n_out):
    """ln 2 - H_2(A) in nats of every gene, A the AUROC of the level counts ``inside`` (M, L) of n_in samples
    against ``outside`` (M, L) of n_out samples (ties one half)."""
    below = np.cumsum(outside, axis=1) - outside  # the other samples in the levels below each level
    auc = np.clip((inside * (below + 0.5 * outside)).sum(axis=1) / (n_in * n_out), 0.0, 1.0)
    return np.log(2.0) - _binary_entropy(auc)


def _rest_and_nearest_order_information(X, y_codes, n_classes, batch, rule):
    """``pair_order_information(..., nearest=True)`` in nats: each block of genes' level counts for every
    (class, batch) in one pass, the rest term as without ``nearest``, and every pair of classes' AUROC as one
    batched GEMM ``A[i, c, d] = sum_j n_c,j (n_d,<j + n_d,j / 2) / (n_c n_d)``."""
    n_batches = 1 if batch is None else len(batch.weights)
    levels_max, m, C = _disc.MAX_LEVELS, X.shape[1], n_classes
    # per gene: the float32 counts and float64 copies (counts, below, pooled: 4 x 8 + 4 bytes per level of every
    # (class, batch)) and the pair tables (3 x C^2 float64); a Dask X in one block (one pass over its chunks)
    per_gene = (36 * n_batches * levels_max + 24 * C) * C
    block = max(1, PAIR_ORDER_BLOCK_BYTES // per_gene) if not is_dask_array(X) else m
    block = min(block, m)
    memory_guard(per_gene * block, f"the pair-order information's counts ({C} classes x {n_batches} batches x "
                 f"{block} genes x {levels_max} levels, and {C} x {C} class pairs)",
                 ["relevance='mi_order' (the rest only) or 'mi' (no pair-order information)", "genes",
                  "fewer classes (merge the rarest, or a coarser groupby)"])
    source = ClassLevelCounts(X, rule, levels_max, y_codes, C, batch)
    weights = np.ones(1) if batch is None else np.asarray(batch.weights, dtype=np.float64)
    sizes = source.sizes
    both = (sizes[:, :, None] > 0) & (sizes[:, None, :] > 0) & ~np.eye(C, dtype=bool)  # (B, C, C)
    pair_weight = np.tensordot(weights, both, axes=1)  # (C, C): the weight of the batches holding c and d
    rest, near = np.zeros((C, m)), np.zeros((C, m))
    for j0 in range(0, m, block):
        cols = slice(j0, min(m, j0 + block))
        block_counts = source.counts(genes=cols)  # (C, B, M_block, L)
        pairs = np.zeros((C, C, cols.stop - j0))
        for b, w_b in enumerate(weights):
            counts = block_counts[:, b]  # (C, M_block, L)
            pooled, n_b = counts.sum(axis=0), sizes[b].sum()
            for c in range(C):
                if 0 < sizes[b, c] < n_b:  # class c absent or alone in this batch: no pair, no information
                    rest[c, cols] += w_b * _order_information(counts[c], pooled - counts[c], sizes[b, c],
                                                              n_b - sizes[b, c])
            below = np.cumsum(counts, axis=2) - counts
            auc = np.matmul(counts.transpose(1, 0, 2), (below + 0.5 * counts).transpose(1, 2, 0))  # (M_block, C, C)
            auc /= np.maximum(np.outer(sizes[b], sizes[b]), 1.0)
            pairs += w_b * np.where(both[b][:, :, None], np.clip(auc, 0.0, 1.0).transpose(1, 2, 0), 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            pairs = np.where((pair_weight > 0)[:, :, None], pairs / pair_weight[:, :, None], np.inf)
        lowest = pairs.min(axis=1)  # the AUROC of c against the class that out-ranks it most often
        near[:, cols] = np.where(np.isfinite(lowest), np.log(2.0) - _binary_entropy(lowest), 0.0)
    return 0.5 * (np.maximum(rest, 0.0) + np.maximum(near, 0.0))


#: bytes of per-class level counts the pair-order information holds at once for an in-memory X (a group of
#: classes at a time): 100 cell types x 20,000 genes would otherwise hold ~6 GB (estimated from the array sizes,
#: (12 C + 64) M 255 bytes, not measured)
PAIR_ORDER_GROUP_BYTES = 512 * 2**20
#: bytes of the nearest-class pair-order information's gene block for an in-memory X (counts, their float64 copies
#: and the pair tables).  Each gene's values come from its own slices, so the block changes no bit; 512 MiB held all
#: 2,000 genes of 15 cell types at once (180 MB whatever the cells: the default recipe's peak, 247 MB at 10,000 cells),
#: 64 MiB halves that peak (120 MB) at the same speed
PAIR_ORDER_BLOCK_BYTES = 64 * 2**20


def _binary_entropy(p):
    """H_2(p) in nats, 0 at p = 0 and 1."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log(p) + (1.0 - p) * np.log1p(-p))
    return np.where((p > 0) & (p < 1), h, 0.0)


def _detected(X):
    """1 where X is non-zero, for :func:`class_sums` (float32; a CSR/CSC X: bool values on X's own index arrays, 1 byte
    per stored value, which the class sums count exactly; a Dask X lazily, chunk by chunk)."""
    if is_dask_array(X):
        return X.map_blocks(_detected, dtype=np.float32)
    if sp.issparse(X) and X.format in ("csr", "csc"):  # no copy of the index arrays, no float copy of the values
        return type(X)((X.data != 0, X.indices, X.indptr), shape=X.shape)
    if hasattr(X, "tocsr") and not isinstance(X, np.ndarray):
        out = X.tocsr(copy=True)
        out.data = (out.data != 0).astype(np.float32)
        return out
    return (np.asarray(X) != 0).astype(np.float32)


def _per_class_bins(counts, sizes, has_zero, n_bins, class_weight):
    """F[c] (nats) of :func:`per_class_bin_relevance` for one sample set: ``counts`` ``(C, M, L)`` the
    unweighted counts of every class in the fine bins, ``sizes`` the class sizes, ``has_zero`` the genes whose
    fine bin 0 holds their zeros (``"zero_quantile"``)."""
    C, m = counts.shape[:2]
    pooled = counts.sum(axis=0)
    L = counts.shape[2]
    start = has_zero.astype(np.int64)  # the first fine bin of the equal-frequency part
    n_cuts = np.where(has_zero, n_bins - 2, n_bins - 1)
    fine = np.arange(L)[None, :]
    below_start = np.arange(L + 1)[None, :] < start[:, None]  # boundaries below the equal-frequency part
    gene_offsets = (np.arange(m) * n_bins)[:, None]
    F = np.zeros((C, m))
    for c in range(C):
        w = _one_vs_rest_weights(sizes, c, class_weight)
        if w is None:
            continue
        inside, outside = counts[c] * w[0], (pooled - counts[c]) * w[1]
        mass = np.where(fine >= start[:, None], inside + outside, 0.0)
        total = mass.sum(axis=1, keepdims=True)
        # share of the weighted mass below each boundary between fine bins (boundary j: below bin j)
        share = np.concatenate([np.zeros((m, 1)), np.cumsum(mass, axis=1)], axis=1) / np.where(total > 0, total, 1.0)
        coarse = np.where(fine >= start[:, None], start[:, None], 0)
        for k in range(1, n_bins):
            q = k / (n_cuts + 1.0)
            gap = np.where(below_start, np.inf, np.abs(share - q[:, None]))
            cut = np.argmin(gap, axis=1)  # the boundary nearest to the weighted q-quantile (the lowest on ties)
            coarse += (k <= n_cuts)[:, None] & (fine >= cut[:, None])
        # each gene's fine bins summed into its coarse ones (in fine-bin order, as a loop would add them)
        cell = (gene_offsets + coarse).ravel()
        merged = np.stack([np.bincount(cell, weights=side.ravel(), minlength=m * n_bins).reshape(m, n_bins)
                           for side in (inside, outside)])
        F[c] = _info.mi_of_joint_counts(merged)
    return F


def _squared(X):
    """X with every entry squared (dense, sparse -- still sparse -- or a lazy Dask X)."""
    if is_dask_array(X):
        return X.map_blocks(_squared, dtype=np.float64)
    return X.multiply(X) if hasattr(X, "multiply") else np.asarray(X, dtype=np.float64) ** 2


def higher_in_class(X, y_codes, n_classes, batch=None):
    """``up[c, i]``: gene i is higher in class c than in the other samples.

    The direction of a marker gene ("up-regulated in c"): the mean of gene i over the samples of class c exceeds
    its mean over all other samples, from per-class sums ``X^T 1[C = c]`` (sparse-aware; X is never densified; a
    Dask X is summed chunk by chunk).  With ``batch`` (:class:`Batches`): the batch-weighted average of the
    within-batch differences ``sum_b w_b (mean_{c,b} - mean_{rest,b}) / sd_b`` is positive (batches where class c
    is absent or alone, and genes constant within a batch, add nothing), so a batch shift does not decide the
    direction.  Returns a bool array ``(C, M)``.
    """
    y_codes = np.asarray(y_codes, dtype=np.int64)
    if batch is None:
        sums = class_sums(X, y_codes, n_classes)
        sizes = np.bincount(y_codes, minlength=n_classes).astype(np.float64)[:, None]
        rest = np.maximum(y_codes.size - sizes, 1.0)
        return sums / np.maximum(sizes, 1.0) > (sums.sum(axis=0)[None, :] - sums) / rest
    contrast = np.zeros((n_classes, X.shape[1]))
    n_batches = len(batch.weights)
    # every (class, batch)'s sums and every batch's sums of squares: two passes, whatever the number of batches
    pair_sums = class_sums(X, y_codes * n_batches + batch.codes, n_classes * n_batches).reshape(n_classes, n_batches, -1)
    squares = class_sums(_squared(X), batch.codes, n_batches)
    for b, w_b in enumerate(batch.weights):
        rows = np.flatnonzero(batch.codes == b)
        sums = pair_sums[:, b]
        sizes = np.bincount(y_codes[rows], minlength=n_classes).astype(np.float64)[:, None]
        total = sums.sum(axis=0)
        sq = squares[b]
        sd = np.sqrt(np.maximum(sq / rows.size - (total / rows.size) ** 2, 0.0))
        diff = sums / np.maximum(sizes, 1.0) - (total[None, :] - sums) / np.maximum(rows.size - sizes, 1.0)
        ok = ((sizes > 0) & (sizes < rows.size)) & (sd > 0)[None, :]
        contrast += w_b * np.where(ok, diff / np.where(sd > 0, sd, 1.0)[None, :], 0.0)
    return contrast > 0
