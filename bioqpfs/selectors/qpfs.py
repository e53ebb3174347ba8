"""Quadratic Programming Feature Selection (Rodriguez-Lujan et al., JMLR 2010).

    min_x  1/2 (1 - alpha) x^T Q x - alpha F^T x    s.t.  x_i >= 0,  sum_i x_i = 1     (eq. 2)

Q is the gene-gene redundancy (mutual information with Q_ii = H(X_i), or |Pearson|), F the class
relevance (I(X_i; C), or Hall's multiclass correlation), alpha defaults to
alpha_hat = q_bar / (q_bar + f_bar) (section 2, and eq. 9), and genes are ranked by weight with ties
broken by F (section 2.3, step 8).

At genome scale (this module, issue 3):

* the QP is solved by quadprog (small M) or by the large-scale solvers of
  :mod:`bioqpfs._kernels.simplex_qp` (``solver="active_set"``, the default, and ``"spg"``), which
  need only products of Q with sparse vectors and small principal blocks, so Q is kept once
  (float32 beyond :data:`FLOAT32_FROM` genes) and never copied;
* ``nystrom_rate=p`` runs QPFS+Nystrom exactly as published (section 2.2-2.3, steps 1-8) from
  ``ceil(p M)`` sampled rows of Q, never forming the M x M matrix;
* an indefinite Q (MI matrices are not PSD in general; Nguyen et al. 2014, section 1.2) is handled
  by ``psd_fix`` and always recorded in the diagnostics;
* ``preselected`` genes are forced into the panel and the rest is optimised given them.
"""
from __future__ import annotations

import time

import numpy as np

from .. import measures
from .._kernels import correlation as _corr
from .._kernels import information as _info
from .._kernels import nystrom as _nys
from .._kernels import simplex_qp
from .._selection import Selection
from .._validation import (
    Interval,
    Options,
    check_n_genes,
    check_random_state,
    describe_indices,
    memory_guard,
    parameter_constraints,
)
from ._common import RELEVANCES, SIMILARITIES, prepare, similarity_and_relevance, warn_constant, weights_and_ranking

__all__ = ["qpfs", "alpha_hat", "solve_qpfs", "apply_psd_fix", "resolve_preselected", "PSD_FIXES", "predicted_seconds"]

#: weights below this (the solution sums to 1) are exact zeros of the optimum up to solver round-off
WEIGHT_TOL = 1e-10
#: quadprog is O(M^3) in time and keeps several M x M arrays; beyond this it runs for many minutes
QUADPROG_MAX_GENES = 6000
#: Q is stored in float32 from this many genes on (halves the 8 M^2 bytes; entries keep ~7 digits)
FLOAT32_FROM = 5000
#: psd_fix="clip" diagonalises G completely up to this size (LAPACK), beyond it uses Lanczos
CLIP_DENSE_MAX = 4000
#: at most this many negative eigenpairs are clipped by Lanczos; the rest are shifted (see apply_psd_fix)
CLIP_LANCZOS_MAX = 200
PSD_FIXES = ("shift", "clip", "none")
NYSTROM_QPS = ("auto", "subspace", "lowrank")
SOLVERS = simplex_qp.SOLVERS
#: relative Lanczos tolerance of ``psd_fix="none"``, which needs only the sign of lambda_min (see apply_psd_fix)
NONE_SIGN_TOL = 0.1
#: nystrom_qp="auto" solves the published subspace QP (quadprog in k~ variables) up to this k~ and the
#: low-rank x-space QP beyond: quadprog measured 2.3 s at k~=100 and 15 s at k~=300 with all
#: M=20,000 constraints, and its cost grows ~k~^3 (5.7 s at k~=700 with only 800 constraints)
NYSTROM_SUBSPACE_MAX = 300


#: cost model of exact QPFS end to end, seconds ~ M^2 (A + B N): the MI matrix (M^2 entries, N samples
#: counted for each) dominates, the eigenvalue of the psd fix and the active-set solve add ~M^2.
#: Fitted to benchmarks/bench_qpfs.py on 2 shared cores (README "Speed, memory and threads").
PREDICT_PER_PAIR = 7e-8
PREDICT_PER_PAIR_SAMPLE = 1.5e-10


