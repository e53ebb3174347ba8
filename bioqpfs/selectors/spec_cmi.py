"""SPEC_CMI, SPEC_CMI + Nystrom and SDP_CMI (Nguyen, Chan, Romano, Bailey, KDD 2014).

All three approximately solve the quadratic integer program

    QIP_CMI:  max_x  x^T Q x   s.t.  x in {0, 1}^M,  sum_i x_i = k                 (eq. 17-18)

    Q_ii = I(X_i; C),   Q_ij = 1/2 [ I(X_i; C | X_j) + I(X_j; C | X_i) ]   (i != j)

which rewards relevant genes that are far apart in conditional-MI distance (section 3); Q is
symmetric and entrywise non-negative, and needs no balancing or convexification parameter.

* :func:`spec_cmi` -- spectral relaxation (section 3.1, eq. 19): weights = the dominant
  eigenvector of Q, made non-negative (Theorem 2), genes ranked by weight;
* :func:`spec_cmi_nystrom` -- the same from ``r = ceil(gamma M)`` sampled rows of Q (section 3.4);
* :func:`sdp_cmi` -- semidefinite relaxation with Goemans--Williamson rounding (section 3.2),
  for small problems only;
* :func:`qip_objective` -- x^T Q x of any gene panel, to compare selectors on the paper's criterion.

Building Q.  The information kernel returns ``C[i, j] = I(X_i; C | X_j) = H(C|X_j) - H(C|X_i, X_j)``
(eq. 15 rearranged; diagonal I(X_i; C)).  Since ``H(C|X_i, X_j)`` is symmetric,
``C[j, i] = C[i, j] + H(C|X_i) - H(C|X_j)``, hence

    Q_ij = (C[i, j] + C[j, i]) / 2 = C[i, j] + (H(C|X_i) - H(C|X_j)) / 2,

a rank-two correction applied row by row: no transpose of the M x M matrix is needed, and any set
of sampled rows of C gives the same rows of Q (what Nystrom needs).

Forced genes (``preselected``, issue 15).  With x_P = 1 fixed, for a 0-1 vector x

    x^T Q x = x_R^T Q_RR x_R + 2 x_R^T Q_RP 1 + 1^T Q_PP 1 = x_R^T Q' x_R + const,
    Q' = Q_RR + 2 diag(Q_RP 1)

because x_i^2 = x_i moves the linear cross term onto the diagonal.  So QIP_CMI given the forced genes is
again QIP_CMI, on the remaining genes R with Q' and k - |P| genes: a remaining gene's "relevance" Q'_ii
grows by its conditional relevance with the forced panel, 2 sum_{p in P} Q_ip.  Q' is entrywise
non-negative like Q (Theorem 2 still holds), and every relaxation of the paper applies to it unchanged:
SPEC_CMI takes its dominant eigenvector, SDP_CMI relaxes it with k - |P|, SPEC_CMI + Nystrom uses
``U_R Lambda U_R^T + 2 diag(U_R Lambda U_P^T 1)`` from the same low-rank factors.  The forced genes rank
first in the given order (their weight: the largest weight of the rest, so weights never contradict ranks).
"""
from __future__ import annotations

import itertools
import math
import time
from typing import TYPE_CHECKING

import numpy as np

from .. import measures
from .._docs import BATCH_DOC, N_BINS_DOC, RANDOM_STATE_DOC, doc_params
from .._kernels import information as _info
from .._kernels import nystrom as _nys
from .._kernels import spectral as _spec
from .._kernels import subset_search as _swap
from .._kernels.counting_dask import take_genes
from .._kernels.ranking import RANK_REL_TOL
from .._selection import ZERO_RELEVANCE, Selection, check_informative, rank_by_weight
from .._validation import (
    Interval,
    Options,
    check_n_genes,
    check_random_state,
    describe_indices,
    memory_guard,
    output_guard,
    parameter_constraints,
    validate_random_state,
)
from ._common import (
    BATCH_DISCRETIZATIONS,
    BATCH_WEIGHTS,
    check_batch,
    check_batch_crosses_classes,
    discretization_rule,
    forced_first,
    gene_labels,
    info_table,
    prepare,
    preselected_record,
)
from ._qp import kept_and_forced

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike, DTypeLike

    from .._typing import MatrixLike, SeedLike

__all__ = ["spec_cmi", "spec_cmi_nystrom", "sdp_cmi", "qip_objective", "cmi_q_rows"]

_ROW_BLOCK = 512  # rows corrected at once in cmi_q_rows (bounds the temporary to 512 x M)
#: weights closer than this (relative to the largest) are made equal, in the stored weights too (the
#: shared ranking tolerance, see bioqpfs._kernels.ranking): the eigenvector is accurate to ~1e-12
TIE_TOL = RANK_REL_TOL
#: with dtype=None, Q is stored in float32 from this many genes on (as QPFS: halves the 8 M^2 bytes,
#: entries keep ~7 digits; M = 20,000: 1.6 GB instead of 3.2 GB, and end to end 51 s instead of 118 s
#: in our benchmark)
FLOAT32_FROM = 5000
#: SDP_CMI checks its panel against the exhaustive optimum when there are at most this many k-subsets
#: (vectorised x^T Q x of every subset: ~0.1 s at 200,000 subsets of size 6)
EXHAUSTIVE_MAX_SUBSETS = 200_000
#: the lifted cardinality constraints made SCS take 0.5-1.2x the time of the paper's relaxation at
#: n <= 100 and 1.7-2.3x at n = 200-325 (Lung, k = 10; 275 -> 725-750 iterations): the time
#: estimate that refuses large problems is scaled by this
LIFTED_COST_FACTOR = 2.5


def cmi_q_rows(table, rows=None, *, base=2.0, dtype=np.float64):
    """Rows of the symmetric SPEC_CMI matrix Q (all rows when ``rows`` is None).

    Parameters
    ----------
    table : CodeTable
        Gene codes with ``groups`` = class codes.
    rows : array of int, optional
        Genes whose rows are computed (Nystrom landmarks, a panel...).
    base : float
        Logarithm base of the information (2: bits).
    dtype : numpy dtype
        Output dtype (float32 halves memory; values are computed in float64).

    Returns
    -------
    Q : ndarray (len(rows), M)
    info : dict
        ``n_negative_clipped``: entries below 0 from floating-point round-off (CMI >= 0 exactly),
        set to 0; ``min_before_clip``: the most negative such value.
    """
    C = _info.pairwise_information(table, None, "cmi_mean", rows=rows, base=base, dtype=dtype)
    n_neg = 0
    min_val = 0.0
    for b in range(0, C.shape[0], _ROW_BLOCK):
        blk = C[b:b + _ROW_BLOCK]
        low = float(blk.min()) if blk.size else 0.0
        if low < 0:  # round-off only: CMI >= 0 exactly
            neg = blk < 0
            n_neg += int(neg.sum())
            min_val = min(min_val, low)
            blk[neg] = 0.0
    return C, dict(n_negative_clipped=n_neg, min_before_clip=min_val)


