"""Class-covering QPFS: one QPFS per class on a one-vs-rest relevance, the panel taken round-robin over classes.

For every class c (ours; built on the QPFS problem of Rodriguez-Lujan et al., JMLR 2010, eq. 2)::

    x_c = argmin_x  1/2 (1 - alpha_c) x^T Q x - alpha_c F_c^T x    s.t.  x_i >= 0,  sum_i x_i = 1

with the shared redundancy Q (mutual information, Q_ii = H(X_i), as QPFS), the one-vs-rest relevance
F_c,i = I(X_i; 1[C = c]) (zero for genes that are not higher in c than in the other samples, by default: marker
genes), and alpha_c = alpha_hat(Q, F_c) (eq. 9).  Each class ranks the genes by x_c (ties by F_c, section 2.3
step 8); the panel interleaves the class rankings as scanpy users interleave marker lists: round r adds the
r-th gene of every class in turn, unless it is already in the panel (then that gene covers both classes).  After
r rounds the panel is the union of the classes' top-r genes, so every class is represented, a marker shared by
two classes takes one slot, and within a class the QP keeps its genes non-redundant with each other (the
multiclass QPFS instead spends a small panel on genes that separate the large groups).  One Q serves all C
problems.

``relevance_bins="per_class"`` (the default recipe, not the method's default) gives every F_c bins of its own:
equal-frequency under the weights F_c is counted with, so that a gene expressed everywhere and highest in a rare
type is cut where the type begins (:func:`~bioqpfs.selectors._common.per_class_bin_relevance`), and
``relevance="auto"`` (also the recipe's) makes F_c the mean of the MI and the pair-order information
ln 2 - H_2(AUROC) (:func:`~bioqpfs.selectors._common.pair_order_information`), on single-cell data against the
rest and against the class nearest to c; ``self_redundancy="constant"`` (the recipe's) replaces Q's diagonal
H(X_i) by one lambda for every gene (Nguyen et al. 2014, section 2.2).

Why: balanced accuracy (and a panel user) weighs every cell type equally, while the multiclass I(X; C) of plain
QPFS rewards genes that separate the large groups; at k close to the number of types, covering every type
matters more (issue 22; the benchmark is ``benchmarks/bench_panels.py`` and README "Panel quality").
"""
from __future__ import annotations

import contextlib
import time
import warnings
from typing import TYPE_CHECKING

import numpy as np

