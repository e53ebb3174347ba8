"""Extended QPFS, convexified (Nguyen, Chan, Romano & Bailey, KDD 2014, section 2.1-2.2, eq. 12-13).

    min_x  alpha x^T [H1 - beta H2 + lambda I] x - f^T x    s.t.  x_i >= 0,  sum_i x_i = 1    (eq. 13)

with ``H1_ij = I(X_i; X_j)`` and ``H2_ij = I(X_i; X_j | C)`` for i != j: the "total redundancy"
``I(X_i;X_j) - I(X_i;X_j|C)`` of the EMRMR/JMI criterion (eq. 10-11) at beta = 1, plain QPFS
redundancy at beta = 0.  Section 2.2 argues there should be no penalty for self-redundancy, so the
diagonals of H1 and H2 are 0 and every gene receives the same diagonal lambda, whose only purpose
is to make the problem convex.  ``f_i = I(X_i; C)``.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from .. import measures
from .._docs import BATCH_DOC, HIERARCHY_DOC, Y_HIERARCHY_DOC, doc_params
from .._kernels import information as _info
from .._kernels import simplex_qp
from .._kernels.counting_dask import take_genes
from .._kernels.psd import PSD_FIXES
from .._selection import Selection, check_informative
from .._validation import Interval, Options, check_n_genes, memory_guard, parameter_constraints
from ._common import (
    BATCH_DISCRETIZATIONS,
    BATCH_WEIGHTS,
    check_batch,
    check_batch_crosses_classes,
    check_levels,
    discretization_rule,
    discretized,
    gene_labels,
    information_relevance,
    prepare,
    weights_and_ranking,
)
from ._qp import SOLVERS, kept_and_forced, preselected_params, solve_qpfs, solver_working_bytes

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

    from .._typing import MatrixLike, SeedLike

__all__ = ["eqpfs", "eqpfs_matrix"]


def eqpfs_matrix(codes, levels, y_codes, beta, *, base=2, batch=None, working_bytes=0):
    """H0 = H1 - beta H2 with zero diagonal (one M x M array plus H2, scaled in place); with ``batch``
    (:class:`~bioqpfs.selectors._common.Batches`) both are ``sum_b w_b`` of the within-batch values.
    ``working_bytes``: what the caller's solver needs beside H0 (:func:`~bioqpfs.selectors._qp.solver_working_bytes`),
    counted by the same guard: H1, H2 and the counting's M x M temporary, or H0 and the solver."""
    m = codes.shape[1]
    memory_guard(3 * m * m * 8 + working_bytes, f"the {m} x {m} EQPFS redundancy matrices"
                 + (" with the solver's working memory" if working_bytes else ""), ["genes", "ikm", "spg"])
    # H1 from an ungrouped table: the "mi" kind of a class-grouped CodeTable counts only the
    # first class's samples (found while writing this; reported to the kernel owner)
    strata = {} if batch is None else dict(strata=batch.codes, strata_weights=batch.weights)
    H = _info.pairwise_information(_info.CodeTable(codes, levels, **strata), None, "mi", base=base)
    if beta != 0:
        grouped = _info.CodeTable(codes, levels, groups=y_codes, **strata)
        H2 = _info.pairwise_information(grouped, None, "mi_given_class", base=base)
        np.multiply(H2, beta, out=H2)
        H -= H2
        del H2
    H[np.diag_indices(m)] = 0.0
    return H


@doc_params(batch_doc=BATCH_DOC, y_doc=Y_HIERARCHY_DOC, groupby_weights=HIERARCHY_DOC)
@parameter_constraints(
    alpha=Interval("real", 0, None, closed="neither", none=True), beta=Interval("real", 0, None),
    lam=Interval("real", 0, None, none=True), discretization=Options(*measures.DISCRETIZATIONS), n_bins=Interval("integer"),
    solver=Options(*SOLVERS), psd_fix=Options(*PSD_FIXES),
    preselected_share=Interval("real", 0, 1, closed="neither", none=True), batch_weights=Options(*BATCH_WEIGHTS),
    batch_discretization=Options(*BATCH_DISCRETIZATIONS))
