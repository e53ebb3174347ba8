"""The QPFS quadratic program with forced genes, shared by every QP selector (qpfs, eqpfs, qpfs_cover, the IKM family).

    min_x  1/2 c_q x^T Q x - c_l F^T x    s.t.  x_i >= 0,  sum_i x_i = 1,   x_P = s / |P|

(QPFS eq. 2 of Rodriguez-Lujan et al. 2010 with c_q = 1 - alpha, c_l = alpha; EQPFS eq. 13 of Nguyen et al.
2014 with c_q = 2 alpha, c_l = 1).  Forced (preselected) genes P hold the fixed total weight s; the rest is
optimised given them, which is again a simplex QP over the remaining genes R with the linear term shifted
by their redundancy with P (:func:`solve_qpfs`).  The psd fix of an indefinite Q is
:func:`bioqpfs._kernels.psd.apply_psd_fix`; the solvers are :mod:`bioqpfs._kernels.simplex_qp`.
"""
from __future__ import annotations

import numpy as np

from .. import _threads
from .._kernels import simplex_qp
from .._kernels.psd import CLIP_DENSE_MAX, CLIP_LANCZOS_MAX, apply_psd_fix, certificate_bytes
from .._validation import available_memory, memory_guard
from ._common import preselected_record, resolve_preselected, warn_constant

__all__ = ["WEIGHT_TOL", "QUADPROG_MAX_GENES", "FLOAT32_FROM", "SOLVERS", "alpha_hat", "alpha_from_means", "solve_qpfs",
           "solver_working_bytes", "active_set_bytes", "finite_weights", "forced_in_qp", "kept_and_forced",
           "preselected_params"]

#: weights below this (the solution sums to 1) are exact zeros of the optimum up to solver round-off
WEIGHT_TOL = 1e-10
#: quadprog is O(M^3) in time and keeps several M x M arrays; beyond this it runs for many minutes
QUADPROG_MAX_GENES = 6000
#: Q is stored in float32 from this many genes on (halves the 8 M^2 bytes; entries keep ~7 digits)
FLOAT32_FROM = 5000
SOLVERS = simplex_qp.SOLVERS


def alpha_hat(Q, F):
    """alpha_hat = q_bar / (q_bar + f_bar): mean of all entries of Q vs mean of F (QPFS section 2, eq. 9)."""
    q_bar = float(np.mean(Q, dtype=np.float64))
    f_bar = float(np.mean(F))
    return alpha_from_means(q_bar, f_bar)


def alpha_from_means(q_bar, f_bar):
    if q_bar + f_bar <= 0:
        raise ValueError("QPFS cannot rank the genes: Q and F are both zero (no gene carries information after "
                         "discretization, so every weighting is equally good); use more samples or another "
                         "discretization (e.g. 'quantile')")
    return q_bar / (q_bar + f_bar), q_bar, f_bar



def forced_in_qp(P_all, keep, m_total, n_genes, preselected_share):
    """The forced genes inside the QP and their total weight.

    Parameters
    ----------
    P_all : ndarray of int
        Forced genes as indices into X (from :func:`bioqpfs.selectors._common.resolve_preselected`).
    keep : ndarray of int
        The genes of X in the QP (the non-constant ones), in order.
    m_total : int
        The number of genes of X.
    n_genes : int or None
        The panel size.
    preselected_share : float or None
        The user's total weight of the forced genes; default ``|P| / n_genes`` (their share of the panel),
        0.5 when ``n_genes`` is not given or equals ``|P|``.

    Returns
    -------
    P : ndarray of int
        Positions among ``keep`` of the forced genes that are in the QP (a constant forced gene only keeps
        its rank).
    share : float or None
        s, None when no forced gene is in the QP.
    """
    m = keep.size
    pos = np.full(m_total, -1)
    pos[keep] = np.arange(m)
    P = pos[P_all][pos[P_all] >= 0]
    if P.size and P.size >= m:
        raise ValueError("every non-constant gene is preselected; nothing is left to optimise")
    share = preselected_share
    if P_all.size and share is None:
        share = P_all.size / n_genes if (n_genes is not None and n_genes > P_all.size) else 0.5
    return P, (share if P.size else None)


