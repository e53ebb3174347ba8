"""The one table of selection methods by name: every face (tl, sklearn, CLI, R) dispatches here."""
from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING

from . import _device, _progress, _threads
from ._docs import BACKEND_DOC, doc_params
from ._selection import Selection
from ._validation import frame_feature_names, one_names_warning, validate_random_state

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

    from ._typing import MatrixLike, SeedLike

__all__ = ["select", "methods", "register", "hierarchy_methods", "method_function", "family", "FAMILIES",
           "DEFAULT_PANEL", "DEFAULT_KEY", "extra_columns", "resolve_method", "result_key", "DASK_METHODS", "dask_refusal"]

from typing import NamedTuple


class _Method(NamedTuple):
    module: str
    function: str
    description: str
    family: str
    extra_columns: tuple = ()


#: the estimator families (:mod:`bioqpfs.estimators`): which sklearn class serves a method and which of
#: its parameters are first-class estimator parameters
FAMILIES = {"qpfs": "QPFSSelector", "spec_cmi": "SpecCMISelector", "clustering": "IKMQPFSSelector",
            "baseline": "BaselineSelector", "generic": "BioQPFSSelector"}

# name -> _Method
_METHODS: dict[str, _Method] = {}


def register(name, module, function, description, *, family, extra_columns=()):
    """Add a method; ``module:function`` is imported lazily on first use.

    ``family`` (a key of :data:`FAMILIES`) names the estimator class that serves the method, explicitly:
    nothing is guessed from the method's name.  ``extra_columns``: the keys of the method's
    ``Selection.extra_columns`` (``tl.select_genes`` writes them as ``.var`` columns ``<key>_<name>``, and refuses
    a user's column of such a name before any work).  Adding a method = one selector module + one ``register``
    line (the contract is written down in :mod:`bioqpfs.selectors._common`).
    """
    if family not in FAMILIES:
        raise ValueError(f"register({name!r}): family must be one of {sorted(FAMILIES)}, got {family!r}")
    _METHODS[name] = _Method(module, function, description, family, tuple(extra_columns))


def extra_columns(method):
    """The names of the extra per-gene results a registered method returns (``Selection.extra_columns``), e.g.
    ``("class",)`` for ``qpfs_cover``; ``()`` for most methods."""
    method_function(method)   # an unknown name: the one error message
    return _METHODS[method].extra_columns


def family(method):
    """The estimator family a registered method belongs to (a key of :data:`FAMILIES`)."""
    method_function(method)   # an unknown name: the one error message
    return _METHODS[method].family


register("qpfs", "bioqpfs.selectors.qpfs", "qpfs", "Quadratic Programming Feature Selection, exact (Rodriguez-Lujan et al. 2010)",
         family="qpfs")
register("eqpfs", "bioqpfs.selectors.eqpfs", "eqpfs", "Extended QPFS, convexified: H1 - beta H2 + lambda I (Nguyen et al. 2014, eq. 13)",
         family="qpfs")
register("spec_cmi", "bioqpfs.selectors.spec_cmi", "spec_cmi", "SPEC_CMI: dominant eigenvector of the conditional-MI matrix (Nguyen et al., KDD 2014)",
         family="spec_cmi")
register("spec_cmi_nystrom", "bioqpfs.selectors.spec_cmi", "spec_cmi_nystrom", "SPEC_CMI from sampled rows, Nystrom approximation (Nguyen et al. 2014, section 3.4)",
         family="spec_cmi")
register("sdp_cmi", "bioqpfs.selectors.spec_cmi", "sdp_cmi", "SDP_CMI: semidefinite relaxation + Goemans-Williamson rounding, small M (Nguyen et al. 2014)",
         family="spec_cmi")
register("maxrel", "bioqpfs.selectors.baselines", "maxrel", "Max-relevance ranking by I(X;C) (Peng et al. 2005)",
         family="baseline")
register("mrmr_mid", "bioqpfs.selectors.baselines", "mrmr_mid", "Greedy mRMR, difference form MID (Peng et al. 2005)",
         family="baseline", extra_columns=("greedy_score",))
register("mrmr_miq", "bioqpfs.selectors.baselines", "mrmr_miq", "Greedy mRMR, quotient form MIQ (Ding & Peng 2005)",
         family="baseline", extra_columns=("greedy_score",))
