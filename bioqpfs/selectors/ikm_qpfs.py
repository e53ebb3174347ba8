"""QPFS on cluster representatives: TLKM-QPFS, IKM-QPFS and IKMA-QPFS (Prasad & Biswas, paper 003).

Genes are clustered with the variant MacQueen k-means under the MI distance
``d = 1 - I(f_i; f_j) / max(H(f_i), H(f_j))`` (eq. 4, :mod:`bioqpfs._kernels.kmeans`), every cluster is
represented by one real gene, and QPFS (Rodriguez-Lujan et al. 2010, paper eq. 2) runs on the
representatives only, so no gene x gene matrix over all M genes is ever formed: time and memory are
O(M k) for the clustering plus O(k^3) per QPFS call on k representatives (sections 3.3 and 4.4).

* :func:`tlkm_qpfs` -- two-level k-means, then one QPFS on all representatives (section 3.3).
* :func:`ikm_qpfs` -- interleave k-means and QPFS (section 4.1, Algorithms IKM-QPFS and IRR).
* :func:`ikma_qpfs` -- IKM that also drops every cluster whose representative gets weight 0 (section 4.5).

Choices where the paper is silent or loose (each also stated in the functions' docstrings):

* QPFS inputs: ``Q`` = MI among the representatives with ``Q_ii = H(X_i)`` and ``F_i = I(X_i; C)`` (bits by
  default), on the same discretisation as the distance (paper section 5.2: mean +- sd, 3 bins).
* alpha: by default re-estimated for every QPFS call as alpha_hat = q_bar / (q_bar + f_bar) (paper eq. 2a)
  over the small problem actually solved -- "apply QPFS on the representatives" with QPFS's own rule.
  This is what makes QPFS discard representatives: siblings of one split cluster are redundant by
  construction, their alpha_hat is high (0.58 at level 1 -> up to 0.87 deeper on Colon) and the QP
  solution sparse; with one smaller alpha for every call the solutions are dense and hardly any
  cluster is dropped (on the planted-groups test data, none).  ``alpha="global"`` uses instead the
  alpha_hat of the *whole* gene set (what exact QPFS would use) for every call: f_bar exactly, q_bar =
  (sum_i H_i + sum_{i != j} I_ij) / M^2 estimated without the M x M matrix from ``alpha_rows`` uniformly
  drawn genes' full MI rows (each row mean is an unbiased estimate of the off-diagonal mean; exact when
  M <= alpha_rows; Colon: 0.771 against 0.776 from the full matrix).  A float is used for every call.
* Gene order: the paper's MacQueen takes the first k genes as initial centres, which makes the result
  depend on the input order of the genes.  With ``shuffle=True`` (default) the genes are first permuted
  with ``random_state``; ``shuffle=False`` is the literal rule.  Sub-clusters keep that order.
* IRR (Algorithm IRR): the level is incremented for the recursive call (the printed pseudo-code
  increments it inside the loop over sibling clusters, which would make the depth depend on the sibling
  order).  The radius of a cluster at the last level is not needed (it is terminal anyway) and is not
  computed.
"""
from __future__ import annotations

import math
import time
import warnings
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as _sparse

from .. import _progress, measures
from .._docs import RANDOM_STATE_DOC, doc_params
from .._kernels import information as _info
from .._kernels import kmeans as _km
from .._kernels.correlation import shared_column_moments
from .._kernels.counting_dask import is_dask_array, take_genes
from .._selection import Selection, rank_by_weight
from .._validation import Interval, check_base, check_n_genes, check_random_state, memory_guard, parameter_constraints
from ._common import discretization_rule, forced_first, gene_labels, prepare, resolve_preselected, warn_constant
from ._qp import alpha_hat, forced_in_qp, preselected_params, solve_qpfs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

    from .._typing import MatrixLike, SeedLike

__all__ = ["tlkm_qpfs", "ikm_qpfs", "ikma_qpfs"]

_CLUSTER_DISCRETIZATIONS = ("mean_sd", "quantile", None)