def predicted_seconds(n_samples, n_genes):
    """Rough end-to-end seconds of exact QPFS on ``n_samples`` x ``n_genes`` (within ~3x on the benchmark shapes).

    ``n_genes**2 * (PREDICT_PER_PAIR + PREDICT_PER_PAIR_SAMPLE * n_samples)``: ~12 s at 20,000 x 2,000
    (measured 7-28 s with load 2-7), ~34 s at 100 x 20,000 (63 s, load 6), ~60 s at 100,000 x 2,000
    (75-107 s, load 4), ~150 s at 2,000 x 20,000 (42-138 s, load 3-10).  Used for the hint ``tl.select_genes`` logs
    when an exact run is predicted to take over a minute.
    """
    return float(n_genes) ** 2 * (PREDICT_PER_PAIR + PREDICT_PER_PAIR_SAMPLE * float(n_samples))


def alpha_hat(Q, F):
    """alpha_hat = q_bar / (q_bar + f_bar): mean of all entries of Q vs mean of F (QPFS section 2, eq. 9)."""
    q_bar = float(np.mean(Q, dtype=np.float64))
    f_bar = float(np.mean(F))
    return _alpha_from_means(q_bar, f_bar)


def _alpha_from_means(q_bar, f_bar):
    if q_bar + f_bar <= 0:
        raise ValueError("QPFS cannot rank the genes: Q and F are both zero (no gene carries information after "
                         "discretization, so every weighting is equally good); use more samples or another "
                         "discretization (e.g. 'quantile')")
    return q_bar / (q_bar + f_bar), q_bar, f_bar


# --------------------------------------------------------------------------------------------
# indefinite Q
# --------------------------------------------------------------------------------------------

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
    if not np.any(diag):  # zero diagonal (EQPFS with lambda = 0): scale the margin by the spectrum
        margin = rel_margin * max(1e-300, abs(simplex_qp.smallest_eigenvalue(G.dense() if m <= 500 else G)))
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
        tol = NONE_SIGN_TOL if psd_fix == "none" else None
        lam_min, einfo = simplex_qp.smallest_eigenvalue(G.dense() if small else G, return_info=True, tol=tol)
        if tol is not None and einfo["method"] == "lanczos" and lam_min >= 0:
            lam_min, einfo = simplex_qp.smallest_eigenvalue(G, return_info=True)
    safety = 1.0 + 10 * einfo["tol"]
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
        with simplex_qp._blas_single_thread():
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


# --------------------------------------------------------------------------------------------
# the QP with forced genes
# --------------------------------------------------------------------------------------------

def resolve_preselected(preselected, m, feature_names=None, n_genes=None):
    """Forced genes as an int array (given order), from names or indices; clear errors otherwise.

    A name that occurs more than once in ``feature_names`` is ambiguous and an error (make the names
    unique, e.g. ``adata.var_names_make_unique()``, or pass integer indices).  The panel must hold every
    forced gene: ``n_genes`` smaller than the number of preselected genes is an error, never a silent
    drop of forced genes.
    """
    if preselected is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(preselected, (str, int, np.integer)):
        preselected = [preselected]
    try:
        items = list(preselected)
    except TypeError:
        raise TypeError(f"preselected must be a list of gene names or indices, got {preselected!r}") from None
    if not items:
        return np.zeros(0, dtype=np.int64)
    if all(isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in items):
        idx = np.asarray(items, dtype=np.int64)
        bad = idx[(idx < 0) | (idx >= m)]
        if bad.size:
            raise ValueError(f"preselected gene index(es) {describe_indices(bad)} out of range 0..{m - 1}")
    else:
        if feature_names is None:
            raise ValueError("preselected gene names given but no feature_names to look them up in; "
                             "pass feature_names=... or integer indices")
        lookup = {str(n): i for i, n in enumerate(feature_names)}
        missing = [str(p) for p in items if str(p) not in lookup]
        if missing:
            raise ValueError(f"preselected gene(s) not found among the genes: {', '.join(missing[:5])}"
                             f"{' ...' if len(missing) > 5 else ''}; check the names (case-sensitive)")
        wanted = {str(p) for p in items}
        names, counts = np.unique(np.asarray([str(n) for n in feature_names if str(n) in wanted]), return_counts=True)
        ambiguous = names[counts > 1]
        if ambiguous.size:
            raise ValueError(
                f"preselected gene name(s) {', '.join(ambiguous[:5])}{' ...' if ambiguous.size > 5 else ''} occur "
                "more than once among the gene names, so it is ambiguous which gene is meant; make the names unique "
                "(e.g. adata.var_names_make_unique()) or pass integer indices")
        idx = np.asarray([lookup[str(p)] for p in items], dtype=np.int64)
    uniq, counts = np.unique(idx, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"preselected lists gene(s) {describe_indices(uniq[counts > 1], feature_names)} more than once")
    if idx.size >= m:
        raise ValueError(f"all {m} genes are preselected; nothing is left to optimise")
    if n_genes is not None and n_genes < idx.size:
        raise ValueError(f"n_genes={n_genes} but {idx.size} genes are preselected, and every preselected gene must "
                         f"be in the panel; ask for n_genes >= {idx.size} or preselect fewer genes")
    return idx