def _check_informative(Q, discretization, n_samples):
    """A Q of zeros (within round-off, :data:`~bioqpfs._selection.ZERO_RELEVANCE`: a conditional information
    computed as a difference of entropies comes out as +-1e-16) means no gene, alone or in pairs, tells the
    classes apart: every panel scores 0."""
    if not max(float(Q.max(initial=0.0)), -float(Q.min(initial=0.0))) > ZERO_RELEVANCE:  # no |Q| copy of Q
        raise ValueError(
            f"no gene carries information about the classes after discretization={discretization!r}: every entry "
            f"of the conditional mutual information matrix Q is 0 on these {n_samples} samples, so every panel "
            "scores 0 and there is nothing to rank. Use more samples (with 2 samples mean +- sd binning puts both "
            "in one bin) or another discretization (e.g. 'quantile')")


def _relevance(table, base):
    return _info.class_relevance(table) / np.log(base)


def _table(X, y_codes, discretization, n_bins, class_weight=None, batch=None, genes=None):
    return info_table(X, y_codes, discretization=discretization, n_bins=n_bins, class_weight=class_weight,
                      grouped=True, batch=batch, genes=genes)


def _panel_qip(X, y_codes, genes, discretization, n_bins, base, class_weight=None, batch=None):
    """x^T Q x of a panel: discretisation is per gene, so only the panel's k x k block is computed."""
    genes = np.asarray(genes, dtype=np.int64)
    Xs = X[:, genes]
    Qs, _ = cmi_q_rows(_table(Xs, y_codes, discretization, n_bins, class_weight, batch), base=base)
    return float(Qs.sum())


class _CMIRows:
    """Rows of the SPEC_CMI Q computed on demand (``Q[rows]``): what the swap search reads when Q is not held."""

    def __init__(self, table, base):
        m = table.n_genes
        self.shape = (m, m)
        self._table, self._base = table, base

    def __getitem__(self, rows):
        return cmi_q_rows(self._table, np.asarray(rows, dtype=np.int64), base=self._base)[0]


def _kept_panel_size(n_genes, P_all, P):
    """The panel's size among the non-constant genes (those of Q): ``n_genes`` less the forced genes that are
    constant (each keeps its slot, first in the ranking, but is not in Q); ``None`` without ``n_genes``."""
    return None if n_genes is None else n_genes - (P_all.size - P.size)


def _polished_top_k(Q, x, F, n_genes, diag=None, fixed=None):
    """SPEC_CMI's top k by weight, then improved by swaps on x^T Q x (``polish=True``; beyond the paper).

    ``fixed``: forced genes, first in the start panel and never swapped out.
    Returns the panel (indices, ordered by marginal contribution) and its diagnostics.
    """
    fixed = np.zeros(0, dtype=np.int64) if fixed is None else np.asarray(fixed, dtype=np.int64)
    top = forced_first(rank_by_weight(_spec.snap_ties(x, TIE_TOL), F), fixed)[:n_genes]
    S, value, n_swaps = _swap.swap_search(Q, None, top, quad=1.0, lin=0.0, diag=diag,
                                          fixed=fixed if fixed.size else None)
    return S, dict(qip_objective=value, unpolished_qip_objective=_swap.subset_value(Q, None, top, lin=0.0),
                   n_swaps=int(n_swaps))


def _finish(method, X, y_codes, classes, constant, keep, weights_keep, F_keep, n_genes, params, diagnostics, t0,
            discretization, n_bins, base, feature_names, extra_columns=None, tie_tol=TIE_TOL, panel=None,
            class_weight=None, forced=None, batch=None, criterion_checked=False):
    m_total = X.shape[1]
    weights = np.zeros(m_total)
    # identical genes have equal weights only up to round-off: differences below the solver's
    # accuracy are made exact ties, which the ranking rule breaks by relevance, then index
    weights[keep] = _spec.snap_ties(weights_keep, tie_tol)
    F_all = np.zeros(m_total)
    F_all[keep] = F_keep
    first = np.zeros(0, dtype=np.int64) if panel is None else keep[np.asarray(panel, dtype=np.int64)]
    rest = np.setdiff1d(keep, first)  # a polished panel (ordered) goes first, then the rest by weight
    ranking = np.concatenate([first, rank_by_weight(weights, F_all, candidates=rest), np.flatnonzero(constant)])
    if forced is not None:
        ranking = forced_first(ranking, forced)
    if n_genes is not None and "qip_objective" not in diagnostics:
        diagnostics["qip_objective"] = _panel_qip(X, y_codes, ranking[:n_genes], discretization, n_bins, base,
                                                  class_weight, batch)
    diagnostics.update(n_constant=int(constant.sum()), constant_genes=[int(i) for i in np.flatnonzero(constant)],
                       n_classes=int(classes.size), seconds_total=time.perf_counter() - t0)
    return Selection(method, weights, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                     relevance=F_all, feature_names=None if feature_names is None else np.asarray(feature_names),
                     extra_columns=extra_columns or {}, criterion_checked=criterion_checked)


def _prepare(X, y, n_genes, feature_names, preselected=None):
    """Validated inputs plus the forced genes: ``P_all`` (indices into X) and ``P`` (among the kept genes)."""
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    n_genes = check_n_genes(n_genes, X.shape[1])
    P_all, keep, P, _ = kept_and_forced(preselected, constant, feature_names, n_genes)
    return X, y_codes, classes, constant, keep, n_genes, P_all, P


@doc_params(n_bins=N_BINS_DOC, batch_doc=BATCH_DOC, random_state=RANDOM_STATE_DOC)
@parameter_constraints(nystrom_rate=Interval("real", 0, 1, closed="right", none=True),
                       n_error_rows=Interval("integer", 0, None), tol=Interval("real", 0, None),
                       discretization=Options(*measures.DISCRETIZATIONS), n_bins=Interval("integer"), class_weight=Options(*_info.CLASS_WEIGHTS),
                       batch_weights=Options(*BATCH_WEIGHTS), batch_discretization=Options(*BATCH_DISCRETIZATIONS))