class _Context:
    """Everything the three methods share: validated data, gene space, relevance, QPFS bookkeeping."""

    def __init__(self, X, y, feature_names, *, discretization, n_bins, base, alpha, shuffle, random_state,
                 alpha_rows=64, n_clusters=None, n_split=1):
        base = check_base(base)
        if discretization not in _CLUSTER_DISCRETIZATIONS:
            raise ValueError(
                f"discretization={discretization!r} is not available for the clustering methods; choose one of "
                f"{_CLUSTER_DISCRETIZATIONS} (cluster means must be discretised by the genes' own rule, and the "
                "supervised 'mdl' cuts of a mean vector are not comparable across clusters)")
        if not (alpha is None or (isinstance(alpha, str) and alpha == "global")
                or (isinstance(alpha, (int, float, np.floating)) and not isinstance(alpha, bool)
                    and 0.0 <= float(alpha) <= 1.0)):
            raise ValueError(f"alpha must be None (alpha_hat per QPFS call), 'global' or a number in [0, 1], "
                             f"got {alpha!r}")
        self.t0 = time.perf_counter()
        X, y_codes, classes, constant = prepare(X, y, feature_names)
        self.m_total = X.shape[1]
        self.keep = np.flatnonzero(~constant)
        if self.keep.size == 0:
            raise ValueError("every gene is constant across samples; there is nothing to select")
        warn_constant(constant, feature_names)
        self.constant = constant
        self.classes = classes
        self.feature_names = None if feature_names is None else np.asarray(feature_names)
        n, m = X.shape[0], self.keep.size
        # the codes and their transpose (1 byte each), the copy of X without its constant genes, and k-means on
        # all genes (level 1) with the most clusters any call makes: O(N M) + O(M k)
        memory_guard(2 * n * m + _gene_copy_bytes(X, m) + _km.variant_macqueen_bytes(
            n, m, max(_resolve_clusters(n_clusters, m), n_split)), f"clustering {m} genes", ["genes", "samples"])
        Xk = take_genes(X, self.keep)  # carries prepare's column moments over (computed once per call)
        self.rule = discretization_rule(Xk, discretization)  # recorded ("auto" and "mdl" are refused above)
        codes, levels = measures.codes_and_levels(Xk, self.rule, n_bins=n_bins, y_codes=y_codes,
                                                  feature_names=gene_labels(feature_names, self.keep))
        # moments of X[:, g] / s[g] (a power of two, 1 for ordinary genes): no overflow/underflow at any scale
        mean, ss, s = shared_column_moments(Xk)  # those of the codes' mean +- sd thresholds
        scale = 1.0 / np.sqrt(ss / max(1, n - 1))

        def standardized(idx):  # (x - mean) / sd of the genes idx, float64, one copy (no temporaries)
            block = Xk[:, idx]
            block = block.toarray().astype(np.float64, copy=False) if _sparse.issparse(block) else \
                np.array(block, dtype=np.float64)
            block /= s[idx]
            block -= mean[idx]
            block *= scale[idx]
            return block

        if discretization is None:  # integer-coded input: means are not codes; equal-frequency bins instead
            rule, bins = "quantile", max(2, int(np.max(levels)))
        else:
            rule, bins = discretization, n_bins
        self.space = _km.GeneSpace(codes, levels, standardized, mean_rule=rule, mean_bins=bins)
        table = _info.CodeTable(codes, levels, groups=y_codes)
        self.F = _info.class_relevance(table) / np.log(base)  # I(X_g; C), local gene index
        if not np.any(self.space.entropy > 0):  # every gene has one code: all distances, Q and F are 0
            raise ValueError(
                f"no gene carries information after discretization={discretization!r}: every gene puts all {n} "
                "samples in one bin, so all mutual informations (the clustering distance, Q and F) are 0. "
                "Use more samples (with 2 samples mean +- sd binning always gives one bin) or another "
                "discretization (e.g. 'quantile')")
        self.base = base
        self.rng = check_random_state(random_state)
        self.order = self.rng.permutation(m) if shuffle else np.arange(m)
        self.alpha_info = {}
        if alpha is None:
            self.alpha = None  # alpha_hat of each QPFS call
        elif isinstance(alpha, str):
            self.alpha = self._global_alpha(alpha_rows)
        else:
            self.alpha = float(alpha)
        self.n_qpfs = 0
        self.progress = _progress.bar(None, "QPFS on cluster representatives", unit="call")
        self.alphas = []
        self.qpfs_sizes = []
        self.t_qpfs = 0.0

    def _global_alpha(self, n_rows):
        """alpha_hat of eq. 2a over all genes: f_bar exact, q_bar from ``n_rows`` random full MI rows."""
        sp = self.space
        m = sp.codes_t.shape[0]
        rows = np.arange(m) if m <= n_rows else np.sort(self.rng.choice(m, size=n_rows, replace=False))
        off = np.empty(rows.size)
        for t, g in enumerate(rows):
            mi = _km.mi_one_to_many(sp.codes_t[g], sp.codes_t, sp.n_bins)[0]
            off[t] = (mi.sum() - mi[g]) / max(1, m - 1)  # mean I(X_g; X_j), j != g
        ln_b = np.log(self.base)
        q_bar = (sp.entropy.sum() + m * (m - 1) * off.mean()) / m**2 / ln_b
        f_bar = float(self.F.mean())
        if q_bar + f_bar <= 0:
            raise ValueError("alpha cannot be estimated: no gene carries information (all MI and relevance are 0)")
        a = q_bar / (q_bar + f_bar)
        self.alpha_info = dict(alpha_hat=float(a), q_bar=float(q_bar), f_bar=f_bar, alpha_rows=int(rows.size),
                               alpha_exact=bool(rows.size == m))
        return a

    def forced(self, preselected, n_genes):
        """``(P_all, P, share)``: the forced genes (indices into X), their local indices among the non-constant
        genes, and their total weight in the final QPFS (:func:`bioqpfs.selectors._qp.forced_in_qp`)."""
        P_all = resolve_preselected(preselected, self.m_total, self.feature_names, n_genes, self.constant)
        P, share = forced_in_qp(P_all, self.keep, self.m_total, n_genes, None)
        return P_all, P, share

    def qpfs(self, reps, forced=0, share=None):
        """QPFS weights of the genes ``reps`` (local indices): Q = their MI matrix, F their relevance; the first
        ``forced`` of them are forced genes of total weight ``share`` (:func:`bioqpfs.selectors._qp.solve_qpfs`)."""
        t = time.perf_counter()
        reps = np.asarray(reps, dtype=np.int64)
        self.n_qpfs += 1
        self.progress.update()
        self.qpfs_sizes.append(int(reps.size))
        memory_guard(6 * 8 * reps.size**2, f"QPFS on {reps.size} representatives",
                     "use fewer clusters (a lower n_clusters; tlkm_qpfs: max_split, ikm_qpfs / ikma_qpfs: "
                     "n_split or max_levels)")
        Q = self.space.mi_matrix(reps, base=self.base)
        F = self.F[reps]
        if self.alpha is not None:
            a = self.alpha
        elif float(np.mean(Q)) + float(np.mean(F)) > 0:
            a = alpha_hat(Q, F)[0]
        else:
            a = 0.5  # no information at all: any weighting gives the same (uniform) answer
        self.alphas.append(float(a))
        if reps.size == 1:
            x, diag = np.ones(1), {}
        elif forced and forced == reps.size:  # nothing left to weigh beyond the forced genes
            x, diag = np.full(reps.size, 1.0 / reps.size), {}
        else:
            x, diag = solve_qpfs(Q, F, a, preselected=np.arange(forced) if forced else None,
                                 preselected_share=share)
        self.t_qpfs += time.perf_counter() - t
        return x, a, diag

    def finish(self, method, local_ranked, local_weights, n_genes, params, diagnostics, leaves, forced=None):
        """Build the Selection: weights and ranking over all input genes, cluster columns, diagnostics.

        Every gene is ranked: first the genes of the final QPFS (``local_ranked``, by weight, ties by
        relevance), then every other non-constant gene by relevance F = I(X; C) alone (weight 0, ties by
        index: MaxRel's order), then the constant genes.
        """
        keep = self.keep
        weights = np.zeros(self.m_total)
        weights[keep] = local_weights
        F_all = np.zeros(self.m_total)
        F_all[keep] = self.F
        by_qpfs = rank_by_weight(weights, F_all, candidates=keep[np.asarray(local_ranked, dtype=np.int64)])
        rest = rank_by_weight(np.zeros(self.m_total), F_all, candidates=np.setdiff1d(keep, by_qpfs))
        ranking = np.concatenate([by_qpfs, rest, np.flatnonzero(self.constant)])
        if forced is not None:
            ranking = forced_first(ranking, forced)
        cluster = np.full(self.m_total, -1, dtype=np.int64)
        level = np.zeros(self.m_total, dtype=np.int64)
        # int8 0/1 rather than bool: the tl face stores non-numeric extra columns as strings in .var, and
        # write_h5ad rejects booleans stored that way (so a bool here would break tl + write_h5ad and the CLI)
        representative = np.zeros(self.m_total, dtype=np.int8)
        for cid, leaf in enumerate(leaves):
            cluster[keep[leaf["members"]]] = cid
            level[keep[leaf["members"]]] = leaf["level"]
            representative[keep[leaf["rep"]]] = 1
        sp = self.space
        diagnostics.update(
            n_qpfs_calls=self.n_qpfs, n_distance_computations=int(sp.n_distances), n_leaf_clusters=len(leaves),
            n_ranked=int(ranking.size), n_ranked_by_qpfs=int(by_qpfs.size), qpfs_max_size=int(max(self.qpfs_sizes)),
            alpha_min=float(min(self.alphas)), alpha_max=float(max(self.alphas)), **self.alpha_info,
            n_constant=int(self.constant.sum()), constant_genes=[int(i) for i in np.flatnonzero(self.constant)],
            n_classes=int(self.classes.size), seconds_qpfs=self.t_qpfs,
            seconds_total=time.perf_counter() - self.t0,
        )
        # panel places filled by relevance alone, beyond the genes the final QPFS weighed
        diagnostics["n_panel_by_relevance"] = 0 if n_genes is None else int(max(0, n_genes - by_qpfs.size))
        params = {**params, "discretization_used": self.rule}  # as every method that discretises records it
        return Selection(method, weights, ranking, n_genes=n_genes, params=params, diagnostics=diagnostics,
                         relevance=F_all, feature_names=self.feature_names,
                         extra_columns={"cluster": cluster, "representative": representative, "cluster_level": level})


