"""Positive-semidefinite fixes of an indefinite quadratic term (the ``psd_fix`` option of the QPFS family).

MI redundancy matrices are not PSD in general (Nguyen et al. 2014, section 1.2), so the QPFS quadratic
program (Rodriguez-Lujan et al. 2010, eq. 2) can be non-convex.  :func:`apply_psd_fix` makes a
:class:`~bioqpfs._kernels.simplex_qp.QPMatrix` usable: a diagonal shift (eq. 13 of Nguyen et al. 2014),
eigenvalue clipping (the nearest PSD matrix in Frobenius norm), or no change after a sign test of the
smallest eigenvalue.  Arrays in, arrays out; the fix applied is always returned for the diagnostics.
"""
from __future__ import annotations

import numpy as np

from .. import _threads
from . import simplex_qp

__all__ = ["PSD_FIXES", "apply_psd_fix", "min_eigenvalue_with_safety", "definite_beyond", "cholesky_factor",
           "certificate_bytes", "eigenvalue_above", "LOWER_BLOCK", "CLIP_DENSE_MAX", "CLIP_LANCZOS_MAX",
           "NONE_SIGN_TOL", "DEFINITE_FLOOR"]

#: psd_fix="clip" diagonalises G completely up to this size (LAPACK), beyond it uses Lanczos
CLIP_DENSE_MAX = 4000
#: at most this many negative eigenpairs are clipped by Lanczos; the rest are shifted (see apply_psd_fix)
CLIP_LANCZOS_MAX = 200
PSD_FIXES = ("shift", "clip", "none")
#: relative Lanczos tolerance of ``psd_fix="none"``, which needs only the sign of lambda_min (see apply_psd_fix)
NONE_SIGN_TOL = 0.1


#: bytes of the dense copy of G up to which a Cholesky factorisation may certify G definite (see
#: :func:`definite_beyond`); also at most a quarter of the available memory.  1.5 GiB (14,188 genes): the
#: multithreaded ``dpotrf`` of scipy's OpenBLAS (0.3.31) crashes the process (SIGSEGV) from about 15,600 genes
#: (1.9 GiB; 15,500 passed) at 2 to 8 threads, the single-threaded one not -- at 2 GiB (16,384 genes) a definite
#: Q of 15,600-16,384 genes killed ``qpfs`` instead of falling back to Lanczos
CHOLESKY_MAX_BYTES = 3 * 2**29
#: columns of the lower triangle :func:`cholesky_factor` symmetrises at a time (a float64 block of M x this)
LOWER_BLOCK = 256


def certificate_bytes(m):
    """Peak memory of the Cholesky certificate of an M x M G beside Q (bytes; for the memory guard): 0 where
    :func:`cholesky_factor` would skip it (its dense copy over :data:`CHOLESKY_MAX_BYTES` or a quarter of the
    available memory), else the dense float64 copy, one :data:`LOWER_BLOCK`-column block of its symmetrisation
    and the ~24 vectors of the Lanczos run on the inverse (:func:`eigenvalue_above`) that holds the factor.  It
    runs before the QP solves and is freed before them (the per-class QPs of ``qpfs_cover`` share one)."""
    m = int(m)
    if m == 0 or not simplex_qp.dense_copy_fits(m, CHOLESKY_MAX_BYTES):
        return 0
    return 8 * m * (m + LOWER_BLOCK + 24)


def definite_beyond(G, floor):
    """Whether ``G - floor I`` has a Cholesky factor, i.e. lambda_min(G) > ``floor`` (to rounding): one LAPACK
    ``potrf`` on a dense copy, M^3/3 flops of multithreaded BLAS-3 (:func:`cholesky_factor`).  ``False`` also
    when the copy would exceed :data:`CHOLESKY_MAX_BYTES` or a quarter of the available memory (then nothing is
    certified).

    It replaces the full-precision Lanczos run (tol 1e-10) that certified a definite G: near the bottom of a
    clustered spectrum that took 1,400-2,000 products, each reading all of Q with one thread -- 13 s of a 27 s
    ``qpfs`` run on 20,000 cells x 3,000 genes (2 cores), and most of the QP stage at 5,000 genes, where the
    factorisation takes about a second.  The factorisation stops at the first non-positive pivot, so an
    indefinite G costs less than a full one.
    """
    return cholesky_factor(G, floor) is not None