def spec_cmi(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, nystrom_rate: float | None = None,
             polish: bool = False, discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2,
             dtype: DTypeLike | None = None, tol: float = 0.0, n_error_rows: int = 50, class_weight: str | None = None,
             preselected: Sequence[str | int] | None = None, batch: ArrayLike | None = None,
             batch_weights: str = "size", batch_discretization: str = "per_batch", random_state: SeedLike = 0,
             feature_names: Sequence[str] | None = None) -> Selection:
    """Rank genes with SPEC_CMI: the dominant eigenvector of the conditional-MI matrix Q.

    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
        Expression (continuous; or integer codes with ``discretization=None``).
    y : array-like, shape (n_samples,)
        Class labels (at least 2 classes).
    n_genes : int, optional
        Panel size k; marks ``Selection.selected`` and adds the panel's QIP objective x^T Q x to
        the diagnostics.  The ranking always covers every gene (section 3.3).
    nystrom_rate : float in (0, 1], optional
        gamma of section 3.4: compute only ``ceil(gamma M)`` uniformly sampled rows of Q and use the
        Nystrom approximation (see :func:`spec_cmi_nystrom`).  ``None``: exact Q.
    polish : bool
        Beyond the paper (issue 19): with ``n_genes``, improve the top-k panel by best-improvement
        one-in/one-out swaps on the true x^T Q x (:func:`bioqpfs._kernels.subset_search.swap_search`;
        with Nystrom the exact rows of the panel's genes are computed on demand, one per swap).  The
        panel then comes first in the ranking, ordered by marginal contribution to x^T Q x, followed
        by the other genes by weight; diagnostics add ``unpolished_qip_objective`` and ``n_swaps``.
        On 36 small random instances the top k reached the exhaustive optimum in 25 (worst 83%),
        polished in 36 (see :func:`sdp_cmi`).  Default False: the published ranking.
    discretization : {"mean_sd", "quantile", "zero_quantile", "mdl", "auto", None}
        How genes are discretised for the information measures (``None``: X holds codes; ``"auto"``:
        ``"zero_quantile"`` for zero-inflated data, else ``"mean_sd"``; see :func:`bioqpfs.measures.discretize`).
        The paper used MDL on small data and equal-frequency bins on large data; the bioqpfs default is the QPFS
        mean +- sd 3-bin rule.
    {n_bins}
    base : float
        Logarithm base (2: bits; the ranking does not depend on it).
    dtype : numpy dtype, optional
        Storage of Q (exact method).  Default: float64 below :data:`FLOAT32_FROM` (5,000) genes,
        float32 from there on (as QPFS), which halves memory (M = 20,000: 1.6 GB instead of
        3.2 GB) and the memory traffic of the eigensolver, which still multiplies in float64.
        The weights then differ from the float64 ones by the float32 rounding of Q (~1e-7).
        Weights closer than 1e-9 of the largest are treated as ties (relevance, then index).
    tol : float
        Eigensolver tolerance (0: machine precision).
    n_error_rows : int
        Nystrom only: rows of Q computed exactly to estimate ||Q - Q_hat||_F.
    class_weight : {None, "balanced"}
        ``"balanced"`` (beyond the paper): every class counts equally in every I(X_i; C | X_j), a
        uniform class prior (weighted counts; :func:`bioqpfs.qpfs`).
    preselected : sequence of str or int, optional
        Forced genes (names need ``feature_names``), ranked first in the given order; the rest is the
        dominant eigenvector of QIP_CMI given them, ``Q' = Q_RR + 2 diag(Q_RP 1)`` on the other genes (module
        docstring: the exact conditioning of the 0-1 problem, then the paper's relaxation).  Each forced gene's
        weight is the largest weight of the rest.  With ``polish`` the forced genes are never swapped out.
    {batch_doc}
        Here Q_ij = sum_b w_b I_b(X_i; C | X_j) (exact SPEC_CMI only; with Nystrom it is an error).
    {random_state}
        Nystrom row sampling; exact SPEC_CMI is deterministic.
    feature_names : sequence of str, optional

    Returns
    -------
    Selection
        ``weights``: the unit-norm non-negative dominant eigenvector (0 for constant genes);
        ``ranking``: all genes by decreasing weight, ties by relevance I(X_i; C), then index;
        ``diagnostics``: dominant eigenvalue, Lanczos products and residual, sign handling
        (``sign_flipped``, ``n_sign_clipped``, ``min_entry``, ``abs_applied``), round-off clipping of
        Q, ``qip_objective`` (with n_genes), timings.

    Notes
    -----
    Theorem 2: Q >= 0 entrywise, so its dominant eigenvector is sign-consistent; the solver's sign
    is arbitrary, so the vector is flipped to a positive sum and round-off negatives (at most 1e-8
    of the largest entry) set to 0, both recorded.  Constant genes have no measurable information
    and are left out (weight 0, ranked last, with a warning) -- kept in, they would receive
    Q_ij = I(X_j; C)/2 with every gene j and large weights.

    Examples
    --------
    >>> import numpy as np, bioqpfs
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 30)); y = (X[:, 3] > 0).astype(int)
    >>> sel = bioqpfs.spec_cmi(X, y, n_genes=5)
    >>> int(sel.selected[0])
    3
    """
    strata = check_batch(batch, X, batch_weights=batch_weights, batch_discretization=batch_discretization)
    if nystrom_rate is not None:
        return _spec_cmi_nystrom(X, y, n_genes=n_genes, nystrom_rate=nystrom_rate, discretization=discretization,
                                 n_bins=n_bins, base=base, tol=tol, n_error_rows=n_error_rows, rank_tol=None,
                                 random_state=random_state, feature_names=feature_names, method="spec_cmi",
                                 polish=polish, class_weight=class_weight, preselected=preselected, strata=strata)
    _check_polish(polish, n_genes)
    t0 = time.perf_counter()
    validate_random_state(random_state)
    X, y_codes, classes, constant, keep, n_genes, P_all, P = _prepare(X, y, n_genes, feature_names, preselected)
    check_batch_crosses_classes(strata, y_codes)
    m = keep.size
    if dtype is None:
        dtype = np.float32 if m >= FLOAT32_FROM else np.float64
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be None, 'float32' or 'float64', got {dtype!r}") from None
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    output_guard(m, m, dtype, "SPEC_CMI conditional mutual information",
                           ["genes"] + (["float32"] if dtype != np.float32 else []) + ["nystrom"])
    Xk = take_genes(X, keep) if m < X.shape[1] else X
    disc_rule = discretization_rule(Xk, discretization)  # "auto" decided once, on the genes discretised; recorded
    table = _table(Xk, y_codes, disc_rule, n_bins, class_weight, strata, gene_labels(feature_names, keep))
    Q, q_info = cmi_q_rows(table, base=base, dtype=dtype)
    _check_informative(Q, discretization, X.shape[0])
    F = np.diag(Q).astype(np.float64)
    t1 = time.perf_counter()
    if P.size:  # QIP_CMI on the other genes given the forced ones (module docstring)
        memory_guard(dtype.itemsize * (m - P.size) ** 2, f"the conditioned {m - P.size} x {m - P.size} SPEC_CMI matrix",
                     ["genes", "nystrom"])
        R, Qc, _ = _conditioned(Q, P)
        lam, x, eig_info = _spec.dominant_eigenvector(Qc, tol=tol)
        del Qc
    else:
        lam, x, eig_info = _spec.dominant_eigenvector(Q, tol=tol)
    x, sign_info = _spec.sign_consistent(x, nonnegative_matrix=True)
    x = _spec.snap_ties(x, TIE_TOL)
    if P.size:
        x = _with_forced_weights(x, R, P, m)
    t2 = time.perf_counter()
    qip = None
    panel, polish_info = None, {}
    k = _kept_panel_size(n_genes, P_all, P)   # a constant forced gene takes a slot of the panel, not of Q
    if polish and k <= m:
        panel, polish_info = _polished_top_k(Q, x, F, k, fixed=P)
    elif n_genes is not None:
        top = forced_first(rank_by_weight(x, F), P)[:k]
        qip = _spec.qip_value(Q, top) if k <= m else None
    del Q
    params = dict(discretization=discretization, discretization_used=disc_rule, n_bins=n_bins, base=base,
                  dtype=dtype.name, tol=tol, nystrom_rate=None, polish=bool(polish), n_genes=n_genes,
                  class_weight=class_weight,
                  **preselected_record(P_all, feature_names), **({} if strata is None else strata.params()))
    diagnostics = dict(
        eigenvalue=lam, eigensolver=eig_info["method"], n_matvec=eig_info["n_matvec"],
        eigen_residual=eig_info["residual"], sign_flipped=sign_info["flipped"],
        n_sign_clipped=sign_info["n_clipped"], min_entry=sign_info["min_entry"],
        abs_applied=sign_info["abs_applied"], q_negative_clipped=q_info["n_negative_clipped"],
        q_min_before_clip=q_info["min_before_clip"], ranking_rule="eigenvector",
        seconds_measures=t1 - t0, seconds_solve=t2 - t1,
    )
    if qip is not None:
        diagnostics["qip_objective"] = qip
    diagnostics.update(polish_info)
    # Q was checked (_check_informative): pure interactions have no relevance alone but a Q (XOR pairs)
    return _finish("spec_cmi", X, y_codes, classes, constant, keep, x, F, n_genes, params, diagnostics, t0,
                   disc_rule, n_bins, base, feature_names, panel=panel, class_weight=class_weight,
                   forced=P_all, batch=strata, criterion_checked=True)