def _gene_copy_bytes(X, m):
    """Bytes of ``take_genes(X, keep)`` for ``m`` kept genes: none for a sparse X that keeps every gene (X itself),
    at most its values and indices otherwise; a dense X's m columns; none for a Dask X (a lazy slice)."""
    if is_dask_array(X):
        return 0
    if _sparse.issparse(X):
        if m == X.shape[1]:
            return 0
        return int(X.data.nbytes + getattr(X, "indices", X.data).nbytes)
    dtype = getattr(X, "dtype", None)
    return int(X.shape[0]) * int(m) * (dtype.itemsize if isinstance(dtype, np.dtype) else 8)


def _with_forced(P, reps):
    """The genes of the final QPFS: the forced genes first, then the representatives that are not forced."""
    return np.concatenate([P, reps[~np.isin(reps, P)]]).astype(np.int64) if P.size else reps


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


#: smallest default k' (the paper's Colon setting, figure 2)
MIN_DEFAULT_CLUSTERS = 15


def _resolve_clusters(n_clusters, m):
    """``n_clusters=None``: max(15, ceil(sqrt(M))) for M informative genes (issue 19, see ``_IKM_PARAMS``)."""
    if n_clusters is None:
        return max(MIN_DEFAULT_CLUSTERS, math.ceil(math.sqrt(m)))
    return _check_int("n_clusters", n_clusters, 1)


