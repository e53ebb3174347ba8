"""Transformation-based feature selection: LDFS and HSFS (Masaeli, Fung & Dy, ICML 2010).

A linear transformation W (genes x q) is learnt with a row-sparsity penalty (eq. 1)

    min_W  J(XW) + lambda sum_j ||w_j||_inf,

so that whole rows of W -- genes -- drop out; lambda is raised until the wanted number of rows
remain (section 6) and genes are ranked by ||w_j||_inf.

Optimisation (section 3)
------------------------
The paper introduces bounds s_j >= ||w_j||_inf (eq. 2-3: min J + lambda sum_j s_j s.t.
-s_j <= w_jk <= s_j) and solves with a two-metric projected L-BFGS.  Those constraints couple w and
s, so they are not box constraints; we write the same feasible set as a box by the substitution

    w_jk = s_j u_jk,   u_jk in [-1, 1],   s_j >= 0,

and minimise J(X (s o U)) + lambda sum_j s_j with scipy's L-BFGS-B (bound-constrained L-BFGS).
Every W is reachable, and at an optimum s_j = ||w_j||_inf.  The substitution has one blind spot:
at s_j = 0 the gradient in u_j vanishes, so a dropped row could only come back along its stale
direction.  After each L-BFGS-B run we therefore check the optimality condition of the original
problem for every zero row, ||grad_{w_j} J||_1 <= lambda (the subdifferential of
lambda ||.||_inf at 0 is the l1 ball of radius lambda); rows that violate it get
u_j = -sign(grad_{w_j} J) -- the steepest re-entry direction -- and the solver is restarted
from there (at most ``max_kkt_rounds`` times).

Criteria
--------
Genes are z-scored first (the penalty and the threshold act on the scale of W, so no gene may win
by its unit; constant genes are left out and rank last).

* LDFS (section 4): the LDA trace criterion J = -tr((W^T S_T W + gamma I)^{-1} W^T S_B W), with
  S_B = sum_c (n_c/n)(mu_c - mu)(mu_c - mu)^T and the total scatter S_T = S_B + S_W (both / n).
  The paper's ratio W^T S_B W / W^T S_W W is invariant to the scale of W, so the penalty could
  shrink W towards 0 without changing J and the problem has no minimiser; and with more genes than
  samples S_W is singular, so the ratio is unbounded.  The S_T form has the same discriminant
  directions as tr(S_W^{-1} S_B) (Fukunaga 1990: eigenvalues mu = lambda / (1 + lambda)), is
  bounded (0 <= -J < q), and the ridge gamma (default 1, the variance of one z-scored gene) fixes
  the scale: J ~ -||W||^2 for small W and saturates for large W, so the penalty has something to
  trade against.  Gradient: grad J = -2 S_B W A^{-1} + 2 S_T W A^{-1} B A^{-1}, A = W^T S_T W +
  gamma I, B = W^T S_B W.  With more genes than samples, S_B W and S_T W are formed from X (n x d)
  and the class means without any d x d matrix; with more samples than genes (single-cell data), from
  S_T itself (the genes' correlation matrix, d x d, :func:`scatter_lda_objective`): less memory, and
  O(d^2 q) per evaluation instead of O(n d q).  A Dask X takes the same route, S_T and the class means
  summed chunk by chunk, so LDFS never holds more than a chunk of an atlas.
* HSFS (section 5, eq. 8-11): J = -HSIC(XW, Y) / HSIC(Y, Y), HSIC(Z, Y) = tr(K H L H) / n^2 with
  a Gaussian kernel K_ab = exp(-||z_a - z_b||^2 / (2 sigma^2)) on the projected samples and the
  delta kernel L_ab = [y_a = y_b] on the labels; dividing by HSIC(Y, Y) (the value for K = L) only
  rescales J into [-1, 0] so that L-BFGS tolerances and lambda mean the same on every data set.
  Bandwidth: sigma = 1 fixed.  HSIC is not scale invariant, and recomputing a median heuristic on
  XW at every iterate would make it so (and the problem again ill-posed); sigma = 1 is the median
  heuristic's scale for one z-scored gene with |w| = 1 (the median squared difference of two
  standard normal draws is 0.91), so W is measured in units of one gene's spread.  Gradient (eq.
  10-11 written as matrix products): with P = K o (H L H), grad HSIC = -2 / (sigma^2 n^2)
  X^T (diag(P 1) - P) X W.  Cost O(n^2 q + n d q) per evaluation, n x n memory.

Choices
-------
* ``n_components`` q: the paper used q = d, i.e. d^2 parameters and O(d^4) work (its section 6),
  impossible for 10,000 genes.  Default q = min(d, max(2, C - 1)): the LDA criterion cannot use
  more than C - 1 directions (rank of S_B), and HSFS gets at least two so that it can represent
  interactions (an XOR pair needs a 2-D projection).
* lambda path (section 6): starting at lambda_1 = 1e-3 * lambda_ref with lambda_ref =
  max_j ||grad_{w_j} J||_1 at the random start, lambda is doubled (warm starts) until at most
  ``n_genes`` rows are non-zero, then bisected geometrically between the last two values until
  exactly ``n_genes`` remain (``max_bisect`` steps).  Screening: rows that are zero at one lambda
  are left out at the larger ones (the row-norm path is treated as monotone, as the paper's
  "raise lambda until" procedure assumes), so only the first solve sees all genes.  The path is not quite
  monotone: at the final lambda some screened rows violate eq. (1)'s optimality condition
  ||grad_{w_j} J||_1 <= lambda (Colon, LDFS / HSFS: 46 / 47 rows; a continuation on all genes lowers the
  objective by 0.017 / 0.044).  Re-admitting them was tried (stop 51) and made the paper's Table 1
  reproduction worse, not better (``benchmarks/reproduce/paper_004_ldfs.py``: Arcene HSFS 11.5 -> 16.0% error
  against the paper's 11.99, Madelon HSFS 39.7 -> 40.1; LDFS 18.0 -> 17.5 and 39.1 -> 38.6), so the paper's
  procedure is kept.  A row counts as non-zero when
  ||w_j||_inf >= ``zero_tol`` * max_j ||w_j||_inf (the paper's 0.01, made relative to the largest
  row so it does not depend on the units of W).  If no lambda gives exactly ``n_genes`` rows the
  solution at the largest lambda with more rows is used and its rows ranked by norm (with a
  warning).  This happens: both criteria are flat at W = 0 (J ~ -||W||^2), so W = 0 is a local
  minimum for every lambda > 0 and beyond some lambda the whole of W can fall to 0 at once
  instead of row by row.
* Ranking: by ||w_j||_inf at the chosen lambda; rows at zero by the largest lambda of the path at
  which they were still non-zero, then by ||w_j||_inf at lambda_1 (stored as ``relevance``), then
  by index.  ``weights`` = ||w_j||_inf at the chosen lambda.
* Reproducibility: the criteria are non-convex and the lambda path is not monotone in the number of
  rows, so last-bit differences of the input can end it on another panel.  The same data in the same
  sample order give the same panel bit for bit, whatever the label type: the classes are put in the
  labels' sorted order first (numeric text by value), so int labels and their text sum the class means
  alike.  Another sample order, or data that differ in the last bits, may give another panel.
"""
from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from .. import _threads
from .._docs import RANDOM_STATE_DOC, append_doc
from .._kernels import correlation as _corr
from .._kernels.counting_dask import compute, is_dask_array, sample_chunked, take_genes
from .._kernels.ranking import rank_descending
from .._selection import ZERO_RELEVANCE, Selection, check_informative
from .._validation import Interval, check_n_genes, check_random_state, memory_guard, parameter_constraints
from ._common import forced_first, prepare, preselected_record, resolve_preselected, sorted_class_order, warn_constant

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

    from .._typing import MatrixLike, SeedLike