def solve_qpfs(Q, F, alpha, *, solver="auto", psd_fix="shift", preselected=None, preselected_share=None,
               quad_scale=None, lin_scale=None, q_min_eigenvalue=None):
    """Solve min 1/2 (1-alpha) x^T Q x - alpha F^T x on the simplex.

    Parameters
    ----------
    Q : ndarray, shape (M, M)
        Symmetric redundancy (float32 or float64; never copied on the large-scale path).
    F : ndarray, shape (M,)
    alpha : float
        In [0, 1].  At alpha = 1 (or whenever the quadratic term vanishes, e.g. Q = 0) the problem is
        a linear program, solved exactly whatever ``solver`` says: all weight on the largest entry
        of the linear term, shared equally among ties (:func:`~bioqpfs._kernels.simplex_qp.solve_linear`).
    solver : {"auto", "quadprog", "active_set", "spg"}
        ``"auto"``: quadprog up to :data:`~bioqpfs._kernels.simplex_qp.QUADPROG_AUTO_MAX` genes,
        the active-set solver beyond (:func:`~bioqpfs._kernels.simplex_qp.solve_active_set`); all
        give the same optimum of a convex problem (1e-8 in the objective, 1e-6 in the weights).
    psd_fix : {"shift", "clip", "none"}
        See :func:`apply_psd_fix`.
    preselected : array of int, optional
        Forced genes P (indices into Q).  Formulation: each forced gene holds the fixed weight
        ``s / |P|`` (``s = preselected_share``) and the rest ``x_R = (1 - s) z``, z on the simplex,
        minimises the full objective (eq. 2) given x_P.  Dividing by (1 - s) and dropping
        constants this is again a simplex QP,

            min_z 1/2 (1-alpha)(1-s) z^T Q_RR z - [alpha F_R - (1-alpha) s Q_RP u]^T z,

        ``u = 1/|P|``: the cross term charges every remaining gene its redundancy with the forced
        panel, as mRMR does with already selected genes.  The psd fix applies to that problem.
    preselected_share : float in (0, 1), optional
        s; default ``|P| / n`` for a panel of n genes (set by :func:`qpfs`) or 0.5.
    quad_scale, lin_scale : float, optional
        Override (1 - alpha) and alpha (used by EQPFS: 2 alpha and 1).
    q_min_eigenvalue : float, optional
        The smallest eigenvalue of Q (safety factor included; see :func:`min_eigenvalue_with_safety`), when
        the caller solves several problems on the same Q: without preselected genes the psd fix uses
        ``(1 - alpha) * q_min_eigenvalue`` instead of an eigen-solve per call.

    Returns
    -------
    x : ndarray, shape (M,)
        Weights, summing to 1; entries below :data:`WEIGHT_TOL` are exact zeros.  Never NaN: a solver
        that fails numerically raises a ``ValueError``.
    diagnostics : dict
        solver, iterations, polish_iterations, kkt_residual, objective (eq. 2 with the original
        Q), objective_convexified (the problem actually solved), psd fix details, n_nonzero.
    """
    m = F.size
    c_quad = (1.0 - alpha) if quad_scale is None else float(quad_scale)
    c_lin = alpha if lin_scale is None else float(lin_scale)
    P = np.zeros(0, dtype=np.int64) if preselected is None else np.asarray(preselected, dtype=np.int64)
    F = np.asarray(F, dtype=np.float64)
    if P.size:
        s = 0.5 if preselected_share is None else float(preselected_share)
        if not 0.0 < s < 1.0:
            raise ValueError(f"preselected_share must lie in (0, 1), got {s}")
        R = np.setdiff1d(np.arange(m), P)
        u = np.full(P.size, 1.0 / P.size)
        cross = np.asarray(Q[P], dtype=np.float64).T @ u  # Q_{:,P} u (Q symmetric)
        G = simplex_qp.QPMatrix(Q, scale=c_quad * (1.0 - s), index=R)
        a = c_lin * F[R] - c_quad * s * cross[R]
    else:
        s, R = 0.0, np.arange(m)
        G = simplex_qp.QPMatrix(Q, scale=c_quad)
        a = c_lin * F
    if solver not in simplex_qp.SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; choose one of {simplex_qp.SOLVERS}")
    if solver == "quadprog" and R.size > QUADPROG_MAX_GENES:
        raise ValueError(f"quadprog on {R.size} genes would take very long (O(M^3)); use solver='auto' (active set)")
    if solver == "quadprog" or (solver == "auto" and R.size <= simplex_qp.QUADPROG_AUTO_MAX):
        memory_guard(4 * R.size ** 2 * 8, f"quadprog on {R.size} genes", ["spg"])
    if simplex_qp.is_linear(G, a):  # alpha = 1 (or Q = 0): a linear program, no eigenvalues or psd fix needed
        Gf, convex = G, True
        fix = dict(psd_fix=psd_fix, psd_fix_applied="none needed (no quadratic term)", psd_shift=0.0, n_clipped=0,
                   min_eigenvalue=0.0, indefinite=False)
    else:
        known = None if (q_min_eigenvalue is None or P.size) else c_quad * float(q_min_eigenvalue)
        Gf, convex, fix = apply_psd_fix(G, psd_fix, known_min_eigenvalue=known)
    if solver == "quadprog" and not convex:
        raise ValueError(f"Q is indefinite (smallest eigenvalue of (1-alpha)Q: {fix.get('min_eigenvalue', float('nan')):.3g}) "
                         "and psd_fix='none' leaves the QP non-convex, which quadprog cannot solve; use solver='spg' or 'auto' "
                         "(a local minimum), or psd_fix='shift'/'clip' (a convexified problem)")
    z, info = simplex_qp.solve(Gf, a, solver=solver, convex=convex)
    z = _finite_weights(z, info["solver"])
    x = np.zeros(m)
    x[R] = (1.0 - s) * z
    x[P] = s / P.size if P.size else 0.0
    supp = np.flatnonzero(x)
    Qx = np.asarray(Q[supp], dtype=np.float64).T @ x[supp]
    diagnostics = dict(
        solver=info["solver"], iterations=info["iterations"], polish_iterations=info["polish_iterations"],
        converged=info["converged"], local=bool(info["local"]), kkt_residual=info["kkt_residual"],
        objective=float(0.5 * c_quad * x @ Qx - c_lin * F @ x),
        objective_convexified=float(simplex_qp.objective(Gf, a, z)),
        **fix, n_nonzero=int(np.count_nonzero(x)),
    )
    if P.size:
        diagnostics.update(n_preselected=int(P.size), preselected_share=float(s))
    return x, diagnostics