def _check_tau(tau):
    if not (isinstance(tau, (int, float, np.floating)) and 0.0 < float(tau) <= 1.0):
        raise ValueError(f"tau is a radius threshold on the distance d in [0, 1]; it must lie in (0, 1], got {tau!r}")
    return float(tau)


_COMMON_DOC = """
    alpha : None, "global" or float in [0, 1]
        QPFS relevance/redundancy trade-off.  ``None`` (default): alpha_hat = q_bar / (q_bar + f_bar) (paper
        eq. 2a) of each QPFS problem, re-estimated per call; ``"global"``: the alpha_hat of all genes for every
        call (q_bar estimated from ``alpha_rows`` random genes' MI rows, never the M x M matrix; recorded in
        ``diagnostics``); a float: that value for every call (1: pure relevance, each QPFS call puts all
        weight on its most relevant representative(s), see :func:`bioqpfs.qpfs`; 0: pure redundancy).
    alpha_rows : int
        Genes whose full MI rows estimate q_bar for ``alpha="global"`` (all genes if there are fewer).
    discretization : {"mean_sd", "quantile", None}
        Discretisation for the MI distance, Q and F (paper section 5.2: mean +- sd, 3 bins).  Cluster means
        are discretised with the same rule (``None``, integer-coded input: equal-frequency bins, as many as
        the genes have levels).
    n_bins : int
        Bins for ``"quantile"``.
    base : float
        Logarithm base of Q and F (does not change the result).
    shuffle : bool
        Permute the genes with ``random_state`` before clustering (MacQueen takes the first k genes as
        initial centres, so without it the result depends on the input gene order); ``False`` is the
        paper's literal rule.
    preselected : sequence of str or int, optional
        Forced genes (names need ``feature_names``), ranked first in the given order.  The clustering and its
        intermediate QPFS calls run as published; the final QPFS (the one that weighs and ranks the kept
        representatives) runs on the forced genes plus the representatives with the shared forced-gene QP
        (:func:`bioqpfs.selectors._qp.solve_qpfs`: the forced genes hold the total weight ``|P| / n_genes``,
        the representatives are weighed given them, their relevance shifted by their redundancy with the
        forced panel), so a representative redundant with a forced gene loses weight.  ``n_genes`` counts them.
    {random_state}
        Seed of the shuffle.
    feature_names : sequence of str, optional
"""


