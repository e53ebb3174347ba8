"""QPFS + Nystrom (Rodriguez-Lujan et al. 2010, section 2.2-2.3): the QP from ``ceil(p M)`` sampled rows of Q.

The selector side of ``bioqpfs.qpfs(..., nystrom_rate=p)``: the sampled rows of the redundancy, the low-rank
eigenpairs and the error estimate of :mod:`bioqpfs._kernels.nystrom` (shared with SPEC_CMI + Nystrom), and the
QP either in the k~-dimensional subspace as published (eq. 5) or in x-space on the low-rank factors.  Forced
genes enter both as in :func:`bioqpfs.selectors._qp.solve_qpfs`.
"""
from __future__ import annotations

import time

import numpy as np

from .._kernels import correlation as _corr
from .._kernels import information as _info
from .._kernels import nystrom as _nys
from .._kernels import simplex_qp
from .._validation import memory_guard
from ._qp import WEIGHT_TOL, alpha_from_means, finite_weights

__all__ = ["nystrom_qpfs", "NYSTROM_QPS", "NYSTROM_SUBSPACE_MAX"]

NYSTROM_QPS = ("auto", "subspace", "lowrank")
#: nystrom_qp="auto" solves the published subspace QP (quadprog in k~ variables) up to this k~ and the
#: low-rank x-space QP beyond: quadprog measured 2.3 s at k~=100 and 15 s at k~=300 with all
#: M=20,000 constraints, and its cost grows ~k~^3 (5.7 s at k~=700 with only 800 constraints)
NYSTROM_SUBSPACE_MAX = 300


def _solve_subspace(lam, U, F, alpha, P, s, *, max_rounds=50):
    """Eq. 5 in the k~-dimensional subspace with quadprog: y minimises
    1/2 (1-alpha) y^T Lambda y - alpha F^T U y  s.t.  U y >= 0 (M rows), 1^T U y = 1, plus
    U_P y = s/|P| for forced genes.

    At most k~ of the M inequalities can be active, so they are passed to quadprog by constraint
    generation: the genes most likely to hit zero first, then every violated one, until U y >= 0
    holds for all genes (to 1e-12 of max |U y|); the result is the optimum of the full problem.
    quadprog's cost grows with the number of constraints it scans, so this is much faster for
    M >> k~.  Returns ``(y, rounds)``, y None if the constraints are inconsistent.
    """
    import quadprog

    k = lam.size
    G = np.diag((1.0 - alpha) * lam)
    G[np.diag_indices(k)] += 1e-12 * max(1e-300, float(G.max()))
    a = alpha * (U.T @ F)
    R = np.setdiff1d(np.arange(U.shape[0]), P)
    eq = [U.sum(axis=0)[:, None]]
    b_eq = [1.0]
    if P.size:
        eq.append(U[P].T)
        b_eq.extend([s / P.size] * P.size)
    Ceq = np.hstack(eq)
    b_eq = np.asarray(b_eq)
    meq = Ceq.shape[1]
    # start: the genes with the smallest value at the equality-only optimum
    try:
        y0, *_ = quadprog.solve_qp(G, a, np.ascontiguousarray(Ceq), b_eq, meq=meq)
    except ValueError:
        return None, 0
    x0 = U[R] @ y0
    work = R[np.argsort(x0, kind="stable")[: min(R.size, 2 * k + 50)]]
    for rounds in range(1, max_rounds + 1):
        C = np.ascontiguousarray(np.hstack([Ceq, U[work].T]))
        b = np.concatenate([b_eq, np.zeros(work.size)])
        try:
            y, *_ = quadprog.solve_qp(G, a, C, b, meq=meq)
        except ValueError:  # "constraints are inconsistent, no solution"
            return None, rounds
        xr = U[R] @ y
        bad = R[xr < -1e-12 * max(np.abs(xr).max(), 1e-300)]
        bad = np.setdiff1d(bad, work)
        if bad.size == 0:
            return y, rounds
        work = np.union1d(work, bad)
    return y, max_rounds


