"""Greedy mutual-information baselines and a seeded random baseline.

The selectors users compare global methods against (QPFS paper section 3.2.1 compares with
MaxRel and mRMR; the SPEC_CMI paper section 4.3 with mRMR, JMI and CIFE).  All of them run on
the same discretised codes and the same GEMM information kernels as QPFS
(:mod:`bioqpfs._kernels.information`); MI is in bits by default.

Criteria (S = genes selected so far, C = class, F_j = I(X_j; C)):

=============  =============================================================  ==========================
method         score of candidate X_j                                         reference
=============  =============================================================  ==========================
``maxrel``     F_j (no search: a ranking by relevance)                         Peng et al. 2005, eq. 4
``mrmr_mid``   F_j - 1/|S| sum_{s in S} I(X_j; X_s)                             Peng et al. 2005, eq. 7 (MID)
``mrmr_miq``   F_j / (1/|S| sum_{s in S} I(X_j; X_s))                           Ding & Peng 2005 (MIQ)
``jmi``        sum_{s in S} I(X_j, X_s; C)                                      Yang & Moody 1999; = EMRMR
``cife``       F_j - sum_{s in S} [I(X_j; X_s) - I(X_j; X_s | C)]               Lin & Tang 2006
``random``     a seeded uniform permutation                                    --
=============  =============================================================  ==========================

Every greedy method picks the most relevant gene first (|S| = 0), then adds the best-scoring
candidate one at a time, as published.

Efficiency: only the rows of the information matrices that belong to selected genes are
computed (``pairwise_information(..., rows=[s])``, one GEMM pass over the genes per step), and
each step adds the new row into a running sum.  Selecting K of M genes costs O(K N M) and
O(M) memory, so mRMR on 10,000 genes is a fraction of a second.  JMI and CIFE use one
class-conditional row per step through the identities (C_sj := I(X_s; C | X_j), the ``"cmi"``
matrix of the kernels)

    I(X_j, X_s; C) = I(X_j; C) + I(X_s; C | X_j) = F_j + C_sj                         (chain rule)
    I(X_j; X_s) - I(X_j; X_s | C) = I(X_j; C) - I(X_j; C | X_s) = F_s - C_sj          (interaction
                                                                                   information symmetry)

so JMI_j = sum_s (F_j + C_sj) and CIFE_j = F_j + sum_s (C_sj - F_s).  The tests check every
method against a plain-loop implementation of the published formula.

Ties: scores within ``1e-9 * max(1, |best|)`` of the best are tied (the identities above and the
blocked sums round differently from a direct computation), and ties go to the higher
relevance F, then to the lower gene index.  In MIQ a zero mean redundancy (within round-off,
``ZERO_RELEVANCE`` relative to the largest F) gives an infinite score to a relevant candidate
independent of every selected gene (ties again broken by F then index) and 0 to a gene without
relevance (0 / 0: it carries nothing about the classes).

Result: ``ranking`` holds the K greedily selected genes in selection order (K = ``n_genes``, or
:data:`DEFAULT_N_RANKED` when ``n_genes`` is None); ``weights`` are rank based, (K - r + 1) / K
for the gene selected r-th and 0 for the rest, because greedy scores of different steps are not
on one scale (and MID/CIFE scores may be negative); the score each gene had when it was picked
is kept in ``extra_columns["greedy_score"]`` (NaN when not selected).  MaxRel and random rank
every gene.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from .. import measures
from .._docs import BATCH_DOC, HIERARCHY_DOC, N_BINS_DOC, Y_HIERARCHY_DOC, append_doc
from .._kernels import information as _info
from .._kernels.ranking import RANK_REL_TOL, rank_descending
from .._selection import ZERO_RELEVANCE, Selection, rank_by_weight
from .._validation import Interval, Options, check_base, check_n_genes, check_random_state, parameter_constraints
from ._common import (
    BATCH_DISCRETIZATIONS,
    BATCH_WEIGHTS,
    check_batch,
    check_batch_crosses_classes,
    check_levels,
    discretization_rule,
    forced_first,
    info_table,
    information_relevance,
    prepare,
    preselected_record,
    resolve_preselected,
    warn_constant,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

    from .._typing import MatrixLike, SeedLike

__all__ = ["maxrel", "mrmr_mid", "mrmr_miq", "jmi", "cife", "random_genes", "greedy_mi", "DEFAULT_N_RANKED"]

#: ranking length of the greedy methods when ``n_genes`` is None
DEFAULT_N_RANKED = 50
#: relative tolerance under which two greedy scores are a tie (the shared ranking tolerance)
TIE_TOL = RANK_REL_TOL

#: the parameters every MI baseline shares (checked before any work)
_CONSTRAINTS = dict(discretization=Options(*measures.DISCRETIZATIONS), n_bins=Interval("integer"),
                    class_weight=Options(*_info.CLASS_WEIGHTS), batch_weights=Options(*BATCH_WEIGHTS),
                    batch_discretization=Options(*BATCH_DISCRETIZATIONS))
_CRITERIA = ("mrmr_mid", "mrmr_miq", "jmi", "cife")


def pick_best(scores, relevance, available):
    """Index of the best available score; ties (within TIE_TOL) by higher relevance (equal up to round-off
    counts as equal), then lower index."""
    idx = np.flatnonzero(available)
    if idx.size == 0:
        return -1
    s = scores[idx]
    best = s.max()
    if np.isinf(best):
        tied = idx[s == best]
    else:
        tied = idx[s >= best - TIE_TOL * max(1.0, abs(best))]
    return int(tied[rank_descending([relevance[tied]], tied)[0]])


def _setup(X, y, feature_names, discretization, n_bins, base, class_weight=None, batch=None, batch_weights="size",
           batch_discretization="per_batch", groupby_weights=None, hierarchical=False):
    """Validated inputs, the class-grouped code table and F; ``hierarchical``: the method sums F over the levels of a
    2-D ``y`` (:func:`check_levels`), else a 2-D ``y`` is refused by :func:`prepare`.  Returns
    ``(X, y_codes, classes, constant, strata, by_class, F, params)`` with ``params`` recording the discretisation
    rule applied (``discretization_used``), batches and levels."""
    base = check_base(base)
    strata = check_batch(batch, X, batch_weights=batch_weights, batch_discretization=batch_discretization)
    levels = None
    if hierarchical:
        y, levels = check_levels(y, X, groupby_weights)
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    check_batch_crosses_classes(strata, y_codes, levels)
    warn_constant(constant, feature_names)
    rule = discretization_rule(X, discretization)  # "auto" decided once, on the matrix discretised; recorded
    by_class = info_table(X, y_codes, discretization=rule, n_bins=n_bins, class_weight=class_weight,
                          grouped=True, batch=strata, genes=feature_names)
    F = information_relevance(by_class, y_codes, base, levels)
    F[constant] = 0.0
    params = {"discretization_used": rule, **({} if strata is None else strata.params()),
              **({} if levels is None else levels.params())}
    return X, y_codes, classes, constant, strata, by_class, F, params


def greedy_mi(codes, levels, y_codes, criterion, n_select, *, base=2.0, candidates=None, F=None, table=None,
              by_class=None, weights=None, start=None):
    """Greedy forward selection with an MI criterion on integer codes (the kernel behind the baselines).

    Parameters
    ----------
    codes, levels : discretised genes (samples x genes, uint8) and the number of levels of each.
    y_codes : class codes 0..C-1.
    criterion : {"mrmr_mid", "mrmr_miq", "jmi", "cife"}
    n_select : int
        Number of genes to pick (stops earlier if the candidates run out).
    candidates : bool array, optional
        Genes allowed to be picked (default all).
    weights : ndarray, optional
        Sample weights of the counts (e.g. class-balanced); ignored when the tables are given.
    start : sequence of int, optional
        Forced genes: S starts as this set (in this order) and the search adds genes given them, every
        criterion's sums over S running over the forced genes too (issue 15: extending a fixed panel).
        ``n_select`` counts them.

    Returns
    -------
    order : ndarray of int, the selected genes in selection order (the forced genes first)
    scores : ndarray, the criterion value of each when it was picked (NaN for the forced genes)
    F : ndarray, I(X_j; C) for every gene
    """
    if criterion not in _CRITERIA:
        raise ValueError(f"unknown greedy criterion {criterion!r}; choose one of {_CRITERIA}")
    m = codes.shape[1]
    ln_b = np.log(base)
    if by_class is None:
        by_class = _info.CodeTable(codes, levels, groups=y_codes, weights=weights)
    if F is None:
        F = _info.class_relevance(by_class) / ln_b
    available = np.ones(m, dtype=bool) if candidates is None else np.asarray(candidates, dtype=bool).copy()
    uses_mi = criterion in ("mrmr_mid", "mrmr_miq")
    if uses_mi and table is None:
        # the plain "mi" kind needs a table without class groups (pooled counts; the same batch strata)
        table = by_class.regrouped(None)
    acc = np.zeros(m)
    order, picked_scores = [], []
    start = np.zeros(0, dtype=np.int64) if start is None else np.asarray(start, dtype=np.int64)
    if start.size:  # S = the forced genes: their rows enter the running sums at once
        order, picked_scores = [int(j) for j in start], [np.nan] * start.size
        available[start] = False
        if uses_mi:
            acc += _info.pairwise_information(table, None, "mi", rows=start, base=base).sum(axis=0)
        else:
            c_rows = _info.pairwise_information(by_class, None, "cmi", rows=start, base=base).sum(axis=0)
            acc += c_rows if criterion == "jmi" else c_rows - F[start].sum()
    _greedy_loop(criterion, n_select, F, acc, available, order, picked_scores, uses_mi, table, by_class, base)
    return np.asarray(order, dtype=np.int64), np.asarray(picked_scores), F


def _greedy_loop(criterion, n_select, F, acc, available, order, picked_scores, uses_mi, table, by_class, base):
    while len(order) < n_select:
        k = len(order)
        if k == 0:
            scores = F
        elif criterion == "mrmr_mid":
            scores = F - acc / k
        elif criterion == "mrmr_miq":
            # a mean redundancy within round-off of 0 is 0 (an exact 0 came out as +-4e-16, and its sign decided
            # between a finite and an infinite score); F / 0 is +inf only for a relevant gene: 0 / 0 scores 0
            red = acc / k
            zero = red <= ZERO_RELEVANCE * max(1.0, float(np.max(F, initial=0.0)))
            scores = np.where(zero, np.where(F > ZERO_RELEVANCE, np.inf, 0.0), F / np.where(zero, 1.0, red))
        elif criterion == "jmi":
            scores = acc + k * F
        else:  # cife
            scores = F + acc
        j = pick_best(scores, F, available)
        if j < 0:
            break
        order.append(j)
        picked_scores.append(float(scores[j]))
        available[j] = False
        if len(order) == n_select or not available.any():
            continue
        # one row per step is a thin sliver of work: more workers cost more to start than they save
        # (measured 0.57 s vs 0.04 s per 10,000-gene row on a loaded 2-core machine), so it runs on one
        rows = np.array([j], dtype=np.int64)
        if uses_mi:
            acc += _info.pairwise_information(table, None, "mi", rows=rows, base=base, n_workers=1)[0]
        else:  # I(X_j; C | X_.)
            c_row = _info.pairwise_information(by_class, None, "cmi", rows=rows, base=base, n_workers=1)[0]
            acc += c_row if criterion == "jmi" else c_row - F[j]


def _greedy_selector(method, X, y, n_genes, discretization, n_bins, base, feature_names, class_weight=None,
                     preselected=None, **options):
    t0 = time.perf_counter()
    X, y_codes, classes, constant, strata, by_class, F, recorded = _setup(
        X, y, feature_names, discretization, n_bins, base, class_weight, **options,
        hierarchical=method in ("mrmr_mid", "mrmr_miq"))
    # the backend's own codes: a Dask X's stay lazy (each greedy step is one counting pass), never gathered
    codes, levels, weights = by_class.backend.native_codes, by_class.n_levels, by_class.weights
    m = X.shape[1]
    n_genes = check_n_genes(n_genes, m)
    P = resolve_preselected(preselected, m, feature_names, n_genes, constant)
    n_rank = n_genes if n_genes is not None else max(min(m, DEFAULT_N_RANKED), P.size)
    order, scores, _ = greedy_mi(codes, levels, y_codes, method, n_rank, base=base, candidates=~constant, F=F,
                                 by_class=by_class, weights=weights, start=P)
    if order.size < n_rank:  # only constant genes left: they rank last, by index
        rest = np.setdiff1d(np.flatnonzero(constant), order)[: n_rank - order.size]
        scores = np.concatenate([scores, np.full(rest.size, np.nan)])
        order = np.concatenate([order, rest])
    weights = np.zeros(m)
    weights[order] = (n_rank - np.arange(order.size)) / n_rank
    greedy_score = np.full(m, np.nan)
    greedy_score[order] = scores
    params = dict(discretization=discretization, n_bins=n_bins, base=base, n_genes=n_genes, n_ranked=int(n_rank),
                  class_weight=class_weight, **preselected_record(P, feature_names), **recorded)
    diagnostics = dict(n_classes=int(classes.size), n_constant=int(constant.sum()),
                       seconds_total=time.perf_counter() - t0)
    return Selection(method, weights, order, n_genes=n_genes, params=params, diagnostics=diagnostics, relevance=F,
                     feature_names=None if feature_names is None else np.asarray(feature_names),
                     extra_columns={"greedy_score": greedy_score})


_PARAMS_DOC = """
    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
        Expression (continuous; or integer codes with ``discretization=None``).
    {y_doc}
    n_genes : int, optional
        Number of genes to select greedily (default :data:`DEFAULT_N_RANKED`, capped at the number of genes).
    discretization : {"mean_sd", "quantile", "zero_quantile", "mdl", "auto", None}
        As in :func:`bioqpfs.qpfs`: mean +- sd 3 bins (QPFS section 2.5) by default.
    {n_bins}
    base : float
        Logarithm base of MI (does not change the selection).
    class_weight : {None, "balanced"}
        As in :func:`bioqpfs.qpfs`: ``"balanced"`` weighs every class equally in every MI term.
    preselected : sequence of str or int, optional
        Forced genes (names need ``feature_names``): the greedy search starts from S = these genes, in the
        given order, and adds the rest given them -- every sum over S in the criterion includes them, exactly
        as if the search had picked them first.  They count towards ``n_genes``.
    {batch_doc}
    {groupby_weights}
    random_state : ignored (deterministic); accepted so every selector has the same signature, and validated
        (an invalid value such as -1 or "abc" is an error, as for the random methods).
    feature_names : sequence of str, optional

    Returns
    -------
    Selection
        ``ranking`` = genes in selection order, rank-based ``weights``, ``relevance`` = I(X_j; C),
        ``extra_columns["greedy_score"]`` = score when picked.