_IKM_PARAMS = """
    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
    y : array-like, shape (n_samples,)
        Class labels.
    n_genes : int, optional
        Panel size (top of the ranking).  Every gene is ranked: the kept representatives first (final
        QPFS weight), then the other genes by relevance alone.  If fewer than ``n_genes`` representatives
        are kept, the panel's last ``diagnostics["n_panel_by_relevance"]`` genes are chosen by relevance
        (MaxRel), not by QPFS.
    n_clusters : int, optional
        k', clusters of the first k-means (paper section 5.2 searches 3..150; figure 2 uses 15).  Default
        (None): ``max(15, ceil(sqrt(M)))`` for M non-constant genes -- 15 up to 225 genes, 45 for Colon,
        85 for Leukemia, 142 for 20,000 genes.
    n_split : int
        k, sub-clusters each split cluster is divided into (default 10; was 5).
    tau : float in (0, 1]
        Radius threshold: clusters with ``r < tau`` are not split (paper searches 0.70..0.99; figure 3: 0.8).
    max_levels : int
        L, the deepest level; clusters at level L are terminal.  There are at most
        ``n_clusters * n_split**(max_levels - 1)`` leaf clusters, so at most that many genes are weighed by
        QPFS (the rest are ranked after them by relevance); the defaults (the paper's Colon setting) suit a few thousand genes.  Representatives are the genes most
        central to their cluster, not the most relevant ones, so a relevant gene or module survives only if
        the clustering isolates it: on a 20,000-gene synthetic set with 400 co-expression modules the LOO
        error at 20 genes was 16 % for IKM with the defaults and 5 % for IKMA with ``n_clusters=100,
        n_split=10`` (QPFS+Nystrom: 1 %).  Raise these for genome-scale data.

        *How the defaults were chosen (issue 19).*  Planted problems: 120 samples, 3 classes, 10 groups of 6
        noisy copies of a class-dependent factor among M genes; score = groups covered by the top 30.
        Class-informative genes share the class information, so they are closer to each other than to noise
        and co-cluster: with the former defaults (k' = 15, k = 5) several groups ended in one leaf at the
        depth limit, which keeps one representative.  Sweep on M = 3,000 (3 seeds; exact QPFS covers 8, 8, 9):
        k' = 15/55/150 x k = 5/10 x tau = 0.8/0.95 (L = 3): k' = 15, k = 5 covered 4, 5, 7; k = 10 lifted
        every k' (15: 8, 10, 8; 55: 9, 9, 10; 150: 8, 8, 10); tau did not matter up to k' = 55 (every
        cluster holding unrelated genes has a radius near 1) and tau = 0.95 hurt at k' = 150 (4-7: small
        clusters stop splitting).  Chosen k' = max(15, ceil(sqrt(M))), k = 10, tau = 0.8, L = 3; on 5 seeds:

        =======  =================  ==================  ==================  ==================
        M        exact QPFS         IKM former          IKM (new)           IKMA (new)
        =======  =================  ==================  ==================  ==================
        1,000    8, 9, 9, 7, 9      10, 8, 6, 8, 5      8, 9, 9, 8, 9       8, 10, 10, 9, 9
        3,000    8, 8, 9, 6, 6      4, 5, 7, 4, 7       9, 9, 10, 8, 8      10, 10, 10, 9, 7
        =======  =================  ==================  ==================  ==================

        (TLKM with k' = ceil(sqrt(M)): 9, 10, 9, 10, 8 and 8, 7, 9, 6, 7; former k' = 20: 8, 7, 7, 9, 7 and
        7, 4, 5, 5, 5.)  The paper's protocol (ranking on all samples, LOO linear SVM, k = 10/20/30/50/100,
        genes standardised), mean over 5 seeds (min-max), error %:

        ========  ============================  ==========================================================
        data      exact QPFS                    IKM former -> new defaults
        ========  ============================  ==========================================================
        Leukemia  2.8, 2.8, 1.4, 2.8, 2.8       8.3, 4.4, 5.3, 4.7, 3.9 -> 3.9, 3.1, 2.8, 1.4, 1.4
                                                (new: 2.8-5.6, 1.4-4.2, 1.4-8.3, 1.4, 1.4)
        Colon     17.7, 14.5, 19.4, 22.6, 14.5  13.6, 13.2, 20.3, 24.5, 21.0 -> 11.9, 14.2, 16.8, 22.6, 21.3
                                                (new: 8.1-21.0, 9.7-16.1, 12.9-22.6, 21.0-24.2, 19.4-24.2)
        ========  ============================  ==========================================================

        IKMA new: Leukemia 3.9, 3.1, 3.9, 3.9, 3.3 (former 6.7, 4.7, 7.8, 8.1, 1.4), Colon 12.9, 13.9, 18.6 (it
        keeps fewer than 50 genes; former 16.5, 20.3, 20.2).  TLKM new: Leukemia 6.7, 6.1, 4.4, 4.2, 2.5 (former
        8.1, 8.6, 6.7, 6.9, 5.3) but Colon 19.7, 17.4, 25.2, 23.9, 22.9 (former 16.1, 18.7, 20.3, 25.8, 24.2):
        on Colon the former TLKM default was better at k = 10 and 30.  A kept cluster that reaches level L still
        wider than tau is counted in
        ``diagnostics["n_wide_at_depth_limit"]`` (sizes in ``wide_at_depth_limit_sizes``), with a warning
        when it has more than ``n_split`` genes.
        The paper's literal settings remain available as parameters (``n_clusters=15, n_split=5`` and
        ``shuffle=False``).
"""


#: the docstring of ikm_qpfs and ikma_qpfs: their parameters, then the ones every IKM-QPFS variant shares
_ikm_doc = doc_params(ikm_params=_IKM_PARAMS.strip("\n") + "\n" + _COMMON_DOC.strip("\n"), random_state=RANDOM_STATE_DOC)


@doc_params(common=_COMMON_DOC, random_state=RANDOM_STATE_DOC)
@parameter_constraints(n_clusters=Interval("integer", none=True), max_split=Interval("integer"),
                       alpha_rows=Interval("integer"), n_bins=Interval("integer"))