#: :func:`cholesky_factor` first factorises this leading block of a larger G (k^3 / 3 flops)
LEADING_CHECK = 512


def cholesky_factor(G, floor):
    """The lower Cholesky factor of ``G - floor I`` (a Fortran-ordered array; its upper triangle is junk), or
    None when that matrix is not definite or its dense copy would not fit (see :func:`definite_beyond`)."""
    import scipy.linalg as sla

    if G.n == 0 or not simplex_qp.dense_copy_fits(G.n, CHOLESKY_MAX_BYTES):
        return None
    k = LEADING_CHECK
    if G.n > 2 * k and G.Q is not None and G.index is None and G.U is None:
        # an indefinite leading block proves G indefinite (interlacing): on microarray MI matrices the first
        # non-positive pivot comes early (Colon 42, Leukemia 316, SRBCT 385), but a failed factorisation of all of
        # G still updated the whole trailing matrix for every panel before it (0.27 s at 2,308 genes)
        lead = np.array(G.scale * G.Q[:k, :k], dtype=np.float64, order="F")
        lead[np.diag_indices(k)] += G.shift - floor
        if sla.lapack.dpotrf(lead, lower=1, clean=0, overwrite_a=1)[1] != 0:
            return None
        del lead  # not held beside the whole copy
    Gd = _dense_lower(G)
    Gd[np.diag_indices(G.n)] -= floor
    L, info = sla.lapack.dpotrf(Gd, lower=1, clean=0, overwrite_a=1)
    return L if info == 0 else None


def _dense_lower(G):
    """``G.dense()`` as a Fortran-ordered float64 array whose lower triangle (what ``potrf(lower=1)`` reads) is
    that of ``G.dense()`` bit for bit: the one n x n allocation of the Cholesky certificate.  ``G.dense()``
    followed by the Fortran copy held two float64 copies of G at once (a float64 cast of a float32 Q, its scaled
    copy, then ``0.5 (G + G^T)`` and the Fortran copy: 16 bytes per entry beside Q, 3.8 GiB at 16,000 genes); here
    Q is cast and scaled into the array itself and the lower triangle is symmetrised a block of columns at a time
    (each block reads only columns that no earlier block wrote).  The upper triangle keeps G unsymmetrised (the
    factor's upper triangle is junk either way).  G with an index or a low-rank part: ``G.dense()``."""
    if G.Q is None or G.index is not None or G.U is not None:
        return np.array(G.dense(), dtype=np.float64, order="F")
    n = G.n
    Gd = np.empty((n, n), dtype=np.float64, order="F")
    np.multiply(np.asarray(G.Q), G.scale, out=Gd, dtype=np.float64)
    Gd += 0.0  # as G.dense()'s zeros + scale Q: -0.0 becomes 0.0
    Gd[np.diag_indices(n)] += G.shift
    buf = np.empty((n, min(LOWER_BLOCK, n)), order="F")
    for c0 in range(0, n, LOWER_BLOCK):
        c1 = min(c0 + LOWER_BLOCK, n)
        block = np.add(Gd[c0:, c0:c1], Gd[c0:c1, c0:].T, out=buf[:n - c0, :c1 - c0])
        block *= 0.5
        Gd[c0:, c0:c1] = block
    return Gd