"""


@parameter_constraints(**_CONSTRAINTS)
def mrmr_mid(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, discretization: str | None = "mean_sd",
             n_bins: int = 3, base: float = 2, class_weight: str | None = None,
             preselected: Sequence[str | int] | None = None, batch: ArrayLike | None = None,
             batch_weights: str = "size", batch_discretization: str = "per_batch",
             groupby_weights: ArrayLike | None = None, random_state: SeedLike = 0,
             feature_names: Sequence[str] | None = None) -> Selection:
    """mRMR, difference form (MID): max I(X_j; C) - mean_{s in S} I(X_j; X_s) (Peng, Long & Ding 2005, eq. 7)."""
    return _greedy_selector("mrmr_mid", X, y, n_genes, discretization, n_bins, base, feature_names, class_weight,
                            preselected, batch=batch, batch_weights=batch_weights,
                            batch_discretization=batch_discretization, groupby_weights=groupby_weights)


@parameter_constraints(**_CONSTRAINTS)
def mrmr_miq(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, discretization: str | None = "mean_sd",
             n_bins: int = 3, base: float = 2, class_weight: str | None = None,
             preselected: Sequence[str | int] | None = None, batch: ArrayLike | None = None,
             batch_weights: str = "size", batch_discretization: str = "per_batch",
             groupby_weights: ArrayLike | None = None, random_state: SeedLike = 0,
             feature_names: Sequence[str] | None = None) -> Selection:
    """mRMR, quotient form (MIQ): max I(X_j; C) / mean_{s in S} I(X_j; X_s) (Ding & Peng 2005)."""
    return _greedy_selector("mrmr_miq", X, y, n_genes, discretization, n_bins, base, feature_names, class_weight,
                            preselected, batch=batch, batch_weights=batch_weights,
                            batch_discretization=batch_discretization, groupby_weights=groupby_weights)


@parameter_constraints(**_CONSTRAINTS)
def jmi(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, discretization: str | None = "mean_sd",
        n_bins: int = 3, base: float = 2, class_weight: str | None = None,
        preselected: Sequence[str | int] | None = None, batch: ArrayLike | None = None, batch_weights: str = "size",
        batch_discretization: str = "per_batch", random_state: SeedLike = 0,
        feature_names: Sequence[str] | None = None) -> Selection:
    """Joint mutual information: max sum_{s in S} I(X_j, X_s; C) (Yang & Moody 1999; the EMRMR of SPEC_CMI section 4.3)."""
    return _greedy_selector("jmi", X, y, n_genes, discretization, n_bins, base, feature_names, class_weight,
                            preselected, batch=batch, batch_weights=batch_weights,
                            batch_discretization=batch_discretization)


@parameter_constraints(**_CONSTRAINTS)
def cife(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, discretization: str | None = "mean_sd",
         n_bins: int = 3, base: float = 2, class_weight: str | None = None,
         preselected: Sequence[str | int] | None = None, batch: ArrayLike | None = None, batch_weights: str = "size",
         batch_discretization: str = "per_batch", random_state: SeedLike = 0,
         feature_names: Sequence[str] | None = None) -> Selection:
    """Conditional infomax feature extraction: max I(X_j; C) - sum_s [I(X_j; X_s) - I(X_j; X_s | C)] (Lin & Tang 2006)."""
    return _greedy_selector("cife", X, y, n_genes, discretization, n_bins, base, feature_names, class_weight,
                            preselected, batch=batch, batch_weights=batch_weights,
                            batch_discretization=batch_discretization)


#: ``y`` of the criteria with a conditional class term (JMI, CIFE): one level of labels
_Y_DOC = """
y : array-like, shape (n_samples,)
    Class labels (one level: the criterion conditions on the classes, so hierarchical labels are refused).