from .. import _progress, measures
from .._docs import BATCH_DOC, N_BINS_DOC, doc_params
from .._kernels import information as _info
from .._kernels.counting_dask import take_genes
from .._kernels.discretize import sharing_sorted_columns
from .._kernels.psd import PSD_FIXES, min_eigenvalue_with_safety
from .._kernels.ranking import round_robin
from .._selection import ZERO_RELEVANCE, Selection, rank_by_weight
from .._validation import Interval, Options, check_n_genes, parameter_constraints, user_stacklevel
from ._common import (
    BATCH_DISCRETIZATIONS,
    BATCH_WEIGHTS,
    CLASS_RELEVANCES,
    EQUAL_FREQUENCY_RULES,
    RELEVANCE_BINS,
    check_batch,
    check_batch_crosses_classes,
    discretization_rule,
    forced_first,
    gene_labels,
    higher_in_class,
    one_vs_rest_relevance,
    pair_order_information,
    per_class_bin_relevance,
    prefetch_recipe_edges,
    prepare,
    similarity_and_relevance,
    similarity_guard,
    sorted_class_order,
)
from ._qp import (
    FLOAT32_FROM,
    SOLVERS,
    alpha_hat,
    class_qp_workers,
    kept_and_forced,
    preselected_params,
    solve_qpfs,
    solver_working_bytes,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

    from .._typing import MatrixLike, SeedLike

__all__ = ["qpfs_cover", "DIRECTIONS"]

#: ``direction="up"``: only genes higher in the class than elsewhere count for it (marker genes);
#: ``"both"``: any gene informative about "c or not"
DIRECTIONS = ("up", "both")
#: the diagonal of Q in every per-class problem: ``"entropy"``, Q_ii = I(X_i; X_i) = H(X_i) (QPFS, section 2.1);
#: ``"constant"``, Q_ii = 0 and the psd fix's lambda I for all genes (Nguyen et al. 2014, section 2.2, eq. 13)
SELF_REDUNDANCIES = ("entropy", "constant")


@doc_params(n_bins=N_BINS_DOC, batch_doc=BATCH_DOC)
@parameter_constraints(
    direction=Options(*DIRECTIONS), alpha=Interval("real", 0, 1, none=True),
    discretization=Options(*measures.DISCRETIZATIONS), n_bins=Interval("integer"), class_weight=Options(*_info.CLASS_WEIGHTS),
    solver=Options(*SOLVERS), psd_fix=Options(*PSD_FIXES), batch_weights=Options(*BATCH_WEIGHTS),
    batch_discretization=Options(*BATCH_DISCRETIZATIONS), relevance_bins=Options(*RELEVANCE_BINS), relevance=Options(*CLASS_RELEVANCES),
    self_redundancy=Options(*SELF_REDUNDANCIES), min_relative_relevance=Interval("real", 0, 1, closed="left"))
def qpfs_cover(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, direction: str = "up",
               alpha: float | None = None, discretization: str | None = "auto", n_bins: int = 3,
               relevance_bins: str = "shared", relevance: str = "mi", self_redundancy: str = "entropy",
               min_relative_relevance: float = 0.25,
               class_weight: str | None = "balanced", base: float = 2, solver: str = "auto", psd_fix: str = "shift",
               preselected: Sequence[str | int] | None = None, batch: ArrayLike | None = None,
               batch_weights: str = "size", batch_discretization: str = "per_batch", random_state: SeedLike = 0,
               feature_names: Sequence[str] | None = None) -> Selection:
    """Rank genes with class-covering QPFS (one QPFS per class, round-robin over the classes).

    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
        Expression (numpy, scipy.sparse CSR/CSC; never densified; integer codes with ``discretization=None``;
        or a Dask array chunked by samples, with ``discretization="mean_sd"``, ``"quantile"``, ``"zero_quantile"``
        or ``"auto"``).
    y : array-like, shape (n_samples,)
        Class labels (at least 2 classes).
    n_genes : int, optional
        Panel size; marks ``Selection.selected``.  The ranking covers every gene.
    direction : {"up", "both"}
        ``"up"`` (default): a gene counts for class c only if its mean in c is above its mean over the other
        samples, as marker genes are; ``"both"``: any gene informative about "c or not" (a gene low in c too).
    alpha : float in [0, 1], optional
        Trade-off of every per-class problem; default alpha_hat(Q, F_c) per class (QPFS eq. 9).
    discretization : {"auto", "mean_sd", "quantile", "zero_quantile", "mdl", None}
        Codes for the MI; ``"auto"`` (default): zero vs. non-zero + quantiles on zero-inflated (single-cell) data,
        the paper's mean +- sd bins otherwise (:func:`bioqpfs.measures.resolve_discretization`).
    {n_bins}
    relevance_bins : {"shared", "per_class"}
        Bins of the relevance F_c.  ``"shared"`` (default of the method): the codes of Q.  ``"per_class"`` (the
        default recipe, :data:`bioqpfs.DEFAULT_PANEL`): with an equal-frequency rule (``"zero_quantile"``,
        ``"quantile"``; ``"auto"`` on single-cell data), each class's problem gets bins of the same rule that are
        equal-frequency under the weights F_c is counted with (class c weighing half with
        ``class_weight="balanced"``), so a graded gene that is high in a rare type is cut where the type begins,
        not at the median of all cells (:func:`~bioqpfs.selectors._common.per_class_bin_relevance`).  Mean +- sd,
        MDL and given codes keep the shared codes.  Q is unchanged either way.
    relevance : {"mi", "mi_order", "mi_order_nearest", "auto"}
        The relevance F_c of class c's problem.  ``"mi"`` (default of the method): the one-vs-rest MI above.
        ``"mi_order"``: the mean of that MI and the pair-order information ``ln 2 - H_2(AUROC_c,i)``, the
        information that gene i's order gives about which sample of a random (class c, other) pair is the
        class-c one (:func:`~bioqpfs.selectors._common.pair_order_information`; exact ranks up to 255 samples;
        beyond, 255 ordered levels).  ``"mi_order_nearest"``: the pair-order term is itself the mean of that
        information against the rest and against the class nearest to c on the gene, the class d whose samples
        out-rank c's most often (``ln 2 - H_2(min_d AUROC_cd,i)``; ``nearest=True``): a gene high in c and in one
        neighbouring type no longer scores as if it marked c alone.  ``"auto"`` (the default recipe):
        ``"mi_order_nearest"`` where every class has bins of its own (``relevance_bins="per_class"`` on
        equal-frequency codes: single-cell data), else ``"mi_order"``.  Why the nearest class on single-cell data
        (README "Panel quality"): on CBMC the recipe's CD14+ monocyte genes were monocyte genes shared with CD16+
        monocytes (CD16+ recall 0.59-0.68 against Wilcoxon's 0.75-0.86 at k = 20); with it and
        ``self_redundancy="constant"`` CBMC k = 20 went from -0.012 to -0.008 against Wilcoxon and Zeisel's 47
        subclasses at k = 10 from +0.009 to +0.058.  Not on dense data: on the microarrays (5 to 9 samples in
        some classes) it lost nci61 (-0.038 / -0.050 against Wilcoxon at k = 10 / 20, 30 folds) and lymphoma62
        at k = 10 (0.942 against 0.967).  It costs C^2 x 255 multiply-adds per gene (a class pair in every GEMM
        row).  Why the pair-order term at all (``bench_panels.py``, README "Panel quality"): the MI of three
        shared mean +- sd bins blurs a clean two-level marker on small dense sets, while the ranks alone ignore how
        the values spread.  Their mean won on the five microarray sets (30 folds, balanced accuracy at k = 10 and 20 summed over the sets: LR +0.086
        over ``"mi"``, kNN +0.13; Leukemia k = 10: 0.958 against 0.928).  On single-cell data with per-class bins
        it is within noise on the four sets the recipe was chosen on (LR, k = 10 and 20 against the better of
        Wilcoxon and COSG, summed: +0.055 against +0.068) and closes most of the gap on real data kept out of that
        choice (CBMC k = 10: -0.036 -> -0.007 against Wilcoxon; Zeisel k = 10: -0.010 -> -0.002).  It costs a
        255-level pass: dense, 0.18 s of Leukemia's 2.5 s (72 x 7,129) and 1.8-2.2 s at 20,000 x 2,000 (the recipe
        6.5 -> 7.3 s); sparse counts, the recipe 6.7-6.8 -> 7.8-8.0 s at 40,000 x 2,000 and 1.2-1.4 -> 1.6 s at
        20,000 x 1,000 (2 cores; ``relevance="mi"`` skips it; measured before a sparse X's levels were counted
        from its sorted columns, README "A sparse X is sorted once").  Both terms are in ``base``; ``params`` records
        ``relevance_used``.
    self_redundancy : {"entropy", "constant"}
        The diagonal of Q.  ``"entropy"`` (default of the method; QPFS, section 2.1): Q_ii = I(X_i; X_i) = H(X_i),
        so a gene pays for its own entropy and, of two equally relevant genes, the one whose values spread over
        more bins gets less weight.  ``"constant"`` (the default recipe): Q_ii = 0 and ``psd_fix`` adds the same
        lambda to every gene (``"shift"``: the smallest lambda making Q definite, Nguyen et al. 2014, section 2.2,
        eq. 13: "there should be no penalty for self redundancy"); alpha_hat is taken on that Q.  Each QP is then
        definite by the shift's margin only, so last-bit differences of Q (a Dask X's chunked counts) move the
        weights by ~1e-9.  On CBMC, with Q_ii = H(X_i) (1.1-1.6 bits on the diagonal against 0.04 off it) the
        CD14+ problem weighted a gene of AUROC 0.966 above one of 0.993 whose entropy was 0.35 bits higher.  On
        the five microarray sets (30 folds, LR, k = 10 and 20 against Wilcoxon) it alone gains a little or ties
        in every cell: summed +0.027 against +0.014 (nci61 k = 20 0.619 against 0.606, Leukemia k = 10 0.963
        against 0.958; kNN -0.024 against -0.061).
    min_relative_relevance : float in [0, 1)
        A class waits in the round-robin while its next gene is weak: a class whose next gene's F_c is below this
        fraction of the best next gene of the round (over all classes, each by its own F_c) adds nothing in that
        round and keeps the gene for later (:func:`~bioqpfs._kernels.ranking.round_robin`).  Default 0.25; 0 gives
        the strict round-robin.  Why: with ``direction="up"`` a class with no gene higher in it (two classes
        whose markers are all up in one: 10 strong markers up in B, none in A) otherwise fills every other slot
        with noise genes of tiny positive F_c (5 of a 10-gene panel; with the wait 9 of 10 are the markers).  On
        13 data sets (the 9 of ``bench_panels.py`` and 2-class pairs of pbmc68k, CBMC and Zeisel types, 2 fold
        seeds, 20 folds) 0.25 gave the strict panels within 0.001 balanced accuracy; 0.5 lost 0.02-0.03 on
        pbmc68k and sim_rare (small types' markers wait too long).
    class_weight : {"balanced", None}
        ``"balanced"`` (default): every class counts equally in Q, and in F_c class c weighs as much as all the
        other samples (a type of 8 cells is as visible as one of 240); ``None``: empirical frequencies.
    base : float
        Logarithm base of MI (does not change the ranking).
    solver : {"auto", "quadprog", "active_set", "spg"}
        QP solver of each per-class problem (see :func:`bioqpfs.qpfs`).
    psd_fix : {"shift", "clip", "none"}
        Convexification of an indefinite Q (see :func:`bioqpfs._kernels.psd.apply_psd_fix`).  Default
        ``"shift"``: its per-class solutions spread over more genes, so every class ranks a longer list by the
        QP; against ``"none"`` the panels score the same within noise (LR balanced accuracy at k = 10 / 20 / 30,
        ``bench_panels.py``: PBMC 0.592 / 0.617 / 0.619 against 0.597 / 0.614 / 0.614, Colon 0.856 / 0.819 /
        0.812 against 0.846 / 0.794 / 0.822, Leukemia 0.934 / 0.964 / 0.959 against 0.929 / 0.964 / 0.959).
        The C problems share one eigen-solve, or for a definite Q one Cholesky certificate
        (``solve_qpfs(..., q_min_eigenvalue=)``, :func:`~bioqpfs._kernels.psd.min_eigenvalue_with_safety`).
    preselected : sequence of str or int, optional
        Forced genes (names need ``feature_names``), ranked first in the given order (``.var["bioqpfs_class"]``
        says ``"preselected"``).  Every per-class problem is solved given them with the shared forced-gene QP
        (:func:`bioqpfs.selectors._qp.solve_qpfs`: the forced genes hold the total weight ``|P| / n_genes``, and the
        rest is the QPFS problem over the remaining genes with F_c shifted by their redundancy with the forced
        panel), and the round-robin runs over the remaining genes.  ``n_genes`` counts the forced genes.
    {batch_doc}
        With batches, the one-vs-rest F_c is ``sum_b w_b F_c,b`` and "higher in class c" is the batch-weighted
        within-batch difference of the means (:func:`~bioqpfs.selectors._common.higher_in_class`).
    random_state : ignored
        The method is deterministic (accepted for a uniform interface).
    feature_names : sequence of str, optional

    Returns
    -------
    Selection
        ``ranking``: the round-robin over the classes' QPFS rankings (each class lists the genes with a positive
        weight or relevance for it), then the remaining genes by the multiclass relevance I(X; C), then constant
        genes.  ``weights``: the weight of each gene in the QP of the class it was taken for (0 for genes after
        the round-robin).  ``relevance``: I(X; C) (same ``class_weight``).  ``extra_columns["class"]``: the
        class a gene was taken for ("" after the round-robin).  ``diagnostics``: per class ``alpha``,
        ``n_candidates`` (genes it ranks) and ``n_added`` (panel genes added for it; a gene shared with an earlier
        class counts for that class).

    Notes
    -----
    The per-class problems share Q and differ only in F_c, so the cost is one Q (as QPFS) plus C QP solves.
    The round-robin visits the classes in the sorted order of their labels (numbers by value, else as text),
    whatever the order of a Categorical's categories, so every face gives the same panel.  With ``n_genes < C``
    the first round is cut short: classes later in that order whose first gene is not already in the panel get
    none.  A class waits (adds nothing in a round) while its next gene's F_c is under ``min_relative_relevance``
    of the round's best next gene.  A class without any candidate gene (no gene higher in it, with
    ``direction="up"``) is skipped with a warning and listed in ``diagnostics["uncovered_classes"]``.
    """
    t0 = time.perf_counter()
    strata = check_batch(batch, X, batch_weights=batch_weights, batch_discretization=batch_discretization)
    X, y_codes, classes, constant = prepare(X, y, feature_names)
    check_batch_crosses_classes(strata, y_codes)
    m_total = X.shape[1]
    n_genes = check_n_genes(n_genes, m_total)
    P_all, keep, P, share = kept_and_forced(preselected, constant, feature_names, n_genes)
    m, C = keep.size, classes.size
    Xk = take_genes(X, keep)
    dtype = np.float32 if m >= FLOAT32_FROM else np.float64
    rule = discretization_rule(Xk, discretization)  # "auto" resolved once (a pass on a Dask X); recorded
    own_bins = relevance_bins == "per_class" and rule in EQUAL_FREQUENCY_RULES
    relevance_used = ("mi_order_nearest" if own_bins else "mi_order") if relevance == "auto" else relevance
    # refused before any counting; no nystrom_rate here (the recipe's class QPs need the whole Q)
    similarity_guard(m, m, dtype, "mi", solver_working_bytes(m, solver, psd_fix),
                     remedies=("genes", "ikm", "method='qpfs' with nystrom_rate=... (e.g. 0.05), one QP on a "
                                                "low-rank Q"))
    # a sparse X's genes sorted once for the codes of Q, the per-class bins and the pair-order levels; Q itself is
    # counted after the block, without the sorted form (the two largest working sets of the recipe never meet)
    several_rules = own_bins or relevance_used != "mi"
    if strata is None and several_rules:  # a Dask X: the edges of all the rules in one search (the same edges)
        prefetch_recipe_edges(Xk, rule, n_bins, per_class_bins=own_bins, pair_order=relevance_used != "mi")
    with sharing_sorted_columns(Xk) if several_rules else contextlib.nullcontext():
        _, F, _, table = similarity_and_relevance(Xk, y_codes, similarity="mi", relevance="mi",
                                                  discretization=rule, n_bins=n_bins, base=base,
                                                  need_full=False, class_weight=class_weight, batch=strata,
                                                  genes=gene_labels(feature_names, keep))
        if own_bins:
            F_c = per_class_bin_relevance(Xk, y_codes, C, rule=rule, n_bins=n_bins, class_weight=class_weight, base=base,
                                          batch=strata)
        else:
            F_c = one_vs_rest_relevance(table, y_codes, C, class_weight=class_weight, base=base)
        if relevance_used in ("mi_order", "mi_order_nearest"):  # the ranks of X (the codes themselves for codes)
            F_c = 0.5 * (F_c + pair_order_information(Xk, y_codes, C, base=base, batch=strata,
                                                      rule=None if rule is None else "quantile",
                                                      nearest=relevance_used == "mi_order_nearest"))
    if direction == "up":
        F_c = np.where(higher_in_class(Xk, y_codes, C, batch=strata), F_c, 0.0)
    # X is not read again: Q is counted from the codes alone, so a copy made here (the kept genes, a float copy
    # of integer counts) is not held through the MI matrix, where the recipe's peak memory is
    del X, Xk
    Q = _info.pairwise_information(table, None, "mi", base=base, dtype=dtype)
    del table  # the codes and the counting backend's class-sorted copy and sparse form: not held through the QPs
    if self_redundancy == "constant":  # Nguyen et al. 2014 eq. 13: no self-redundancy; psd_fix adds lambda I
        np.fill_diagonal(Q, 0.0)
    t_measures = time.perf_counter() - t0

    # the C problems share Q: one eigen-solve for the psd fix (lambda_min((1 - alpha_c) Q) = (1 - alpha_c) lambda_min(Q))
    q_min = None if psd_fix == "clip" else min_eigenvalue_with_safety(Q)
    empty = [c for c in range(C) if not (F_c[c] > ZERO_RELEVANCE).any()]
    rankings, weights_c = [np.zeros(0, dtype=np.int64)] * C, np.zeros((C, m))
    alphas, n_cand = [float("nan")] * C, [0] * C

    def solve_class(c):
        f = F_c[c]
        a = alpha_hat(Q, f)[0] if alpha is None else float(alpha)
        x, _ = solve_qpfs(Q, f, a, solver=solver, psd_fix=psd_fix, q_min_eigenvalue=q_min, preselected=P,
                          preselected_share=share)
        cand = np.flatnonzero((x > 0) | (f > ZERO_RELEVANCE))
        if P.size:
            cand = np.setdiff1d(cand, P)
        rankings[c] = rank_by_weight(x, f, candidates=cand)
        weights_c[c], alphas[c], n_cand[c] = x, float(a), int(cand.size)

    # the class QPs side by side on the worker threads: each runs whole on one thread (one BLAS thread), so the
    # results do not depend on the worker count
    todo = [c for c in range(C) if c not in empty]
    with _progress.bar(len(todo), "class QPs", unit="class") as progress:
        _info.run_tasks(solve_class, todo, progress, workers=class_qp_workers(m, psd_fix))
    if empty:
        warnings.warn(f"{len(empty)} class(es) have no gene {'higher in them than elsewhere and ' if direction == 'up' else ''}"
                      f"informative about them, so the panel cannot cover them: "
                      f"{', '.join(str(classes[c]) for c in empty[:10])}", UserWarning, stacklevel=user_stacklevel())
    # the classes visited in the sorted order of their labels, not the labels' category order: the same data give
    # the same panel from a Categorical (tl, R factors), strings (evaluate, a CSV in the CLI) or any relabelling
    visit = sorted_class_order(classes)
    order, owner = round_robin([rankings[c] for c in visit], scores=[F_c[c] for c in visit],
                               min_relative=min_relative_relevance)
    owner = visit[owner]
    rest = np.setdiff1d(np.arange(m), np.concatenate([order, P]))
    tail = rank_by_weight(F, None, candidates=rest)
    ranking = forced_first(np.concatenate([keep[order], keep[tail], np.flatnonzero(constant)]), P_all)

    weights = np.zeros(m_total)
    weights[keep[order]] = weights_c[owner, order]
    F_all = np.zeros(m_total)
    F_all[keep] = F
    taken_for = np.full(m_total, "", dtype=object)
    taken_for[keep[order]] = np.asarray(classes, dtype=str)[owner]
    if P.size:
        weights[keep[P]] = share / P.size
    taken_for[P_all] = "preselected"
    added = np.bincount(owner[:n_genes - P_all.size] if n_genes is not None else owner, minlength=C)
    params = dict(direction=direction, alpha=None if alpha is None else float(alpha), discretization=discretization,
                  discretization_used=rule, n_bins=n_bins, relevance_bins=relevance_bins, relevance=relevance,
                  relevance_used=relevance_used, self_redundancy=self_redundancy,
                  min_relative_relevance=float(min_relative_relevance),
                  relevance_bins_used="per_class" if own_bins else "shared",
                  class_weight=class_weight, base=base, solver=solver, psd_fix=psd_fix, n_genes=n_genes,
                  **preselected_params(P_all, feature_names, share), **({} if strata is None else strata.params()))
    diagnostics = dict(
        classes=[str(c) for c in classes], alpha=alphas, n_candidates=n_cand,
        n_added=[int(v) for v in added], n_round_robin=int(order.size), n_classes=int(C),
        uncovered_classes=[str(classes[c]) for c in empty], n_constant=int(constant.sum()),
        constant_genes=[int(i) for i in np.flatnonzero(constant)], q_dtype=np.dtype(dtype).name,
        seconds_measures=t_measures, seconds_total=time.perf_counter() - t0,
    )
    return Selection("qpfs_cover", weights, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                     relevance=F_all, feature_names=None if feature_names is None else np.asarray(feature_names),
                     extra_columns={"class": taken_for.astype(str)})