def kept_and_forced(preselected, constant, feature_names, n_genes, preselected_share=None, *, min_kept=1):
    """The genes a QP selector optimises over and its forced genes, in one step for every QP selector.

    Validates ``preselected=`` (:func:`bioqpfs.selectors._common.resolve_preselected`), keeps the non-constant
    genes (fewer than ``min_kept`` is an error; the constant ones are reported by a warning) and places the
    forced genes in the QP (:func:`forced_in_qp`).

    Parameters
    ----------
    preselected : None, str, int or sequence of str / int
        The user's forced genes.
    constant : ndarray of bool, shape (M,)
        The constant genes of X (from :func:`bioqpfs.selectors._common.prepare`).
    feature_names : sequence of str or None
    n_genes : int or None
        The panel size (already checked).
    preselected_share : float or None
        The user's total weight of the forced genes (see :func:`forced_in_qp`).
    min_kept : int
        The fewest non-constant genes the method can work with.

    Returns
    -------
    P_all : ndarray of int
        The forced genes as indices into X.
    keep : ndarray of int
        The non-constant genes of X, in order.
    P : ndarray of int
        Positions among ``keep`` of the forced genes in the QP.
    share : float or None
        Their total weight (see :func:`forced_in_qp`).
    """
    m_total = constant.size
    P_all = resolve_preselected(preselected, m_total, feature_names, n_genes, constant)
    keep = np.flatnonzero(~constant)
    if keep.size < min_kept:
        raise ValueError("every gene is constant across samples; there is nothing to select" if min_kept == 1
                         else f"fewer than {min_kept} non-constant genes; there is nothing to select")
    warn_constant(constant, feature_names)
    P, share = forced_in_qp(P_all, keep, m_total, n_genes, preselected_share)
    return P_all, keep, P, share


def preselected_params(P_all, feature_names, share=None):
    """``params`` entries recording the forced genes (names when known) and their share; ``{}`` without any."""
    if not P_all.size:
        return {}
    return dict(**preselected_record(P_all, feature_names), preselected_share=None if share is None else float(share))


def solve_qpfs(Q, F, alpha, *, solver="auto", psd_fix="shift", preselected=None, preselected_share=None,
               quad_scale=None, lin_scale=None, q_min_eigenvalue=None, exclude=None):
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
        See :func:`bioqpfs._kernels.psd.apply_psd_fix`.
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
        The smallest eigenvalue of Q (safety factor included), or for a Q certified definite a lower bound whose
        shifts are the exact ones (see :func:`bioqpfs._kernels.psd.min_eigenvalue_with_safety`), when the caller
        solves several problems on the same Q: without preselected genes the psd fix uses
        ``(1 - alpha) * q_min_eigenvalue`` instead of an eigen-solve per call (reported as ``eigen_method="given"``).
    exclude : array of int, optional
        More genes (indices into Q) known to carry nothing, treated as :func:`null_genes`' are: EQPFS sets every
        diagonal entry of its matrix to lambda, so its genes of one level do not show a zero row.

    Genes that carry nothing (:func:`null_genes`: a zero row of Q and a zero linear term -- for MI, one level
    after discretisation, as ``discretization="mdl"`` leaves most genes of a microarray) are a sink for the
    simplex's mass: the QP's optimum puts weight t on them (after the psd shift d, K of them cost only
    ``d t^2 / (2K)``; with ``psd_fix="none"`` nothing, and the solver may put all of t on one).  That mass lowers the
    redundancy term's pull on the others (their part of the objective is that of a problem whose quadratic term is
    scaled by 1 - t), which is part of the published QP and of its panels (solving without them made the MDL
    panels of Leukemia much worse: balanced accuracy 0.60-0.77 instead of 0.88-0.96).  But a gene that carries
    nothing must not be in a panel (one was ranked first): the returned weights move their mass, proportionally,
    onto the other non-forced genes -- the same ranking among those, the null genes at weight 0
    (``diagnostics["null_weight"]``: the mass moved); when the QP gave those nothing, the forced genes hold the
    whole weight (else the weight follows the relevance).

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
    z, info = _solve_pooling_null_genes(Q, R, Gf, a, solver, convex, fix)
    z = finite_weights(z, info["solver"])
    x = np.zeros(m)
    x[R] = (1.0 - s) * z
    x[P] = s / P.size if P.size else 0.0
    supp = np.flatnonzero(x)
    Qx = np.asarray(Q[supp], dtype=np.float64).T @ x[supp]
    objective = float(0.5 * c_quad * x @ Qx - c_lin * F @ x)   # the QP's optimum (before the null genes' mass moves)
    null = R[null_genes(Q, R, a)]
    if exclude is not None and len(exclude):
        null = np.union1d(null, np.intersect1d(R, np.asarray(exclude, dtype=np.int64)))
    moved = float(x[null].sum()) if null.size else 0.0
    rest = (1.0 - s) - moved
    if moved > 0:
        x[null] = 0.0
        if rest > WEIGHT_TOL:   # their mass onto the other non-forced genes: the same ranking among those
            x[R] *= (1.0 - s) / rest
        elif P.size:            # the QP gave the other genes nothing: the forced ones hold the whole panel
            x[P] = 1.0 / P.size
        else:                   # nothing but the sink had weight: by relevance (what ranks them anyway)
            f = np.clip(np.asarray(F, dtype=np.float64)[R], 0.0, None)
            x[R] = f / f.sum() if f.sum() > 0 else 1.0 / R.size
    diagnostics = dict(
        solver=info["solver"], iterations=info["iterations"], polish_iterations=info["polish_iterations"],
        converged=info["converged"], local=bool(info["local"]), kkt_residual=info["kkt_residual"],
        objective=objective, objective_convexified=float(simplex_qp.objective(Gf, a, z)),
        **fix, n_nonzero=int(np.count_nonzero(x)), n_null_pooled=int(info.get("n_null_pooled", 0)),
        n_null=int(null.size), null_weight=moved,
    )
    if P.size:
        diagnostics.update(n_preselected=int(P.size), preselected_share=float(s))
    return x, diagnostics