"""

for _f in (mrmr_mid, mrmr_miq):
    append_doc(_f, _PARAMS_DOC, n_bins=N_BINS_DOC, batch_doc=BATCH_DOC, y_doc=Y_HIERARCHY_DOC,
               groupby_weights=HIERARCHY_DOC)
for _f in (jmi, cife):
    append_doc(_f, _PARAMS_DOC, n_bins=N_BINS_DOC, batch_doc=BATCH_DOC, y_doc=_Y_DOC, groupby_weights="")


@parameter_constraints(**_CONSTRAINTS)
def maxrel(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, discretization: str | None = "mean_sd",
           n_bins: int = 3, base: float = 2, class_weight: str | None = None,
           preselected: Sequence[str | int] | None = None, batch: ArrayLike | None = None, batch_weights: str = "size",
           batch_discretization: str = "per_batch", groupby_weights: ArrayLike | None = None,
           random_state: SeedLike = 0, feature_names: Sequence[str] | None = None) -> Selection:
    """Max-relevance: rank every gene by I(X_j; C) (Peng, Long & Ding 2005, eq. 4).

    ``weights`` = I(X_j; C) in bits; ties by index; constant genes rank last.  Parameters as in
    :func:`mrmr_mid`, except that the ranking covers every gene.  ``preselected`` genes rank first in the
    given order; the rest keep their MaxRel order, because the criterion has no term in the selected set
    S (I(X_j; C) is the same given any S), so ranking the rest given the forced genes changes nothing.
    With ``batch``, F = sum_b w_b I_b(X_j; C) (see :func:`mrmr_mid`); with hierarchical labels (a 2-D ``y``,
    coarse to fine), F = sum_l v_l I(X_j; C_l) (``groupby_weights``, see :func:`mrmr_mid`).
    """
    t0 = time.perf_counter()
    X, y_codes, classes, constant, strata, _, F, recorded = _setup(
        X, y, feature_names, discretization, n_bins, base, class_weight, batch, batch_weights, batch_discretization,
        groupby_weights, hierarchical=True)
    m = X.shape[1]
    n_genes = check_n_genes(n_genes, m)
    P = resolve_preselected(preselected, m, feature_names, n_genes, constant)
    ranking = np.concatenate([rank_by_weight(F, F, candidates=np.flatnonzero(~constant)), np.flatnonzero(constant)])
    ranking = forced_first(ranking, P)
    params = dict(discretization=discretization, n_bins=n_bins, base=base, n_genes=n_genes, class_weight=class_weight,
                  **preselected_record(P, feature_names), **recorded)
    diagnostics = dict(n_classes=int(classes.size), n_constant=int(constant.sum()),
                       seconds_total=time.perf_counter() - t0)
    return Selection("maxrel", F.copy(), ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                     relevance=F, feature_names=None if feature_names is None else np.asarray(feature_names))


@parameter_constraints()
def random_genes(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None,
                 preselected: Sequence[str | int] | None = None, random_state: SeedLike = 0,
                 feature_names: Sequence[str] | None = None) -> Selection:
    """Seeded random baseline: a uniform random permutation of all genes.

    ``random_state`` (int or Generator) seeds ``numpy.random.default_rng``; ``weights`` are rank
    based, (M - r + 1) / M for the gene at rank r.  ``y`` is validated but not used.  ``preselected``
    genes (names or indices) rank first in the given order, the rest in the order of the same seeded
    permutation (a uniform random order of the remaining genes).
    """
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    m = X.shape[1]
    n_genes = check_n_genes(n_genes, m)
    P = resolve_preselected(preselected, m, feature_names, n_genes)
    rng = check_random_state(random_state)
    ranking = forced_first(rng.permutation(m), P)
    weights = np.zeros(m)
    weights[ranking] = (m - np.arange(m)) / m
    # a Generator or RandomState recorded as tl records every method's (its str: 'Generator(PCG64)')
    seed = random_state if isinstance(random_state, (int, np.integer)) or random_state is None else str(random_state)
    return Selection("random", weights, ranking, n_genes=n_genes,
                     params=dict(n_genes=n_genes, random_state=seed if seed is None or isinstance(seed, str)
                                 else int(seed), **preselected_record(P, feature_names)),
                     diagnostics=dict(n_classes=int(classes.size)),
                     feature_names=None if feature_names is None else np.asarray(feature_names))
