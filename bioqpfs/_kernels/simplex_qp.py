"""Simplex-constrained QP:  min 1/2 x^T G x - a^T x  s.t.  x >= 0, sum(x) = 1.

Three solvers.

``quadprog``
    Goldfarb--Idnani dual active-set method (the solver of the QPFS paper, section 2.5): O(M^3)
    time, several dense M x M arrays, needs G positive definite (an indefinite G is first convexified by the caller's psd fix,
    :mod:`bioqpfs._kernels.psd`; the shift is the lambda I of eq. 13 in Nguyen et al. 2014).

``spg`` (large scale, :func:`solve_spg`)
    Needs only products of G with *sparse* vectors and small principal blocks ``G[S, S]``, so G
    may be dense (float32 or float64), low rank ``U diag(w) U^T``, or a sum of such terms plus
    ``shift * I`` (:class:`QPMatrix`); it never forms anything M x M itself.

    1. *Spectral projected gradient* (Birgin, Martinez & Raydan 2000) with the exact Euclidean
       projection onto the simplex (sort based, O(M log M); Held et al. 1974, Duchi et al. 2008),
       Barzilai--Borwein steps and, because the objective is quadratic, an exact line search
       along the projected direction.  Every direction ``d`` is supported on ``supp(x) U
       supp(P(x - s g))``, which is small for QPFS (the optimum is sparse), so ``G d`` costs
       O(M |supp d|) and the gradient is updated incrementally (``g += t G d``).  BB steps adapt
       to the curvature on the current support; a fixed 1/L step (FISTA) would use
       L = lambda_max(G) ~ M q_bar, hundreds of times too short for a support of a few hundred genes.
    2. *Active-set polish* (primal active-set method, Nocedal & Wright 2006, section 16.5) from
       the support S of the SPG iterate: solve the equality-constrained QP on S exactly
       (KKT system ``[[G_SS, 1], [1^T, 0]]``); if the solution leaves the simplex take the
       blocking step and drop the blocking genes; otherwise check the multipliers
       ``g_i - nu >= 0`` off the support and add the most violating genes.  For convex G this
       terminates at the exact optimum (round-off level), which is why the result agrees with
       quadprog to 1e-8 in the objective and 1e-6 in the weights.

    With an indefinite G (``psd_fix="none"``) step 1 converges to a stationary point (KKT point) of
    the non-convex QP; the polish then only accepts exact face solutions that lower the objective,
    and the result is reported as ``local=True``.

``active_set`` (:func:`solve_active_set`, the default beyond :data:`QUADPROG_AUTO_MAX` genes)
    Step 2 alone, started from the best vertex: the working set grows from one gene by the worst
    KKT violators, so the cost follows the support of the solution (dense solves on the working set,
    one product with |S| rows of G per step) instead of M x |supp| per SPG iteration times thousands of
    iterations.  For convex G the Cholesky factor of ``G[S, S]`` is kept along the steps and updated
    as genes join and leave (:class:`_FaceFactor`), so the whole solve costs about one factorisation
    of the final working set: the default recipe's class QPs (supports of 1,800-4,300 genes) 2.5-3x
    faster than factoring every step anew (``benchmarks/bench_qpfs.py --face-factor``).  With an
    indefinite G, faces of negative curvature are left along it, so the result is a local minimum.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla
from numba import njit

from .. import _device, _progress, _threads
from .._jit import skip_failed_cache_writes

__all__ = ["solve_quadprog", "solve_spg", "solve_active_set", "solve", "SOLVERS", "ACTIVE_SET_MAX_SUPPORT",
           "solve_linear", "is_linear", "kkt_residual",
           "objective", "project_simplex", "QPMatrix", "smallest_eigenvalue", "QUADPROG_AUTO_MAX"]

#: ``solver="auto"`` uses quadprog up to this many variables.  Measured on random gene subsets of
#: the raw SRBCT MI matrix (shift fix, solve only, 2 shared cores): quadprog 0.05 / 0.07 / 0.24 /
#: 0.48 / 3.4 / 8.5 / 30 s at M = 100 / 200 / 300 / 500 / 1,000 / 1,500 / 2,308 against spg
#: 0.04 / 0.08 / 0.04 / 0.04 / (1.1, 2.1, 2.8 s incl. the eigenvalue) ; they break even near M ~ 200-300.
QUADPROG_AUTO_MAX = 300
#: the solver names :func:`solve` accepts
SOLVERS = ("auto", "quadprog", "active_set", "spg")
#: the active-set solver factors ``G[S, S]`` densely (|S|^2 memory, about |S|^3 flops over the whole solve with the
#: kept factor); beyond this working set it hands over to spg (see :func:`solve_active_set`)
ACTIVE_SET_MAX_SUPPORT = 5000
_ROW_CHUNK = 256
#: working sets of up to this many genes are factored anew when genes join them (:class:`_FaceFactor`): the two calls
#: of a new factorisation cost less than the five of an update there (the default recipe's class QPs, all steps:
#: 3,000 cells x 800 genes 19.0 ms updating at every size, 15.4 ms from 200; 100 x 500 4.4 / 3.1 ms; 2 cores)
FACE_FACTOR_ANEW_MAX = 200


class QPMatrix:
    """``G = scale * Q + U diag(w) U^T + shift * I`` without forming the sum.

    Any of the terms may be absent.  ``Q`` is a dense symmetric array (float32 storage is fine:
    products are done in float64 on the columns they touch); ``U`` is M x k.
    """

    def __init__(self, Q=None, *, scale=1.0, U=None, w=None, shift=0.0, n=None, index=None):
        self.Q = Q
        self.index = None if index is None else np.asarray(index, dtype=np.int64)
        self.scale = float(scale)
        self.U = None if U is None else np.asarray(U, dtype=np.float64)
        self.w = None if w is None else np.asarray(w, dtype=np.float64)
        self.shift = float(shift)
        if Q is not None:
            self.n = Q.shape[0] if self.index is None else self.index.size
        elif U is not None:
            self.n = self.U.shape[0]
        else:
            self.n = int(n)

    def with_shift(self, extra):
        return QPMatrix(self.Q, scale=self.scale, U=self.U, w=self.w, shift=self.shift + extra, n=self.n, index=self.index)

    def with_lowrank(self, U, w):
        """Add ``U diag(w) U^T`` to the low-rank term."""
        U = np.asarray(U, dtype=np.float64)
        if self.U is not None:
            U = np.hstack([self.U, U])
            w = np.concatenate([self.w, w])
        return QPMatrix(self.Q, scale=self.scale, U=U, w=np.asarray(w, dtype=np.float64), shift=self.shift, n=self.n,
                        index=self.index)

    def dot_sparse(self, idx, vals):
        """``G[:, idx] @ vals`` in float64, O(M |idx|)."""
        out = np.zeros(self.n)
        if idx.size == 0:
            return out
        if self.Q is not None:
            # Q is symmetric: rows are contiguous, columns are not
            gidx = idx if self.index is None else self.index[idx]
            acc = np.zeros(self.Q.shape[0])
            for c0 in range(0, gidx.size, _ROW_CHUNK):  # float64 copies of at most _ROW_CHUNK rows
                rows = np.asarray(self.Q[gidx[c0:c0 + _ROW_CHUNK]], dtype=np.float64)
                acc += rows.T @ vals[c0:c0 + _ROW_CHUNK]
            out += self.scale * (acc if self.index is None else acc[self.index])
        if self.U is not None:
            out += self.U @ (self.w * (self.U[idx].T @ vals))
        if self.shift:
            out[idx] += self.shift * vals
        return out

    def dot(self, x):
        idx = np.flatnonzero(x)
        return self.dot_sparse(idx, x[idx])

    def block(self, idx):
        """The principal block ``G[idx][:, idx]`` (float64)."""
        B = np.zeros((idx.size, idx.size))
        if self.Q is not None:
            gi = idx if self.index is None else self.index[idx]
            B += self.scale * np.asarray(self.Q[np.ix_(gi, gi)], dtype=np.float64)
        if self.U is not None:
            Ui = self.U[idx]
            B += (Ui * self.w) @ Ui.T
        if self.shift:
            B[np.diag_indices(idx.size)] += self.shift
        return 0.5 * (B + B.T)

    def cross_block(self, rows, cols):
        """The block ``G[rows][:, cols]`` for disjoint index sets (float64; the shift touches no entry in it).

        Read as the transpose of ``Q[cols][:, rows]``: few rows (the genes joining a working set) read whole
        are twice as fast to gather as many rows cut to a few columns.  Q is symmetric; where it is so only to
        round-off (a GEMM product) this is the block of ``Q^T``, as :meth:`dot_sparse` reads it too."""
        B = np.zeros((rows.size, cols.size))
        if self.Q is not None:
            gr, gc = (rows, cols) if self.index is None else (self.index[rows], self.index[cols])
            B += self.scale * np.asarray(self.Q[np.ix_(gc, gr)], dtype=np.float64).T
        if self.U is not None:
            B += (self.U[rows] * self.w) @ self.U[cols].T
        return B

    def diagonal(self):
        d = np.full(self.n, self.shift)
        if self.Q is not None:
            dq = np.asarray(np.diagonal(self.Q), dtype=np.float64)
            d += self.scale * (dq if self.index is None else dq[self.index])
        if self.U is not None:
            d += np.einsum("ij,j,ij->i", self.U, self.w, self.U)
        return d

    def dense(self):
        """Materialise G (only for small problems, e.g. to hand to quadprog)."""
        G = np.zeros((self.n, self.n))
        if self.Q is not None:
            Qs = self.Q if self.index is None else self.Q[np.ix_(self.index, self.index)]
            G += self.scale * np.asarray(Qs, dtype=np.float64)
        if self.U is not None:
            G += (self.U * self.w) @ self.U.T
        G[np.diag_indices(self.n)] += self.shift
        return 0.5 * (G + G.T)

    def linear_operator(self):
        """G as a scipy ``LinearOperator`` (float64 vectors) for Lanczos.

        The products with Q run on the GPU when :func:`bioqpfs._device.products_on_gpu` says so for Q's size
        (``backend="gpu"``; ``"auto"`` with a device from :data:`~bioqpfs._device.AUTO_GPU_CELLS` entries) and a
        copy of Q fits in half the device's free memory: Q is copied there once, and each product moves one
        vector each way.  The product is the same float32 / float64 product as on the CPU, rounded differently
        in its last bits.  The operator's ``device`` attribute says where the products ran (``"gpu"`` or
        ``"cpu"``).
        """
        import scipy.sparse.linalg as ssl

        Q_device = None if self.Q is None else _device.matrix_on_gpu(self.Q)
        if Q_device is None:
            q_product = None if self.Q is None else self.Q.__matmul__
        else:
            xp = _device.array_module()

            def q_product(x):
                return _device.to_host(Q_device @ xp.asarray(x))

        def mv(v):
            v = np.asarray(v, dtype=np.float64).ravel()
            out = self.shift * v
            if self.Q is not None:
                if self.index is None:
                    out = out + self.scale * q_product(v.astype(self.Q.dtype)).astype(np.float64)
                else:
                    full = np.zeros(self.Q.shape[0], dtype=self.Q.dtype)
                    full[self.index] = v
                    out = out + self.scale * q_product(full)[self.index].astype(np.float64)
            if self.U is not None:
                out = out + self.U @ (self.w * (self.U.T @ v))
            return out

        op = ssl.LinearOperator((self.n, self.n), matvec=mv, dtype=np.float64)
        op.device = "cpu" if Q_device is None else "gpu"
        return op


def _as_matrix(G):
    return G if isinstance(G, QPMatrix) else QPMatrix(np.asarray(G))


def objective(G, a, x):
    G = _as_matrix(G)
    return float(0.5 * x @ G.dot(x) - a @ x)


def smallest_eigenvalue(G, *, dense_max=500, tol=None, return_info=False):
    """Smallest eigenvalue of symmetric G.

    LAPACK syevr restricted to one eigenvalue when G is a small ndarray; Lanczos (ARPACK
    ``eigsh(which="SA")``, 40 Lanczos vectors) on products otherwise: measured 0.4 s at M = 1,000
    against 4-13 s for the LAPACK subset call on the shared machine.  ``tol`` (relative) defaults
    to 1e-10 up to 5,000 genes and 1e-5 beyond, where every product reads the whole Q; if ARPACK
    stops before converging (at most 12 restarts, ~470 products, beyond 5,000 genes) the best Ritz
    value is used and ``converged=False`` reported.  A Ritz value is never below the true
    lambda_min, so callers that shift by it add a relative safety factor.  With ``return_info`` a
    dict (``method``, ``converged``, ``tol``, ``matvecs``) is returned too.
    """
    if not isinstance(G, QPMatrix) and G.shape[0] <= dense_max:
        lam = float(sla.eigh(G, eigvals_only=True, subset_by_index=[0, 0], check_finite=False)[0])
        info = dict(method="lapack", converged=True, tol=0.0, matvecs=0)
        return (lam, info) if return_info else lam
    import scipy.sparse.linalg as ssl

    op = _as_matrix(G)
    if tol is None:
        tol = 1e-10 if op.n <= 5000 else 1e-5
    lin = op.linear_operator()
    count = [0]

    def mv(v):
        count[0] += 1
        return lin.matvec(v)

    A = ssl.LinearOperator((op.n, op.n), matvec=mv, dtype=np.float64)
    v0 = np.ones(op.n) / np.sqrt(op.n)
    converged = True
    with _threads.blas_limited(1):
        try:
            lam = float(ssl.eigsh(A, k=1, which="SA", tol=tol, v0=v0, ncv=min(op.n - 1, 40),
                                  maxiter=100 if op.n <= 5000 else 12, return_eigenvectors=False)[0])
        except ssl.ArpackNoConvergence as e:
            converged = False
            lam = float(np.min(e.eigenvalues)) if len(e.eigenvalues) else float("nan")
    info = dict(method="lanczos", converged=converged, tol=float(tol), matvecs=int(count[0]), device=lin.device)
    if not np.isfinite(lam):  # ARPACK stopped without a single Ritz value: the dense solve, if it fits
        lam = _dense_smallest_eigenvalue(op, info)
    return (lam, info) if return_info else lam


#: bytes of the dense copy of G up to which a Lanczos run that ends without any Ritz value falls back to LAPACK
DENSE_FALLBACK_BYTES = 2 * 2**30


def dense_copy_fits(n, max_bytes):
    """Whether a dense float64 n x n copy fits: at most ``max_bytes`` and a quarter of the available memory."""
    from .._validation import available_memory

    return 8 * n * n <= min(max_bytes, available_memory()[0] // 4)


def _dense_smallest_eigenvalue(op, info):
    """lambda_min of the QPMatrix ``op`` by LAPACK (syevr, one eigenvalue) on its dense copy, after a Lanczos run
    that gave none; ``info`` is updated (``method="lapack"``).  A matrix too large for a dense copy is an error
    that says what to do, never a NaN eigenvalue (a NaN would turn the psd shift silently into none)."""
    n_bytes = 8 * op.n * op.n
    if not dense_copy_fits(op.n, DENSE_FALLBACK_BYTES):
        raise RuntimeError(f"the smallest eigenvalue of the {op.n} x {op.n} QP matrix did not converge "
                           f"({info['matvecs']} Lanczos products, no Ritz value) and a dense solve would need "
                           f"{n_bytes / 2**30:.1f} GiB; use psd_fix='clip' or fewer genes (e.g. a variance filter)")
    lam = float(sla.eigh(op.dense(), eigvals_only=True, subset_by_index=[0, 0], check_finite=False)[0])
    info.update(method="lapack", converged=True, tol=0.0)
    return lam


#: the quadratic term counts as absent when every entry of G is at most this times max|a| (or is 0)
LINEAR_REL_TOL = 1e-12


def is_linear(G, a, *, rel_tol=LINEAR_REL_TOL):
    """True when the quadratic term is negligible: every entry of G is <= ``rel_tol * max|a|`` in size.

    This is QPFS at alpha = 1 (``(1 - alpha) Q = 0``, possibly plus a round-off margin), or an all-zero Q.
    The diagonal is checked first (cheap); only when it vanishes are the off-diagonal entries read.
    """
    G = _as_matrix(G)
    a = np.asarray(a, dtype=np.float64)
    thr = rel_tol * (float(np.max(np.abs(a))) if a.size else 0.0)
    if G.n == 0 or float(np.max(np.abs(G.diagonal()))) > thr or abs(G.shift) > thr:
        return False
    bound = abs(G.shift)
    if G.Q is not None and G.scale != 0.0:
        Qs = G.Q if G.index is None else G.Q[np.ix_(G.index, G.index)]
        bound += abs(G.scale) * max(float(np.max(Qs)), -float(np.min(Qs)))
    if G.U is not None and G.U.size:
        bound += float(np.sum(np.abs(G.w))) * float(np.max(G.U ** 2))  # |U diag(w) U^T|_ij <= sum|w| max U^2
    return bound <= thr


def solve_linear(a, *, rel_tol=LINEAR_REL_TOL):
    """Exact solution of the linear program ``max a^T x`` on the simplex (the QP with G = 0).

    The optimum is any point of the face spanned by the maximisers of ``a``; the one returned spreads
    the weight equally over them (the ties are ``a_i >= max(a) - rel_tol * max|a|``), which is also the
    limit of the QP with a vanishing ridge ``G = eps I`` and therefore independent of the solver.
    Returns ``(x, info)`` as :func:`solve`.
    """
    a = np.asarray(a, dtype=np.float64)
    top = float(np.max(a))
    ties = a >= top - rel_tol * float(np.max(np.abs(a)))
    x = ties / float(ties.sum())
    return x, dict(solver="linear (no quadratic term)", iterations=0, polish_iterations=0,
                   kkt_residual=float(_kkt_from_gradient(-a, x)), objective=float(-a @ x), converged=True,
                   local=False, n_nonzero=int(ties.sum()))


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


def _kkt_from_gradient(g, x):
    support = x > 1e-12 * max(1.0, x.max())
    nu = float(np.median(g[support])) if support.any() else float(g.min())
    stat = np.abs(g[support] - nu).max(initial=0.0)
    dual = np.maximum(nu - g[~support], 0.0).max(initial=0.0)
    return max(stat, dual, abs(x.sum() - 1.0), max(0.0, -x.min()))


def kkt_residual(G, a, x):
    """Max violation of the simplex-QP KKT conditions at x.

    With gradient g = Gx - a and nu = the multiplier of sum(x) = 1 (estimated on the support),
    optimality means g_i = nu where x_i > 0 and g_i >= nu elsewhere.  ``G`` may be an ndarray or a
    :class:`QPMatrix`.
    """
    g = (G.dot(x) if isinstance(G, QPMatrix) else G @ x) - a
    return _kkt_from_gradient(g, x)


def project_simplex(v):
    """Euclidean projection of v onto {x >= 0, sum x = 1} (sort based, O(M log M)).

    ``x_i = max(v_i - tau, 0)`` with ``tau = (sum_{j<=rho} u_j - 1) / rho`` for ``u`` = v sorted
    decreasingly and ``rho`` the largest j with ``u_j > (sum_{i<=j} u_i - 1) / j`` (Held, Wolfe &
    Crowder 1974; Duchi et al. 2008, Fig. 1).
    """
    v = np.asarray(v, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    j = np.arange(1, v.size + 1)
    rho = np.flatnonzero(u - css / j > 0)[-1]
    tau = css[rho] / (rho + 1)
    return np.maximum(v - tau, 0.0)


def _solve_face(B, a, S):
    """Minimiser of 1/2 z^T B z - a_S^T z subject to sum z = 1 (B = G_SS); returns (z, nu).

    With B positive definite by one Cholesky factorisation (k^3/3 flops): ``z = B^-1 (a_S - mu 1)``
    with ``mu`` fixed by ``sum z = 1``, and ``nu = -mu`` is the common gradient value on S.  Otherwise
    (singular or indefinite B) by the LU of the KKT system ``[[B, 1], [1^T, 0]]`` (least squares when
    that is singular too).
    """
    k = S.size
    rhs = a[S]
    try:
        c = sla.cho_factor(B, check_finite=False)
        w = sla.cho_solve(c, np.column_stack([rhs, np.ones(k)]), check_finite=False)
        mu = (w[:, 0].sum() - 1.0) / w[:, 1].sum()
        z = w[:, 0] - mu * w[:, 1]
        if np.all(np.isfinite(z)):
            return z, -mu
    except (np.linalg.LinAlgError, ZeroDivisionError, FloatingPointError):
        pass
    K = np.zeros((k + 1, k + 1))
    K[:k, :k] = B
    K[:k, k] = 1.0
    K[k, :k] = 1.0
    rhs = np.concatenate([rhs, [1.0]])
    try:
        sol = np.linalg.solve(K, rhs)
        if not np.all(np.isfinite(sol)):
            raise np.linalg.LinAlgError
    except np.linalg.LinAlgError:
        sol = np.linalg.lstsq(K, rhs, rcond=None)[0]
    return sol[:k], -sol[k]


def _cholesky_or_none(B):
    """The lower Cholesky factor of B (Fortran order), or None when B is not positive definite.  numpy's, which
    releases the GIL (scipy's LAPACK wrappers hold it), as do the other steps of :class:`_FaceFactor`."""
    try:
        L = np.linalg.cholesky(B)
    except np.linalg.LinAlgError:
        return None
    return np.asfortranarray(L) if np.all(np.isfinite(np.diagonal(L))) else None


#: rows per block of the triangular solves of :class:`_FaceFactor`
_TRIANGULAR_BLOCK = 128


def _solve_lower(L, B):
    """``L^-1 B`` for a lower-triangular L and many columns B, by blocks of rows: a GEMM with the rows solved so far,
    then the inverse of the diagonal block times the rest.  Only numpy calls, which release the GIL, so that the
    class QPs of ``qpfs_cover`` run side by side on threads (scipy's ``solve_triangular`` holds it: two threads
    took as long as one after the other)."""
    n, b = L.shape[0], _TRIANGULAR_BLOCK
    X = np.empty((n, B.shape[1]))
    for i0 in range(0, n, b):
        i1 = min(n, i0 + b)
        R = B[i0:i1] - L[i0:i1, :i0] @ X[:i0] if i0 else B[i0:i1]
        X[i0:i1] = np.linalg.inv(L[i0:i1, i0:i1]) @ R
    return X


@njit(cache=True, nogil=True)
def _cholesky_solve(L, B):
    """``(L L^T)^-1 B`` for a lower-triangular L (Fortran order: read down its columns) and a few columns B: forward
    substitution down the columns of L, then back substitution with dot products along them.  numba, without the
    GIL (scipy's ``cho_solve`` holds it)."""
    n, r = B.shape
    X = B.copy()
    for c in range(r):
        for j in range(n):
            X[j, c] /= L[j, j]
            xj = X[j, c]
            for i in range(j + 1, n):
                X[i, c] -= L[i, j] * xj
        for j in range(n - 1, -1, -1):
            acc = X[j, c]
            for i in range(j + 1, n):
                acc -= L[i, j] * X[i, c]
            X[j, c] = acc / L[j, j]
    return X


@njit(cache=True, nogil=True)
def _cholesky_delete(L, stay):
    """Turn the lower Cholesky factor L of A into that of ``A[stay][:, stay]``, in place: on return it is the
    leading k x k block of L, k = the number of positions that stay (returned).  O(n^2) per deleted position.

    Deleting row and column p of A deletes row p of L and leaves the block after p to be re-factored:
    ``L33' L33'^T = L33 L33^T + l l^T`` with l the deleted column below p, a rank-one update by plane rotations
    (LINPACK's ``dchud``; Golub & Van Loan 2013, section 6.5.4), which is backward stable (a downdate would not
    be).  Positions are deleted from the last, so each update runs on the rows and columns that still stay."""
    n = stay.size
    for p in range(n - 1, -1, -1):
        if stay[p]:
            continue
        rest = np.flatnonzero(stay[p + 1:]) + p + 1
        x = np.empty(rest.size)
        for i in range(rest.size):
            x[i] = L[rest[i], p]
        for a in range(rest.size):
            k = rest[a]
            r = math.hypot(L[k, k], x[a])
            c = r / L[k, k]
            s = x[a] / L[k, k]
            L[k, k] = r
            for b in range(a + 1, rest.size):
                i = rest[b]
                L[i, k] = (L[i, k] + s * x[b]) / c
                x[b] = c * x[b] - s * L[i, k]
    keep = np.flatnonzero(stay)
    for jj in range(keep.size):  # compact: entry (keep[ii], keep[jj]) to (ii, jj), never onto one still to move
        j = keep[jj]
        for ii in range(jj, keep.size):
            L[ii, jj] = L[keep[ii], j]
    return keep.size


class _FaceFactor:
    """The working set S of :func:`_polish` with the Cholesky factor of ``G[S, S]``, updated as S changes.

    S keeps the order in which genes joined it.  Adding the genes N costs the block ``G[S, N]``, one triangular
    solve ``W = L^-1 G[S, N]`` and the factor of the Schur complement ``G[N, N] - W^T W`` (block Cholesky,
    ``|S|^2 |N| + |S| |N|^2 + |N|^3 / 3`` flops), instead of reading ``G[S+N, S+N]`` and factoring it anew
    (``(|S| + |N|)^3 / 3``); dropping a blocking gene at position p deletes row and column p of L and restores the
    trailing block by one rank-one update with the deleted column (O(|S|^2), :func:`_cholesky_delete`).  When a factor is not positive
    definite (a singular face: identical genes, no shift) it is set aside, and the face is solved from the block
    itself by :func:`_solve_face` (the KKT system) until a later step factors it again.  Every step is numpy or
    nogil numba, so several problems run side by side on threads (``qpfs_cover``'s class QPs).
    """

    def __init__(self, G, S):
        self.G = G
        self.S = np.asarray(S, dtype=np.int64)
        self.L = _cholesky_or_none(G.block(self.S))

    def add(self, new):
        new = np.asarray(new, dtype=np.int64)
        k0, k1 = self.S.size, new.size
        if self.L is None or k0 + k1 <= FACE_FACTOR_ANEW_MAX:
            self.S = np.concatenate([self.S, new])
            self.L = _cholesky_or_none(self.G.block(self.S))
            return
        # one BLAS thread, as the loops around: threaded BLAS rounds differently with another thread count (2.7e-19
        # in the weights at 20,000 x 5,000), and results are bit-identical across worker counts; the threads go to
        # whole problems instead (qpfs_cover's class QPs side by side: every step here releases the GIL)
        W = _solve_lower(self.L, self.G.cross_block(self.S, new))
        L22 = _cholesky_or_none(self.G.block(new) - W.T @ W)
        self.S = np.concatenate([self.S, new])
        if L22 is None:
            self.L = None
            return
        L = np.zeros((k0 + k1, k0 + k1), order="F")
        L[:k0, :k0] = self.L
        L[k0:, :k0] = W.T
        L[k0:, k0:] = L22
        self.L = L

    def keep(self, mask):
        """Drop the genes of S where ``mask`` is False."""
        if self.L is not None:
            k = _cholesky_delete(self.L, mask)
            L = np.asfortranarray(self.L[:k, :k])
            self.L = L if np.all(np.isfinite(np.diagonal(L))) else None
        self.S = self.S[mask]

    def solve(self, a):
        """The face solution ``(z, nu)`` of :func:`_solve_face`, from the factor when there is one."""
        S = self.S
        if self.L is not None:
            w = _cholesky_solve(self.L, np.column_stack([a[S], np.ones(S.size)]))
            den = w[:, 1].sum()
            if den != 0.0:
                mu = (w[:, 0].sum() - 1.0) / den
                z = w[:, 0] - mu * w[:, 1]
                if np.all(np.isfinite(z)):
                    return z, -mu
        return _solve_face(self.G.block(S), a, S)


def solve_spg(G, a, *, x0=None, tol=1e-9, max_iter=20000, polish=True, max_polish=500, convex=True):
    """Large-scale simplex QP solver (spectral projected gradient + active-set polish).

    Parameters
    ----------
    G : ndarray or QPMatrix, shape (M, M)
        Symmetric; positive semidefinite unless ``convex=False``.
    a : ndarray, shape (M,)
    x0 : ndarray, optional
        Starting point (projected onto the simplex); default the best vertex ``argmin G_ii/2 - a_i``.
    tol : float
        Stop SPG when the KKT residual is below ``tol * scale`` (``scale = max|a| + max|diag G|``).
    polish : bool
        Run the active-set polish afterwards.
    convex : bool
        False for an indefinite G: SPG to a stationary point, polish only where it helps.

    Returns
    -------
    x : ndarray, shape (M,)
    info : dict
        ``iterations`` (SPG), ``polish_iterations``, ``kkt_residual``, ``objective``,
        ``converged``, ``local`` (True when G is not known to be convex), ``n_nonzero``.
    """
    if is_linear(G, a):
        return solve_linear(a)
    with _threads.blas_limited(1):
        return _solve_spg(G, a, x0=x0, tol=tol, max_iter=max_iter, polish=polish, max_polish=max_polish,
                          convex=convex)


def _solve_spg(G, a, *, x0, tol, max_iter, polish, max_polish, convex):
    G = _as_matrix(G)
    a = np.asarray(a, dtype=np.float64)
    m = a.size
    diag = G.diagonal()
    scale = float(np.max(np.abs(a)) + np.max(np.abs(diag))) or 1.0
    if x0 is None:
        x = np.zeros(m)
        x[int(np.argmin(0.5 * diag - a))] = 1.0
    else:
        x = project_simplex(x0)
    supp = np.flatnonzero(x)
    g = G.dot_sparse(supp, x[supp]) - a
    s = 1.0 / max(float(np.max(np.abs(diag))), 1e-12)
    s_min, s_max = 1e-12 / scale, 1e12 / scale
    it = 0
    converged = False
    kkt = _kkt_from_gradient(g, x)
    with _progress.bar(None, "QP (spg)", unit="it") as progress:  # closed on an error too
        for it in range(1, max_iter + 1):
            p = project_simplex(x - s * g)
            d = p - x
            idx = np.flatnonzero(d)
            if idx.size == 0:
                kkt = _kkt_from_gradient(g, x)
                converged = kkt <= tol * scale
                if converged:
                    break
                s = min(s * 10.0, s_max)
                continue
            dv = d[idx]
            Gd = G.dot_sparse(idx, dv)
            dGd = float(dv @ Gd[idx])
            gd = float(g[idx] @ dv)
            if gd >= 0:  # no descent left (round-off level): stop, the polish takes over
                kkt = _kkt_from_gradient(g, x)
                converged = kkt <= tol * scale
                break
            t = 1.0 if dGd <= 0 else min(1.0, -gd / dGd)
            x[idx] += t * dv
            x[idx] = np.maximum(x[idx], 0.0)
            g += t * Gd
            s = float(dv @ dv) / dGd if dGd > 0 else s_max
            s = min(max(s, s_min), s_max)
            if it % 20 == 0:
                progress.update(20)
                x /= x.sum()
                supp = np.flatnonzero(x)
                g = G.dot_sparse(supp, x[supp]) - a  # refresh: no drift from the incremental updates
                kkt = _kkt_from_gradient(g, x)
                if kkt <= tol * scale:
                    converged = True
                    break
    x /= x.sum()
    n_polish = 0
    if polish:
        x, n_polish, ok = _polish(G, a, x, scale, convex, max_polish)
        converged = converged or ok
    supp = np.flatnonzero(x)
    g = G.dot_sparse(supp, x[supp]) - a
    kkt = _kkt_from_gradient(g, x)
    info = dict(solver="spg", iterations=int(it), polish_iterations=int(n_polish), kkt_residual=float(kkt),
                objective=float(0.5 * x @ (g + a) - a @ x), converged=bool(converged or kkt <= 1e-8 * scale),
                local=not convex, n_nonzero=int(supp.size))
    return x, info


def _face_curvature(B):
    """Smallest eigenpair of G_SS restricted to the face directions {d : sum d = 0}.

    With ``Z = [I; -1^T]`` (a basis of those directions) the reduced Hessian is ``Z^T G_SS Z``.
    Returns ``(lambda_min, d)`` with ``d = Z v`` the direction of the smallest eigenvalue, or
    ``(inf, None)`` when the reduced Hessian is positive definite (one Cholesky) or empty.
    """
    k = B.shape[0]
    if k < 2:
        return np.inf, None
    H = B[:-1, :-1] - B[:-1, -1:] - B[-1:, :-1] + B[-1, -1]
    try:
        np.linalg.cholesky(H)
        return np.inf, None
    except np.linalg.LinAlgError:
        lam, V = np.linalg.eigh(0.5 * (H + H.T))
        v = V[:, 0]
        return float(lam[0]), np.append(v, -v.sum())


def _blocking_step(x, S, d):
    """Move x along d (supported on S, sum d = 0) to the first gene that reaches 0; that gene leaves S.

    Returns the new x and the mask of the genes of S that stay.

    Only the blocking genes leave: genes of S at weight 0 that are not blocking (just added, moving
    up) stay, otherwise a step of length 0 would drop every gene just added and the next step would
    add them again (a cycle, seen with a ridge-dominated G of 400 genes).
    """
    xs = x[S]
    dec = d < 0
    t = float(np.min(xs[dec] / -d[dec]))
    xs = xs + t * d
    block = dec & (xs <= 1e-15 + 1e-12 * np.abs(d))
    xs[block] = 0.0
    xs = np.maximum(xs, 0.0)
    x = np.zeros_like(x)
    x[S] = xs / xs.sum()
    return x, ~block


def _polish(G, a, x, scale, convex, max_polish, max_support=None):
    """Primal active-set (working-set) iterations from the support of x (Nocedal & Wright 2006, 16.5).

    On the working set S (the support of x plus the genes added so far) the equality-constrained QP
    ``min 1/2 z^T G_SS z - a_S^T z, sum z = 1`` is solved exactly by its KKT system; a solution that
    leaves the simplex is cut at the first blocking gene (which leaves S); otherwise the gradient
    ``g = G[:, S] z - a`` (one product with |S| rows of G, float64) gives the multiplier check
    ``g_i >= nu`` off S, and the worst violators join S.  The objective decreases at every step.
    For convex G the face systems are solved from a Cholesky factor of ``G_SS`` that follows S
    (:class:`_FaceFactor`: block Cholesky when genes join, a rank-one update per blocking gene), so a step
    costs O(|S|^2) plus the new genes' block rather than a new O(|S|^3) factorisation.

    For an indefinite G (``convex=False``) a face whose reduced Hessian has a negative eigenvalue is
    left along that direction of negative curvature (descent sign) up to the first blocking gene, so
    the result is a KKT point whose face Hessian is positive definite: a local minimum.

    Returns ``(x, iterations, converged)``; not converged when ``max_polish`` steps or, when given,
    ``max_support`` working-set genes would be exceeded (x is then the best feasible point so far).
    """
    tol = 1e-12 * scale
    S = np.flatnonzero(x > 0)
    face = _FaceFactor(G, S) if convex else None
    n = 0
    for n in range(1, max_polish + 1):
        if convex:
            z, nu = face.solve(a)
        else:
            B = G.block(S)
            lam, d = _face_curvature(B)
            if lam < -1e-12 * scale:  # negative curvature: a descent direction along the face
                xs = x[S]
                if (B @ xs - a[S]) @ d > 0:
                    d = -d
                x, stay = _blocking_step(x, S, d)
                S = S[stay]
                continue
            z, nu = _solve_face(B, a, S)
        if (z < 0).any():
            x, stay = _blocking_step(x, S, z - x[S])
            S = S[stay]
            if convex:
                face.keep(stay)
            continue
        x = np.zeros_like(x)
        x[S] = z
        g = G.dot_sparse(S, z) - a
        viol = nu - g
        viol[S] = -np.inf
        bad = np.flatnonzero(viol > tol)
        if bad.size == 0:
            return x, n, True
        # grow S by up to half its size: measured 21 / 22 steps (0.29 / 10.5 s) on the 20,000 x 2,000 (933
        # weights) / 2,000 x 20,000 shift (3,723 weights) benchmark problems, against 54 / 69 steps
        # (0.58 / 19 s) when growing by a tenth and 18 / 15 steps (0.44 / 11 s) when doubling
        k = max(1, min(bad.size, S.size // 2 + 1))
        if max_support is not None and S.size + k > max_support:
            return x, n, False
        add = bad[np.argsort(-viol[bad], kind="stable")[:k]]
        S = np.concatenate([S, add])  # in the order of joining: the factor grows by rows at its end
        if convex:
            face.add(add)
    return x, n, False


def solve_active_set(G, a, *, x0=None, tol=1e-9, max_iter=2000, max_support=ACTIVE_SET_MAX_SUPPORT, convex=True):
    """Working-set solver of the QPFS problem: cost follows the support of the solution, not M.

    Solves eq. 2 of Rodriguez-Lujan et al. (2010), ``min 1/2 (1 - alpha) x^T Q x - alpha F^T x``
    on the simplex, here ``min 1/2 x^T G x - a^T x``, by the primal active-set iterations of
    :func:`_polish` started from one vertex: the best one, ``argmin G_ii / 2 - a_i`` (for QPFS the
    gene that best trades relevance against self-information, near the top of MaxRel), or ``x0``.
    Each step solves the face system on the working set S from a Cholesky factor of ``G[S, S]`` kept
    along the steps (:class:`_FaceFactor`; O(|S|^2) per step plus the block of the genes that join) and
    checks the complement with one product ``G[:, S] z`` (O(M |S|), float64 even when Q is float32), so
    the solve costs about ``|S|^3 + steps x M |S|`` flops against SPG's ``iterations x M |supp|``: measured 0.3 s
    (21 steps) against 85-160 s (13,920 SPG iterations) on a 20,000-cell x 2,000-gene MI matrix
    with 933 non-zero weights (``benchmarks/bench_qpfs.py``, shared 2-core machine).  At termination the KKT conditions hold to round-off, so the
    answer is quadprog's (convex G) to 1e-8 in the objective.

    When the working set would exceed ``max_support`` genes (the dense solves would cost more than
    first-order steps) or after ``max_iter`` steps, it hands its current point to :func:`solve_spg`
    as a warm start; ``info["solver"]`` then reads ``"active_set+spg"``.  With ``convex=False``
    faces of negative curvature are left along that curvature, and the answer is a local minimum
    (``local=True``).

    Returns ``(x, info)`` as :func:`solve_spg` (``iterations`` = active-set steps).
    """
    if is_linear(G, a):
        return solve_linear(a)
    G = _as_matrix(G)
    a = np.asarray(a, dtype=np.float64)
    diag = G.diagonal()
    scale = float(np.max(np.abs(a)) + np.max(np.abs(diag))) or 1.0
    if x0 is None:
        x = np.zeros(a.size)
        x[int(np.argmin(0.5 * diag - a))] = 1.0
    else:
        x = project_simplex(x0)
    with _threads.blas_limited(1):
        x, n, ok = _polish(G, a, x, scale, convex, max_iter, max_support=max_support)
    if not ok:
        x, info = solve_spg(G, a, x0=x, tol=tol, convex=convex)
        info.update(solver="active_set+spg", iterations=int(n) + info["iterations"])
        return x, info
    supp = np.flatnonzero(x)
    g = G.dot_sparse(supp, x[supp]) - a
    kkt = _kkt_from_gradient(g, x)
    return x, dict(solver="active_set", iterations=int(n), polish_iterations=0, kkt_residual=float(kkt),
                   objective=float(0.5 * x @ (g + a) - a @ x), converged=True, local=not convex,
                   n_nonzero=int(supp.size))


def solve(G, a, *, solver="auto", convex=True, **kwargs):
    """Dispatch: ``"quadprog"`` (G a dense PD ndarray), ``"active_set"``, ``"spg"``, or ``"auto"``.

    ``"auto"`` takes quadprog when M <= :data:`QUADPROG_AUTO_MAX`, G is convex and can be formed
    densely, and the active-set solver otherwise (:func:`solve_active_set`; it hands over to spg
    itself when the support exceeds :data:`ACTIVE_SET_MAX_SUPPORT`).  Whatever the solver, a
    negligible quadratic term (:func:`is_linear`,
    e.g. QPFS at alpha = 1) is solved exactly as the linear program it is (:func:`solve_linear`):
    quadprog would invert a (near) zero G and return NaN.  Returns ``(x, info)``.
    """
    m = a.size
    if solver in SOLVERS and is_linear(G, a):
        return solve_linear(a)
    if solver == "auto":
        solver = "quadprog" if (m <= QUADPROG_AUTO_MAX and convex) else "active_set"
    if solver == "quadprog":
        if not convex:
            raise ValueError("quadprog needs a convex problem; use solver='spg' for psd_fix='none'")
        Gd = G.dense() if isinstance(G, QPMatrix) else np.asarray(G, dtype=np.float64)
        name, n_polish = "quadprog", 0
        try:
            x = solve_quadprog(Gd, a)
        except ValueError:
            # convex but singular G (e.g. identical genes): Goldfarb-Idnani needs strict definiteness, so
            # factor G + 1e-9 max|diag| I; the polish below then solves the problem with G itself
            margin = 1e-9 * max(float(np.max(np.abs(np.diag(Gd)))), 1e-300)
            x = solve_quadprog(Gd + margin * np.eye(m), a)
            name = "quadprog(singular G, margin)"
        g = Gd @ x - a
        kkt = _kkt_from_gradient(g, x)
        scale = float(np.max(np.abs(a)) + np.max(np.abs(np.diag(Gd)))) or 1.0
        if kkt > 1e-9 * scale:
            # Goldfarb-Idnani works with G^-1 and loses accuracy when G is nearly singular (e.g. a
            # clipped Q: KKT residual 0.2 seen); the active-set polish from its support repairs it
            x, n_polish, _ = _polish(QPMatrix(Gd), a, x, scale, True, 500)
            g = Gd @ x - a
            kkt = _kkt_from_gradient(g, x)
            name += "+polish"
        return x, dict(solver=name, iterations=None, polish_iterations=int(n_polish),
                       kkt_residual=float(kkt), objective=float(0.5 * x @ (g + a) - a @ x),
                       converged=True, local=False, n_nonzero=int(np.count_nonzero(x)))
    if solver == "spg":
        return solve_spg(G, a, convex=convex, **kwargs)
    if solver == "active_set":
        return solve_active_set(G, a, convex=convex, **kwargs)
    raise ValueError(f"unknown solver {solver!r}; choose one of {SOLVERS}")


skip_failed_cache_writes(globals())  # numba's cache is an optimisation: a full disk must not fail a selection