def _conditioned(Q, P):
    """QIP_CMI given the forced genes ``P`` (module docstring): ``(R, Q', const)`` with ``R`` the other genes,
    ``Q' = Q_RR + 2 diag(Q_RP 1)`` (a new array, Q's dtype) and ``const = 1^T Q_PP 1``, so that
    ``x^T Q x = x_R^T Q' x_R + const`` for every 0-1 x with x_P = 1."""
    R = np.setdiff1d(np.arange(Q.shape[0]), P)
    Qc = np.array(Q[np.ix_(R, R)])
    Qc[np.diag_indices(R.size)] += 2.0 * np.asarray(Q[np.ix_(R, P)], dtype=np.float64).sum(axis=1)
    return R, Qc, float(np.asarray(Q[np.ix_(P, P)], dtype=np.float64).sum())


def _with_forced_weights(x_rest, R, P, m):
    """Weights over all m genes from those of the rest: each forced gene gets the largest of them."""
    x = np.zeros(m)
    x[R] = x_rest
    x[P] = x_rest.max(initial=0.0)
    return x


def _check_polish(polish, n_genes):
    if not isinstance(polish, (bool, np.bool_)):
        raise TypeError(f"polish must be True or False, got {polish!r}")
    if polish and n_genes is None:
        raise ValueError("polish=True improves the top-n_genes panel; pass n_genes=k")


@doc_params(random_state=RANDOM_STATE_DOC)
@parameter_constraints(nystrom_rate=Interval("real", 0, 1, closed="right"), n_error_rows=Interval("integer", 0, None),
                       rank_tol=Interval("real", 0, None, none=True), tol=Interval("real", 0, None),
                       discretization=Options(*measures.DISCRETIZATIONS), n_bins=Interval("integer"), class_weight=Options(*_info.CLASS_WEIGHTS))
def spec_cmi_nystrom(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, nystrom_rate: float = 0.2,
                     polish: bool = False, discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2,
                     tol: float = 0.0, n_error_rows: int = 50, rank_tol: float | None = None,
                     class_weight: str | None = None, preselected: Sequence[str | int] | None = None,
                     random_state: SeedLike = 0, feature_names: Sequence[str] | None = None) -> Selection:
    """SPEC_CMI from ``r = ceil(gamma M)`` sampled rows of Q (Nystrom approximation, section 3.4).

    Only the sampled rows ``[A B]`` of Q are computed (cost O(gamma M^2 N) instead of O(M^2 N)).
    ``Q_hat = [[A, B], [B^T, B^T A^{-1} B]]`` is never formed: its eigenpairs come from the small
    matrix ``A + A^{-1/2} B B^T A^{-1/2}`` (the construction of
    :func:`bioqpfs._kernels.nystrom.nystrom_eigh`, shared with QPFS + Nystrom).  ``A^{-1/2}`` is
    taken on the eigenvalues of A above ``rank_tol`` (Q has a positive diagonal but is not PSD, and
    A is indefinite like Q); with the default cut only the few leading eigenpairs of A remain, and
    :func:`bioqpfs._kernels.spectral.nystrom_leading` finds them by Lanczos instead of a full
    O(r^3) eigendecomposition.  The weights are the dominant eigenvector of Q_hat.

    Q is non-negative but Q_hat need not be, and its dominant eigenvector may then mix signs
    beyond round-off.  In that case the section 3.4 rule is applied: the dominant eigenvector of
    the (M+1) x (M+1) dummy-variable matrix ``Qbar = [[1^T Q_hat 1, 1^T Q_hat], [Q_hat 1, Q_hat]]``
    with positive first entry, found by Lanczos with O(M k) products through the low-rank factors;
    its entries 1..M are the weights (``diagnostics["ranking_rule"] = "dummy_variable"``).

    Parameters
    ----------
    nystrom_rate : float in (0, 1]
        gamma; the paper used 0.1-0.5 (0.2 in its large-data experiments, Fig. 2).
    polish : bool
        As in :func:`spec_cmi`: swaps on the exact x^T Q x, whose rows are computed on demand
        (k rows, then one per swap; never M x M).
    n_error_rows : int
        Unsampled rows of Q computed exactly to estimate ``||Q - Q_hat||_F`` and its ratio to
        ``||Q||_F`` (diagnostics ``frobenius_error_estimate``, ``relative_frobenius_error_estimate``,
        as for QPFS + Nystrom); the sampled rows' part is exact.
    rank_tol : float, optional
        Relative cut on the eigenvalues of the sampled block A when forming ``A^{-1/2}``.  Default
        (None): ``|lambda_min(A)| / lambda_max(A)`` (:func:`bioqpfs._kernels.spectral.nystrom_leading`)
        -- A is indefinite like Q, and eigenvalues at the level of its negative part would be
        amplified by the inverse; on real data this keeps the few leading eigenpairs.
    preselected : sequence of str or int, optional
        Forced genes, ranked first in the given order; the rest is the dominant eigenvector of the
        conditioned problem on the Nystrom factors, ``U_R Lambda U_R^T + 2 diag(U_R Lambda U_P^T 1)`` (module
        docstring), with the section 3.4 dummy-variable rule when it mixes signs.
    {random_state}
        Row sampling (and the choice of error rows).

    Other parameters and the result are as in :func:`spec_cmi`; diagnostics add ``r`` (rows
    sampled), ``k_tilde`` (eigenpairs of Q_hat kept), ``rank_tol``, ``nystrom_rank_A``, the extreme
    eigenvalues of A (``nystrom_lambda_min_A`` < 0 shows Q's indefiniteness) and the error estimates.  With ``nystrom_rate=1`` the result equals exact SPEC_CMI (the dominant
    eigenpair of Q is kept by the cut).
    """
    return _spec_cmi_nystrom(X, y, n_genes=n_genes, nystrom_rate=nystrom_rate, discretization=discretization,
                             n_bins=n_bins, base=base, tol=tol, n_error_rows=n_error_rows, rank_tol=rank_tol,
                             random_state=random_state, feature_names=feature_names, method="spec_cmi_nystrom",
                             polish=polish, class_weight=class_weight, preselected=preselected)