register("jmi", "bioqpfs.selectors.baselines", "jmi", "Greedy joint mutual information, = EMRMR (Yang & Moody 1999)",
         family="baseline", extra_columns=("greedy_score",))
register("cife", "bioqpfs.selectors.baselines", "cife", "Greedy conditional infomax feature extraction (Lin & Tang 2006)",
         family="baseline", extra_columns=("greedy_score",))
register("qpfs_cover", "bioqpfs.selectors.qpfs_cover", "qpfs_cover",
         "Class-covering QPFS: one QPFS per class on one-vs-rest MI, panel round-robin over classes (bioqpfs)",
         family="generic", extra_columns=("class",))
register("random", "bioqpfs.selectors.baselines", "random_genes", "Seeded uniform random ranking (baseline)",
         family="baseline")
register("ldfs", "bioqpfs.selectors.transform", "ldfs", "Linear Discriminant Feature Selection, l1/linf row-sparse LDA (Masaeli et al. 2010)",
         family="baseline")
register("hsfs", "bioqpfs.selectors.transform", "hsfs", "Hilbert-Schmidt Feature Selection, l1/linf row-sparse HSIC (Masaeli et al. 2010)",
         family="baseline")
register("tlkm_qpfs", "bioqpfs.selectors.ikm_qpfs", "tlkm_qpfs", "QPFS on two-level k-means gene-cluster representatives (Prasad & Biswas)",
         family="clustering", extra_columns=("cluster", "representative", "cluster_level"))
register("ikm_qpfs", "bioqpfs.selectors.ikm_qpfs", "ikm_qpfs", "Interleaved k-means and QPFS on gene clusters, O(M) memory (Prasad & Biswas)",
         family="clustering", extra_columns=("cluster", "representative", "cluster_level"))
register("ikma_qpfs", "bioqpfs.selectors.ikm_qpfs", "ikma_qpfs", "IKM-QPFS dropping every zero-weight cluster at once (Prasad & Biswas)",
         family="clustering", extra_columns=("cluster", "representative", "cluster_level"))


#: The panel recipe used when no method is named (``method=None``) by :func:`select`, ``tl.select_genes``, the
#: CLI, rpy2's ``bioqpfs.r.select_genes`` and R's ``selectGenes(method = NULL)``: a method and its parameters.  Chosen by the panel benchmark (``benchmarks/bench_panels.py``; evidence in
#: README "Panel quality").  Naming a method (``method="qpfs"``) gives that method with its published settings.
#:
#: Class-covering QPFS (:func:`bioqpfs.selectors.qpfs_cover.qpfs_cover`): one QPFS problem (eq. 2, alpha_hat)
#: per class on the one-vs-rest information of the genes higher in that class, with the shared MI redundancy Q,
#: the panel taken round-robin over the classes; every class counted equally (``class_weight="balanced"``) and
#: ``discretization="auto"`` (zero vs. non-zero + quantile codes on zero-inflated single-cell data, the paper's
#: mean +- sd bins on dense microarray data), and on single-cell data each class's relevance coded with bins of
#: its own that are equal-frequency under the class-balanced weights it is counted with
#: (``relevance_bins="per_class"``, :func:`bioqpfs.selectors._common.per_class_bin_relevance`: a graded gene
#: high in a rare type is cut where the type begins, not at the median of all cells).  It replaced the first
#: benchmarked recipe, QPFS + the same two levers, which spent small panels on the large groups (k = 10 on PBMC
#: louvain: 0.653 against 0.808 with qpfs_cover).  Each class's relevance is the mean of that MI and the
#: pair-order information ln 2 - H_2(AUROC) (``relevance="auto"``,
#: :func:`bioqpfs.selectors._common.pair_order_information`): on dense data the MI of three mean +- sd bins alone
#: lost Leukemia at k = 10 to scanpy's Wilcoxon markers (0.928 against 0.974 over 30 folds); on single-cell data
#: with per-class bins it was added after the check on real data not used to choose the recipe (CBMC at k = 10:
#: -0.036 against Wilcoxon with the MI alone, -0.007 with the mean).  No gene pays for its own entropy
#: (``self_redundancy="constant"``, Nguyen et al. 2014 section 2.2), and on single-cell data (per-class bins) the
#: pair-order term also looks at the class nearest to c (``relevance="auto"`` -> ``"mi_order_nearest"``):
#: against the rest alone, and with Q_ii = H(X_i) penalising the spread-out genes, CD14+ monocytes took monocyte
#: genes shared with CD16+ monocytes and CBMC at k = 20 stayed -0.012 below Wilcoxon (2 of 10 folds); with both,
#: every (single-cell set, k = 10 / 20) cell is within 0.01 of the better peer.  Dense data keeps the rest-only
#: term, which with the nearest class lost nci61 and lymphoma62; the constant diagonal alone gains a little on
#: all five microarray sets (README "Panel quality").
DEFAULT_PANEL = dict(method="qpfs_cover", params=dict(class_weight="balanced", discretization="auto",
                                                      relevance_bins="per_class", relevance="auto",
                                                      self_redundancy="constant"))


