"""Simplex-constrained convex QP:  min 1/2 x^T G x - a^T x  s.t.  x >= 0, sum(x) = 1.

Exact solver: the Goldfarb--Idnani dual active-set method (``quadprog``, the solver of the QPFS
paper, section 2.5).  It needs G positive definite; :func:`convexify_shift` supplies the smallest
diagonal shift that makes an indefinite G definite (the lambda I of eq. 13 in Nguyen et al. 2014).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla

__all__ = ["solve_quadprog", "convexify_shift", "kkt_residual", "objective"]


def objective(G, a, x):
    return 0.5 * x @ (G @ x) - a @ x


def smallest_eigenvalue(G):
    """Smallest eigenvalue of symmetric G (LAPACK syevr restricted to one eigenvalue)."""
    return float(sla.eigh(G, eigvals_only=True, subset_by_index=[0, 0], check_finite=False)[0])


def convexify_shift(G, *, rel_margin=1e-9):
    """Smallest lambda >= 0 such that G + lambda I is safely positive definite.

    Returns ``(lam, lambda_min)``.  ``lam = max(0, margin - lambda_min)`` with
    ``margin = rel_margin * max|diag G|``: quadprog's Cholesky needs strict definiteness, so even
    a PSD but singular G gets this tiny margin (recorded by the caller).
    """
    lam_min = smallest_eigenvalue(G)
    margin = rel_margin * max(1e-300, float(np.max(np.abs(np.diag(G)))))
    return max(0.0, margin - lam_min), lam_min


def solve_quadprog(G, a):
    """Exact solution of the simplex QP with Goldfarb--Idnani (G must be positive definite)."""
    import quadprog

    m = a.size
    C = np.empty((m, m + 1))
    C[:, 0] = 1.0
    C[:, 1:] = np.eye(m)
    b = np.zeros(m + 1)
    b[0] = 1.0
    x, *_ = quadprog.solve_qp(np.ascontiguousarray(G, dtype=np.float64), np.asarray(a, dtype=np.float64), C, b, meq=1)
    x = np.maximum(x, 0.0)
    return x / x.sum()


def kkt_residual(G, a, x):
    """Max violation of the simplex-QP KKT conditions at x.

    With gradient g = Gx - a and nu = the multiplier of sum(x) = 1 (estimated on the support),
    optimality means g_i = nu where x_i > 0 and g_i >= nu elsewhere.
    """
    g = G @ x - a
    support = x > 1e-12 * max(1.0, x.max())
    nu = float(np.median(g[support])) if support.any() else float(g.min())
    stat = np.abs(g[support] - nu).max(initial=0.0)
    dual = np.maximum(nu - g[~support], 0.0).max(initial=0.0)
    return max(stat, dual, abs(x.sum() - 1.0), max(0.0, -x.min()))