def eqpfs(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, alpha: float | None = None, beta: float = 1.0,
          lam: float | None = None, discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2,
          solver: str = "auto", psd_fix: str = "shift", preselected: Sequence[str | int] | None = None,
          preselected_share: float | None = None, batch: ArrayLike | None = None, batch_weights: str = "size",
          batch_discretization: str = "per_batch", groupby_weights: ArrayLike | None = None,
          random_state: SeedLike = 0, feature_names: Sequence[str] | None = None) -> Selection:
    """Rank genes with convexified EQPFS (eq. 13 of Nguyen et al. 2014).

    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
    {y_doc}
        With hierarchical labels only f is summed over the levels; H2 conditions on the finest level.
    n_genes : int, optional
        Panel size.
    alpha : float > 0, optional
        Weight of the redundancy term.  The paper leaves it to the user; the default transfers the
        QPFS rule (eq. 9 of Rodriguez-Lujan et al.): QPFS with alpha_hat is, after dividing by
        alpha_hat, ``1/2 (f_bar/q_bar) x^T Q x - F^T x``, so the EQPFS analogue is
        ``alpha = f_bar / (2 h_bar)`` with h_bar the mean off-diagonal entry of H1 - beta H2 (if
        h_bar <= 0, the mean of its absolute values is used; recorded).
    beta : float >= 0
        Balance of the class-conditional redundancy H2 (beta = 1: EMRMR/JMI; beta = 0: QPFS with
        zero self-redundancy).
    lam : float >= 0, optional
        The convexifying diagonal lambda.  Default: the smallest lambda making H1 - beta H2 + lambda I
        positive semidefinite (minus its smallest eigenvalue, found by Lanczos), plus the 1e-9
        relative margin strict definiteness needs.  A given lambda that leaves the matrix indefinite
        is handled by ``psd_fix`` (recorded).
    discretization, n_bins, base
        As in :func:`bioqpfs.qpfs`.
    solver : {"auto", "quadprog", "active_set", "spg"}
    psd_fix : {"shift", "clip", "none"}
        Applied only when a user-given ``lam`` leaves the problem indefinite.
    preselected, preselected_share
        Forced genes, as in :func:`bioqpfs.qpfs`.
    {batch_doc}
        H1, H2 and f are all within-batch averages.
    {groupby_weights}
    random_state : ignored (deterministic); validated like every selector's (an invalid value is an error).
    feature_names : sequence of str, optional

    Returns
    -------
    Selection
        ``diagnostics`` hold alpha, beta, lambda (and the smallest eigenvalue of H1 - beta H2), the
        psd fix, objective and KKT residual.
    """
    t0 = time.perf_counter()
    strata = check_batch(batch, X, batch_weights=batch_weights, batch_discretization=batch_discretization)
    y, hierarchy = check_levels(y, X, groupby_weights)
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    check_batch_crosses_classes(strata, y_codes, hierarchy)
    m_total = X.shape[1]
    n_genes = check_n_genes(n_genes, m_total)
    P_all, keep, P, share = kept_and_forced(preselected, constant, feature_names, n_genes, preselected_share,
                                            min_kept=2)
    m = keep.size

    # one path for plain, batch and hierarchical labels; a Dask X's codes stay lazy (counted chunk by chunk)
    Xk = take_genes(X, keep)
    rule = discretization_rule(Xk, discretization)  # "auto" decided once, on the genes discretised; recorded
    codes, levels = discretized(Xk, rule, n_bins, y_codes, strata, gene_labels(feature_names, keep))
    f = information_relevance(_info.CodeTable(codes, levels, groups=y_codes,
                                              strata=None if strata is None else strata.codes,
                                              strata_weights=None if strata is None else strata.weights),
                              y_codes, base, hierarchy)
    H = eqpfs_matrix(codes, levels, y_codes, float(beta), base=base, batch=strata,
                     working_bytes=solver_working_bytes(m, solver, psd_fix))
    check_informative("eqpfs", f, dict(discretization=discretization))  # before alpha and lambda fail on it
    t_measures = time.perf_counter() - t0

    off = m * (m - 1)
    h_bar = float(H.sum(dtype=np.float64)) / off
    h_bar_used = h_bar if h_bar > 0 else float(np.abs(H).sum(dtype=np.float64)) / off
    f_bar = float(np.mean(f))
    if alpha is None:
        if h_bar_used <= 0:
            raise ValueError("alpha cannot be estimated: all redundancies are zero; pass alpha=...")
        alpha_used = f_bar / (2.0 * h_bar_used)
    else:
        alpha_used = float(alpha)
    H_min = simplex_qp.smallest_eigenvalue(H)
    margin = 1e-9 * max(1e-300, float(max(H.max(), -H.min())))  # max |H| without an M x M |H| copy
    lam_used = max(0.0, -H_min * (1.0 + 1e-9)) + margin if lam is None else float(lam)
    H[np.diag_indices(m)] = lam_used

    t1 = time.perf_counter()
    # alpha x^T H x - f^T x  ==  1/2 (2 alpha) x^T H x - 1 * f^T x
    # genes of one level carry nothing (zero relevance and zero off-diagonal H) but sit on the lambda diagonal: a
    # sink for the simplex's mass (an MDL gene of one level was in the panel), so they get weight 0
    x, solve_diag = solve_qpfs(H, f, alpha_used, solver=solver, psd_fix=psd_fix, preselected=P,
                               preselected_share=share, quad_scale=2.0 * alpha_used,
                               lin_scale=1.0, exclude=np.flatnonzero(np.asarray(levels) <= 1))
    t_solve = time.perf_counter() - t1

    weights, F_all, ranking = weights_and_ranking(m_total, keep, x, f, constant, P_all)
    params = dict(alpha=alpha_used, alpha_given=alpha is not None, beta=float(beta), lam=lam_used,
                  lam_given=lam is not None, discretization=discretization, discretization_used=rule, n_bins=n_bins,
                  base=base, solver=solve_diag["solver"], psd_fix=psd_fix, n_genes=n_genes)
    params.update(preselected_params(P_all, feature_names, share))
    if strata is not None:
        params.update(strata.params())
    if hierarchy is not None:
        params.update(hierarchy.params())
    diagnostics = dict(h_bar=h_bar, f_bar=f_bar, redundancy_min_eigenvalue=H_min, **solve_diag,
                       n_constant=int(constant.sum()), constant_genes=[int(i) for i in np.flatnonzero(constant)],
                       n_classes=int(classes.size), seconds_measures=t_measures, seconds_solve=t_solve,
                       seconds_total=time.perf_counter() - t0)
    diagnostics["objective_eq13"] = diagnostics.pop("objective")
    return Selection("eqpfs", weights, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                     relevance=F_all, feature_names=None if feature_names is None else np.asarray(feature_names))
