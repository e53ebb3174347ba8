"""Spectral and semidefinite solvers of the SPEC_CMI quadratic integer program.

Nguyen, Chan, Romano, Bailey, *Effective global approaches for mutual information based feature
selection*, KDD 2014 (the "SPEC_CMI paper").  The problem is

    QIP_CMI:  max_x  x^T Q x   s.t.  x in {0, 1}^n,  sum_i x_i = k                 (eq. 18)

with Q symmetric and entrywise non-negative.  This module holds the array-level pieces:

* :func:`dominant_eigenvector` -- the spectral relaxation (section 3.1, eq. 19): the unit vector
  maximising x^T Q x is a dominant eigenvector, found by Lanczos (ARPACK ``eigsh`` on a
  ``LinearOperator``), never by a full eigendecomposition;
* :func:`sign_consistent` -- Theorem 2 sign handling (flip, clip round-off, record);
  :func:`snap_ties` (from :mod:`.ranking`) -- round-off differences between symmetric genes become exact ties;
* :func:`nystrom_leading` -- the section 3.4 Nystrom eigenpairs from sampled rows, with a cut on
  the sampled block's spectrum suited to an indefinite Q and Lanczos for the few pairs kept;
* :func:`dummy_variable_weights` -- the section 3.4 ranking for approximations Q_hat with negative
  entries: the dominant eigenvector of the (n+1) x (n+1) matrix Qbar of eq. 23, first entry positive;
* :func:`sdp_relaxation`, :func:`gw_round` -- SDP_CMI (section 3.2, eq. 26) and Goemans--Williamson
  random-projection rounding;
* :func:`qip_value` -- the objective x^T Q x of a gene subset.

Arrays in, arrays out; inputs are never modified; randomness only through a ``Generator``.
"""
from __future__ import annotations

import time

import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, aslinearoperator, eigsh

from .ranking import rank_descending, snap_ties  # noqa: F401  (snap_ties re-exported: spectral.snap_ties)

__all__ = [
    "dominant_eigenvector",
    "dominant_start_value",
    "sign_consistent",
    "snap_ties",
    "nystrom_leading",
    "lowrank_operator",
    "dummy_variable_operator",
    "dummy_variable_weights",
    "qip_value",
    "qip_values",
    "expand_bipolar",
    "sdp_resource_estimate",
    "sdp_relaxation",
    "gw_round",
    "SDP_SECONDS_PER_CUBE",
    "SDP_BYTES_PER_ENTRY",
]

#: round-off threshold (relative to max |x_i|) below which a wrong-signed eigenvector entry is zero
SIGN_TOL = 1e-8

#: SCS wall time per (n+1)^3 for SDP_CMI with eps 1e-7 on the shared 2-core development machine:
#: 1.5-3e-7 on random Q (n = 100: 0.3 s, 300: 4-7 s, 500: 17-34 s) and 1.4-2.1e-6 on the Lung CMI
#: matrix (n = 325: 47-73 s, 325-375 iterations, load average ~10).  Used to refuse early.
SDP_SECONDS_PER_CUBE = 1e-6
#: peak resident memory per entry of the (n+1) x (n+1) variable (cvxpy canonicalisation + SCS),
#: measured: n = 300 -> +110 MB, n = 500 -> +290 MB over the interpreter's baseline.
SDP_BYTES_PER_ENTRY = 1200