def min_eigenvalue_with_safety(Q):
    """lambda_min(Q) times the relative safety factor :func:`apply_psd_fix` applies to a Lanczos estimate
    (a Ritz value is never below the true one), for ``solve_qpfs(..., q_min_eigenvalue=)``."""
    lam, info = simplex_qp.smallest_eigenvalue(Q if Q.shape[0] <= 500 else simplex_qp.QPMatrix(Q, scale=1.0),
                                               return_info=True)
    return lam * (1.0 + 10 * info["tol"])


def solver_working_bytes(m, solver="auto", psd_fix="shift"):
    """Peak working memory of :func:`solve_qpfs` on M genes, beyond Q itself (bytes; for the memory guard).

    quadprog (``solver="quadprog"``, or ``"auto"`` up to ``QUADPROG_AUTO_MAX`` genes): the dense G,
    the M x (M+1) constraints and its workspace, ~4 M^2 float64.  ``psd_fix="clip"`` up to
    :data:`CLIP_DENSE_MAX`: G dense, its eigenvectors and LAPACK's workspace, ~3 M^2 float64.
    Otherwise O(M) (the large-scale path): Lanczos vectors (40 for the shift; up to
    2 x :data:`CLIP_LANCZOS_MAX` + 1 when clipping), the float64 row blocks of the products
    (``_ROW_CHUNK`` rows) and ~20 SPG vectors.
    """
    quad = solver == "quadprog" or (solver == "auto" and m <= simplex_qp.QUADPROG_AUTO_MAX)
    dense = (4 if quad else 0) + (3 if psd_fix == "clip" and m <= CLIP_DENSE_MAX else 0)
    if dense:
        return dense * m * m * 8
    lanczos = {"clip": 2 * CLIP_LANCZOS_MAX + 1, "shift": 40}.get(psd_fix, 0)
    return (lanczos + simplex_qp._ROW_CHUNK + 20) * m * 8


def _finite_weights(z, solver):
    """Zero the round-off weights and renormalise; a solver that returned NaN/Inf is an error, never an answer."""
    z = np.asarray(z, dtype=np.float64)
    if z.size == 0 or not np.isfinite(z).all() or not z.sum() > 0:
        raise ValueError(
            f"the QP solver ({solver}) returned invalid weights ({int((~np.isfinite(z)).sum())} of {z.size} not "
            "finite); this is a numerical failure on degenerate input -- try solver='spg', another psd_fix, or "
            "check that the genes carry information (enough samples, a suitable discretization)")
    z = z.copy()
    z[z < WEIGHT_TOL] = 0.0
    return z / z.sum()