def tlkm_qpfs(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, n_clusters: int | None = None,
              tau: float = 0.9, max_split: int = 10, alpha: float | str | None = None, alpha_rows: int = 64,
              discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2, shuffle: bool = True,
              preselected: Sequence[str | int] | None = None, random_state: SeedLike = 0,
              feature_names: Sequence[str] | None = None) -> Selection:
    """Two-level k-means QPFS (TLKM-QPFS, paper section 3.3).

    The genes are clustered with the variant two-level k-means (section 3.2): level 1 makes ``n_clusters``
    (k') clusters; each cluster with radius ``r_i = max d(member, representative) > tau`` is split into
    ``min(ceil((r_i/tau)^N), max_split)`` sub-clusters (N = number of samples).  QPFS then ranks all
    representatives; every other gene gets weight 0 and is ranked after them by relevance I(X; C).

    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
    y : array-like, shape (n_samples,)
        Class labels.
    n_genes : int, optional
        Panel size (top of the ranking).  If there are fewer representatives, the panel's last
        ``diagnostics["n_panel_by_relevance"]`` genes are the most relevant non-representatives.
    n_clusters : int, optional
        k', clusters of level 1.  Default (None): ``max(15, ceil(sqrt(M)))`` (see :func:`ikm_qpfs`; on the
        planted problems of issue 19 it covered as many class signals as exact QPFS, give or take one, on
        10 of 10 runs, against 6 of 10 for the former default 20).
    tau : float in (0, 1]
        Radius threshold on the distance d.
    max_split : int
        Cap on the sub-clusters of one level-2 split.  The paper's count (r_i/tau)^N (from Chitta & Murty's
        two-level k-means, section 2.4 step 3) explodes with N in the tens -- e.g. (1.2)^62 = 8e4 for a radius
        20 % above tau on Colon -- so without a cap level 2 would put every gene in its own cluster.  With
        tau chosen by the paper's eq. 8, ``tau >= R / k^(1/N)``, the formula itself never exceeds k; the cap
        plays the role of that k.
    {common}

    Returns
    -------
    Selection
        ``weights`` = QPFS weights of the representatives (0 elsewhere); ``ranking`` = every gene: the
        representatives (weight desc, ties by relevance), then the other genes by relevance, then the
        constant genes (``diagnostics["n_ranked_by_qpfs"]`` says where QPFS's part ends); ``extra_columns``: ``cluster`` (leaf cluster id per gene, -1 for
        constant genes), ``representative`` (int8: 1 for the leaf cluster's representative, else 0),
        ``cluster_level`` (1 or 2); ``diagnostics``: QPFS calls,
        distance computations, levels reached, level-1 radii and split counts, alpha, timings.
    """
    if n_clusters is not None:
        _check_int("n_clusters", n_clusters, 1)
    max_split = _check_int("max_split", max_split, 1)
    tau = _check_tau(tau)
    alpha_rows = _check_int("alpha_rows", alpha_rows, 1)
    ctx = _Context(X, y, feature_names, discretization=discretization, n_bins=n_bins, base=base, alpha=alpha,
                   shuffle=shuffle, random_state=random_state, alpha_rows=alpha_rows,
                   n_clusters=n_clusters, n_split=max_split)
    with ctx.progress:  # the bar is closed on an error too
        n_clusters = _resolve_clusters(n_clusters, ctx.keep.size)
        n_genes = check_n_genes(n_genes, ctx.m_total)
        P_all, P, share = ctx.forced(preselected, n_genes)
        t = time.perf_counter()
        leaves, info = _km.two_level(ctx.space, ctx.order, n_clusters, tau, max_split)
        t_cluster = time.perf_counter() - t
        reps = _with_forced(P, np.array([leaf[1] for leaf in leaves], dtype=np.int64))
        x, a, solve_diag = ctx.qpfs(reps, P.size, share)
        local_w = np.zeros(ctx.keep.size)
        local_w[reps] = x
        leaf_dicts = [dict(members=mem, rep=rep, level=lev) for mem, rep, lev, _ in leaves]
        params = dict(n_clusters=n_clusters, tau=tau, max_split=max_split,
                      alpha="per_call" if alpha is None else ctx.alpha, alpha_rows=alpha_rows, discretization=discretization,
                      n_bins=n_bins, base=base, shuffle=shuffle, n_genes=n_genes, similarity="mi", relevance="mi",
                      **preselected_params(P_all, feature_names, share))
        diagnostics = dict(levels_reached=int(max(leaf[2] for leaf in leaves)), n_representatives=int(reps.size),
                           alpha_used=float(a), level1_radii=[float(r) for r in info["level1_radii"]],
                           level1_split=[int(s) for s in info["level1_split"]], seconds_clustering=t_cluster,
                           **{f"qpfs_{k}": v for k, v in solve_diag.items()})
        return ctx.finish("tlkm_qpfs", reps, local_w, n_genes, params, diagnostics, leaf_dicts, P_all)