def null_genes(Q, R, a, rows_at_once=1024, rtol=1e-12):
    """Positions (into ``R``) of the genes that carry nothing: a zero linear term ``a`` and a zero row of ``Q`` (for
    MI, ``Q_ii = H(X_i) = 0``: one level after discretisation, as MDL leaves most genes of a microarray).  Zero
    means at most ``rtol`` times the largest diagonal entry of Q (resp. the largest ``|a|``): the MI algebra leaves
    such a gene's entries at +-1e-14 instead of 0."""
    if not R.size:
        return np.zeros(0, dtype=np.int64)
    diag = np.abs(np.asarray(Q[R, R], dtype=np.float64))
    q_tol = rtol * float(diag.max())
    a_tol = rtol * float(np.max(np.abs(a)))
    cand = np.flatnonzero((np.abs(a) <= a_tol) & (diag <= q_tol))
    null = [np.zeros(0, dtype=np.int64)]
    for c0 in range(0, cand.size, rows_at_once):
        part = cand[c0:c0 + rows_at_once]
        null.append(part[np.max(np.abs(np.asarray(Q[R[part]], dtype=np.float64)), axis=1) <= q_tol])
    return np.concatenate(null)


def _solve_pooling_null_genes(Q, R, Gf, a, solver, convex, fix):
    """``simplex_qp.solve(Gf, a)``, with the genes that carry nothing (:func:`null_genes`) pooled into one.

    After a diagonal shift d > 0 each of the K null genes enters the problem only through ``d x_i^2 / 2`` (to
    rounding: their entries are zero to 1e-12 of the largest, :func:`null_genes`): they take equal weights at the
    optimum (the problem is strictly convex in them), and K equal weights summing to t
    cost ``d t^2 / (2K)``.  So one of them stands for all, its diagonal set to ``d / K``, and each of them gets a
    K-th of its weight: the same optimum.  Without it thousands of such genes (MDL codes of Leukemia:
    6,235 of 7,129 genes with one level) enter the active set with equal weights and push it to the first-order
    solver (the default recipe with ``discretization="mdl"`` on Leukemia: 27.8 s, against 4.4 s after pooling).
    Only for a shifted Q (``psd_fix="shift"``, or a convex Q with its safety margin); with ``psd_fix="none"`` the
    split among null genes is not unique and is left to the solver."""
    shift = float(getattr(Gf, "shift", 0.0))
    plain = isinstance(Gf, simplex_qp.QPMatrix) and Gf.U is None and Gf.Q is Q and fix.get("psd_fix_applied") in (
        "shift", "none needed")
    null = null_genes(Q, R, a) if plain and shift > 0 and convex else np.zeros(0, dtype=np.int64)
    if null.size < 2:
        return simplex_qp.solve(Gf, a, solver=solver, convex=convex)
    keep = np.setdiff1d(np.arange(R.size), null[1:])
    rep = int(np.searchsorted(keep, null[0]))
    index = keep if Gf.index is None else Gf.index[keep]
    unit = np.zeros((keep.size, 1))
    unit[rep, 0] = 1.0
    Gr = simplex_qp.QPMatrix(Q, scale=Gf.scale, shift=shift, index=index).with_lowrank(
        unit, np.array([shift * (1.0 / null.size - 1.0)]))
    zr, info = simplex_qp.solve(Gr, a[keep], solver=solver, convex=convex)
    z = np.zeros(R.size)
    share = zr[rep] / null.size
    z[keep] = zr
    z[null] = share
    info = dict(info, n_null_pooled=int(null.size))
    return z, info