def dominant_eigenvector(Q, *, tol=0.0, maxiter=None, v0=None, ncv=8):
    """Largest (algebraic) eigenvalue of a symmetric matrix or operator and its unit eigenvector.

    Implements the solution of SPEC_CMI (section 3.1, eq. 19 without the sign constraint): the
    maximum of the Rayleigh quotient x^T Q x / x^T x is the largest eigenvalue, attained at its
    eigenvectors.  For an entrywise non-negative Q this is the Perron root (= spectral radius).

    Parameters
    ----------
    Q : ndarray (n, n) or scipy LinearOperator
        Symmetric.  Only products ``Q @ v`` are used (Lanczos / ARPACK ``eigsh``, ``which="LA"``),
        so the cost is a few dozen matrix-vector products, O(n^2) each, instead of O(n^3).
        A float32 matrix is read in float32 and multiplied in float64 (block-wise upcast).
    tol : float
        ARPACK relative accuracy of the eigenvalue (0: machine precision).
    maxiter : int, optional
        ARPACK restarts.
    v0 : ndarray, optional
        Start vector; default the all-ones vector, which is close to the Perron vector of a
        non-negative matrix (and makes the result deterministic).
    ncv : int
        Lanczos basis size (capped at n).  SPEC_CMI matrices have a dominant Perron root with a
        large gap, where a small basis converges in fewer products: on the SRBCT CMI matrix 13
        products with ncv = 8 against 21 with ARPACK's default 20 (on matrices with a small
        spectral gap a larger ncv is better).

    Returns
    -------
    lam : float
    x : ndarray (n,), float64, unit norm (sign as returned by the solver; see :func:`sign_consistent`)
    info : dict
        ``method`` ("lanczos", "dense" for n <= 2, where ARPACK cannot run, "zero matrix": Q = 0,
        every vector is dominant, the uniform one is returned, or "start vector": the start vector is
        itself a dominant eigenvector, e.g. of Q = c I, and is returned), ``n_matvec``,
        ``residual`` = ||Q x - lam x|| / max(|lam|, tiny).
    """
    op = Q if isinstance(Q, LinearOperator) else None
    n = Q.shape[0]
    if Q.shape != (n, n):
        raise ValueError(f"Q must be square, got shape {Q.shape}")
    count = [0]
    if op is None:
        Qa = np.asarray(Q)
        if Qa.dtype == np.float32:
            # float32 storage, float64 arithmetic: row blocks are upcast on the fly (2 MB temporaries,
            # cache-resident; measured fastest at M = 20,000), so the eigenvector is that of the stored
            # matrix to float64 accuracy (ARPACK in single precision only reaches ~1e-4 on the vector)
            step = max(1, (1 << 18) // max(n, 1))

            def matvec(v):
                count[0] += 1
                v = np.asarray(v, dtype=np.float64).ravel()
                out = np.empty(n)
                for b in range(0, n, step):
                    out[b:b + step] = Qa[b:b + step].astype(np.float64) @ v
                return out
        else:
            Qa = Qa.astype(np.float64, copy=False)

            def matvec(v):
                count[0] += 1
                return Qa @ np.asarray(v, dtype=np.float64).ravel()

        op = LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    else:
        base = aslinearoperator(op)

        def matvec(v):
            count[0] += 1
            return base.matvec(v)

        op = LinearOperator((n, n), matvec=matvec, dtype=base.dtype)
    if n <= 2:  # ARPACK needs n > k + 1; form the tiny matrix from its columns
        dense = np.column_stack([op.matvec(e) for e in np.eye(n)]).astype(np.float64)
        w, V = np.linalg.eigh(0.5 * (dense + dense.T))
        lam, x, method = float(w[-1]), V[:, -1].copy(), "dense"
    else:
        start = np.ones(n) if v0 is None else np.asarray(v0, dtype=np.float64)
        q = np.asarray(op.matvec(start), dtype=np.float64)
        if not np.any(q):
            # Q 1 = 0: for a non-negative Q that means Q = 0 (every vector is an eigenvector)
            start = np.random.default_rng(0).standard_normal(n)
            q = np.asarray(op.matvec(start), dtype=np.float64)
        if not np.any(q):  # Q = 0 (ARPACK would fail: "starting vector is zero")
            x = np.ones(n) / np.sqrt(n)
            return 0.0, x, dict(method="zero matrix", n_matvec=int(count[0]), residual=0.0)
        try:
            w, V = eigsh(op, k=1, which="LA", v0=start.astype(op.dtype), tol=tol, maxiter=maxiter,
                         ncv=min(n, max(int(ncv), 3)))
        except ArpackNoConvergence as exc:  # pragma: no cover - ARPACK converges on these problems
            raise RuntimeError(
                f"the Lanczos eigensolver did not converge on the {n} x {n} matrix "
                f"({count[0]} products); pass a larger maxiter or tol"
            ) from exc
        lam, x, method = float(w[0]), np.asarray(V[:, 0], dtype=np.float64), "lanczos"
        # A start vector that is itself a dominant eigenvector (Q = c I, e.g. one sample per class makes every
        # CMI 0 and Q = H(C) I): Lanczos breaks down on it and ARPACK restarts from a vector of its own random
        # generator, whose state moves from call to call, so the same call returned different vectors of the
        # dominant eigenspace (rankings too).  The start vector (all ones by default) is returned instead.
        lam0 = dominant_start_value(start, q, lam)
        if lam0 is not None:
            lam, x, method = lam0, start.copy(), "start vector"
    x /= np.linalg.norm(x)
    n_matvec = int(count[0])
    r = np.asarray(op.matvec(x.astype(op.dtype)), dtype=np.float64) - lam * x
    info = dict(method=method, n_matvec=n_matvec,
                residual=float(np.linalg.norm(r) / max(abs(lam), np.finfo(float).tiny)))
    return lam, x, info


def dominant_start_value(start, q, lam):
    """The Rayleigh quotient of ``start`` when it is itself a dominant eigenvector (``q = Q start`` parallel to it
    to 1e-12, with a value not below the dominant eigenvalue ``lam``), else ``None``: the vector to return in a
    degenerate dominant eigenspace (Q = c I, copies of one gene), where an eigensolver's vector is arbitrary."""
    lam0 = float(start @ q) / float(start @ start)
    if np.linalg.norm(q - lam0 * start) <= 1e-12 * np.linalg.norm(q) and lam0 >= lam - 1e-12 * abs(lam):
        return lam0
    return None


def sign_consistent(x, *, nonnegative_matrix=True, tol=SIGN_TOL):
    """Make a dominant eigenvector a vector of non-negative weights (SPEC_CMI Theorem 2).

    Eigenvectors are defined up to sign, so the vector is first flipped to have a positive sum.
    Theorem 2 (ii) says a dominant eigenvector of an entrywise non-negative Q is sign-consistent;
    entries of the wrong sign then come only from round-off and are clipped to 0 when they are at
    most ``tol * max|x|``.  (The theorem's proof needs care when Q is reducible and its Perron root
    repeated: a difference of two Perron vectors of disjoint blocks is a mixed-sign dominant
    eigenvector.  For non-negative Q, ``|x|^T Q |x| >= x^T Q x``, so ``|x|`` attains the maximum
    Rayleigh quotient too and is itself a dominant eigenvector; that is what is returned then.)

    Parameters
    ----------
    x : ndarray (n,)
    nonnegative_matrix : bool
        Whether the matrix is known to be entrywise non-negative (exact SPEC_CMI).  When False
        (e.g. a Nystrom approximation) the vector is only flipped and clipped, and ``mixed_sign``
        reports whether the caller needs the dummy-variable ranking of section 3.4.
    tol : float

    Returns
    -------
    x : ndarray (new array)
    info : dict
        ``flipped``, ``min_entry`` (before clipping, after the flip), ``n_clipped`` (round-off
        entries set to 0), ``mixed_sign`` (wrong-signed entries beyond round-off remained),
        ``abs_applied`` (``|x|`` used, only for non-negative matrices).
    """
    x = np.array(x, dtype=np.float64)
    flipped = bool(x.sum() < 0)
    if flipped:
        x = -x
    scale = np.max(np.abs(x), initial=0.0)
    min_entry = float(x.min(initial=0.0))
    tiny = (x < 0) & (x >= -tol * scale)
    x[tiny] = 0.0
    mixed = bool(np.any(x < 0))
    abs_applied = False
    if mixed and nonnegative_matrix:
        x = np.abs(x)
        abs_applied = True
    return x, dict(flipped=flipped, min_entry=min_entry, n_clipped=int(tiny.sum()), mixed_sign=mixed,
                   abs_applied=abs_applied)


def nystrom_leading(C, rows, *, rank_tol=None, floor=1e-10, full_below=200):
    """Nystrom eigenpairs of Q from its sampled rows, keeping only A's eigenvalues above a cut.

    The same construction as :func:`bioqpfs._kernels.nystrom.nystrom_eigh` (QPFS section 2.2 /
    SPEC_CMI section 3.4: ``S = A^{-1/2} C C^T A^{-1/2}`` on the kept eigenspace of A,
    ``U = C^T A^{-1/2} R Sigma^{-1/2}``), with two differences:

    * the default cut is ``max(|lambda_min(A)| / lambda_max(A), floor)``: the eigenvalues of the
      sampled block A that are not larger than the magnitude of its most negative one are at the
      level of Q's indefinite part, and inverting them amplifies it.  On the SRBCT, Colon and
      Leukemia CMI matrices, the pseudo-inverse cut 1e-10 gave ||Q - Q_hat||_F several times
      ||Q||_F and a top-50 overlap with exact SPEC_CMI of 8-41 genes at gamma = 0.1-0.2; this cut
      gave 44-50.  For a PSD A it is ``floor``, the plain pseudo-inverse;
    * when the cut keeps few eigenpairs -- the usual case for SPEC_CMI -- they are found by Lanczos
      instead of a full O(r^3) eigendecomposition of A: O(r^2) per product plus O(r M k) for U.
      It falls back to ``nystrom_eigh`` (identical result) when the cut keeps many eigenpairs or
      r is small.

    Parameters
    ----------
    C : ndarray (r, M)
        Sampled rows of the symmetric Q.
    rows : ndarray of int (r,)
    rank_tol : float, optional
        Relative cut (eigenvalues of A above ``rank_tol * lambda_max(A)`` are kept); default
        ``max(|lambda_min(A)| / lambda_max(A), floor)``.
    floor : float
        Smallest relative cut (as ``nystrom_eigh``'s default 1e-10).
    full_below : int
        r below which the full eigendecomposition is used directly.

    Returns
    -------
    lam, U, info
        As ``nystrom_eigh``; info has ``r``, ``rank_A`` (eigenpairs of A kept), ``rank_tol``,
        ``lambda_max_A``, ``lambda_min_A``, ``method`` ("lanczos" or "full").
    """
    from . import nystrom as _nys

    C = np.asarray(C, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.int64)
    r = rows.size
    A = C[:, rows]
    A = 0.5 * (A + A.T)
    if r <= max(full_below, 3):
        s = np.linalg.eigvalsh(A)
        hi, lo = float(s[-1]), float(s[0])
    else:
        # the cut needs the extremes only roughly (1e-6 relative), which saves Lanczos steps
        hi = float(eigsh(A, k=1, which="LA", v0=np.ones(r), tol=1e-6, ncv=min(r, 20),
                         return_eigenvectors=False)[0])
        lo = float(eigsh(A, k=1, which="SA", v0=np.ones(r), tol=1e-6, ncv=min(r, 20),
                         return_eigenvectors=False)[0])
    if rank_tol is None:
        rank_tol = max(-lo / hi, floor) if (hi > 0 and lo < 0) else floor
    base = dict(r=int(r), rank_tol=float(rank_tol), lambda_max_A=hi, lambda_min_A=lo)
    cut = rank_tol * max(hi, 1e-300)
    if r > max(full_below, 3) and hi > cut:
        kk = 2
        while kk < r // 8:
            s, V = eigsh(A, k=kk, which="LA", v0=np.ones(r))
            if s.min() <= cut:  # every eigenvalue above the cut is among these
                keep = s > cut
                inv_sqrt = V[:, keep] / np.sqrt(s[keep])
                W = C.T @ inv_sqrt
                sig, R = np.linalg.eigh(W.T @ W)
                order = np.argsort(sig)[::-1]
                sig, R = sig[order], R[:, order]
                pos = sig > 0
                U = W @ (R[:, pos] / np.sqrt(sig[pos]))
                return sig[pos], U, dict(base, rank_A=int(keep.sum()), method="lanczos")
            kk *= 2
    lam, U, info = _nys.nystrom_eigh(C, rows, rank_tol=rank_tol)
    return lam, U, dict(base, rank_A=info["rank_A"], method="full")


def lowrank_operator(U, lam, diag=None):
    """``LinearOperator`` of ``U diag(lam) U^T`` (n x n), plus ``diag(diag)`` when given, without forming it:
    O(n k) per product."""
    U = np.asarray(U, dtype=np.float64)
    lam = np.asarray(lam, dtype=np.float64)
    n = U.shape[0]
    if diag is None:
        return LinearOperator((n, n), matvec=lambda v: U @ (lam * (U.T @ np.ravel(v))), dtype=np.float64)
    d = np.asarray(diag, dtype=np.float64)
    return LinearOperator((n, n), matvec=lambda v: U @ (lam * (U.T @ np.ravel(v))) + d * np.ravel(v),
                          dtype=np.float64)


def dummy_variable_operator(op):
    """``Qbar = [[1^T Q 1, 1^T Q], [Q 1, Q]]`` of SPEC_CMI eq. 23 as an operator of size n + 1.

    ``Qbar = P^T Q P`` with ``P = [1 | I_n]`` (n x (n+1)), because for the bipolar variables
    ``y = 2x - 1`` and the dummy ``y_0 = 1``: ``(y + 1)^T Q (y + 1) = [y_0; y]^T Qbar [y_0; y]``.
    A product costs one product with Q plus O(n).
    """
    base = aslinearoperator(op)
    n = base.shape[0]

    def matvec(v):
        v = np.ravel(v)
        w = base.matvec(v[0] + v[1:])  # Q P v
        return np.concatenate([[w.sum()], w])  # P^T w

    return LinearOperator((n + 1, n + 1), matvec=matvec, dtype=np.float64)


def dummy_variable_weights(op, *, tol=0.0):
    """Section 3.4 ranking weights when the (approximated) Q has negative entries.

    The 0-1 problem is rewritten over bipolar variables with a dummy ``y_0 = 1`` (eq. 22-23); the
    dominant eigenvector of ``Qbar`` with its first entry made positive gives the feature weights
    (its entries 1..n), sorted in descending order to rank the features.

    Parameters
    ----------
    op : ndarray (n, n) or LinearOperator
        The symmetric (approximate) Q.

    Returns
    -------
    weights : ndarray (n,)
        Entries 1..n of the unit dominant eigenvector of Qbar (sign fixed by entry 0 > 0).
    info : dict
        ``lam`` (dominant eigenvalue of Qbar), ``y0`` (entry 0), plus the solver info.
    """
    lam, v, info = dominant_eigenvector(dummy_variable_operator(op), tol=tol)
    if v[0] < 0:
        v = -v
    return v[1:].copy(), dict(lam=lam, y0=float(v[0]), **info)


def qip_value(Q, genes):
    """x^T Q x for the 0-1 indicator x of ``genes`` (eq. 18): the sum of the Q block of the subset."""
    idx = np.unique(np.asarray(genes, dtype=np.int64))
    return float(np.asarray(Q)[np.ix_(idx, idx)].sum(dtype=np.float64))


def qip_values(Q, subsets):
    """:func:`qip_value` of each row of an integer array ``subsets`` (s, k) of distinct indices."""
    Q = np.asarray(Q, dtype=np.float64)
    subsets = np.asarray(subsets, dtype=np.int64)
    return Q[subsets[:, :, None], subsets[:, None, :]].sum(axis=(1, 2))


def expand_bipolar(Q):
    """The (n+1) x (n+1) matrices ``Qbar`` and ``Ibar`` of eq. 23-24 (the variable expansion trick).

    ``Qbar = [[1^T Q 1, 1^T Q], [Q 1, Q]]``, ``Ibar = [[n, 1^T], [1, I]]`` so that for ``y = 2x - 1``
    and ``y_0 = 1``: ``4 x^T Q x = [1; y]^T Qbar [1; y]`` and ``4 |x|^2 = [1; y]^T Ibar [1; y]``.
    """
    Q = np.asarray(Q, dtype=np.float64)
    n = Q.shape[0]
    q1 = Q.sum(axis=1)
    Qbar = np.empty((n + 1, n + 1))
    Qbar[0, 0] = q1.sum()
    Qbar[0, 1:] = q1
    Qbar[1:, 0] = q1
    Qbar[1:, 1:] = Q
    Ibar = np.eye(n + 1)
    Ibar[0, 0] = n
    Ibar[0, 1:] = 1.0
    Ibar[1:, 0] = 1.0
    return Qbar, Ibar


def sdp_resource_estimate(n):
    """(bytes, seconds) SDP_CMI with SCS is expected to need for n features (see the constants)."""
    m = n + 1
    return SDP_BYTES_PER_ENTRY * m * m, SDP_SECONDS_PER_CUBE * m ** 3


def sdp_relaxation(Q, k, *, solver="SCS", eps=1e-7, max_iters=100_000, lifted=False, verbose=False):
    """Solve SDP_CMI (eq. 26): max Qbar . Y  s.t.  Ibar . Y = 4k, diag(Y) = 1, Y PSD.

    Parameters
    ----------
    Q : ndarray (n, n), symmetric
    k : int
        Number of features to select.
    solver : {"SCS", "CLARABEL"}
        SCS (first-order splitting, memory O(n^2), one (n+1)-eigendecomposition per iteration) is
        the default: with ``eps = 1e-7`` it matched Clarabel's interior-point optimum to ~1e-9
        relative on our tests while being 30-200x faster at n = 50-100 (Clarabel forms a dense
        Hessian block of size ~n^2/2 and took 46 s at n = 100).
    eps : float
        SCS absolute and relative tolerance.
    lifted : bool
        Add the lifted cardinality constraints ``sum_j Y_ij = (2k - n) Y_0i`` (i = 1..n), i.e. the
        cardinality constraint ``sum_j y_j = 2k - n`` multiplied by each ``y_i`` -- valid for every
        rank-one feasible point, so the bound stays an upper bound but is tighter.  Not in the
        paper (eq. 26 has only the aggregate constraint); see :func:`bioqpfs.sdp_cmi` for its effect.

    Returns
    -------
    Y : ndarray (n+1, n+1)
        The relaxed solution (symmetrised).
    info : dict
        ``status``, ``bound`` = Qbar . Y / 4 (an upper bound on max x^T Q x over |S| = k when
        solved to optimality), ``iterations``, ``seconds``, ``solver``.

    Notes
    -----
    With diag(Y) = 1 the cardinality constraint ``Ibar . Y = 2n + 2 sum_i Y_0i = 4k`` is the linear
    constraint ``sum_i Y_0i = 2k - n``, and ``Qbar . Y = 1^T Q 1 + 2 (Q 1)^T Y_0,1: + Q . Y_1:,1:``;
    this is what is passed to the solver (equivalent, and keeps the large constant out of it).
    """
    import cvxpy as cp

    Q = np.asarray(Q, dtype=np.float64)
    n = Q.shape[0]
    t0 = time.perf_counter()
    q1 = Q.sum(axis=1)
    Y = cp.Variable((n + 1, n + 1), PSD=True)
    objective = 2.0 * (q1 @ Y[0, 1:]) + cp.sum(cp.multiply(Q, Y[1:, 1:]))
    constraints = [cp.diag(Y) == 1, cp.sum(Y[0, 1:]) == 2 * k - n]
    if lifted:
        constraints.append(cp.sum(Y[1:, 1:], axis=1) == (2 * k - n) * Y[1:, 0])
    prob = cp.Problem(cp.Maximize(objective), constraints)
    solver = solver.upper()
    if solver == "SCS":
        kwargs = dict(eps_abs=eps, eps_rel=eps, max_iters=max_iters)
    elif solver == "CLARABEL":
        kwargs = {}
    else:
        raise ValueError(f"unknown SDP solver {solver!r}; choose 'SCS' or 'CLARABEL'")
    prob.solve(solver=solver, verbose=verbose, **kwargs)
    if prob.status not in ("optimal", "optimal_inaccurate") or Y.value is None:
        raise RuntimeError(f"the SDP solver {solver} failed on SDP_CMI (status {prob.status!r}); "
                           "use SPEC_CMI (method='spec_cmi') instead")
    Yv = 0.5 * (Y.value + Y.value.T)
    Qbar, _ = expand_bipolar(Q)
    stats = prob.solver_stats
    info = dict(status=str(prob.status), bound=float(np.sum(Qbar * Yv) / 4.0), solver=solver,
                iterations=None if stats.num_iters is None else int(stats.num_iters),
                seconds=time.perf_counter() - t0)
    return Yv, info


def gw_round(Y, Q, k, *, n_projections=100, rng):
    """Goemans--Williamson random-projection rounding of an SDP_CMI solution (section 3.2).

    ``Y = V V^T`` is factored (eigenvalues clipped at 0); row ``v_i`` is the vector of variable
    ``y_i`` (``v_0`` the dummy).  For each of ``n_projections`` directions ``r`` drawn uniformly on
    the unit sphere of R^{n+1}, the k features whose vectors have the largest cosine similarity
    with ``r`` are selected -- oriented so the dummy's side counts as "selected" (``y_0 = 1``; the
    problem is symmetric in y and -y, section 3.2) -- and the projection whose subset has the
    largest x^T Q x is kept.

    The paper says "rows Y_i." where Goemans--Williamson (its ref. 11) use the factor rows
    ``v_i``; we follow GW: for a rank-one Y both coincide, and ``v_i`` are the unit vectors whose
    inner products are Y.

    Returns
    -------
    best : ndarray (k,) of int, sorted
    info : dict
        ``objective`` (best x^T Q x), ``best_projection``, ``n_distinct`` (distinct subsets seen),
        ``objectives_min``/``objectives_median``.
    """
    Y = np.asarray(Y, dtype=np.float64)
    m = Y.shape[0]
    w, E = np.linalg.eigh(Y)
    V = E * np.sqrt(np.clip(w, 0.0, None))
    norms = np.linalg.norm(V, axis=1)
    norms[norms == 0] = 1.0
    R = rng.standard_normal((m, n_projections))
    R /= np.linalg.norm(R, axis=0)
    cos = (V @ R) / norms[:, None]
    side = np.where(cos[0] >= 0, 1.0, -1.0)
    score = cos[1:] * side  # (n, P): alignment of each feature with the dummy's side
    n = m - 1
    idx = np.arange(n)
    subsets = np.empty((n_projections, k), dtype=np.int64)
    for p in range(n_projections):
        order = rank_descending([score[:, p]], idx)  # ties (up to round-off): lower index first
        subsets[p] = np.sort(order[:k])
    vals = qip_values(Q, subsets)
    best_p = int(np.argmax(vals))  # first projection among equals
    info = dict(objective=float(vals[best_p]), best_projection=best_p,
                n_distinct=int(np.unique(subsets, axis=0).shape[0]),
                objectives_min=float(vals.min()), objectives_median=float(np.median(vals)))
    return subsets[best_p].copy(), info