def _interleaved(method, X, y, *, aggressive, n_genes, n_clusters, n_split, tau, max_levels, alpha, alpha_rows,
                 discretization, n_bins, base, shuffle, random_state, feature_names, preselected=None):
    """Algorithms IKM-QPFS and IRR (section 4.1); with ``aggressive`` the IKMA-QPFS check (section 4.5)."""
    if n_clusters is not None:
        _check_int("n_clusters", n_clusters, 1)
    n_split = _check_int("n_split", n_split, 2)
    max_levels = _check_int("max_levels", max_levels, 1)
    tau = _check_tau(tau)
    alpha_rows = _check_int("alpha_rows", alpha_rows, 1)
    ctx = _Context(X, y, feature_names, discretization=discretization, n_bins=n_bins, base=base, alpha=alpha,
                   shuffle=shuffle, random_state=random_state, alpha_rows=alpha_rows,
                   n_clusters=n_clusters, n_split=n_split)
    with ctx.progress:  # the bar is closed on an error too
        n_clusters = _resolve_clusters(n_clusters, ctx.keep.size)
        n_genes = check_n_genes(n_genes, ctx.m_total)
        P_all, P, share = ctx.forced(preselected, n_genes)
        sp = ctx.space
        kept = []  # F of Algorithm IRR: representatives (local indices) of relevant terminal clusters
        leaves = []
        counts = dict(kmeans=0, radius=0, depth_check=0, dropped_zero=0, dropped_aggressive=0, split=0)
        depth = [1]
        wide_kept = []  # (size, radius) of kept leaves at the depth limit with radius >= tau

        def irr(km, level):
            x, _, _ = ctx.qpfs(km.representatives)  # step 2 of IKM-QPFS / step 9 of IRR
            for c, rep in enumerate(km.representatives):
                members = km.members(c)
                rep = int(rep)
                if aggressive and x[c] <= 0.0:  # IKMA: drop irrelevant clusters at any level
                    counts["dropped_aggressive"] += 1
                    leaves.append(dict(members=members, rep=rep, level=level))
                    continue
                terminal = level >= max_levels
                if not terminal:
                    before = sp.n_distances
                    terminal = _km.radius(sp, members, rep) < tau  # IRR step 3-4
                    counts["radius"] += sp.n_distances - before
                elif x[c] > 0.0 and members.size > 1:  # kept at the depth limit: is it still wider than tau?
                    before = sp.n_distances
                    r = _km.radius(sp, members, rep)
                    counts["depth_check"] += sp.n_distances - before
                    if r >= tau:  # one representative stands for all of it
                        wide_kept.append((int(members.size), float(r)))
                if terminal:
                    if x[c] > 0.0:
                        kept.append(rep)  # IRR step 6
                    else:
                        counts["dropped_zero"] += 1
                    leaves.append(dict(members=members, rep=rep, level=level))
                else:  # IRR steps 8-11: split into n_split sub-clusters and recurse
                    counts["split"] += 1
                    depth[0] = max(depth[0], level + 1)
                    sub = _km.variant_macqueen(sp, members, min(n_split, members.size))
                    counts["kmeans"] += sub.n_distances
                    irr(sub, level + 1)

        t = time.perf_counter()
        first = _km.variant_macqueen(sp, ctx.order, n_clusters)  # step 1
        counts["kmeans"] += first.n_distances
        irr(first, 1)
        t_cluster = time.perf_counter() - t - ctx.t_qpfs
        kept = np.array(kept, dtype=np.int64)
        if kept.size == 0 and not P.size:
            raise ValueError(
                f"{method}: every cluster was dropped (no representative got a positive QPFS weight), so no gene is "
                "left to rank; use a smaller alpha, more clusters (n_clusters / n_split) or fewer levels"
                + (", or ikm_qpfs instead of ikma_qpfs" if aggressive else ""))
        kept = _with_forced(P, kept)
        x, a, solve_diag = ctx.qpfs(kept, P.size, share)  # step 5: final QPFS on F (given the forced genes)
        local_w = np.zeros(ctx.keep.size)
        local_w[kept] = x
        kept_set = set(kept.tolist())
        dropped_genes = sum(leaf["members"].size for leaf in leaves if leaf["rep"] not in kept_set)
        params = dict(n_clusters=n_clusters, n_split=n_split, tau=tau, max_levels=max_levels,
                      alpha="per_call" if alpha is None else ctx.alpha, alpha_rows=alpha_rows,
                      discretization=discretization, n_bins=n_bins, base=base, shuffle=shuffle, n_genes=n_genes,
                      similarity="mi", relevance="mi", aggressive=aggressive, **preselected_params(P_all, feature_names, share))
        diagnostics = dict(
            levels_reached=int(depth[0]), n_kept=int(kept.size), n_clusters_split=counts["split"],
            n_clusters_dropped=counts["dropped_zero"] + counts["dropped_aggressive"],
            n_clusters_dropped_aggressive=counts["dropped_aggressive"], n_genes_dropped=int(dropped_genes),
            n_distances_kmeans=int(counts["kmeans"]), n_distances_radius=int(counts["radius"]),
            n_distances_depth_check=int(counts["depth_check"]),
            n_wide_at_depth_limit=len(wide_kept), wide_at_depth_limit_sizes=[w[0] for w in wide_kept],
            alpha_used=float(a), seconds_clustering=t_cluster, **{f"qpfs_{k}": v for k, v in solve_diag.items()})
        splittable = [w for w in wide_kept if w[0] > n_split]  # a split would have made sub-clusters of it
        if splittable:
            big = max(splittable)
            warnings.warn(
                f"{method}: {len(splittable)} kept cluster(s) of more than n_split={n_split} genes reached the depth limit max_levels={max_levels} still wider "
                f"than tau={tau:g} (largest: {big[0]} genes, radius {big[1]:.3f}); each keeps one representative, so "
                "distinct class signals inside one of them can be lost. Raise max_levels, n_split or n_clusters "
                "(diagnostics['wide_at_depth_limit_sizes'] lists their sizes)", UserWarning, stacklevel=3)
        return ctx.finish(method, kept, local_w, n_genes, params, diagnostics, leaves, P_all)