def eigenvalue_above(factor, floor, tol=1e-10):
    """lambda_min(G) of a G certified definite beyond ``floor`` by its factor (:func:`cholesky_factor`): Lanczos on
    the inverse, ``mu = lambda_max((G - floor I)^-1)`` by triangular solves, and ``lambda_min = floor + 1 / mu``.
    The bottom of G's spectrum is the well separated top of the inverse's, so a few products suffice where
    Lanczos on G crawled (a clustered bottom, 20,000 cells x 2,000 genes: 1,572 products at the loose
    tolerance, 4.3 s of ``qpfs(psd_fix="shift")``; 22 here, 0.18 s).  Returns ``(value, info)`` as :func:`bioqpfs._kernels.simplex_qp.smallest_eigenvalue`
    (``method="cholesky"``)."""
    import scipy.linalg as sla
    import scipy.sparse.linalg as ssl

    n = factor.shape[0]
    count = [0]

    def solve(v):
        count[0] += 1
        return sla.cho_solve((factor, True), np.asarray(v, dtype=np.float64).ravel(), check_finite=False)

    if n == 1:
        mu = float(solve(np.ones(1))[0])
    else:
        op = ssl.LinearOperator((n, n), matvec=solve, dtype=np.float64)
        mu = float(ssl.eigsh(op, k=1, which="LA", tol=tol, v0=np.ones(n) / np.sqrt(n), ncv=min(n - 1, 20),
                             return_eigenvectors=False)[0])
    info = dict(method="cholesky", converged=True, tol=float(tol), matvecs=int(count[0]))
    return float(floor + 1.0 / mu), info