# --------------------------------------------------------------------------------------------
# QPFS + Nystrom (section 2.2-2.3)
# --------------------------------------------------------------------------------------------

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


def _nystrom_qpfs(X, y_codes, F, table, *, similarity, base, rate, eig_threshold, nystrom_qp, alpha, rng,
                  P, share, psd_fix, n_error_rows=50):
    """Steps 2-7 of section 2.3.  Returns (x, alpha_used, alpha_hat, q_bar, f_bar, diagnostics)."""
    m = F.size
    t0 = time.perf_counter()
    rows = _nys.sample_rows(m, rate, rng)

    def q_rows(idx):
        if similarity == "mi":
            return _info.pairwise_information(table, None, "mi", rows=idx, base=base, dtype=np.float64)
        return _corr.abs_pearson(X, rows=idx, dtype=np.float64)

    memory_guard(3 * rows.size * m * 8, f"Nystrom with {rows.size} of {m} rows", ["lower_nystrom"])
    C = q_rows(rows)
    t_rows = time.perf_counter() - t0
    # negative_floor: positive eigenvalues of an indefinite A below |its most negative one| are
    # noise and would blow up B^T A^-1 B (see nystrom_eigh); the published method assumes PSD Q
    lam, U, ninfo = _nys.nystrom_eigh(C, rows, eig_threshold=eig_threshold, negative_floor=True)
    # eq. 9: mean of Q_hat = [[A, B], [B^T, B^T A^-1 B]] = C^T A^+ C (all of it, before the delta
    # cut), with A^-1 read as the pseudo-inverse on A's positive eigenspace (= A^-1 for PD A)
    a_hat, q_bar, f_bar = _alpha_from_means(ninfo["sum_Q_hat"] / m ** 2, float(np.mean(F)))
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
        z = _finite_weights(z, sol["solver"])
        x = np.zeros(m)
        if P.size:
            x[R] = (1.0 - share) * z
            x[P] = share / P.size
        else:
            x = z
    t_solve = time.perf_counter() - t1
    # ||Q - Q_hat||_F: sampled rows exactly, unsampled rows estimated from a random sample of them
    rest = np.setdiff1d(np.arange(m), rows)
    n_err = min(n_error_rows, rest.size)
    err_rows = np.sort(rng.choice(rest, size=n_err, replace=False)) if n_err else rest[:0]
    Ul = U * lam
    e_s = float(np.sum((C - Ul[rows] @ U.T) ** 2))
    q_s = float(np.sum(C ** 2))
    e_u = q_u = 0.0
    if n_err:
        Ce = q_rows(err_rows)
        e_u = float(np.sum((Ce - Ul[err_rows] @ U.T) ** 2)) * rest.size / n_err
        q_u = float(np.sum(Ce ** 2)) * rest.size / n_err
    xq = U.T @ x
    objective_hat = float(0.5 * (1.0 - alpha_used) * xq @ (lam * xq) - alpha_used * F @ x)
    diag = dict(
        nystrom_rate=float(rate), r=int(rows.size), k_tilde=k, eig_threshold=float(eig_threshold),
        gamma_bound=float((m + 1) * (m - k) * eig_threshold / 2.0),
        frobenius_error_estimate=float(np.sqrt(e_s + e_u)),
        relative_frobenius_error_estimate=float(np.sqrt((e_s + e_u) / max(q_s + q_u, 1e-300))),
        n_error_rows=int(n_err), nystrom_rank_A=ninfo["rank_A"], nystrom_A_negative=ninfo["dropped_A_negative"],
        nystrom_qp=used, psd_fix="nystrom", psd_fix_applied="negative eigenvalues of A dropped (Q_hat is PSD)",
        objective_nystrom=objective_hat, seconds_rows=t_rows, seconds_eigen=t_eig, seconds_qp=t_solve,
        solver=sol["solver"], iterations=sol["iterations"], polish_iterations=sol["polish_iterations"],
        converged=bool(sol["converged"]), local=False, n_nonzero=int(np.count_nonzero(x)),
    )
    if psd_fix != "shift":
        diag["psd_fix_requested"] = psd_fix
    return x, alpha_used, a_hat, q_bar, f_bar, diag


# --------------------------------------------------------------------------------------------
# public selector
# --------------------------------------------------------------------------------------------

