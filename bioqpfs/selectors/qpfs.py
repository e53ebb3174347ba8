"""Quadratic Programming Feature Selection (Rodriguez-Lujan et al., JMLR 2010).

    min_x  1/2 (1 - alpha) x^T Q x - alpha F^T x    s.t.  x_i >= 0,  sum_i x_i = 1     (eq. 2)

Q is the gene-gene redundancy (mutual information with Q_ii = H(X_i), or |Pearson|), F the class
relevance (I(X_i; C), or Hall's multiclass correlation), alpha defaults to
alpha_hat = q_bar / (q_bar + f_bar) (section 2, and eq. 9), and genes are ranked by weight with ties
broken by F (section 2.3, step 8).
"""
from __future__ import annotations

import time

import numpy as np

from .._kernels import simplex_qp
from .._selection import Selection, rank_by_weight
from .._validation import check_n_genes, memory_guard
from ._common import prepare, similarity_and_relevance, warn_constant

__all__ = ["qpfs", "alpha_hat", "solve_qpfs"]

#: weights below this (the solution sums to 1) are exact zeros of the optimum up to solver round-off
WEIGHT_TOL = 1e-10
#: quadprog is O(M^3) in time and keeps several M x M arrays; beyond this it runs for many minutes
QUADPROG_MAX_GENES = 6000


def alpha_hat(Q, F):
    """alpha_hat = q_bar / (q_bar + f_bar): mean of all entries of Q vs mean of F (QPFS section 2, eq. 9)."""
    q_bar = float(np.mean(Q))
    f_bar = float(np.mean(F))
    if q_bar + f_bar <= 0:
        raise ValueError("alpha cannot be estimated: Q and F are both zero (no gene carries information)")
    return q_bar / (q_bar + f_bar), q_bar, f_bar


def solve_qpfs(Q, F, alpha):
    """Solve min 1/2 (1-alpha) x^T Q x - alpha F^T x on the simplex exactly (quadprog).

    Returns ``(x, diagnostics)``; weights below :data:`WEIGHT_TOL` are set to exact zeros.  An
    indefinite (1-alpha) Q is convexified with the smallest diagonal shift (recorded).
    """
    m = F.size
    G = (1.0 - alpha) * Q
    shift, lam_min = simplex_qp.convexify_shift(G)
    G[np.diag_indices(m)] += shift
    a = alpha * F
    x = simplex_qp.solve_quadprog(G, a)
    x[x < WEIGHT_TOL] = 0.0
    x /= x.sum()
    diagnostics = dict(
        solver="quadprog", psd_fix="shift", psd_shift=float(shift), min_eigenvalue=float(lam_min),
        indefinite=bool(lam_min < 0),
        objective=float(0.5 * (1.0 - alpha) * x @ (Q @ x) - alpha * F @ x),
        objective_convexified=float(simplex_qp.objective(G, a, x)),
        kkt_residual=float(simplex_qp.kkt_residual(G, a, x)), n_nonzero=int(np.count_nonzero(x)),
    )
    return x, diagnostics


def qpfs(X, y, *, n_genes=None, similarity="mi", relevance=None, alpha=None, discretization="mean_sd",
         n_bins=3, base=2, random_state=None, feature_names=None):
    """Rank genes with exact QPFS.

    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
        Expression (continuous; or integer codes with ``discretization=None``).
    y : array-like, shape (n_samples,)
        Class labels (any hashable values; at least 2 classes).
    n_genes : int, optional
        Panel size; marks ``Selection.selected``.  The ranking always covers every gene.
    similarity : {"mi", "correlation"}
        Redundancy Q: mutual information of the discretised genes (Q_ii = H(X_i), as published) or
        |Pearson correlation| (eq. 3).
    relevance : {"mi", "hall"} or array, optional
        F: I(X_i; C) (default with MI) or Hall's multiclass correlation (default with correlation),
        or a precomputed non-negative vector.
    alpha : float in [0, 1], optional
        Relevance/redundancy trade-off; default alpha_hat = q_bar / (q_bar + f_bar).
    discretization : {"mean_sd", "quantile", "mdl", None}
        For MI: QPFS section 2.5 mean +- sd bins by default; ``None`` if X holds codes.
    n_bins : int
        Bins for ``"quantile"``.
    base : float
        Logarithm base of MI (does not change the ranking).
    random_state : ignored
        Exact QPFS is deterministic; accepted so every selector has the same signature.
    feature_names : sequence of str, optional

    Returns
    -------
    Selection
        ``weights`` (the QP solution x), ``ranking`` (all genes), ``diagnostics`` with alpha, q_bar,
        f_bar, the convexifying shift, the smallest eigenvalue of (1-alpha)Q, objective and KKT residual.

    Notes
    -----
    MI matrices of real data are often indefinite (SPEC_CMI paper section 1.2), and quadprog needs a
    positive definite matrix.  The smallest shift lambda making (1 - alpha) Q + lambda I definite is
    applied and reported in ``diagnostics["psd_shift"]``; a PSD but singular Q gets a shift of
    1e-9 * max diag for strict definiteness.  Constant genes carry no information: they are left out
    of the QP, get weight 0 and rank last (a warning lists them).
    """
    t0 = time.perf_counter()
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    m_total = X.shape[1]
    n_genes = check_n_genes(n_genes, m_total)
    if alpha is not None and not (0.0 <= float(alpha) <= 1.0):
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    keep = np.flatnonzero(~constant)
    if keep.size == 0:
        raise ValueError("every gene is constant across samples; there is nothing to select")
    warn_constant(constant, feature_names)
    m = keep.size
    if m > QUADPROG_MAX_GENES:
        raise ValueError(
            f"exact QPFS with quadprog on {m} genes would take very long (O(M^3)); restrict the genes "
            f"(e.g. mask_var='highly_variable') to at most {QUADPROG_MAX_GENES}, or use a Nystrom method"
        )
    memory_guard(4 * m * m * 8, f"exact QPFS on {m} genes", "restrict the genes (e.g. highly variable genes)")
    Xk = X[:, keep]
    Q, F, relevance_used, t_measures = similarity_and_relevance(
        Xk, y_codes, similarity=similarity, relevance=relevance, discretization=discretization, n_bins=n_bins,
        base=base)
    a_hat, q_bar, f_bar = alpha_hat(Q, F)
    alpha_used = a_hat if alpha is None else float(alpha)

    t1 = time.perf_counter()
    x, solve_diag = solve_qpfs(Q, F, alpha_used)
    t_solve = time.perf_counter() - t1

    weights = np.zeros(m_total)
    weights[keep] = x
    F_all = np.zeros(m_total)
    F_all[keep] = F
    ranking = np.concatenate([rank_by_weight(weights, F_all, candidates=keep), np.flatnonzero(constant)])
    params = dict(similarity=similarity, relevance=relevance_used, alpha=alpha_used, alpha_given=alpha is not None,
                  discretization=discretization, n_bins=n_bins, base=base, solver="quadprog", n_genes=n_genes)
    diagnostics = dict(
        alpha_hat=a_hat, q_bar=q_bar, f_bar=f_bar, **solve_diag, n_constant=int(constant.sum()),
        constant_genes=[int(i) for i in np.flatnonzero(constant)], n_classes=int(classes.size),
        seconds_measures=t_measures, seconds_solve=t_solve, seconds_total=time.perf_counter() - t0,
    )
    return Selection("qpfs", weights, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                     relevance=F_all, feature_names=None if feature_names is None else np.asarray(feature_names))