__all__ = ["ldfs", "hsfs", "LDAObjective", "HSICObjective", "transform_select", "DEFAULT_N_GENES",
           "MAX_HSIC_SAMPLES"]

#: panel size aimed at when ``n_genes`` is None (paper Table 1 selects 2-20 features)
DEFAULT_N_GENES = 10
#: HSFS keeps several n x n matrices and costs O(n^2 q) per evaluation; beyond this, subsample
MAX_HSIC_SAMPLES = 4000


def check_hsic_samples(n):
    """Refuse HSFS on more than :data:`MAX_HSIC_SAMPLES` samples, with what to do instead."""
    if n > MAX_HSIC_SAMPLES:
        raise ValueError(f"HSFS keeps n x n kernel matrices and costs O(n^2) per step; {n} samples is above "
                         f"{MAX_HSIC_SAMPLES}: subsample the samples (e.g. stratified, 1,000 as in the paper)")


def _zscore(X):
    """Genes standardised to mean 0, sd 1 (constant genes: 0), dense float64.

    Scale-safe: each gene is first divided by the power of two of
    :func:`bioqpfs._kernels.correlation.column_scales` (exact; 1 for ordinary genes), so data of any
    magnitude (e.g. X * 1e307 or X * 1e-300) give the z-scores of X, without overflow or underflow.
    A sparse X is densified first (the result is dense anyway), and every X is made C-ordered (a CSC matrix
    densifies F-ordered, and numpy sums the two layouts in different orders), so the z-scores of CSR, CSC and
    dense X are bit-identical: the transformation path (L-BFGS-B on a non-convex criterion) otherwise turns
    last-bit differences of the moments into different tie-breaks between zero rows.
    """
    Xs = np.ascontiguousarray(X.toarray() if hasattr(X, "toarray") else X)
    mean, ss, s = _corr.scaled_column_moments(Xs)
    sd = np.sqrt(ss / X.shape[0])
    return (Xs / s - mean) / np.where(sd > 0, sd, 1.0)