def resolve_method(method, params):
    """``(method, params, preset)``: ``method=None`` -> :data:`DEFAULT_PANEL` (the user's params win over
    the recipe's); a named method -> itself with the user's params only (its paper settings)."""
    if method is None:
        return DEFAULT_PANEL["method"], {**DEFAULT_PANEL["params"], **params}, "default"
    return method, dict(params), None


#: The key (``.var`` column prefix, ``.uns`` / R ``metadata()`` entry) of a run of :data:`DEFAULT_PANEL`
#: when no ``key_added`` is given; a named method is stored under its own name.
DEFAULT_KEY = "bioqpfs"


def result_key(method, key_added=None):
    """The key a selection is stored under, the same on every face (tl, CLI, R, rpy2).

    Parameters
    ----------
    method : str or None
        The method as the user named it, before :func:`resolve_method` (``None``: the default recipe).
    key_added : str, optional
        The user's key; wins when given.

    Returns
    -------
    str
        ``key_added``, else the named method, else :data:`DEFAULT_KEY` (``"bioqpfs"``).
    """
    if key_added is not None:
        return key_added
    return method if method is not None else DEFAULT_KEY


def methods() -> dict[str, str]:
    """Registered method names with a one-line description."""
    return {k: v.description for k, v in sorted(_METHODS.items())}


def closest_method(name):
    """The registered method name closest to ``name`` (case-insensitive match first, then
    :func:`difflib.get_close_matches`, preferring a name with the same letters), or None when nothing is close."""
    import difflib

    if not isinstance(name, str):
        return None
    folded = {k.lower(): k for k in _METHODS}
    key = name.strip().lower().replace("-", "_")
    if key in folded:
        return folded[key]
    close = difflib.get_close_matches(key, list(folded), n=3, cutoff=0.6)
    same_letters = [c for c in close if sorted(c) == sorted(key)]   # a transposition ('mrmr_mdi') beats a substitution
    return folded[(same_letters or close)[0]] if close else None


def unknown_method_message(name):
    """``unknown method 'QPFS' (did you mean 'qpfs'?); available: ...`` -- the one wording every face uses."""
    guess = closest_method(name)
    hint = f" (did you mean {guess!r}?)" if guess is not None else ""
    return f"unknown method {name!r}{hint}; available: {', '.join(sorted(_METHODS))}"


def method_function(method):
    """The selector function registered as ``method``; an unknown name is an error suggesting the closest."""
    if not isinstance(method, str) or method not in _METHODS:
        raise ValueError(unknown_method_message(method))
    entry = _METHODS[method]
    return getattr(importlib.import_module(entry.module), entry.function)


def batch_methods():
    """The registered methods that take ``batch=`` (batch-aware statistics), in registry order."""
    return [name for name in methods() if "batch" in inspect.signature(method_function(name)).parameters]


#: methods with a Dask path, tested equal to in memory and never holding more than a sample chunk of X
#: (README "Large data (Dask)"): with MI or |Pearson| similarity, MI or Hall relevance (with or without batches),
#: and a discretisation that the Dask codes implement (:func:`dask_refusal`); LDFS from its total scatter (a
#: genes x genes correlation matrix) and class means.  The others (gene clustering, HSFS) read X whole.
DASK_METHODS = ("qpfs", "qpfs_cover", "spec_cmi", "spec_cmi_nystrom", "sdp_cmi", "eqpfs", "maxrel", "mrmr_mid",
                "mrmr_miq", "jmi", "cife", "random", "ldfs")