def _spec_cmi_nystrom(X, y, *, n_genes, nystrom_rate, discretization, n_bins, base, tol, n_error_rows, rank_tol,
                      random_state, feature_names, method, polish=False, class_weight=None, preselected=None,
                      strata=None):
    """SPEC_CMI from sampled rows of Q; ``strata`` (spec_cmi's checked ``batch=``): the rows are those of the
    batch-aware Q, as the exact path computes it (every row of Q is a row of CMI estimates, pooled over the
    batches the same way)."""
    t0 = time.perf_counter()
    _check_polish(polish, n_genes)
    rng = check_random_state(random_state)
    X, y_codes, classes, constant, keep, n_genes, P_all, P = _prepare(X, y, n_genes, feature_names, preselected)
    check_batch_crosses_classes(strata, y_codes)
    m = keep.size
    rows = _nys.sample_rows(m, float(nystrom_rate), rng)
    r = rows.size
    output_guard(r, m, np.float64, "sampled SPEC_CMI rows", ["lower_nystrom", "genes"])
    memory_guard(8 * r * r * 3, f"the {r} x {r} Nystrom core matrices", ["lower_nystrom"])
    err_rows = _nys.error_rows(m, rows, n_error_rows, rng)
    Xk = take_genes(X, keep) if m < X.shape[1] else X
    disc_rule = discretization_rule(Xk, discretization)  # "auto" decided once, on the genes discretised; recorded
    table = _table(Xk, y_codes, disc_rule, n_bins, class_weight, strata, gene_labels(feature_names, keep))
    # the landmark rows and the few exact rows of the error estimate in one pass over the genes
    Qall, q_info = cmi_q_rows(table, np.concatenate([rows, err_rows]), base=base)
    Qr, Qe = Qall[:r], Qall[r:]
    F = _relevance(table, base)
    check_informative(method, F, dict(discretization=discretization))  # before the Nystrom block fails on it
    t1 = time.perf_counter()
    lam, U, nys_info = _spec.nystrom_leading(Qr, rows, rank_tol=rank_tol)
    rank_tol_used = nys_info["rank_tol"]
    if lam.size == 0:
        raise ValueError("the sampled block A of Q has no positive eigenvalue, so the Nystrom approximation is "
                         "zero; raise nystrom_rate or use exact SPEC_CMI (nystrom_rate=None)")
    if P.size:  # QIP_CMI given the forced genes on Q_hat: U_R Lambda U_R^T + 2 diag(U_R Lambda U_P^T 1)
        R = np.setdiff1d(np.arange(m), P)
        op = _spec.lowrank_operator(U[R], lam, diag=2.0 * (U[R] @ (lam * U[P].sum(axis=0))))
        x = _spec.dominant_eigenvector(op, tol=tol)[1]
    else:
        op, x = _spec.lowrank_operator(U, lam), U[:, 0]
        # the all-ones vector when it is itself a dominant eigenvector of Q_hat (every gene alike, e.g. copies:
        # Q = c I), as exact SPEC_CMI returns it (dominant_eigenvector's "start vector"); U[:, 0] is then an
        # arbitrary vector of a degenerate eigenspace (all the weight on one copy)
        ones = np.ones(m)
        if lam.size > 1 and _spec.dominant_start_value(ones, np.asarray(op.matvec(ones), dtype=np.float64),
                                                       lam[0]) is not None:
            x = ones / np.sqrt(m)
    x, sign_info = _spec.sign_consistent(x, nonnegative_matrix=False)
    rule = "eigenvector"
    dummy_info = {}
    if sign_info["mixed_sign"]:
        x, dummy_info = _spec.dummy_variable_weights(op, tol=tol)
        rule = "dummy_variable"
    if P.size:
        x = _with_forced_weights(x, R, P, m)
    t2 = time.perf_counter()
    err = _nys.error_estimate(Qr, rows, Qe, err_rows, U, lam)
    panel, polish_info = None, {}
    k = _kept_panel_size(n_genes, P_all, P)   # a constant forced gene takes a slot of the panel, not of Q
    if polish and k <= m:
        panel, polish_info = _polished_top_k(_CMIRows(table, base), x, F, k, diag=F, fixed=P)
    params = dict(discretization=discretization, discretization_used=disc_rule, n_bins=n_bins, base=base, tol=tol,
                  nystrom_rate=float(nystrom_rate),
                  n_error_rows=int(n_error_rows), rank_tol=rank_tol, polish=bool(polish), n_genes=n_genes,
                  class_weight=class_weight, **preselected_record(P_all, feature_names),
                  **({} if strata is None else strata.params()))
    diagnostics = dict(
        nystrom_rate=float(nystrom_rate), r=int(r), k_tilde=int(lam.size), rank_tol=rank_tol_used,
        nystrom_rank_A=nys_info["rank_A"], nystrom_lambda_min_A=nys_info["lambda_min_A"],
        nystrom_lambda_max_A=nys_info["lambda_max_A"], nystrom_eigensolver=nys_info["method"],
        eigenvalue=float(lam[0]), ranking_rule=rule, sign_flipped=sign_info["flipped"],
        n_sign_clipped=sign_info["n_clipped"], min_entry=sign_info["min_entry"], mixed_sign=sign_info["mixed_sign"],
        q_negative_clipped=q_info["n_negative_clipped"], q_min_before_clip=q_info["min_before_clip"],
        **err, seconds_measures=t1 - t0, seconds_solve=t2 - t1,
    )
    if dummy_info:
        diagnostics.update(dummy_eigenvalue=dummy_info["lam"], dummy_y0=dummy_info["y0"])
    diagnostics.update(polish_info)
    return _finish(method if method == "spec_cmi_nystrom" else "spec_cmi", X, y_codes, classes, constant, keep, x, F,
                   n_genes, params, diagnostics, t0, disc_rule, n_bins, base, feature_names, panel=panel,
                   class_weight=class_weight, forced=P_all, batch=strata)