class LDAObjective:
    """J(W) = -tr((W^T S_T W + gamma I)^{-1} W^T S_B W) on centred data Xc (n x d) and class codes."""

    name = "ldfs"

    def __init__(self, Xc, y_codes, gamma=1.0):
        self.X = Xc
        self.ST = None
        self.n = Xc.shape[0]
        counts = np.bincount(y_codes).astype(np.float64)
        self.pi = counts / self.n
        means = np.zeros((counts.size, Xc.shape[1]))
        np.add.at(means, y_codes, Xc)
        self.M = means / counts[:, None]  # class means (overall mean is 0)
        self.gamma = float(gamma)

    @classmethod
    def from_scatter(cls, ST, M, pi, gamma=1.0):
        """The criterion from the total scatter ``S_T`` (genes x genes), the class means ``M`` (classes x genes) of
        the z-scored genes and the class proportions ``pi``: every product with X is one with ``S_T``
        (``S_T W = X^T X W / n``): :func:`scatter_lda_objective`."""
        out = object.__new__(cls)
        out.X, out.ST, out.M, out.n = None, np.asarray(ST, dtype=np.float64), np.asarray(M, dtype=np.float64), None
        out.pi, out.gamma = np.asarray(pi, dtype=np.float64), float(gamma)
        return out

    def restrict(self, cols):
        """The same criterion on a subset of the genes (rows of W)."""
        out = object.__new__(LDAObjective)
        out.__dict__.update(self.__dict__)
        if self.X is not None:
            out.X = np.ascontiguousarray(self.X[:, cols])
        else:
            out.ST = self.ST[np.ix_(cols, cols)]
        out.M = self.M[:, cols]
        return out

    def __call__(self, W):
        """Objective value and gradient with respect to ``W`` (genes x components)."""
        MW = self.M @ W
        q = W.shape[1]
        if self.X is not None:
            P = self.X @ W
            A = P.T @ P / self.n + self.gamma * np.eye(q)
            STW = self.X.T @ P / self.n
        else:
            STW = self.ST @ W
            A = W.T @ STW
            A = 0.5 * (A + A.T) + self.gamma * np.eye(q)
        B = MW.T @ (self.pi[:, None] * MW)
        try:
            if not np.isfinite(A).all():
                raise np.linalg.LinAlgError("W^T S_T W overflows")
            Ainv = np.linalg.inv(A)
        except np.linalg.LinAlgError:
            # an unpenalised (forced) row of W can grow without bound, as J(cW) still improves with c, until
            # W^T S_T W + gamma I overflows or is singular: an infinite value keeps the line search away from there
            return np.inf, np.zeros_like(W)
        Ainv = 0.5 * (Ainv + Ainv.T)
        f = -np.trace(Ainv @ B)
        SBW = self.M.T @ (self.pi[:, None] * MW)
        grad = -2.0 * SBW @ Ainv + 2.0 * STW @ (Ainv @ B @ Ainv)
        return f, grad