def apply_psd_fix(G, psd_fix, *, rel_margin=1e-9, known_min_eigenvalue=None):
    """Make the quadratic term ``G`` (a :class:`~bioqpfs._kernels.simplex_qp.QPMatrix`) usable.

    Parameters
    ----------
    G : QPMatrix
        The quadratic term, e.g. ``(1 - alpha) Q``.
    psd_fix : {"shift", "clip", "none"}
        ``"shift"``: ``G + lambda I`` with the smallest lambda making it definite (eq. 13 of
        Nguyen et al. 2014; what quadprog-based QPFS has always done here).
        ``"clip"``: the nearest PSD matrix in Frobenius norm (negative eigenvalues set to 0).  Up
        to :data:`CLIP_DENSE_MAX` genes by a full LAPACK eigendecomposition; beyond, the negative
        eigenpairs are found by Lanczos (``eigsh(which="SA")``) in growing batches.  When more than
        :data:`CLIP_LANCZOS_MAX` eigenvalues are negative, the most negative
        :data:`CLIP_LANCZOS_MAX` are clipped and the remaining ones (all in ``[theta, 0)``,
        ``theta`` the largest one found) are removed by a shift ``-theta``, recorded as
        ``psd_fix_applied="clip+shift"``.
        ``"none"``: keep G; if it is indefinite the QP is non-convex and the large-scale solver
        returns a stationary (KKT) point, reported as local.
    known_min_eigenvalue : float, optional
        The smallest eigenvalue of G (with any safety factor already applied), when the caller knows it
        (e.g. C problems on the same Q scaled by 1 - alpha_c): ``"shift"`` and ``"none"`` then skip the
        eigen-solve.  Ignored by ``"clip"``, which needs the eigenvectors.

    Returns
    -------
    G_fixed : QPMatrix
    convex : bool
    diag : dict
        ``psd_fix``, ``psd_fix_applied``, ``min_eigenvalue`` (of G before the fix; with ``"none"`` on an
        indefinite G beyond 500 genes a Lanczos Ritz value to :data:`NONE_SIGN_TOL`, i.e. within a few
        percent above the true value, as only its sign is used),
        ``indefinite``, ``psd_shift``, ``n_clipped`` (eigenvalues set to 0).
    """
    if psd_fix not in PSD_FIXES:
        raise ValueError(f"unknown psd_fix {psd_fix!r}; choose one of {PSD_FIXES}")
    m = G.n
    dense_small = m <= CLIP_DENSE_MAX
    diag = G.diagonal()
    margin = rel_margin * max(1e-300, float(np.max(np.abs(diag))))
    out = dict(psd_fix=psd_fix, psd_shift=0.0, n_clipped=0)
    if not np.any(diag):  # zero diagonal (EQPFS with lambda = 0, qpfs_cover's self_redundancy="constant"): scale
        # the margin by the spectrum, from the caller's value when it gives one (C problems on one Q: one eigen-solve)
        known = known_min_eigenvalue is not None and psd_fix != "clip"
        lam_ref = known_min_eigenvalue if known else simplex_qp.smallest_eigenvalue(G.dense() if m <= 500 else G)
        margin = rel_margin * max(1e-300, abs(float(lam_ref)))
    if psd_fix == "clip" and dense_small:
        Gd = G.dense()
        lam, V = np.linalg.eigh(Gd)
        lam_min = float(lam[0])
        neg = lam < 0
        out.update(min_eigenvalue=lam_min, indefinite=bool(lam_min < 0), n_clipped=int(neg.sum()))
        if neg.any():
            Vn = V[:, neg]
            Gd -= (Vn * lam[neg]) @ Vn.T  # V max(Lambda, 0) V^T
            Gd = 0.5 * (Gd + Gd.T)
            out["psd_fix_applied"] = "clip"
        else:
            out["psd_fix_applied"] = "none needed"
        out["psd_shift"] = margin  # strict definiteness for quadprog / a unique optimum
        return simplex_qp.QPMatrix(Gd, shift=margin), True, out

    # dense LAPACK for moderate M; Lanczos beyond, whose Ritz value sits just above lambda_min,
    # so the shift gets a relative safety factor there
    small = m <= 500
    if known_min_eigenvalue is not None and psd_fix != "clip":
        lam_min, einfo = float(known_min_eigenvalue), dict(method="given", converged=True, tol=0.0, matvecs=0)
    else:
        # psd_fix="none" only needs the sign (convex or not) and a reported value.  A Ritz value is never below
        # lambda_min, so a negative one from a loose Lanczos run already proves G indefinite: NONE_SIGN_TOL cuts
        # the products 5-13x (N = 100: 535 -> 41 at 2,000 genes, 383 -> 79 at 10,000; each reads all of Q) for
        # a reported value within ~2% (above lambda_min).  A non-negative one does not settle convexity and is
        # confirmed at full precision.
        # A definite G (beyond 500 genes) is certified by a Cholesky factorisation instead (:func:`cholesky_factor`:
        # lambda_min > 0 for "none", > the margin for "shift", where the shift is then 0 whatever the value), and
        # the value reported comes from the factor (:func:`eigenvalue_above`: Lanczos on the inverse, a few
        # products, to 1e-10) -- before, a loose run on G, which took 1,572 products on a clustered spectrum.
        factor = cholesky_factor(G, margin) if psd_fix == "shift" and not small else None
        if factor is not None:
            lam_min, einfo = eigenvalue_above(factor, margin)
        else:
            tol = NONE_SIGN_TOL if psd_fix == "none" else None
            lam_min, einfo = simplex_qp.smallest_eigenvalue(G.dense() if small else G, return_info=True, tol=tol)
            if psd_fix == "none" and einfo["method"] == "lanczos" and lam_min >= 0:
                factor = cholesky_factor(G, 0.0)
                lam_min, einfo = (eigenvalue_above(factor, 0.0) if factor is not None
                                  else simplex_qp.smallest_eigenvalue(G, return_info=True))
    safety = 1.0 + 10 * einfo["tol"]  # certified: the Ritz value is >= lambda_min > margin, so no shift follows
    out.update(min_eigenvalue=lam_min, indefinite=bool(lam_min < 0), eigen_method=einfo["method"],
               eigen_converged=einfo["converged"], eigen_matvecs=einfo["matvecs"])
    if psd_fix == "none":
        out["psd_fix_applied"] = "none" if lam_min < 0 else "none needed"
        return G, lam_min >= 0, out
    if psd_fix == "shift" or lam_min >= 0:
        shift = max(0.0, margin - lam_min * safety)
        out.update(psd_shift=shift, psd_fix_applied="shift" if lam_min < 0 else "none needed")
        return G.with_shift(shift), True, out
    # clip by Lanczos on the negative part
    import scipy.sparse.linalg as ssl

    op = G.linear_operator()
    k = 16
    v0 = np.ones(m) / np.sqrt(m)
    while True:
        k = min(k, CLIP_LANCZOS_MAX, m - 1)
        with _threads.blas_limited(1):
            lam, V = ssl.eigsh(op, k=k, which="SA", tol=1e-8, v0=v0)
        order = np.argsort(lam)
        lam, V = lam[order], V[:, order]
        if lam[-1] >= 0 or k >= CLIP_LANCZOS_MAX or k >= m - 1:
            break
        k *= 4
    neg = lam < 0
    Gf = G.with_lowrank(V[:, neg], -lam[neg])
    out["n_clipped"] = int(neg.sum())
    if lam[-1] < 0:  # more negative eigenvalues than CLIP_LANCZOS_MAX: shift the rest away
        shift = -float(lam[-1]) * (1.0 + 1e-6) + margin
        out.update(psd_fix_applied="clip+shift", psd_shift=shift)
        return Gf.with_shift(shift), True, out
    out.update(psd_fix_applied="clip", psd_shift=margin)
    return Gf.with_shift(margin), True, out



