"""The result every selector returns, and the deterministic ranking rule they share."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._kernels.ranking import RANK_REL_TOL, rank_descending

__all__ = ["Selection", "rank_by_weight", "check_informative"]


def rank_by_weight(weights, relevance=None, *, candidates=None, rel_tol=RANK_REL_TOL):
    """Gene indices ordered by decreasing weight, ties by decreasing relevance, then by index.

    This is step 8 of QPFS section 2.3 ("in case of equal coefficients, rank them by decreasing
    relevance F"), made fully deterministic by a final tie-break on the input order.  Weights (and
    relevances) that differ by less than ``rel_tol`` relative to the largest among the candidates
    are ties (:func:`bioqpfs._kernels.ranking.snap_ties`), so round-off never decides an order.
    ``candidates`` restricts the ranking to those indices (e.g. cluster representatives).
    """
    w = np.asarray(weights, dtype=np.float64)
    idx = np.arange(w.size) if candidates is None else np.asarray(candidates, dtype=np.int64)
    f = np.zeros(w.size) if relevance is None else np.asarray(relevance, dtype=np.float64)
    return idx[rank_descending([w[idx], f[idx]], idx, rel_tol)]


#: relevances up to this value are 0 (round-off: a gene independent of the labels can get ~1e-16 bits)
ZERO_RELEVANCE = 1e-12


def check_informative(method, relevance, params=None):
    """Refuse a panel when no gene carries information about the labels (every relevance is 0).

    "0" means at most :data:`ZERO_RELEVANCE`: the relevances of the methods are on a scale of
    order one (MI in bits is at most log2 of the number of classes; LDFS/HSFS criteria are
    normalised), and a gene independent of the labels gets round-off (~1e-16) instead of 0.

    The one check of the selector contract, made where every method hands back its result: the
    global methods cannot weigh genes without any relevance, and the greedy ones (MaxRel, mRMR, JMI,
    CIFE) would return the first genes in index order, a meaningless panel.  Typical causes: classes
    that do not differ in the data (the labels of other samples), too few samples per class, or a
    discretisation too coarse for the data (one sample per class is refused earlier, by
    :func:`bioqpfs.selectors._common.prepare`).  The ``random``
    baseline has no relevance: it never uses the labels, and is not checked.  Selectors whose
    numerics would fail on such data before a ``Selection`` is made (eigenvectors, alpha estimates)
    call it as soon as their relevance is known, so that the message is the same.
    """
    if relevance is None:
        return
    r = np.asarray(relevance, dtype=np.float64)
    if r.size and not (r > ZERO_RELEVANCE).any():
        params = params or {}
        disc = params.get("discretization") if params.get("relevance", "mi") == "mi" else None
        if disc is None:  # a criterion on the continuous values (LDFS, HSFS, Hall, MST) or a user relevance
            what, hint = "", ("Check that the labels belong to these samples (in this order) and that the "
                              "classes differ in some gene")
        else:
            what = f" after discretization={disc!r}"
            hint = ("Check that the labels belong to these samples; use more samples per class, another "
                    "discretization (e.g. 'quantile'), or a method on the continuous values (ldfs, or qpfs with "
                    "similarity='correlation')")
        pairs = ("" if method not in ("jmi", "cife") else
                 " (Genes may still tell the classes apart in pairs, as an XOR does, which a greedy search that "
                 "starts from the most relevant gene cannot find: spec_cmi and sdp_cmi rank genes by the "
                 "conditional information I(X_i; C | X_j) and take such pairs.)")
        raise ValueError(
            f"{method}: no gene carries information about the labels -- the class relevance of every one of the "
            f"{r.size} genes is 0{what}, so any panel would be as good as the first genes in index order. {hint}"
            f"{pairs}")


@dataclass(eq=False)   # compared by identity (the generated == compared ndarray fields and raised); hashable
class Selection:
    """Outcome of a gene selection.

    Attributes
    ----------
    method : str
        Registry name of the selector (e.g. ``"qpfs"``).
    weights : ndarray, shape (n_genes_total,)
        One weight per input gene (input order); 0 for genes the method gave no weight.
    ranking : ndarray of int
        Ranked gene indices, best first.  Usually every gene; methods that rank only some genes
        (cluster representatives, greedy selectors stopped early) return fewer.
    n_genes : int or None
        Panel size asked for; ``selected`` is ``ranking[:n_genes]``.
    params : dict
        Parameters actually used (defaults resolved, e.g. the alpha estimate).
    diagnostics : dict
        What happened: solver convergence, PSD fixes, timings, excluded genes...
    relevance : ndarray or None
        Class relevance F used for ranking ties, when the method has one.  A relevance that is 0 for
        every gene is refused here, for every method (see :func:`check_informative`).
    feature_names : ndarray or None
        Gene names in input order, when known (``feature_names=``, the columns of a pandas
        DataFrame given to :func:`bioqpfs.select`, ``var_names`` through :func:`bioqpfs.tl.select_genes`).
    extra_columns : dict
        Method-specific per-gene columns (name -> array in input order, e.g. the greedy selectors'
        ``greedy_score``), added by :meth:`to_frame` and stored in ``.var`` by :func:`bioqpfs.tl.select_genes`.
    n_features : int
        (property) Number of input genes, ``weights.size``.
    selected : ndarray of int
        (property) Indices of the panel, best first: ``ranking[:n_genes]`` (every ranked gene if ``n_genes`` is None).
    selected_mask : ndarray of bool
        (property) One entry per input gene, True for the panel.
    rank : ndarray of float
        (property) 1-based rank of every input gene, NaN for genes the method did not rank.
    genes : ndarray of str
        (property) Names of the panel, best first: ``feature_names[selected]``.
    ranked_genes : ndarray of str
        (property) Names of every ranked gene, best first: ``feature_names[ranking]``.
    """

    method: str
    weights: np.ndarray
    ranking: np.ndarray
    n_genes: int | None = None
    params: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    relevance: np.ndarray | None = None
    feature_names: np.ndarray | None = None
    extra_columns: dict = field(default_factory=dict)
    #: the method checked its own criterion for information (SPEC_CMI / SDP_CMI: the conditional-information matrix
    #: Q), so a relevance of zeros is not refused: pure interactions (XOR) carry none alone but do in pairs
    criterion_checked: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self):
        self.weights = np.asarray(self.weights, dtype=np.float64)
        self.ranking = np.asarray(self.ranking, dtype=np.int64)
        bad = np.flatnonzero(~np.isfinite(self.weights))
        if bad.size:  # the last guard: a selector must never hand back NaN/Inf weights
            raise ValueError(
                f"{self.method}: the computed weights are not finite for {bad.size} of {self.weights.size} gene(s) "
                f"(e.g. gene index {', '.join(str(int(i)) for i in bad[:5])}); this is a numerical failure on "
                "degenerate input (too few samples, genes without information, extreme parameters) -- check the "
                "input or the method's parameters")
        if not self.criterion_checked:
            check_informative(self.method, self.relevance, self.params)

    @property
    def n_features(self) -> int:
        """Number of input genes (``weights.size``)."""
        return self.weights.size

    @property
    def selected(self) -> np.ndarray:
        """Indices of the panel, best first (``ranking[:n_genes]``; all ranked genes if n_genes is None)."""
        return self.ranking if self.n_genes is None else self.ranking[: self.n_genes]

    @property
    def selected_mask(self) -> np.ndarray:
        """One boolean per input gene, True for the panel (:attr:`selected`)."""
        mask = np.zeros(self.n_features, dtype=bool)
        mask[self.selected] = True
        return mask

    @property
    def rank(self) -> np.ndarray:
        """1-based rank of every gene (float), NaN for genes the method did not rank."""
        r = np.full(self.n_features, np.nan)
        r[self.ranking] = np.arange(1, self.ranking.size + 1)
        return r

    def _names_of(self, idx, what):
        if self.feature_names is None:
            raise ValueError(f"this Selection has no gene names, so {what} is unavailable: pass feature_names= "
                             "(or a pandas DataFrame with gene columns) to bioqpfs.select, or use the indices in "
                             "Selection.selected / Selection.ranking")
        return np.asarray(self.feature_names).astype(str)[idx]

    @property
    def genes(self) -> np.ndarray:
        """Names of the panel genes, best first (``feature_names[selected]``); an error when names are unknown."""
        return self._names_of(self.selected, "genes")

    @property
    def ranked_genes(self) -> np.ndarray:
        """Names of every ranked gene, best first (``feature_names[ranking]``); an error when names are unknown."""
        return self._names_of(self.ranking, "ranked_genes")

    def selected_names(self) -> list[str]:
        """Names of the panel, best first, as a list; the indices as text when the names are unknown."""
        if self.feature_names is None:
            return [str(i) for i in self.selected]
        return [str(self.feature_names[i]) for i in self.selected]

    def to_frame(self):
        """Tidy DataFrame: gene, rank, weight, selected (+ relevance and method-specific columns), in rank order."""
        import pandas as pd

        names = self.feature_names if self.feature_names is not None else np.arange(self.n_features).astype(str)
        df = pd.DataFrame({"gene": np.asarray(names).astype(str), "rank": self.rank, "weight": self.weights,
                           "selected": self.selected_mask})
        if self.relevance is not None:
            df["relevance"] = self.relevance
        for k, v in self.extra_columns.items():
            df[k] = v
        return df.sort_values(["rank"], kind="stable", na_position="last").reset_index(drop=True)

    def __repr__(self):
        top = ", ".join(self.selected_names()[:5])
        return (f"Selection(method={self.method!r}, n_features={self.n_features}, ranked={self.ranking.size}, "
                f"n_genes={self.n_genes}, top=[{top}{', ...' if self.selected.size > 5 else ''}])")