def scatter_lda_objective(X, y_codes, gamma=1.0):
    """:class:`LDAObjective` of the z-scored genes of ``X`` (numpy, scipy.sparse or a Dask array chunked by samples;
    no constant gene) from its total scatter and class means: ``S_T`` is the genes' Pearson correlation matrix
    (:func:`bioqpfs._kernels.correlation.pearson`; a Dask X's summed over the chunks about the global moments) and
    the class means come from one pass of class sums (:func:`bioqpfs._kernels.counting_dask.class_sums`).  Used
    when samples outnumber genes: each evaluation then needs d x d memory and O(d^2 q) time instead of n x d and
    O(n d q).  Building ``S_T`` reads X once more in blocks of genes (two n x b float64 blocks,
    :func:`bioqpfs._kernels.correlation.product_block_width`), after one computation of the moments."""
    from .._kernels.counting_dask import class_sums, sample_chunked

    X = sample_chunked(X) if is_dask_array(X) else X
    n = X.shape[0]
    counts = np.bincount(y_codes).astype(np.float64)
    mean, ss, s = _corr.shared_column_moments(X)  # of X / s: no overflow at any scale
    sums = class_sums(X, y_codes, counts.size, s=s)
    M = (sums / counts[:, None] - mean) / np.sqrt(ss / n)  # class means of (x / s - mean) / sd
    return LDAObjective.from_scatter(_corr.pearson(X, moments=(mean, ss, s)), M, counts / n, gamma)


class HSICObjective:
    """J(W) = -HSIC(XW, Y) / HSIC(Y, Y), Gaussian kernel (bandwidth sigma) on XW, delta kernel on Y."""

    name = "hsfs"

    def __init__(self, Xs, y_codes, sigma=1.0):
        n = Xs.shape[0]
        self.X = Xs
        self.n = n
        L = (y_codes[:, None] == y_codes[None, :]).astype(np.float64)
        Lc = L - L.mean(axis=0, keepdims=True)
        self.HLH = Lc - Lc.mean(axis=1, keepdims=True)
        self.norm = float(np.sum(L * self.HLH))  # n^2 HSIC(Y, Y), the value for K = L
        self.sigma2 = float(sigma) ** 2

    def restrict(self, cols):
        """The same criterion on a subset of the genes (rows of W)."""
        out = object.__new__(HSICObjective)
        out.__dict__.update(self.__dict__)
        out.X = np.ascontiguousarray(self.X[:, cols])
        return out

    def hsic(self, W):
        """The Gaussian kernel matrix of ``X W`` and ``X W`` itself."""
        Z = self.X @ W
        sq = np.sum(Z * Z, axis=1)
        D2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * Z @ Z.T, 0.0)
        K = np.exp(-D2 / (2.0 * self.sigma2))
        return K, Z

    def __call__(self, W):
        """Objective value and gradient with respect to ``W`` (genes x components)."""
        K, Z = self.hsic(W)
        P = K * self.HLH
        f = -float(np.sum(P)) / self.norm
        # d sum(P)/dW = -(2 / sigma^2) X^T (diag(P 1) - P) Z
        G = P.sum(axis=1)[:, None] * Z - P @ Z
        grad = (2.0 / (self.sigma2 * self.norm)) * (self.X.T @ G)
        return f, grad


def _penalised(objective, d, q, lam):
    """Objective and gradient in the box variables v = [U (d*q), s (d)] with W = s o U.

    ``lam``: the penalty, a number or one value per row (0 for the unpenalised rows of forced genes)."""

    def fun(v):
        U = v[: d * q].reshape(d, q)
        s = v[d * q :]
        W = s[:, None] * U
        f, G = objective(W)
        g = np.empty_like(v)
        g[: d * q] = (s[:, None] * G).ravel()
        g[d * q :] = np.sum(U * G, axis=1) + lam
        return f + (lam * s.sum() if np.ndim(lam) == 0 else float(lam @ s)), g

    return fun


def _solve(objective, U, s, lam, *, maxiter, max_kkt_rounds, tol):
    d, q = U.shape
    fun = _penalised(objective, d, q, lam)
    bounds = [(-1.0, 1.0)] * (d * q) + [(0.0, None)] * d
    v = np.concatenate([U.ravel(), s])
    n_iter = 0
    kkt_rounds = 0
    res = None
    for kkt_rounds in range(max_kkt_rounds + 1):
        res = minimize(fun, v, jac=True, method="L-BFGS-B", bounds=bounds,
                       options=dict(maxiter=maxiter, ftol=tol, gtol=tol * 1e3, maxcor=10))
        n_iter += int(res.nit)
        v = res.x.copy()
        U = v[: d * q].reshape(d, q)
        s = v[d * q :]
        _, G = objective(s[:, None] * U)
        zero = s <= 0
        viol = zero & (np.abs(G).sum(axis=1) > lam * (1 + 1e-6))  # lam: a number or per row
        if not viol.any():
            break
        U = U.copy()
        U[viol] = -np.sign(G[viol])
        v[: d * q] = U.ravel()
    U = v[: d * q].reshape(d, q)
    s = v[d * q :]
    # converged: the last L-BFGS-B run converged and no zero row is left violating the optimality condition (an
    # earlier run that stopped short was continued by the next, so its status does not describe the result; rows
    # still violating it after max_kkt_rounds re-entries do: that solution is not an optimum of eq. (1))
    message = str(res.message)
    if viol.any():
        message += f"; {int(viol.sum())} zero row(s) still violate the optimality condition after {kkt_rounds} " \
                   "re-entry round(s)"
    return U, s, dict(success=bool(res.success) and not viol.any(), message=message, nit=n_iter,
                      kkt_rounds=kkt_rounds, objective=float(res.fun))


