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

The pieces live where they are shared: the QP with forced genes and alpha_hat in
:mod:`bioqpfs.selectors._qp` (also used by EQPFS, class-covering QPFS and the IKM family), the psd fixes in
:mod:`bioqpfs._kernels.psd`, QPFS+Nystrom in :mod:`bioqpfs.selectors.qpfs_nystrom` (its low-rank factors and
error estimate in :mod:`bioqpfs._kernels.nystrom`, shared with SPEC_CMI + Nystrom).  Their public names stay
importable from here.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from .. import measures
from .._docs import BATCH_DOC, HIERARCHY_DOC, N_BINS_DOC, RANDOM_STATE_DOC, Y_HIERARCHY_DOC, doc_params
from .._kernels import information as _info
from .._kernels.counting_dask import take_genes
from .._kernels.psd import PSD_FIXES, apply_psd_fix, min_eigenvalue_with_safety
from .._selection import Selection
from .._validation import (
    Interval,
    Options,
    check_n_genes,
    check_random_state,
    parameter_constraints,
)
from ._common import (
    BATCH_DISCRETIZATIONS,
    BATCH_WEIGHTS,
    RELEVANCES,
    SIMILARITIES,
    check_batch,
    check_batch_crosses_classes,
    check_levels,
    discretization_rule,
    gene_labels,
    prepare,
    resolve_preselected,
    similarity_and_relevance,
    weights_and_ranking,
)
from ._qp import (
    FLOAT32_FROM,
    QUADPROG_MAX_GENES,
    SOLVERS,
    alpha_hat,
    kept_and_forced,
    preselected_params,
    solve_qpfs,
    solver_working_bytes,
)
from .qpfs_nystrom import NYSTROM_QPS, nystrom_qpfs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

    from .._typing import MatrixLike, SeedLike

__all__ = ["qpfs", "alpha_hat", "solve_qpfs", "apply_psd_fix", "resolve_preselected", "PSD_FIXES", "predicted_seconds",
           "min_eigenvalue_with_safety", "solver_working_bytes", "SOLVERS", "NYSTROM_QPS", "FLOAT32_FROM"]



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


@doc_params(n_bins=N_BINS_DOC, batch_doc=BATCH_DOC, random_state=RANDOM_STATE_DOC, y_doc=Y_HIERARCHY_DOC,
            groupby_weights=HIERARCHY_DOC)
@parameter_constraints(
    similarity=Options(*SIMILARITIES), alpha=Interval("real", 0, 1, none=True), discretization=Options(*measures.DISCRETIZATIONS),
    n_bins=Interval("integer"), solver=Options(*SOLVERS), psd_fix=Options(*PSD_FIXES),
    nystrom_rate=Interval("real", 0, 1, closed="right", none=True), eig_threshold=Interval("real", 0, None),
    nystrom_qp=Options(*NYSTROM_QPS), preselected_share=Interval("real", 0, 1, closed="neither", none=True),
    class_weight=Options(*_info.CLASS_WEIGHTS), batch_weights=Options(*BATCH_WEIGHTS),
    batch_discretization=Options(*BATCH_DISCRETIZATIONS))