def solver_working_bytes(m, solver="auto", psd_fix="shift"):
    """Peak working memory of :func:`solve_qpfs` on M genes, beyond Q itself (bytes; for the memory guard).

    quadprog (``solver="quadprog"``, or ``"auto"`` up to ``QUADPROG_AUTO_MAX`` genes): the dense G,
    the M x (M+1) constraints and its workspace, ~4 M^2 float64.  ``psd_fix="clip"`` up to
    :data:`CLIP_DENSE_MAX`: G dense, its eigenvectors and LAPACK's workspace, ~3 M^2 float64.
    Otherwise (the large-scale path) the larger of the problem's own working memory (:func:`_problem_bytes`:
    the active-set working set and O(M) vectors) and the Cholesky certificate of a definite G that comes before
    it (:func:`bioqpfs._kernels.psd.certificate_bytes`: a dense float64 copy of G, 8 M^2 -- twice a float32 Q --
    whenever it fits a quarter of the available memory; not counted, the estimate of ``qpfs`` on a definite Q of
    14,000 genes was 1.3 GiB against a 3.6 GiB peak).
    """
    work = _problem_bytes(m, solver, psd_fix)
    quad = solver == "quadprog" or (solver == "auto" and m <= simplex_qp.QUADPROG_AUTO_MAX)
    if quad or psd_fix == "clip":
        return work
    return max(work, certificate_bytes(m))


def _problem_bytes(m, solver, psd_fix):
    """One QP's own working memory on M genes (bytes): the dense forms of :func:`solver_working_bytes`, else the
    active-set working set, :func:`active_set_bytes`, and O(M): Lanczos vectors (40 for the shift; up to 2 x
    :data:`CLIP_LANCZOS_MAX` + 1 when clipping), the float64 row blocks of the products (``_ROW_CHUNK`` rows)
    and ~20 SPG vectors."""
    quad = solver == "quadprog" or (solver == "auto" and m <= simplex_qp.QUADPROG_AUTO_MAX)
    dense = (4 if quad else 0) + (3 if psd_fix == "clip" and m <= CLIP_DENSE_MAX else 0)
    if dense:
        return dense * m * m * 8
    lanczos = {"clip": 2 * CLIP_LANCZOS_MAX + 1, "shift": 40}.get(psd_fix, 0)
    return active_set_bytes(m) + (lanczos + simplex_qp._ROW_CHUNK + 20) * m * 8


def active_set_bytes(m):
    """Peak memory of the active-set working set on M genes (bytes): the Cholesky factor of G[S, S], up to
    ``min(M, ACTIVE_SET_MAX_SUPPORT)^2`` float64 (the solver hands over to SPG beyond), about three times over
    while it grows (the old factor, the new one, the block of the genes that join).  The SPG path's exact polish
    works on the same kind of working set."""
    support = min(int(m), simplex_qp.ACTIVE_SET_MAX_SUPPORT)
    return 3 * 8 * support ** 2


def class_qp_workers(m, psd_fix):
    """Worker threads for QPs on one shared Q of M genes solved side by side (``qpfs_cover``'s class problems).

    The worker count in force (``n_jobs``), as many as half the available memory holds at
    :func:`_problem_bytes` each (the active-set working set, :func:`active_set_bytes`, and the O(M) vectors; the
    shared Cholesky certificate comes before them, once).
    One with ``psd_fix="clip"`` (a dense eigen-solve per problem up to :data:`CLIP_DENSE_MAX` genes).
    """
    if psd_fix == "clip":
        return 1
    per_problem = _problem_bytes(m, "auto", psd_fix)
    return max(1, min(_threads.current(), int(available_memory()[0] // 2 // per_problem)))


def finite_weights(z, solver):
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