def _penalised_top(row, forced):
    """The largest row norm among the penalised rows (the zero threshold is relative to it)."""
    return row.max(initial=0.0) if forced is None else row[~forced].max(initial=0.0)


def _n_active(s, U, zero_tol, forced=None):
    """Row norms ||w_j||_inf and the number of non-zero penalised rows (forced rows are not counted)."""
    row = s * np.abs(U).max(axis=1)
    top = _penalised_top(row, forced)
    if top <= 0:
        return row, 0
    counted = row if forced is None else row[~forced]
    return row, int(np.count_nonzero(counted >= zero_tol * top))


def transform_select(objective, d, q, target, rng, *, zero_tol=0.01, maxiter=300, max_bisect=8, max_doublings=40,
                     max_kkt_rounds=3, tol=1e-9, n_init=3, factor=2.0, forced=None):
    """Raise lambda until ``target`` rows of W remain (section 6).

    ``forced`` (bool, d): rows of forced genes, left out of the penalty (they are in the panel whatever
    lambda is), never screened out and not counted in ``target``.

    The criteria are non-convex: the first (smallest) lambda is solved from ``n_init`` random
    starts and the lowest penalised objective is kept; every later lambda is warm-started from the
    last solution with more than ``target`` rows.  Screening: a row that is zero at lambda is
    left out of the problems at larger lambda (``objective.restrict``), which makes the path on
    10,000 genes cost little more than its first solve.

    Returns ``(W, row_norms, n_active, lambda)`` of the chosen solution (full d rows), the row
    norms at the first lambda, the largest lambda at which each row was non-zero, the path
    records and lambda_ref.
    """
    starts = [(rng.uniform(-1.0, 1.0, size=(d, q)), np.full(d, 1.0 / np.sqrt(d))) for _ in range(max(1, n_init))]
    U, s = starts[0]
    _, G0 = objective(s[:, None] * U)
    sensitivity = np.abs(G0).sum(axis=1)
    # a criterion flat in every gene (e.g. classes with identical values): the same refusal as for a zero relevance
    sigma2 = getattr(objective, "sigma2", None)  # HSFS: a bandwidth far from the z-scores' spread flattens it too
    if sigma2 is not None and not (sensitivity > ZERO_RELEVANCE).any() and not 1e-4 <= sigma2 <= 1e4:
        raise ValueError(f"{objective.name}: the Gaussian kernel of bandwidth sigma={np.sqrt(sigma2):.3g} on z-scored "
                         "genes is flat (every sample pair equally near, or equally far), so the criterion has no "
                         "gradient in any gene; use a sigma of the order of the genes' spread (0.1-10; default 1)")
    check_informative(objective.name, sensitivity)
    lam_ref = float(_penalised_top(sensitivity, forced))
    pen = np.ones(d) if forced is None else (~forced).astype(np.float64)
    path = []
    last_nonzero = np.full(d, -np.inf)  # largest lambda at which each row was non-zero

    def run(obj, cols, lam, U0, s0, record=True):
        # the competing random starts are only compared: no KKT re-entry rounds for them
        sub = None if forced is None else forced[cols]
        U1, s1, info = _solve(obj, U0, s0, lam if forced is None else lam * pen[cols], maxiter=maxiter,
                              max_kkt_rounds=max_kkt_rounds if record else 0, tol=tol)
        row_sub, k = _n_active(s1, U1, zero_tol, sub)
        row = np.zeros(d)
        row[cols] = row_sub
        if record:
            top = _penalised_top(row_sub, sub)
            active = cols[row_sub >= zero_tol * top] if top > 0 else cols[:0]
            last_nonzero[active] = np.maximum(last_nonzero[active], lam)
            path.append(dict(lam=float(lam), n_active=k, n_rows_solved=int(cols.size), **info))
        return dict(obj=obj, cols=cols, U=U1, s=s1, row=row, k=k, lam=float(lam), f=info["objective"])

    def first(lam):
        cols = np.arange(d)
        sols = [run(objective, cols, lam, U0, s0, record=False) for U0, s0 in starts]
        b = min(sols, key=lambda t: t["f"])
        return run(objective, cols, lam, b["U"], b["s"])  # converged start: a few iterations, recorded

    def screened(sol):
        """The solution restricted to its non-zero rows (objective, columns and variables)."""
        keep = sol["row"][sol["cols"]] >= zero_tol * _penalised_top(sol["row"], forced)
        if forced is not None:
            keep |= forced[sol["cols"]]
        if keep.all():
            return sol
        return dict(sol, obj=sol["obj"].restrict(np.flatnonzero(keep)), cols=sol["cols"][keep],
                    U=sol["U"][keep], s=sol["s"][keep])

    def result(sol):
        W = np.zeros((d, q))
        W[sol["cols"]] = sol["s"][:, None] * sol["U"]
        return W, sol["row"], sol["k"], sol["lam"]

    lam = 1e-3 * lam_ref
    lo = first(lam)
    steps = 0
    while lo["k"] < target and steps < 10:  # lambda_1 already removes too many rows: step down
        lam /= 10.0
        lo = first(lam)
        steps += 1
    first_row = lo["row"].copy()
    if lo["k"] == target:
        return result(lo), first_row, last_nonzero, path, lam_ref
    hi_lam = None
    for _ in range(max_doublings):  # double lambda until at most `target` rows survive (warm starts)
        base = screened(lo)
        cur = run(base["obj"], base["cols"], lo["lam"] * factor, base["U"], base["s"])
        if cur["k"] == target:
            return result(cur), first_row, last_nonzero, path, lam_ref
        if cur["k"] > target:
            lo = cur
        else:
            hi_lam = cur["lam"]
            break
    if hi_lam is not None:
        for _ in range(max_bisect):  # geometric bisection between the last two lambdas
            base = screened(lo)
            cur = run(base["obj"], base["cols"], np.sqrt(lo["lam"] * hi_lam), base["U"], base["s"])
            if cur["k"] == target:
                return result(cur), first_row, last_nonzero, path, lam_ref
            if cur["k"] > target:
                lo = cur
            else:
                hi_lam = cur["lam"]
    return result(lo), first_row, last_nonzero, path, lam_ref