def _relevance_of_kept(relevance, m_total, keep):
    """A precomputed relevance vector, one value per gene of X (as ``measures.relevance`` returns it), reduced
    to the genes that stay in the QP (constant genes are dropped); a vector over the kept genes passes as is."""
    if relevance is None or isinstance(relevance, str):
        return relevance
    try:
        F = np.asarray(relevance, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"relevance must be one of {RELEVANCES} or a vector of numbers, one per gene") from None
    if F.shape == (m_total,):
        return F[keep]
    if F.shape == (keep.size,):
        return F
    raise ValueError(f"relevance vector has shape {F.shape}; expected ({m_total},), one value per gene of X "
                     "(as bioqpfs.measures.relevance(X, y) returns it)")


@parameter_constraints(
    similarity=Options(*SIMILARITIES), alpha=Interval("real", 0, 1, none=True), discretization=Options(*measures.DISCRETIZATIONS),
    n_bins=Interval("integer"), solver=Options(*SOLVERS), psd_fix=Options(*PSD_FIXES),
    nystrom_rate=Interval("real", 0, 1, closed="right", none=True), eig_threshold=Interval("real", 0, None),
    nystrom_qp=Options(*NYSTROM_QPS), preselected_share=Interval("real", 0, 1, closed="neither", none=True),
    class_weight=Options(*_info.CLASS_WEIGHTS))