@_ikm_doc
@parameter_constraints(n_clusters=Interval("integer", none=True), n_split=Interval("integer"), max_levels=Interval("integer"),
                       alpha_rows=Interval("integer"), n_bins=Interval("integer"))
def ikm_qpfs(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, n_clusters: int | None = None,
             n_split: int = 10, tau: float = 0.8, max_levels: int = 3, alpha: float | str | None = None,
             alpha_rows: int = 64, discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2,
             shuffle: bool = True, preselected: Sequence[str | int] | None = None, random_state: SeedLike = 0,
             feature_names: Sequence[str] | None = None) -> Selection:
    """Interleaved k-means QPFS (IKM-QPFS, paper section 4.1, Algorithms IKM-QPFS and IRR).

    k-means makes ``n_clusters`` clusters and QPFS weighs their representatives.  A cluster with radius
    ``r < tau``, or at level ``max_levels``, is terminal: its representative is kept if its QPFS weight is
    > 0, else the whole cluster is dropped.  Every other cluster is split into ``n_split`` sub-clusters by
    k-means, QPFS weighs the sub-cluster representatives, and the same rule recurses.  A final QPFS over
    the kept representatives ranks them; every other gene (members of kept clusters, dropped clusters) is
    ranked after them by relevance I(X; C), with weight 0, so a panel of any size can be taken (the paper
    ranks only the kept representatives).  At most ``max_levels * (2 M k - k^2 + 2 M)`` distances are spent
    in k-means when ``n_clusters == n_split == k`` (section 4.3), plus one per member for radii.

    {ikm_params}

    Returns
    -------
    Selection
        ``weights`` = final QPFS weights of the kept representatives (0 elsewhere); ``ranking`` = every gene:
        the kept representatives (final QPFS weight desc, ties by relevance; ``diagnostics["n_ranked_by_qpfs"]``
        of them), then the other genes by relevance, then the constant genes; ``extra_columns``: ``cluster`` (leaf cluster id per gene, -1 for constant genes),
        ``representative`` (int8 0/1: gene represents its leaf cluster, kept or not), ``cluster_level``;
        ``diagnostics``: ``n_qpfs_calls``, ``n_distance_computations`` (k-means + radii),
        ``n_distances_kmeans``, ``n_distances_radius`` (radii deciding splits), ``n_distances_depth_check`` (radii
        of kept clusters at level L, for ``n_wide_at_depth_limit``), ``levels_reached``, kept/dropped clusters and genes, alpha, timings.
    """
    return _interleaved("ikm_qpfs", X, y, aggressive=False, n_genes=n_genes, n_clusters=n_clusters,
                        n_split=n_split, tau=tau, max_levels=max_levels, alpha=alpha, alpha_rows=alpha_rows,
                        discretization=discretization, n_bins=n_bins, base=base, shuffle=shuffle,
                        random_state=random_state, feature_names=feature_names, preselected=preselected)


@_ikm_doc
@parameter_constraints(n_clusters=Interval("integer", none=True), n_split=Interval("integer"), max_levels=Interval("integer"),
                       alpha_rows=Interval("integer"), n_bins=Interval("integer"))
def ikma_qpfs(X: MatrixLike, y: ArrayLike, *, n_genes: int | None = None, n_clusters: int | None = None,
              n_split: int = 10, tau: float = 0.8, max_levels: int = 3, alpha: float | str | None = None,
              alpha_rows: int = 64, discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2,
              shuffle: bool = True, preselected: Sequence[str | int] | None = None, random_state: SeedLike = 0,
              feature_names: Sequence[str] | None = None) -> Selection:
    """Interleaved k-means aggressive QPFS (IKMA-QPFS, paper section 4.5).

    As :func:`ikm_qpfs`, but every cluster whose representative gets QPFS weight 0 is dropped at once, at
    any level and whatever its radius (the check added at the top of the loop of Algorithm IRR).

    {ikm_params}

    Returns
    -------
    Selection
        As :func:`ikm_qpfs`; ``diagnostics["n_clusters_dropped_aggressive"]`` counts the early drops.
    """
    return _interleaved("ikma_qpfs", X, y, aggressive=True, n_genes=n_genes, n_clusters=n_clusters,
                        n_split=n_split, tau=tau, max_levels=max_levels, alpha=alpha, alpha_rows=alpha_rows,
                        discretization=discretization, n_bins=n_bins, base=base, shuffle=shuffle,
                        random_state=random_state, feature_names=feature_names, preselected=preselected)