def _transform_selector(method, X, y, *, n_genes, n_components, random_state, feature_names, make_objective,
                        zero_tol, maxiter, max_bisect, extra_params, preselected=None, make_scatter_objective=None):
    t0 = time.perf_counter()
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    warn_constant(constant, feature_names)
    # the classes in the labels' sorted order (numeric text by value), whatever their codes: the class sums of the
    # criteria then add up in one order on every face (int labels in select, their text in tl, the CLI or R), and
    # the non-convex path, which last-bit differences can steer to another panel, gets the same input
    rank = np.empty(classes.size, dtype=np.int64)
    rank[sorted_class_order(classes)] = np.arange(classes.size)
    y_codes = rank[y_codes]
    n, m = X.shape
    n_genes = check_n_genes(n_genes, m)
    P_all = resolve_preselected(preselected, m, feature_names, n_genes, constant)
    keep = np.flatnonzero(~constant)
    if keep.size == 0:
        raise ValueError("every gene is constant across samples; there is nothing to select")
    d = keep.size
    q = min(d, max(2, classes.size - 1)) if n_components is None else int(n_components)
    if not 1 <= q <= d:
        raise ValueError(f"n_components must lie in 1..{d} (the number of non-constant genes), got {n_components}")
    forced = np.isin(keep, P_all) if P_all.size else None
    n_forced = 0 if forced is None else int(forced.sum())
    if n_forced >= d:
        raise ValueError("every non-constant gene is preselected; nothing is left to select")
    # target counts the penalised rows: the panel minus the forced genes among them
    # without n_genes: a panel of DEFAULT_N_GENES, or one gene beyond the forced ones when more are forced (it was
    # DEFAULT_N_GENES - |P| < 0: lambda doubled until every row was 0 and the ranking came from tie-breaks)
    panel = n_genes if n_genes is not None else max(DEFAULT_N_GENES, P_all.size + 1)
    target = min(d - n_forced, panel - P_all.size)
    if not 0 < zero_tol < 1:
        raise ValueError(f"zero_tol must lie in (0, 1), got {zero_tol}")
    if make_scatter_objective is not None and n > d:  # LDFS: from S_T (d x d) and the class means
        # beside S_T and the path's d x q terms: the kept genes' copy (take_genes indexes a dense X always, a sparse
        # one when genes are dropped) and S_T's two standardised blocks at their narrowest (they widen to the memory)
        copy = X.dtype.itemsize * n * d if isinstance(X, np.ndarray) else \
            (12 * X.nnz if sp.issparse(X) and d < m else 0)
        memory_guard(8 * (2 * d * d + 12 * d * q) + copy + 2 * 8 * n * min(d, _corr.MIN_PRODUCT_BLOCK),
                     f"{method.upper()}'s {d} x {d} total scatter (q = {q}) from {n} samples",
                     ["genes", "components", "samples"])
        objective = make_scatter_objective(take_genes(X, keep), y_codes)
    else:
        memory_guard(8 * (n * d + 12 * d * q), f"{method.upper()} on {n} samples x {d} genes (q = {q})",
                     ["genes", "components"])
        if is_dask_array(X):  # no larger than S_T would be (HSFS: at most MAX_HSIC_SAMPLES samples, checked)
            X = compute(sample_chunked(X))
        objective = make_objective(_zscore(X[:, keep]), y_codes)
    rng = check_random_state(random_state)
    # every evaluation is a handful of small products: BLAS threads only add overhead (20x slower
    # measured on a loaded 2-core machine), so the path runs single-threaded
    with _threads.blas_limited(1):
        (W, row, k, lam), first_row, last_nonzero, path, lam_ref = transform_select(
            objective, d, q, target, rng, zero_tol=zero_tol, maxiter=maxiter, max_bisect=max_bisect, forced=forced)
    weights = np.zeros(m)
    weights[keep] = row
    F = np.zeros(m)
    F[keep] = first_row
    dropout = np.full(m, -np.inf)
    dropout[keep] = last_nonzero
    idx = keep
    order = rank_descending([weights[idx], dropout[idx], F[idx]], idx)
    ranking = forced_first(np.concatenate([idx[order], np.flatnonzero(constant)]), P_all)
    f_final, _ = objective(W)
    if k != target:
        warnings.warn(f"{method}: no lambda on the path left exactly {target} non-zero rows of W; "
                      f"using lambda={lam:.3g} with {k} rows and ranking them by ||w_j||_inf", UserWarning,
                      stacklevel=3)
    params = dict(n_genes=n_genes, n_components=q, target_genes=target, zero_tol=zero_tol, lam=float(lam),
                  maxiter=maxiter, standardize=True, **extra_params, **preselected_record(P_all, feature_names))
    diagnostics = dict(
        n_active=int(k), criterion=float(f_final), lam_ref=lam_ref, n_solves=len(path),
        path_lambda=[p["lam"] for p in path], path_n_active=[p["n_active"] for p in path],
        path_nit=[p["nit"] for p in path], path_rows_solved=[p["n_rows_solved"] for p in path],
        all_converged=all(p["success"] for p in path),
        n_constant=int(constant.sum()), n_classes=int(classes.size), seconds_total=time.perf_counter() - t0,
    )
    return Selection(method, weights, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics, relevance=F,
                     feature_names=None if feature_names is None else np.asarray(feature_names))