def dask_refusal(method, params, X):
    """Why ``method`` with ``params`` does not run chunk by chunk on the Dask array ``X``; ``None`` when it does.

    Used by the faces that read a backed or lazy AnnData (:func:`bioqpfs._anndata.obs_rep_for`) to decide
    between reading X lazily in sample chunks and reading it whole, without a pass over ``X``.  Whether the Dask
    codes implement the rule is asked of :func:`bioqpfs._kernels.discretize.codes` itself on a 2 x 1 Dask array,
    so the answer follows that module; for ``discretization="auto"``, of both rules it can resolve to
    (:data:`bioqpfs._kernels.discretize.AUTO_RULES`).
    """
    import dask.array as da

    from ._kernels import discretize

    if method not in DASK_METHODS:
        return f"method {method!r} has no Dask path (methods with one: {', '.join(DASK_METHODS)})"
    defaults = {k: v.default for k, v in inspect.signature(method_function(method)).parameters.items()}
    settings = {**defaults, **params}
    relevance = settings.get("relevance")
    if isinstance(relevance, str) and relevance not in ("mi", "hall", "mi_order", "auto"):
        return f"relevance={relevance!r} has no Dask path (relevance='mi', 'hall', and qpfs_cover's 'mi_order' have)"
    setting = settings.get("discretization", "mean_sd")
    # "auto" is never resolved here (that was a pass over X): the question is asked of every rule it can become
    for rule in discretize.AUTO_RULES if isinstance(setting, str) and setting == "auto" else (setting,):
        try:
            discretize.codes(da.zeros((2, 1), chunks=(2, 1)), rule)
        except ValueError as e:
            auto = f" ('auto' can resolve to {rule!r})" if rule != setting else ""
            return f"{str(e).split(';')[0]}{auto}"
    return None


def _whole_unless_dask_method(X, method):
    """A Dask ``X`` read whole (numpy, or CSR from sparse chunks) for a method outside :data:`DASK_METHODS`, after
    a check that it fits as dense float64 (what those methods make of it: gene clustering standardises genes,
    HSFS z-scores X, at most :data:`bioqpfs.selectors.transform.MAX_HSIC_SAMPLES` samples); then the method runs
    exactly as in memory.  Anything else is returned unchanged."""
    from ._kernels.counting_dask import compute, csr_chunks, is_dask_array
    from ._validation import memory_guard

    if method in DASK_METHODS or not is_dask_array(X) or X.ndim != 2:
        return X
    if method == "hsfs":  # refused above MAX_HSIC_SAMPLES samples: before reading them, not after
        from .selectors.transform import check_hsic_samples

        check_hsic_samples(X.shape[0])
    memory_guard(8 * X.shape[0] * X.shape[1], f"reading the {X.shape[0]} x {X.shape[1]} Dask array whole "
                 f"(method {method!r} has no Dask path)", ["lazy"])
    return compute(csr_chunks(X))


def hierarchy_methods():
    """The registered methods that take hierarchical labels (a 2-D ``y``, ``groupby_weights=``), in registry order:
    those whose class relevance F is summed over the levels (README "Hierarchical labels")."""
    return [name for name in methods() if "groupby_weights" in inspect.signature(method_function(name)).parameters]


def check_levels_supported(method, y, preset=None):
    """Refuse hierarchical labels (a 2-D ``y`` with several columns) for a method without ``groupby_weights``,
    naming the method and those that take them (one wording for :func:`select` and ``tl.select_genes``)."""
    from .selectors._common import label_levels

    n_levels = label_levels(y)
    if n_levels > 1 and "groupby_weights" not in inspect.signature(method_function(method)).parameters:
        raise ValueError(
            f"method {method!r}{' (the default recipe, method=None)' if preset else ''} does not take hierarchical "
            f"labels ({n_levels} levels): its class statistics are not one relevance vector that could be summed "
            f"over the levels (README 'Hierarchical labels'). Methods that do: {', '.join(hierarchy_methods())}; "
            "or pass the finest level alone")