def qpfs(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, similarity: str = "mi",
         relevance: str | ArrayLike | None = None, alpha: float | None = None, discretization: str | None = "mean_sd",
         n_bins: int = 3, base: float = 2, solver: str = "auto", psd_fix: str = "none",
         nystrom_rate: float | None = None, eig_threshold: float = 0.0, nystrom_qp: str = "auto",
         preselected: Sequence[str | int] | None = None, preselected_share: float | None = None,
         class_weight: str | None = None, batch: ArrayLike | None = None, batch_weights: str = "size",
         batch_discretization: str = "per_batch", groupby_weights: ArrayLike | None = None,
         random_state: SeedLike = 0, feature_names: Sequence[str] | None = None) -> Selection:
    """Rank genes with QPFS (exact, or QPFS+Nystrom).

    Parameters
    ----------
    X : array-like, sparse or dask array, shape (n_samples, n_genes)
        Expression (continuous; or integer codes with ``discretization=None``).  Array support: numpy,
        scipy.sparse, and a Dask array chunked by samples (numpy or CSR chunks; MI similarity with
        ``discretization="mean_sd"``, ``"quantile"``, ``"zero_quantile"`` or ``"auto"``, exact and Nystrom), counted
        chunk by chunk -- README "Large data (Dask)".
    {y_doc}
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
    {n_bins}
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
        ``"auto"``: "subspace" while k~ <= :data:`~bioqpfs.selectors.qpfs_nystrom.NYSTROM_SUBSPACE_MAX` (300),
        "lowrank" beyond (which one ran is in ``diagnostics["nystrom_qp"]``).
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
    {batch_doc}
    {groupby_weights}
    {random_state}
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
    strata = check_batch(batch, X, batch_weights=batch_weights, batch_discretization=batch_discretization)
    y, levels = check_levels(y, X, groupby_weights)
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    check_batch_crosses_classes(strata, y_codes, levels)
    if strata is not None and nystrom_rate is not None and similarity != "mi":
        raise ValueError("QPFS+Nystrom with batch= needs similarity='mi' (the landmark rows of the |correlation| "
                         "matrix are not batch-aware); use the exact QPFS (nystrom_rate=None) or similarity='mi'")
    m_total = X.shape[1]
    n_genes = check_n_genes(n_genes, m_total)
    P_all, keep, P, share = kept_and_forced(preselected, constant, feature_names, n_genes, preselected_share)
    m = keep.size
    Xk = take_genes(X, keep)
    rule = discretization_rule(Xk, discretization)  # "auto" decided once, on the genes discretised; recorded
    relevance = _relevance_of_kept(relevance, m_total, keep)
    rng = check_random_state(random_state)

    if nystrom_rate is None:
        if solver == "quadprog" and m > QUADPROG_MAX_GENES:
            raise ValueError(
                f"exact QPFS with quadprog on {m} genes would take very long (O(M^3)); use solver='auto' "
                f"(the active-set solver), restrict the genes (e.g. mask_var='highly_variable'), or use nystrom_rate=...")
        dtype = np.float32 if m >= FLOAT32_FROM else np.float64
        Q, F, relevance_used, _ = similarity_and_relevance(Xk, y_codes, similarity=similarity, relevance=relevance,
                                            discretization=rule, n_bins=n_bins, base=base,
                                            need_full=True, dtype=dtype, class_weight=class_weight,
                                            working_bytes=solver_working_bytes(m, solver, psd_fix), batch=strata,
                                            levels=levels, genes=gene_labels(feature_names, keep))
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
                                                discretization=rule, n_bins=n_bins, base=base,
                                                need_full=False, class_weight=class_weight, batch=strata,
                                                levels=levels, genes=gene_labels(feature_names, keep))
        t_measures = time.perf_counter() - t0
        t1 = time.perf_counter()
        x, alpha_used, a_hat, q_bar, f_bar, solve_diag = nystrom_qpfs(
            Xk, y_codes, F, table, similarity=similarity, base=base, rate=float(nystrom_rate),
            eig_threshold=float(eig_threshold), nystrom_qp=nystrom_qp, alpha=alpha, rng=rng, P=P, share=share,
            psd_fix=psd_fix)
        t_solve = time.perf_counter() - t1

    weights, F_all, ranking = weights_and_ranking(m_total, keep, x, F, constant, P_all)
    params = dict(similarity=similarity, relevance=relevance_used, alpha=alpha_used, alpha_given=alpha is not None,
                  discretization=discretization, discretization_used=rule, n_bins=n_bins, base=base,
                  solver=solve_diag["solver"], psd_fix=psd_fix, n_genes=n_genes, class_weight=class_weight)
    if strata is not None:
        params.update(strata.params())
    if levels is not None:
        params.update(levels.params())
    if nystrom_rate is not None:
        params.update(nystrom_rate=float(nystrom_rate), eig_threshold=float(eig_threshold), nystrom_qp=nystrom_qp)
    params.update(preselected_params(P_all, feature_names, share))
    diagnostics = dict(
        alpha_hat=a_hat, q_bar=q_bar, f_bar=f_bar, **solve_diag, n_constant=int(constant.sum()),
        constant_genes=[int(i) for i in np.flatnonzero(constant)], n_classes=int(classes.size),
        seconds_measures=t_measures, seconds_solve=t_solve, seconds_total=time.perf_counter() - t0,
    )
    if P_all.size:
        diagnostics.update(n_preselected=int(P_all.size), preselected_share=None if share is None else float(share))
    return Selection("qpfs", weights, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                     relevance=F_all, feature_names=None if feature_names is None else np.asarray(feature_names))