_DOC_COMMON = """
    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
        Expression; genes are z-scored inside (constant genes are left out and rank last).
    y : array-like, shape (n_samples,)
        Class labels.
    n_genes : int, optional
        Number of rows of W that must stay non-zero; lambda is raised until that many remain
        (default :data:`DEFAULT_N_GENES` for the search, or one more than the preselected genes when they are
        as many; the ranking always covers every gene).
    n_components : int, optional
        Columns q of W; default min(d, max(2, C - 1)).
    {extra}
    zero_tol : float
        A row is zero when ||w_j||_inf < zero_tol * max_j ||w_j||_inf (paper section 6: 0.01).
    maxiter : int
        L-BFGS-B iterations per lambda.
    max_bisect : int
        Bisection steps on lambda to hit ``n_genes`` exactly.
    preselected : sequence of str or int, optional
        Forced genes (names need ``feature_names``), ranked first in the given order.  Their rows of W are
        left out of the penalty, ``min_W J(XW) + lambda sum_{j not forced} ||w_j||_inf``: they are in the
        panel whatever lambda is, so the transformation uses them freely, and lambda is raised until
        ``n_genes - len(preselected)`` other rows remain -- the genes that add most to the criterion given
        the forced ones.  Their weight is their own ``||w_j||_inf``.
    {random_state}
        Seeds the random start U ~ U(-1, 1).
    feature_names : sequence of str, optional

    Returns
    -------
    Selection
        ``weights`` = ||w_j||_inf at the chosen lambda, ``ranking`` all genes, ``relevance`` =
        ||w_j||_inf at the first (smallest) lambda; ``diagnostics`` hold the lambda path, and ``all_converged``:
        whether every solve on it ended at an optimum (its last L-BFGS-B run converged within ``maxiter`` and left
        no zero row violating the optimality condition, re-entries included; rows screened out at a smaller
        lambda are not checked, see the module docstring).  The ranking is the
        panel by weight, then the other genes by the lambda at which their row last stayed non-zero on the
        path (later first), genes that left at the same lambda by ``relevance``.  That tie-break is not unique:
        near lambda = 0 the criterion is almost flat along W -> W A, so ||w_j||_inf there depends on the last
        bits of the input (another CPU's BLAS kernels, a Dask X's chunked sums) and so may the order of those
        genes; the panel does not, and its weights agree to the L-BFGS-B tolerance.
"""