@doc_params(backend=BACKEND_DOC)
@one_names_warning()   # a DataFrame's columns, then the selector's feature_names: repeated names warned once
def select(X: MatrixLike, y: ArrayLike, *, method: str | None = None, n_genes: int | None = None,
           random_state: SeedLike = 0, feature_names: Sequence[str] | None = None, progress: bool | None = None,
           n_jobs: int | None = None, backend: str | None = None, **params) -> Selection:
    """Select genes with the named method.

    Parameters
    ----------
    X : array-like, sparse or dask array, shape (n_samples, n_genes)
        Array support per method: numpy and scipy.sparse for every method; a Dask array chunked by samples
        for every method: counted chunk by chunk by those of :data:`DASK_METHODS` (the MI methods, with
        ``discretization="mean_sd"``, ``"quantile"``, ``"zero_quantile"`` or ``"auto"``), read whole after a
        memory check by the others (gene clustering, HSFS); each tested equal to in memory (README "Large
        data (Dask)").  A pandas DataFrame's columns become the gene names (``Selection.genes``) unless ``feature_names`` is given.
    y : array-like, shape (n_samples,) or (n_samples, n_levels)
        Class labels; or hierarchical labels, one column per level, coarse to fine (a 2-D array or a
        DataFrame), for the methods of :func:`hierarchy_methods` (the relevance is summed over the levels,
        ``groupby_weights=``; see :func:`bioqpfs.qpfs`); any other method refuses them.
    method : str, optional
        A name from :func:`bioqpfs.methods`, run with its published settings (plus ``**params``).
        ``None`` (default): the benchmarked default panel recipe :data:`DEFAULT_PANEL`; the
        recipe's parameters can be overridden through ``**params``.
    n_genes : int, optional
        Panel size.
    random_state : int, numpy Generator or None, default 0
        Seed for every random choice the method makes: a non-negative integer (default 0, the same
        seeded default as every face: tl, CLI, R, estimators, evaluate, the selector functions), a
        NumPy Generator/RandomState, or None (unseeded).  Anything else (e.g. ``"abc"``, -1, 1.5) is an error for every method,
        also for the deterministic ones, which ignore a valid seed.
    feature_names : sequence of str, optional
        Gene names, one per column of X (in messages and ``Selection.genes``).
    progress : bool, optional
        Progress bars (tqdm, stderr) for steps longer than a second: ``True``, ``False``, or ``None``
        (default): on when ``scanpy.settings.verbosity`` is info or higher (:mod:`bioqpfs._progress`).
    n_jobs : int, optional
        Worker threads for the counting kernels and numba regions: a positive count or -1 (all);
        ``None`` (default): ``scanpy.settings.n_jobs`` when set, else ``NUMBA_NUM_THREADS`` (the
        number of cores by default); see :mod:`bioqpfs._threads`.
    {backend}
    **params
        Method parameters (see the method's function, e.g. :func:`bioqpfs.qpfs`).  Unknown
        parameters are an error naming the ones the method accepts.  ``batch=`` (one batch label per
        sample, with ``batch_weights=`` and ``batch_discretization=``) gives batch-aware statistics to the
        methods of :func:`batch_methods` (see :func:`bioqpfs.qpfs`); any other method refuses it.
    """
    _device.check_backend(backend)
    method, params, preset = resolve_method(method, params)
    func = method_function(method)
    accepted = set(inspect.signature(func).parameters) - {"X", "y"}
    if "batch" in params and params["batch"] is None and "batch" not in accepted:
        params = {k: v for k, v in params.items() if k != "batch"}  # no batches: every method runs as usual
    if params.get("batch") is not None and "batch" not in accepted:
        raise ValueError(
            f"method {method!r} does not take batch= (batch-aware statistics: it has no within-batch formulation "
            f"here). Methods that do: {', '.join(batch_methods())}; or correct the batch effect before selecting")
    check_levels_supported(method, y, preset)
    unknown = set(params) - accepted
    if unknown:
        raise TypeError(
            f"method {method!r} does not take parameter(s) {', '.join(sorted(unknown))}; "
            f"it accepts: {', '.join(sorted(accepted - {'n_genes', 'random_state', 'feature_names'}))}"
        )
    validate_random_state(random_state)
    if feature_names is None and hasattr(X, "columns") and hasattr(X, "index"):  # a DataFrame names its genes
        feature_names = frame_feature_names(X.columns)
    gpu_input = _device.is_gpu_input(X)
    X = _whole_unless_dask_method(_device.to_host(X), method)
    with _progress.requested(progress), _threads.limited(n_jobs), _device.requested(backend), \
            _device.mark_gpu_input(gpu_input):
        sel = func(X, y, n_genes=n_genes, random_state=random_state, feature_names=feature_names, **params)
    if preset is not None:
        sel.params["preset"] = preset
    return sel