@doc_params(random_state=RANDOM_STATE_DOC)
@parameter_constraints(n_projections=Interval("integer", 1, None),
                       max_seconds=Interval("real", 0, None, closed="neither"),
                       discretization=Options(*measures.DISCRETIZATIONS), n_bins=Interval("integer"), class_weight=Options(*_info.CLASS_WEIGHTS))
def sdp_cmi(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, n_projections: int = 100,
            relaxation: str = "lifted", polish: bool = True, solver: str = "SCS", max_seconds: float = 300.0,
            discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2, class_weight: str | None = None,
            preselected: Sequence[str | int] | None = None, random_state: SeedLike = 0,
            feature_names: Sequence[str] | None = None) -> Selection:
    """Select a k-gene panel with SDP_CMI: semidefinite relaxation + Goemans--Williamson rounding.

    Section 3.2: with bipolar variables ``y = 2x - 1`` and a dummy ``y_0 = 1`` (variable expansion,
    eq. 22-24), QIP_CMI becomes ``max Qbar . Y`` over rank-one ``Y = y y^T``; dropping the rank
    gives the SDP (eq. 26)

        max  Qbar . Y   s.t.  Ibar . Y = 4k,  diag(Y) = 1,  Y PSD    ((M+1) x (M+1)),

    solved with cvxpy (SCS by default).  100 random projections round it: each picks the k genes
    whose factor vectors are most aligned with a random direction (oriented by the dummy), and the
    panel with the largest x^T Q x is kept.

    Meant for small problems: the relaxed variable has ~M^2/2 entries and the solve grows like M^3
    (the paper's CVX/SDPT3 ran out of 16 GB at M ~ 700).  The time and memory are estimated from M
    before anything is built, and the call is refused beyond ``max_seconds`` or the free memory.

    Parameters
    ----------
    n_genes : int
        k, the panel size (required: the relaxation depends on it).
    n_projections : int
        Random projections for the rounding (100 in the paper).
    relaxation : {"lifted", "paper"}
        ``"paper"``: eq. 26 as published.  ``"lifted"`` (default, beyond the paper): eq. 26 plus the
        lifted cardinality constraints ``sum_j Y_ij = (2k - M) Y_0i`` (the cardinality constraint
        multiplied by each ``y_i``; every feasible panel satisfies them, so the value stays an upper
        bound).  See Notes for why and what it costs.
    polish : bool
        After rounding, improve the panel by best-improvement one-in/one-out swaps on the true
        x^T Q x (:func:`bioqpfs._kernels.subset_search.swap_search`), started from the rounded panel
        and from SPEC_CMI's top k; the better local optimum is kept.  Beyond the paper; default True.
        ``relaxation="paper", polish=False`` is the published method.
    solver : {"SCS", "CLARABEL"}
        SDP solver (see :func:`bioqpfs._kernels.spectral.sdp_relaxation`).
    max_seconds : float
        Refuse when the estimated solve time exceeds this.  The estimate is a measured model,
        1e-6 (M+1)^3 s with SCS on a loaded 2-core machine (Lung, M = 325: 47-73 s; on random Q
        it ran 3-7x faster), times 2.5 for the lifted relaxation: ~27 s at M = 300 for the paper's
        relaxation, and the default 300 s admits M <= 668 for it (about where the paper's CVX/SDPT3
        ran out of 16 GB, M ~ 700) and M <= 492 for the lifted one.
    preselected : sequence of str or int, optional
        Forced genes, ranked first in the given order; the relaxation, rounding, swaps and exhaustive check
        run on QIP_CMI given them, ``Q' = Q_RR + 2 diag(Q_RP 1)`` with ``k - |P|`` genes (module docstring);
        the reported objectives, bound and optimum are those of the whole panel (``+ 1^T Q_PP 1``).
        With ``n_genes == len(preselected)`` the panel is the preselected genes and the others are ranked
        by the relaxation for one more gene (the objective diagnostics are then the panel's exact value).
    {random_state}
        The random projections.
    X, y, discretization, n_bins, base, class_weight, feature_names
        As in :func:`spec_cmi`.

    Returns
    -------
    Selection
        ``selected``: the panel -- with ``polish``, ordered by marginal contribution to x^T Q x
        (best first; ties by index); without, by ``weights`` -- then the other genes by
        ``weights`` = (1 + Y_0i) / 2 (the relaxed 0-1 indicator of each gene).  Diagnostics: SDP
        status, iterations and time, ``sdp_bound`` (= Qbar . Y / 4, an upper bound on the best
        possible x^T Q x, always reported), ``qip_objective`` of the panel, ``relative_gap`` to the
        bound, ``sdp_rank`` (numerical rank of Y), ``rounded_objective`` and
        ``rounded_equals_spec_cmi`` (the rounding before the polish), ``n_swaps`` and
        ``polish_start`` (``"rounded"`` or ``"spec_cmi"``), ``spec_cmi_objective`` (SPEC_CMI's top-k
        on the same Q), ``n_distinct`` panels among the projections, and -- when there are at most
        200,000 k-subsets -- ``exhaustive_optimum`` and ``optimality_ratio`` (None otherwise).

    Notes
    -----
    *The published relaxation is degenerate on typical data.*  Its constraint set fixes only the
    sum of ``Y_0i``; maximising ``Qbar . Y`` with Q >= 0 then favours a Y of rank 2 whose factor
    vectors are ordered like SPEC_CMI's eigenvector, and the rounding returns SPEC_CMI's panel:
    measured on 36 random instances (8-14 genes, k = 3-6, mean +- sd codes) Y had rank 2 and the
    rounded panel equalled SPEC_CMI's top k in 36 of 36, reaching the exhaustive optimum in 25
    (worst 83% of it); on Waveform (its 21 real features, MDL codes, k = 2..19) in 13 of 18 (worst
    62%).  The bound was loose (1.8x and 2.0x the optimum on average; 3.6x on 24-gene subsets of
    Lung/WDBC/Musk, 26x on all 325 Lung genes).

    Both fixes of issue 19 were measured on the same instances (k-subsets enumerated exhaustively):

    ==================  ===============  ===============  =========================
    panel               random (36)      Waveform (18)    Lung/WDBC/Musk 24-gene (24)
    ==================  ===============  ===============  =========================
    paper               25, worst 0.827  13, worst 0.616  1, worst 0.690
    paper + swaps       36, worst 1      18, worst 1      20, worst 0.995
    lifted              36, worst 1      18, worst 1      23, worst 0.998
    lifted + swaps      36, worst 1      18, worst 1      23, worst 0.998
    ==================  ===============  ===============  =========================

    (instances at the optimum, worst ratio to it.)  The lifted bound is within 0.07%, 0.3% and 2%
    of the optimum on average, so ``relative_gap`` becomes a useful certificate.  Costs: the swap
    search reads only the k rows of Q of the panel per swap (~1 ms); the lifted relaxation took
    0.5-1.2x the paper's SCS time up to M = 100 and 1.7-2.3x at M = 200-325.  On all 325 Lung genes
    (k = 10) the paper's relaxation + swaps reached 68.3 and the lifted one + swaps 67.3 (bound
    82.4 vs 1,802), hence the polish also starts from SPEC_CMI's panel and keeps the better.
    """
    t0 = time.perf_counter()
    if n_genes is None:
        raise ValueError("sdp_cmi needs n_genes (the panel size k enters the relaxation); pass n_genes=k")
    if relaxation not in ("lifted", "paper"):
        raise ValueError(f"relaxation must be 'lifted' (default) or 'paper' (eq. 26 as published), got {relaxation!r}")
    if not isinstance(polish, (bool, np.bool_)):
        raise TypeError(f"polish must be True or False, got {polish!r}")
    if not isinstance(solver, str):
        raise TypeError(f"solver must be the name of a cvxpy solver (e.g. 'SCS'), got {solver!r}")
    rng = check_random_state(random_state)
    X, y_codes, classes, constant, keep, n_genes, P_all, P = _prepare(X, y, n_genes, feature_names, preselected)
    m = keep.size
    k = _kept_panel_size(n_genes, P_all, P)   # a constant forced gene takes a slot of the panel, not of Q
    if k > m:
        raise ValueError(f"n_genes={n_genes} but only {m} genes are not constant; ask for at most "
                         f"{m + n_genes - k}")
    # n_genes == len(preselected): the panel is the forced genes (as for every other method); the rest is ranked
    # by the relaxation for one more gene -- the order in which SDP_CMI would add them
    forced_only = bool(P.size) and k == P.size
    if forced_only and m == P.size:
        raise ValueError(f"n_genes={n_genes} and every one of the {m} non-constant genes is preselected: SDP_CMI has "
                         "no gene left to rank; the panel is the preselected genes (no selection needed)")
    est_bytes, est_seconds = _spec.sdp_resource_estimate(m)
    cost = LIFTED_COST_FACTOR if relaxation == "lifted" else 1.0
    est_seconds *= cost
    if est_seconds > max_seconds:
        n_max = int((max_seconds / cost / _spec.SDP_SECONDS_PER_CUBE) ** (1 / 3)) - 1
        raise ValueError(
            f"SDP_CMI on {m} genes is estimated to take ~{est_seconds:,.0f} s (limit max_seconds={max_seconds:g}; "
            f"it grows like M^3 and its memory like M^2). Use method='spec_cmi' (the spectral relaxation of the "
            f"same objective; seconds for 20,000 genes), restrict the candidates to at most {n_max} genes "
            f"(e.g. mask_var), or raise max_seconds"
        )
    memory_guard(est_bytes, f"SDP_CMI on {m} genes", ["spec_cmi", "genes"])
    Xk = take_genes(X, keep) if m < X.shape[1] else X
    disc_rule = discretization_rule(Xk, discretization)  # "auto" decided once, on the genes discretised; recorded
    Q_full, q_info = cmi_q_rows(_table(Xk, y_codes, disc_rule, n_bins, class_weight,
                                       genes=gene_labels(feature_names, keep)), base=base)
    _check_informative(Q_full, discretization, X.shape[0])
    F = np.diag(Q_full).copy()
    # forced genes: QIP_CMI on the other genes with Q' and k - |P| (module docstring); every objective below
    # is then x_R^T Q' x_R, the panel's x^T Q x minus the constant 1^T Q_PP 1, added back where reported
    R, const = np.arange(m), 0.0
    Q, k_panel = Q_full, k
    if P.size:
        R, Q, const = _conditioned(Q_full, P)
        k_panel = max(k - P.size, 1)   # forced_only: solved for one more gene, to rank the rest
        F = F[R]
    t1 = time.perf_counter()
    Y, sdp_info = _spec.sdp_relaxation(Q, k_panel, solver=solver, lifted=relaxation == "lifted")
    panel, round_info = _spec.gw_round(Y, Q, k_panel, n_projections=int(n_projections), rng=rng)
    _, x_spec, _ = _spec.dominant_eigenvector(Q)
    x_spec, _ = _spec.sign_consistent(x_spec)
    spec_panel = rank_by_weight(x_spec, F)[:k_panel]
    spec_obj = _spec.qip_value(Q, spec_panel)
    weights = 0.5 * (1.0 + np.clip(Y[0, 1:], -1.0, 1.0))
    objective, n_swaps, start = round_info["objective"], 0, None
    if polish:
        tries = [(*_swap.swap_search(Q, None, s0, quad=1.0, lin=0.0), name)
                 for s0, name in ((panel, "rounded"), (spec_panel, "spec_cmi"))]
        panel_ordered, objective, n_swaps, start = max(tries, key=lambda t: t[1])  # first of equals: rounded
    else:
        panel_ordered = rank_by_weight(weights, F, candidates=panel)
    t2 = time.perf_counter()
    exact = _exhaustive_qip(Q, k_panel)
    rest = np.setdiff1d(np.arange(R.size), panel_ordered)
    order = R[np.concatenate([panel_ordered, rank_by_weight(weights, F, candidates=rest)])]
    m_total = X.shape[1]
    w_all = np.zeros(m_total)
    w_all[keep[R]] = weights
    w_all[keep[P]] = weights.max(initial=0.0)
    F_all = np.zeros(m_total)
    F_all[keep] = np.diag(Q_full)
    ranking = forced_first(np.concatenate([keep[order], np.flatnonzero(constant)]), P_all)
    if P.size:  # back to the whole panel's x^T Q x
        objective, spec_obj = objective + const, spec_obj + const
        round_info["objective"] += const
        sdp_info["bound"] += const
        exact = None if exact is None else exact + const
    if forced_only:   # the panel is the forced genes: its x^T Q x is known exactly, nothing was chosen
        objective = spec_obj = exact = round_info["objective"] = sdp_info["bound"] = const
        n_swaps, start = 0, None
    bound = sdp_info["bound"]
    eig_y = np.linalg.eigvalsh(Y)
    params = dict(discretization=discretization, discretization_used=disc_rule, n_bins=n_bins, base=base,
                  n_projections=int(n_projections),
                  relaxation=relaxation, polish=bool(polish), solver=sdp_info["solver"], max_seconds=float(max_seconds),
                  n_genes=n_genes, class_weight=class_weight, **preselected_record(P_all, feature_names))
    diagnostics = dict(
        sdp_status=sdp_info["status"], sdp_iterations=sdp_info["iterations"], sdp_seconds=sdp_info["seconds"],
        estimated_seconds=est_seconds, estimated_bytes=int(est_bytes), sdp_bound=bound,
        sdp_rank=int(np.sum(eig_y > 1e-3 * eig_y.max())), qip_objective=objective,
        relative_gap=(bound - objective) / bound if bound > 0 else 0.0,
        rounded_objective=round_info["objective"],
        rounded_equals_spec_cmi=bool(np.array_equal(np.sort(panel), np.sort(spec_panel))),
        n_swaps=int(n_swaps), polish_start=start,
        exhaustive_optimum=exact, optimality_ratio=None if exact is None else (objective / exact if exact > 0 else 1.0),
        spec_cmi_objective=spec_obj, best_projection=round_info["best_projection"],
        n_distinct=round_info["n_distinct"], q_negative_clipped=q_info["n_negative_clipped"],
        seconds_measures=t1 - t0, seconds_solve=t2 - t1, n_constant=int(constant.sum()),
        constant_genes=[int(i) for i in np.flatnonzero(constant)], n_classes=int(classes.size),
        seconds_total=time.perf_counter() - t0,
    )
    return Selection("sdp_cmi", w_all, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                     relevance=F_all, feature_names=None if feature_names is None else np.asarray(feature_names),
                     criterion_checked=True)  # Q_full was checked: XOR pairs have no relevance alone