@parameter_constraints(n_components=Interval("integer", none=True), maxiter=Interval("integer"),
                       max_bisect=Interval("integer"))
def ldfs(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, n_components: int | None = None,
         gamma: float = 1.0, zero_tol: float = 0.01, maxiter: int = 500, max_bisect: int = 8,
         preselected: Sequence[str | int] | None = None, random_state: SeedLike = 0,
         feature_names: Sequence[str] | None = None) -> Selection:
    """Linear Discriminant Feature Selection (Masaeli et al. 2010, section 4, eq. 4-7).

    min_W -tr((W^T S_T W + gamma I)^{-1} W^T S_B W) + lambda sum_j ||w_j||_inf; see the module
    docstring for why the trace criterion is used in this S_T, ridge-regularised form.
    """
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    return _transform_selector(
        "ldfs", X, y, n_genes=n_genes, n_components=n_components, random_state=random_state,
        feature_names=feature_names, make_objective=lambda Xs, yc: LDAObjective(Xs, yc, gamma),
        zero_tol=zero_tol, maxiter=maxiter, max_bisect=max_bisect, extra_params=dict(gamma=float(gamma)),
        preselected=preselected, make_scatter_objective=lambda X, yc: scatter_lda_objective(X, yc, gamma))


@parameter_constraints(n_components=Interval("integer", none=True), maxiter=Interval("integer"),
                       max_bisect=Interval("integer"))
def hsfs(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, n_components: int | None = None,
         sigma: float = 1.0, zero_tol: float = 0.01, maxiter: int = 500, max_bisect: int = 8,
         preselected: Sequence[str | int] | None = None, random_state: SeedLike = 0,
         feature_names: Sequence[str] | None = None) -> Selection:
    """Hilbert-Schmidt Feature Selection (Masaeli et al. 2010, section 5, eq. 8-11).

    min_W -HSIC(XW, Y) / HSIC(Y, Y) + lambda sum_j ||w_j||_inf, Gaussian kernel of bandwidth
    ``sigma`` on XW (z-scored genes), delta kernel on the labels.  Needs n x n memory: refused
    beyond :data:`MAX_HSIC_SAMPLES` samples (subsample, as the paper did above 1,000).
    """
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    n = np.shape(X)[0]
    check_hsic_samples(n)
    memory_guard(6 * 8 * n * n, f"HSFS kernel matrices for {n} samples", ["samples"])
    return _transform_selector(
        "hsfs", X, y, n_genes=n_genes, n_components=n_components, random_state=random_state,
        feature_names=feature_names, make_objective=lambda Xs, yc: HSICObjective(Xs, yc, sigma),
        zero_tol=zero_tol, maxiter=maxiter, max_bisect=max_bisect, extra_params=dict(sigma=float(sigma)),
        preselected=preselected)


append_doc(ldfs, _DOC_COMMON, random_state=RANDOM_STATE_DOC, extra="""gamma : float
    Ridge on W^T S_T W (units: variance of one z-scored gene); fixes the scale of W.
""")
append_doc(hsfs, _DOC_COMMON, random_state=RANDOM_STATE_DOC, extra="""sigma : float
    Gaussian kernel bandwidth in the projected space (default 1; see the module docstring).
""")