def qpfs(X, y, *, n_genes=None, similarity="mi", relevance=None, alpha=None, discretization="mean_sd",
         n_bins=3, base=2, solver="auto", psd_fix="none", nystrom_rate=None, eig_threshold=0.0,
         nystrom_qp="auto", preselected=None, preselected_share=None, class_weight=None, random_state=0,
         feature_names=None):
    """Rank genes with QPFS (exact, or QPFS+Nystrom).

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
    relevance : {"mi", "hall", "mst", "mst_cpx"} or array, optional
        F: I(X_i; C) (default with MI), Hall's multiclass correlation (default with correlation), the
        minimum-spanning-tree relevances of Sousa et al. section 3.1 (see ``measures.relevance``), or a
        precomputed non-negative vector with one value per gene of X, as ``measures.relevance(X, y)``
        returns it (the entries of constant genes, which are left out of the QP, are ignored).
    alpha : float in [0, 1], optional
        Relevance/redundancy trade-off; default alpha_hat = q_bar / (q_bar + f_bar) (eq. 9; with
        Nystrom q_bar is the mean of the Nystrom Q_hat).  ``alpha=1`` is pure relevance: the QP
        becomes a linear program, "equivalent to the MaxRel criterion" (section 2): all weight goes
        to the gene of largest F, shared equally when several tie, and the other genes rank by F.
        Every solver path returns exactly that (:func:`~bioqpfs._kernels.simplex_qp.solve_linear`).
        ``alpha=0`` is pure redundancy (only 1/2 x^T Q x is minimised; F breaks ties in the ranking).
    discretization : {"mean_sd", "quantile", "zero_quantile", "mdl", "auto", None}
        For MI: QPFS section 2.5 mean +- sd bins by default; ``None`` if X holds codes; ``"auto"``
        chooses ``"zero_quantile"`` for zero-inflated (single-cell) data, else ``"mean_sd"``
        (see :func:`bioqpfs.measures.discretize`; the rule used is in ``params["discretization_used"]``).
    n_bins : int
        Bins for ``"quantile"`` and ``"zero_quantile"``.
    base : float
        Logarithm base of MI (does not change the ranking).
    solver : {"auto", "quadprog", "active_set", "spg"}
        QP solver of the exact problem: quadprog (Goldfarb--Idnani, O(M^3), up to 6,000 genes), the
        working-set solver ``"active_set"`` (grows the support from the best gene, dense solves on it
        and one product with its rows of Q per step: its cost follows the number of non-zero weights,
        e.g. 0.5 s instead of 160 s with spg at 20,000 cells x 2,000 genes), or the spectral projected
        gradient + active-set polish ``"spg"`` (products of Q with sparse vectors only).  All reach the
        exact optimum to round-off.  ``"auto"``: quadprog up to 300 genes, ``"active_set"`` beyond.
    psd_fix : {"shift", "clip", "none"}
        What to do when (1 - alpha) Q is indefinite (see :func:`apply_psd_fix`); always recorded in
        ``diagnostics`` (``psd_fix_applied``, ``min_eigenvalue``, ``psd_shift``, ``n_clipped``,
        ``local``).  Evidence: ``benchmarks/README.md``, "psd_fix" (``benchmarks/bench_qpfs.py
        --psd-evidence`` on SRBCT, Colon and Leukemia).  The shift (eq. 13's lambda I) adds the
        same large penalty to every gene (lambda ~ 1.4 on SRBCT against diagonals ~ 0.8), so the
        optimum spreads over many genes and the top-10 panel is worse; clip and none stay close to
        the published objective and give a lower CV error than shift on all three data sets (none
        the lowest), shift the most stable top-20 on two of three.  "none" is also the cheapest (no eigendecomposition beyond one Lanczos run), so it is the default.
        On a PSD Q it is the exact optimum; on an indefinite Q it is a local minimum (a KKT point whose
        face Hessian is positive definite, with the default active-set solver) of the
        non-convex QP from a deterministic start (``diagnostics["local"]`` says so).  Pass
        ``psd_fix="shift"`` for the convexified problem (a global optimum of a changed objective). With
        ``nystrom_rate`` the fix is moot: Q_hat is PSD by construction (see ``eig_threshold``).
    nystrom_rate : float in (0, 1], optional
        p: run QPFS+Nystrom (section 2.3) from ``r = ceil(p M)`` rows of Q sampled uniformly
        without replacement (``random_state``); only those rows (plus a few for the error
        estimate) are computed, the M x M matrix is never formed.
    eig_threshold : float
        delta of section 2.2: Nystrom eigenvalues <= delta are dropped (k~ are kept).  Section 2.2
        assumes a PSD Q; for an indefinite MI matrix the sampled block A is indefinite too, and
        its negative eigenvalues and the positive ones up to |its most negative eigenvalue| are
        treated as noise in A^{-1/2} (``nystrom_eigh(..., negative_floor=True)``): without that
        the extension B^T A^-1 B blew up (relative error 6 instead of 0.47 at M=20,000, p=0.1).
        Hence with p = 1 Q_hat is Q without its eigenvalues <= |lambda_min(Q)| (Q itself when PSD).
    nystrom_qp : {"auto", "subspace", "lowrank"}
        ``"auto"``: "subspace" while k~ <= :data:`NYSTROM_SUBSPACE_MAX`, "lowrank" beyond (which one
        ran is in ``diagnostics["nystrom_qp"]``).
        ``"subspace"`` (as published, eq. 5): quadprog on y in R^k~ with the M + 1 constraints
        ``U y >= 0, 1^T U y = 1``, x = U y; x is confined to the span of the k~ eigenvectors.
        ``"lowrank"``: the same Q_hat = U Lambda U^T in x-space, solved by the large-scale solver on
        low-rank products: x ranges over the whole simplex, directions outside span(U) carry no
        curvature so only F acts there (a 1e-9 ridge makes the optimum unique).  The subspace
        problem is the low-rank one with the extra constraint x in span(U); its optimum is never
        lower, and it is cheap only while k~ is small (quadprog in k~ variables).  Its solutions
        are dense: x = U y can vanish on at most k~ - 1 genes (generically), so at least
        M - k~ + 1 weights are positive, and the ranking rests on small differences between them.
    preselected : sequence of str or int, optional
        Genes that must be in the panel (names need ``feature_names``): they are ranked first, in
        the given order, and the rest is optimised given them (formulation in :func:`solve_qpfs`).
        ``n_genes`` must be at least ``len(preselected)`` (a smaller panel could not hold them: error),
        and a name occurring more than once in ``feature_names`` is an error (ambiguous).
    preselected_share : float in (0, 1), optional
        Total weight of the forced genes; default ``|P| / n_genes`` (their share of the panel; 0.5
        when ``n_genes`` is not given or equals ``|P|``).
    class_weight : {None, "balanced"}
        ``"balanced"``: every class counts equally in Q and F (weighted counts, each sample of class c
        weighs ``N / (C n_c)``), so a rare cell type is as relevant as a common one.  Goes beyond the
        paper, which estimates the MI with the empirical class frequencies (``None``).  MI only.
    random_state : int, Generator or None, default 0 (seeded, as every face; None: unseeded)
        Seeds the Nystrom row sample (exact QPFS is deterministic).
    feature_names : sequence of str, optional

    Returns
    -------
    Selection
        ``weights`` (the QP solution x), ``ranking`` (all genes), ``diagnostics`` with alpha, q_bar,
        f_bar, the psd fix, objective, KKT residual, solver iterations and, with Nystrom, r, k~,
        the bound gamma = (M+1)(M-k~)delta/2 of section 2.2 and an estimate of ||Q - Q_hat||_F.

    Notes
    -----
    Constant genes carry no information: they are left out of the QP, get weight 0 and rank last (a
    warning lists them).  From :data:`FLOAT32_FROM` genes on, the exact Q is held in float32.
    """
    t0 = time.perf_counter()
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    m_total = X.shape[1]
    n_genes = check_n_genes(n_genes, m_total)
    P_all = resolve_preselected(preselected, m_total, feature_names, n_genes)
    keep = np.flatnonzero(~constant)
    if keep.size == 0:
        raise ValueError("every gene is constant across samples; there is nothing to select")
    warn_constant(constant, feature_names)
    m = keep.size
    pos = np.full(m_total, -1)
    pos[keep] = np.arange(m)
    P = pos[P_all][pos[P_all] >= 0]  # forced genes inside the QP (constant ones only keep their rank)
    if P.size >= m:
        raise ValueError("every non-constant gene is preselected; nothing is left to optimise")
    share = preselected_share
    if P_all.size and share is None:
        share = P_all.size / n_genes if (n_genes is not None and n_genes > P_all.size) else 0.5
    if P.size == 0:
        share = None
    Xk = X[:, keep]
    relevance = _relevance_of_kept(relevance, m_total, keep)
    rng = check_random_state(random_state)

    if nystrom_rate is None:
        if solver == "quadprog" and m > QUADPROG_MAX_GENES:
            raise ValueError(
                f"exact QPFS with quadprog on {m} genes would take very long (O(M^3)); use solver='auto' "
                f"(the active-set solver), restrict the genes (e.g. mask_var='highly_variable'), or use nystrom_rate=...")
        dtype = np.float32 if m >= FLOAT32_FROM else np.float64
        Q, F, relevance_used, _ = similarity_and_relevance(Xk, y_codes, similarity=similarity, relevance=relevance,
                                            discretization=discretization, n_bins=n_bins, base=base,
                                            need_full=True, dtype=dtype, class_weight=class_weight,
                                            working_bytes=solver_working_bytes(m, solver, psd_fix))
        t_measures = time.perf_counter() - t0
        a_hat, q_bar, f_bar = alpha_hat(Q, F)
        alpha_used = a_hat if alpha is None else float(alpha)
        t1 = time.perf_counter()
        x, solve_diag = solve_qpfs(Q, F, alpha_used, solver=solver, psd_fix=psd_fix, preselected=P,
                                   preselected_share=share)
        t_solve = time.perf_counter() - t1
        solve_diag["q_dtype"] = np.dtype(dtype).name
        del Q
    else:
        _, F, relevance_used, table = similarity_and_relevance(Xk, y_codes, similarity=similarity, relevance=relevance,
                                                discretization=discretization, n_bins=n_bins, base=base,
                                                need_full=False, class_weight=class_weight)
        t_measures = time.perf_counter() - t0
        t1 = time.perf_counter()
        x, alpha_used, a_hat, q_bar, f_bar, solve_diag = _nystrom_qpfs(
            Xk, y_codes, F, table, similarity=similarity, base=base, rate=float(nystrom_rate),
            eig_threshold=float(eig_threshold), nystrom_qp=nystrom_qp, alpha=alpha, rng=rng, P=P, share=share,
            psd_fix=psd_fix)
        t_solve = time.perf_counter() - t1

    weights, F_all, ranking = weights_and_ranking(m_total, keep, x, F, constant, P_all)
    params = dict(similarity=similarity, relevance=relevance_used, alpha=alpha_used, alpha_given=alpha is not None,
                  discretization=discretization, discretization_used=measures.resolve_discretization(X, discretization), n_bins=n_bins, base=base, solver=solve_diag["solver"],
                  psd_fix=psd_fix, n_genes=n_genes, class_weight=class_weight)
    if nystrom_rate is not None:
        params.update(nystrom_rate=float(nystrom_rate), eig_threshold=float(eig_threshold), nystrom_qp=nystrom_qp)
    if P_all.size:
        params.update(preselected=[int(i) for i in P_all] if feature_names is None
                      else [str(feature_names[i]) for i in P_all],
                      preselected_share=None if share is None else float(share))
    diagnostics = dict(
        alpha_hat=a_hat, q_bar=q_bar, f_bar=f_bar, **solve_diag, n_constant=int(constant.sum()),
        constant_genes=[int(i) for i in np.flatnonzero(constant)], n_classes=int(classes.size),
        seconds_measures=t_measures, seconds_solve=t_solve, seconds_total=time.perf_counter() - t0,
    )
    if P_all.size:
        diagnostics.update(n_preselected=int(P_all.size), preselected_share=None if share is None else float(share))
    return Selection("qpfs", weights, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                     relevance=F_all, feature_names=None if feature_names is None else np.asarray(feature_names))