def _exhaustive_qip(Q, k, max_subsets=None):
    """max x^T Q x over all k-subsets when there are at most ``max_subsets`` of them, else None."""
    m = Q.shape[0]
    max_subsets = EXHAUSTIVE_MAX_SUBSETS if max_subsets is None else max_subsets
    if math.comb(m, k) > max_subsets:
        return None
    combs = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(m), k)), dtype=np.int64)
    combs = combs.reshape(-1, k)
    best = -np.inf
    for b in range(0, combs.shape[0], 20_000):
        best = max(best, float(_spec.qip_values(Q, combs[b:b + 20_000]).max()))
    return best


def qip_objective(X: MatrixLike, y: ArrayLike, genes: Selection | ArrayLike, *, n_genes: int | None = None,
                  discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2,
                  feature_names: Sequence[str] | None = None) -> float:
    """The SPEC_CMI paper's criterion x^T Q x (eq. 17-18) of a gene panel.

    ``sum_{i in S} I(X_i; C) + sum_{i != j in S} I(X_i; C | X_j)`` -- relevance plus pairwise
    conditional relevance -- so panels from any selector (QPFS, SPEC_CMI, SDP_CMI, mRMR...) can be
    compared on the same scale.  Only the panel's k x k block of Q is computed.

    Parameters
    ----------
    X, y : expression matrix and class labels, as given to the selectors
    genes : Selection, or array of int indices, bool mask (n_genes_total,), or gene names
        The panel.  For a ``Selection``, its ``selected`` genes (or its top ``n_genes``).
    n_genes : int, optional
        Use only the first ``n_genes`` genes of ``genes`` (a Selection's ranking or an ordered list).
    discretization, n_bins, base
        As for the selectors (use the same values to compare with their diagnostics).
    feature_names : sequence of str, optional
        Needed when ``genes`` holds names.

    Returns
    -------
    float
    """
    from ._common import prepare as _prep

    X, y_codes, _, _ = _prep(X, y, feature_names)
    m = X.shape[1]
    if isinstance(genes, Selection):
        if genes.n_features != m:
            raise ValueError(f"the Selection covers {genes.n_features} genes but X has {m}")
        if n_genes is None and genes.n_genes is None:
            raise ValueError("the Selection has no n_genes; pass n_genes=k to score its top k genes")
        idx = genes.ranking[:n_genes] if n_genes is not None else genes.selected
    else:
        arr = np.asarray(genes)
        if arr.dtype == bool:
            if arr.shape != (m,):
                raise ValueError(f"a boolean gene mask must have length {m}, got shape {arr.shape}")
            idx = np.flatnonzero(arr)
        elif arr.dtype.kind in "iu":
            idx = arr.ravel().astype(np.int64)
            bad = idx[(idx < 0) | (idx >= m)]
            if bad.size:
                raise ValueError(f"gene indices out of range 0..{m - 1}: {describe_indices(bad)}")
        elif arr.dtype.kind in "UO":
            if feature_names is None:
                raise ValueError("genes are given by name; pass feature_names (the names of X's columns)")
            pos = {str(g): i for i, g in enumerate(np.asarray(feature_names).astype(str))}
            missing = [str(g) for g in arr.ravel() if str(g) not in pos]
            if missing:
                raise ValueError(f"{len(missing)} gene name(s) not in feature_names: {', '.join(missing[:5])}")
            idx = np.array([pos[str(g)] for g in arr.ravel()], dtype=np.int64)
        else:
            raise TypeError("genes must be a Selection, integer indices, a boolean mask or gene names")
        if n_genes is not None:
            idx = idx[:check_n_genes(n_genes, idx.size)]
    if idx.size == 0:
        raise ValueError("the panel is empty")
    uniq, counts = np.unique(idx, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"the panel lists gene(s) more than once: {describe_indices(uniq[counts > 1], feature_names)}")
    return _panel_qip(X, y_codes, idx, discretization, n_bins, base)