#: :func:`min_eigenvalue_with_safety` certifies a definite Q down to this fraction of its largest diagonal entry
#: (1,000 times the psd margin of :func:`apply_psd_fix`)
DEFINITE_FLOOR = 1e-6


def min_eigenvalue_with_safety(Q):
    """For ``solve_qpfs(..., q_min_eigenvalue=)`` when C problems share Q (``qpfs_cover``: lambda_min((1 - alpha_c)
    Q) = (1 - alpha_c) lambda_min(Q)): a value from which every per-class psd shift is the exact one.

    Up to 500 genes lambda_min(Q) by LAPACK.  Beyond, when a Cholesky factorisation certifies lambda_min(Q) > c =
    :data:`DEFINITE_FLOOR` x the largest diagonal entry (:func:`definite_beyond`), that lower bound c: every
    shift ``max(0, margin - (1 - alpha_c) c)`` is then 0 (the margin is 1e-9 (1 - alpha_c) x the largest
    diagonal entry), as with the exact value.  Otherwise (an indefinite or nearly singular Q, whose shift needs
    the value) the full-precision Lanczos value times the relative safety factor :func:`apply_psd_fix` applies
    (a Ritz value is never below the true one).  The full run near the bottom of a clustered spectrum -- a
    definite MI matrix of sparse counts, 20,000 cells x 2,000 genes: lambda_min 3.2e-4, the next 4.6e-4 --
    took 3,653 products, 8.4 s of a 19.6 s default recipe on 2 cores, and ended without a Ritz value.
    """
    m = Q.shape[0]
    if m <= 500:
        lam, info = simplex_qp.smallest_eigenvalue(Q, return_info=True)
        return lam * (1.0 + 10 * info["tol"])
    G = simplex_qp.QPMatrix(Q, scale=1.0)
    floor = DEFINITE_FLOOR * float(np.max(np.abs(np.diagonal(Q))))
    if floor > 0 and definite_beyond(G, floor):
        return floor
    lam, info = simplex_qp.smallest_eigenvalue(G, return_info=True)
    return _rounded_down(lam * (1.0 + 10 * info["tol"]))


def _rounded_down(value, bits=32):
    """``value`` rounded toward -inf to ``bits`` significant bits (a lower bound stays one).  ARPACK draws its
    restart vectors from a LAPACK seed kept for the whole process (arpack-ng issues 218, 287), so repeated
    Lanczos runs on the same Q return Ritz values a few ulp apart and every psd shift, hence every weight, moved
    in the last bits from call to call; on the 2^-32 relative grid (below the 1e-9 safety margin) they agree."""
    if value == 0 or not np.isfinite(value):
        return value
    step = np.ldexp(1.0, int(np.frexp(value)[1]) - bits)
    return float(np.floor(value / step) * step)