def nystrom_qpfs(X, y_codes, F, table, *, similarity, base, rate, eig_threshold, nystrom_qp, alpha, rng,
                  P, share, psd_fix, n_error_rows=50):
    """QPFS+Nystrom, steps 2-7 of section 2.3 (the rows of Q are computed here; the M x M matrix never is).

    Parameters
    ----------
    X : ndarray or sparse, shape (n_samples, M)
        The genes in the QP (for the |Pearson| rows).
    y_codes : ndarray of int
        Class codes (unused by the rows; kept for the caller's symmetry with the exact path).
    F : ndarray, shape (M,)
        Relevance.
    table : CodeTable or None
        The codes for the MI rows (``similarity="mi"``).
    similarity, base : as in :func:`bioqpfs.qpfs`
    rate, eig_threshold, nystrom_qp : as ``nystrom_rate``, ``eig_threshold``, ``nystrom_qp`` of :func:`bioqpfs.qpfs`
    alpha : float or None
        None: alpha_hat of eq. 9 from the mean of Q_hat.
    rng : numpy.random.Generator
        Draws the sampled rows, then the error rows.
    P : ndarray of int
        Forced genes (positions in X); ``share`` their total weight (as :func:`bioqpfs.selectors._qp.solve_qpfs`).
    psd_fix : str
        The requested fix, only recorded (``psd_fix_requested`` unless "shift"): Q_hat is PSD by construction.
    n_error_rows : int
        Unsampled rows computed exactly for :func:`bioqpfs._kernels.nystrom.error_estimate`.

    Returns
    -------
    tuple
        ``(x, alpha_used, alpha_hat, q_bar, f_bar, diagnostics)``.
    """
    m = F.size
    t0 = time.perf_counter()
    rows = _nys.sample_rows(m, rate, rng)

    def q_rows(idx):
        if similarity == "mi":
            return _info.pairwise_information(table, None, "mi", rows=idx, base=base, dtype=np.float64)
        return _corr.abs_pearson(X, rows=idx, dtype=np.float64)

    # the peak is the error estimate's: the r sampled rows C, U and U diag(lam) (M x k, k <= r), the exact error
    # rows and three float64 temporaries of a block of min(r, ROW_BLOCK) rows (error_estimate); counted as 3 r M
    # before, 0.27 GiB against a 0.43 GiB peak (r = 772 of 15,433 genes)
    r_blk = min(rows.size, _nys.ROW_BLOCK)
    memory_guard(8 * m * (3 * rows.size + 4 * n_error_rows + 3 * r_blk), f"Nystrom with {rows.size} of {m} rows",
                 ["lower_nystrom"])
    C = q_rows(rows)
    t_rows = time.perf_counter() - t0
    # negative_floor: positive eigenvalues of an indefinite A below |its most negative one| are
    # noise and would blow up B^T A^-1 B (see nystrom_eigh); the published method assumes PSD Q
    lam, U, ninfo = _nys.nystrom_eigh(C, rows, eig_threshold=eig_threshold, negative_floor=True)
    # eq. 9: mean of Q_hat = [[A, B], [B^T, B^T A^-1 B]] = C^T A^+ C (all of it, before the delta
    # cut), with A^-1 read as the pseudo-inverse on A's positive eigenspace (= A^-1 for PD A)
    a_hat, q_bar, f_bar = alpha_from_means(ninfo["sum_Q_hat"] / m ** 2, float(np.mean(F)))
    alpha_used = a_hat if alpha is None else float(alpha)
    k = int(lam.size)
    t_eig = time.perf_counter() - t0 - t_rows
    if k == 0:
        raise ValueError(f"no Nystrom eigenvalue exceeds eig_threshold={eig_threshold}; lower it or raise nystrom_rate")
    used = nystrom_qp
    if nystrom_qp == "auto":
        used = "subspace" if k <= NYSTROM_SUBSPACE_MAX else f"lowrank (auto: k~={k} > {NYSTROM_SUBSPACE_MAX})"
    if used == "subspace" and alpha_used >= 1.0:  # no quadratic term: the exact LP over the whole simplex
        used = "lowrank (alpha=1: linear program)"
    y = None
    rounds = 0
    t1 = time.perf_counter()
    if used == "subspace":
        y, rounds = _solve_subspace(lam, U, F, alpha_used, P, share)
        if y is None:
            used = "lowrank (subspace constraints inconsistent)"
    if y is not None and not np.isfinite(y).all():
        y, used = None, "lowrank (subspace QP failed numerically)"
    if y is not None:
        x = np.maximum(U @ y, 0.0)
        x[x < WEIGHT_TOL * x.sum()] = 0.0
        if P.size:
            x[P] = 0.0
            R = np.setdiff1d(np.arange(m), P)
            x[R] *= (1.0 - share) / x[R].sum()
            x[P] = share / P.size
        else:
            x /= x.sum()
        sol = dict(solver="quadprog (subspace)", iterations=rounds, polish_iterations=0, converged=True, local=False)
    else:
        # the same Q_hat in x-space: G = (1 - alpha) U Lambda U^T (+ a 1e-9 ridge for a unique optimum)
        if P.size:
            R = np.setdiff1d(np.arange(m), P)
            u = np.full(P.size, 1.0 / P.size)
            Gl = simplex_qp.QPMatrix(U=U[R], w=(1.0 - alpha_used) * (1.0 - share) * lam)
            a = alpha_used * F[R] - (1.0 - alpha_used) * share * (U[R] @ (lam * (U[P].T @ u)))
        else:
            R = np.arange(m)
            Gl = simplex_qp.QPMatrix(U=U, w=(1.0 - alpha_used) * lam)
            a = alpha_used * F
        ridge = 1e-9 * max(1e-300, float(np.max(Gl.diagonal())))
        z, sol = simplex_qp.solve_spg(Gl.with_shift(ridge), a)
        z = finite_weights(z, sol["solver"])
        x = np.zeros(m)
        if P.size:
            x[R] = (1.0 - share) * z
            x[P] = share / P.size
        else:
            x = z
    t_solve = time.perf_counter() - t1
    # ||Q - Q_hat||_F: sampled rows exactly, unsampled rows estimated from a random sample of them
    err_rows = _nys.error_rows(m, rows, n_error_rows, rng)
    err = _nys.error_estimate(C, rows, q_rows(err_rows) if err_rows.size else C[:0], err_rows, U, lam)
    xq = U.T @ x
    objective_hat = float(0.5 * (1.0 - alpha_used) * xq @ (lam * xq) - alpha_used * F @ x)
    diag = dict(
        nystrom_rate=float(rate), r=int(rows.size), k_tilde=k, eig_threshold=float(eig_threshold),
        gamma_bound=float((m + 1) * (m - k) * eig_threshold / 2.0),
        **err, nystrom_rank_A=ninfo["rank_A"], nystrom_A_negative=ninfo["dropped_A_negative"],
        nystrom_qp=used, psd_fix="nystrom", psd_fix_applied="negative eigenvalues of A dropped (Q_hat is PSD)",
        objective_nystrom=objective_hat, seconds_rows=t_rows, seconds_eigen=t_eig, seconds_qp=t_solve,
        solver=sol["solver"], iterations=sol["iterations"], polish_iterations=sol["polish_iterations"],
        converged=bool(sol["converged"]), local=False, n_nonzero=int(np.count_nonzero(x)),
    )
    if psd_fix != "shift":
        diag["psd_fix_requested"] = psd_fix
    return x, alpha_used, a_hat, q_bar, f_bar, diag

