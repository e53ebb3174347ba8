"""scikit-learn face: every registered selection method as a ``SelectorMixin`` transformer.

The selectors are thin: ``fit`` validates ``(X, y)`` with :func:`sklearn.utils.validation.validate_data`
and calls :func:`bioqpfs.select` (the registry every face dispatches through), so any method
registered there is reachable from here, from :mod:`bioqpfs.tl` and from the CLI with the same
results.  Modelled on ``sklearn/feature_selection/_variance_threshold.py`` and
``_univariate_selection.py``: ``__init__`` only stores parameters, fitted attributes end in ``_``.

- :class:`BioQPFSSelector` -- any registered method by name, parameters in ``method_params``.
- :class:`QPFSSelector` -- QPFS (and its registered variants, e.g. ``method="eqpfs"``) with the QPFS
  parameters as first-class estimator parameters, so ``GridSearchCV`` can search ``alpha`` directly.
- :class:`SpecCMISelector`, :class:`IKMQPFSSelector`, :class:`BaselineSelector` -- the other method
  families, defaulting to ``"spec_cmi"``, ``"ikm_qpfs"`` and ``"mrmr_mid"``; ``method=`` picks a
  family member (``"spec_cmi_nystrom"``, ``"sdp_cmi"``, ``"ikma_qpfs"``, ``"tlkm_qpfs"``, ``"maxrel"``,
  ...) once that method is registered (see :func:`bioqpfs.methods`).

>>> import numpy as np
>>> from bioqpfs.estimators import QPFSSelector
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(40, 8)); y = np.repeat([0, 1], 20); X[:, 3] += 3 * y
>>> sel = QPFSSelector(n_features_to_select=2).fit(X, y)
>>> int(sel.ranking_[3]), sel.transform(X).shape
(1, (40, 2))
"""
from __future__ import annotations

import inspect
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.feature_selection import SelectorMixin
from sklearn.utils._param_validation import Interval, RealNotInt
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ._io import read_if_on_disk
from ._kernels.counting_dask import csr_chunks, is_dask_array
from ._registry import FAMILIES, check_levels_supported, family, method_function, methods, select
from ._validation import check_labels, dense_labels, is_default_index, refuse_ambiguous_default_index, sample_names_of
from .selectors._common import label_levels

__all__ = ["BioQPFSSelector", "QPFSSelector", "SpecCMISelector", "IKMQPFSSelector", "BaselineSelector"]

# parameters every registry function takes; they are set by the estimator, never via method_params
_RESERVED = ("n_genes", "random_state", "feature_names")


class BioQPFSSelector(SelectorMixin, BaseEstimator):
    """Select features (genes) with any method registered in :func:`bioqpfs.methods`.

    Parameters
    ----------
    n_features_to_select : int or float, default=None
        Panel size.  ``None``: half of the features (as :class:`sklearn.feature_selection.RFE`);
        an int: that many (capped at the number of features, with a warning); a float in (0, 1]:
        that fraction of the features (at least one).  The only positional parameter of every
        bioqpfs estimator; the others are keyword-only.
    method : str, default="qpfs"
        Registered method name (``bioqpfs.methods()`` lists them).
    method_params : dict, default=None
        Further keyword arguments of the method (e.g. ``{"alpha": 0.3}`` for ``"qpfs"``).  Unknown
        names raise a ``TypeError`` listing the accepted ones.  Forced genes (extending a fixed panel) go
        here for every method: ``method_params={"preselected": ["CD3E", "MS4A1"]}`` (names need a DataFrame
        X, whose columns become ``feature_names_in_``; integer column indices always work); they rank
        first and count towards ``n_features_to_select``.  :class:`QPFSSelector` also has it as a
        first-class parameter.
    random_state : int, RandomState instance or None, default=0
        Seed for the method's random choices (Nystrom rows, k-means seeds, rounding, the random
        baseline); seeded by default as in every bioqpfs face.  A ``RandomState``
        instance is turned into one integer seed per ``fit``; ``None``: unseeded.

    Attributes
    ----------
    selection_ : bioqpfs.Selection
        The full result: weights, ranking, parameters actually used, diagnostics.
    weights_ : ndarray of shape (n_features_in_,)
        The method's weight per feature (e.g. the QPFS solution x; 0 for unweighted features).
    ranking_ : ndarray of int of shape (n_features_in_,)
        1-based rank of each feature (1 = best), as in :class:`sklearn.feature_selection.RFE`.
        Features the method did not rank (e.g. dropped cluster members) share the last rank,
        ``n_ranked + 1``.
    order_ : ndarray of int
        Feature indices best first (``selection_.ranking``; may be shorter than ``n_features_in_``).
    n_features_to_select_ : int
        The resolved panel size.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Defined only when ``X`` has string feature names (a DataFrame); passed to the method.

    Notes
    -----
    The task is classification: ``y`` holds class labels (strings or integers).  ``y`` is first
    checked by bioqpfs's label validation (missing labels are an error naming the samples; integers mixed with
    strings are classes, as in :func:`bioqpfs.select`), then X by scikit-learn's ``validate_data`` and by
    bioqpfs's check of NaN/Inf (naming the genes), and repeated DataFrame column names are refused by name.
    """

    _parameter_constraints: dict = {
        "method": [str],
        "n_features_to_select": [
            Interval(Integral, 1, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="right"),
            None,
        ],
        "method_params": [dict, None],
        "random_state": ["random_state"],
    }

    #: estimator parameters forwarded to the method as keyword arguments (subclasses add their own)
    _forwarded: tuple = ()

    def __init__(self, n_features_to_select=None, *, method="qpfs", method_params=None, random_state=0):
        self.method = method
        self.n_features_to_select = n_features_to_select
        self.method_params = method_params
        self.random_state = random_state

    # -- helpers -------------------------------------------------------------------------------
    def _method_kwargs(self, func):
        """Keyword arguments for the method: explicit estimator parameters + ``method_params``."""
        accepted = inspect.signature(func).parameters
        defaults = inspect.signature(type(self).__init__).parameters
        kwargs = {}
        for name in self._forwarded:
            value = getattr(self, name)
            if value is None and defaults[name].default is None:
                continue          # left unset: the method keeps its own default
            if name in accepted:
                kwargs[name] = value
            elif not _same(value, defaults[name].default):
                raise TypeError(f"method {self.method!r} does not take parameter {name!r} (set to {value!r}); "
                                f"leave it at its default {defaults[name].default!r} or choose another method")
        extra = dict(self.method_params or {})
        reserved = sorted(set(extra) & set(_RESERVED))
        if reserved:
            instead = {"n_genes": "the estimator parameter n_features_to_select",
                       "random_state": "the estimator parameter random_state",
                       "feature_names": "fit on a pandas DataFrame (its columns name the features)"}
            raise ValueError(f"method_params must not contain {reserved}: use "
                             f"{'; '.join(instead[r] for r in reserved)} instead")
        clash = sorted(set(extra) & set(kwargs))
        if clash and all(_same(getattr(self, name), defaults[name].default) for name in clash):
            # given once, in method_params, but the estimator has its own parameter (at its default) for it
            raise ValueError(f"{clash} {'is a parameter' if len(clash) == 1 else 'are parameters'} of "
                             f"{type(self).__name__}: set {', '.join(f'{n}={extra[n]!r}' for n in clash)} on the "
                             "estimator (so GridSearchCV and get_params see it), not in method_params")
        if clash:
            raise ValueError(f"{clash} given both as estimator parameter(s) and in method_params; give each once")
        kwargs.update(extra)
        return kwargs

    def _n_select(self, n_features):
        k = self.n_features_to_select
        if k is None:
            return max(1, n_features // 2)
        if isinstance(k, (bool, np.bool_)):  # an Integral to scikit-learn's validation: True selected one gene
            raise ValueError(f"n_features_to_select must be a positive integer or a fraction in (0, 1], got {k!r}")
        if isinstance(k, Integral):
            if k > n_features:
                warnings.warn(f"n_features_to_select={k} is greater than the {n_features} features of X; "
                              "all features will be selected", UserWarning, stacklevel=3)
            return min(int(k), n_features)
        return max(1, int(k * n_features))


    # -- sklearn API ---------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, batch=None):
        """Run the selection method on ``(X, y)``.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array} of shape (n_samples, n_features)
            Expression (samples x genes).  A Dask array is passed to :func:`bioqpfs.select` as it is: counted
            chunk by chunk by the methods with a Dask path (README "Large data (Dask)"), never read whole by
            scikit-learn's checks.
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            Class labels; or hierarchical labels, one column per level, coarse to fine, for the methods of
            :func:`bioqpfs.hierarchy_methods` (the relevance is summed over the levels; ``groupby_weights``
            goes in ``method_params``; README "Hierarchical labels").  The class checks use the finest level.
        batch : array-like of shape (n_samples,), optional
            Batch of every sample (a fit parameter, because it is per sample, like ``sample_weight``):
            batch-aware statistics (``batch=`` of :func:`bioqpfs.select`; methods of
            :func:`bioqpfs.batch_methods` only); ``batch_weights`` / ``batch_discretization`` go in
            ``method_params``.  In a pipeline: ``pipe.fit(X, y, select__batch=batches)``.

        Returns
        -------
        self : object
            The fitted selector.
        """
        func = method_function(self.method)      # unknown name: ValueError listing the registered ones
        kwargs = self._method_kwargs(func)
        if batch is not None and "batch" in kwargs:
            raise ValueError("batch given both to fit(batch=...) and in method_params; give it once (fit's "
                             "batch= follows the samples through pipelines and cross-validation)")
        X = read_if_on_disk(X)   # anndata's backed CSRDataset: scikit-learn's checks would see a 0-d object
        y, batch = _aligned_to_samples(X, y, batch)   # a Series/DataFrame matched by sample name, as select() does
        y = dense_labels(y)   # a sparse column of labels: np.asarray would make it one object
        levels = None
        if label_levels(y) > 1:  # hierarchical labels: sklearn's checks see the finest level, the method every level
            check_levels_supported(self.method, y)
            levels = y if hasattr(y, "iloc") else np.asarray(y, dtype=object)   # a DataFrame keeps its level names
            y = levels.iloc[:, -1].to_numpy(dtype=object) if hasattr(levels, "iloc") else levels[:, -1]
        _check_unique_columns(X)
        dask_x = is_dask_array(X)
        if dask_x:  # selected chunk by chunk (validate_data would read X whole, and fails on sparse chunks)
            X = _dask_fit_input(self, X)
        n_samples = _n_rows(X)
        codes = None
        if y is not None and n_samples:   # no samples: left to validate_data, which names the empty X
            # bioqpfs's label check first: it names missing labels, refuses continuous values and takes what select
            # takes (integers mixed with strings, an "unknown" target type to scikit-learn); scikit-learn then
            # checks the class codes, in y's shape (a column vector still gets its DataConversionWarning)
            codes, classes = check_labels(y, n_samples, name="y", min_classes=1)
            if np.ndim(y) == 2:
                codes = codes.reshape(np.shape(y))
                y = np.asarray(y, dtype=object).ravel()
        # at least 2 features: choosing among one gene is no selection (and some methods refuse it); NaN/Inf are
        # left to bioqpfs's check, which names the genes (scikit-learn's message suggests another estimator)
        if dask_x:  # its values are checked by select(), chunk by chunk (NaN/Inf naming the genes)
            if codes is None:
                raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        else:
            X, checked = validate_data(self, X, y if codes is None else codes, accept_sparse=("csr", "csc"),
                                       dtype=(np.float64, np.float32), ensure_min_features=2, ensure_all_finite=False)
            _check_finite(X, getattr(self, "feature_names_in_", None))
        if codes is None:  # X without a length before validate_data (which made it an array)
            y = checked
            codes, classes = check_labels(y, X.shape[0], name="y", min_classes=1)
        check_classification_targets(np.ravel(codes))
        if classes.size < 2:
            raise ValueError(f"y has only one class ({classes[0]!r}); feature selection needs at least 2 classes")
        k = self._n_select(X.shape[1])
        names = getattr(self, "feature_names_in_", None)
        if batch is not None:
            kwargs["batch"] = batch
        try:   # random_state as select() takes it (a RandomState instance gives select()'s panel)
            sel = select(X, y if levels is None else levels, method=self.method, n_genes=k,
                         random_state=self.random_state, feature_names=names, **kwargs)
        except ValueError as e:
            if "pass feature_names=" not in str(e):
                raise
            raise ValueError(str(e).replace("pass feature_names= (or an AnnData), or integer positions",
                                            "fit on a pandas DataFrame whose columns name the features, or give "
                                            "integer column positions")) from e
        if sel.n_features != X.shape[1]:
            raise RuntimeError(f"method {self.method!r} returned {sel.n_features} weights for {X.shape[1]} features")
        self.selection_ = sel
        self.weights_ = sel.weights.copy()
        self.order_ = sel.ranking.copy()
        rank = np.full(X.shape[1], sel.ranking.size + 1, dtype=np.int64)
        rank[sel.ranking] = np.arange(1, sel.ranking.size + 1)
        self.ranking_ = rank
        self.n_features_to_select_ = k
        return self

    def transform(self, X):
        """Reduce X to the selected features.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array} of shape (n_samples, n_features)
            The samples; a Dask array is indexed lazily (``X[:, selected]``, nothing computed; its sparse chunks
            as CSR).

        Returns
        -------
        X_r : array of shape (n_samples, n_selected_features)
            The selected features of X, of X's type.
        """
        if not is_dask_array(X):
            return super().transform(read_if_on_disk(X))
        check_is_fitted(self)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has shape {X.shape}, but {type(self).__name__} is expecting {self.n_features_in_} "
                             "features as input.")
        return csr_chunks(X)[:, self.get_support(indices=True)]

    def _get_support_mask(self):
        check_is_fitted(self)
        return self.selection_.selected_mask

    def __sklearn_tags__(self):
        """A classification target is required; sparse input is accepted; float32/float64 are kept."""
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _aligned_to_samples(X, y, batch):
    """``y`` and ``batch`` in X's sample order: a pandas Series (or a DataFrame of label levels) whose index holds
    the sample names of a DataFrame X in another order is matched by name, as :func:`bioqpfs.select` matches it
    (by position, a shuffled Series scrambled the classes silently).  Any other index is positional, as
    scikit-learn takes targets: inside cross-validation a default-indexed y keeps its row numbers while X keeps
    its sample names."""
    names = sample_names_of(X)
    if names is None:
        return y, batch
    import pandas as pd

    index = pd.Index(names)

    def permutes(v):
        return (len(v) == len(index) and index.is_unique and v.index.is_unique and not v.index.equals(index)
                and len(v.index.symmetric_difference(index)) == 0)

    def align(v, name):
        if isinstance(v, (pd.Series, pd.DataFrame)) and is_default_index(v.index):
            refuse_ambiguous_default_index(v.index, index, name)
            return v
        if isinstance(v, (pd.Series, pd.DataFrame)) and permutes(v):
            return v.reindex(index) if isinstance(v, pd.Series) else v.loc[index]
        return v

    return align(y, "y"), align(batch, "batch")


def _same(a, b):
    if a is None or b is None:
        return a is b
    try:
        return bool(np.all(a == b))
    except Exception:  # noqa: BLE001 - incomparable values are different
        return False


class QPFSSelector(BioQPFSSelector):
    """Quadratic Programming Feature Selection (Rodriguez-Lujan et al., JMLR 2010) as a transformer.

    Solves min 1/2 (1 - alpha) x^T Q x - alpha F^T x on the simplex (eq. 2) and keeps the
    ``n_features_to_select`` features of largest weight (ties by relevance F, section 2.3 step 8).
    See :func:`bioqpfs.qpfs` for the parameters; they are forwarded unchanged.

    Parameters
    ----------
    n_features_to_select : int or float, default=None
        See :class:`BioQPFSSelector`.
    method : str, default="qpfs"
        ``"qpfs"`` or a registered QPFS variant taking the same parameters (e.g. ``"eqpfs"``).
    similarity : {"mi", "correlation"}, default="mi"
        Redundancy Q: mutual information (Q_ii = H(X_i)) or |Pearson correlation| (eq. 3).
    relevance : str or array-like, default=None
        F: ``"mi"`` (default with MI), ``"hall"`` (default with correlation), another kind a
        registered relevance offers, or a vector.
    alpha : float, default=None
        Trade-off, in [0, 1] for QPFS (EQPFS takes any alpha > 0); ``None`` estimates
        alpha_hat = q_bar / (q_bar + f_bar) (eq. 9) on the training data.
    discretization : {"mean_sd", "quantile", "zero_quantile", "mdl", "auto"} or None, default="mean_sd"
        For MI: the mean +- sd three bins of section 2.5 (``"auto"``: zero vs. non-zero + quantiles on
        zero-inflated single-cell data, mean +- sd otherwise; ``None``: X holds integer codes).  Always passed
        to the method, so ``method="qpfs_cover"`` gets ``"mean_sd"`` unless another value is given (the
        default recipe's own is ``"auto"``: use :class:`BioQPFSSelector` for it).
    n_bins : int, default=3
    base : float, default=2
    solver : str, default="auto"
        QP solver (``"quadprog"``, ``"active_set"``, ``"spg"``, all exact; ``"auto"`` picks by size).
    psd_fix : str, default=None
        How an indefinite Q is made convex (recorded in ``selection_.diagnostics``); ``None``: the
        method's own default -- ``"none"`` for :func:`bioqpfs.qpfs` (the QP as published), ``"shift"`` for
        :func:`~bioqpfs.selectors.eqpfs.eqpfs`.
    nystrom_rate : float in (0, 1], default=None
        QPFS + Nystrom with this row-sampling rate p (section 2.2); ``None``: exact Q.
    preselected : array-like of int or str, int or str, default=None
        Genes always kept and ranked first (names need a DataFrame X).
    method_params : dict, default=None
        Further parameters of the method (e.g. ``{"eig_threshold": 1e-3}``).
    random_state : int, RandomState instance or None, default=0

    Attributes
    ----------
    selection_, weights_, ranking_, order_, n_features_to_select_, n_features_in_, feature_names_in_
        See :class:`BioQPFSSelector`.  ``selection_.diagnostics["alpha_hat"]`` holds the estimate.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.svm import SVC
    >>> pipe = make_pipeline(QPFSSelector(n_features_to_select=20), SVC(kernel="linear", C=1.0))
    """

    _parameter_constraints: dict = {
        **BioQPFSSelector._parameter_constraints,
        "similarity": [str],
        "relevance": [str, "array-like", None],
        "alpha": [Interval(Real, 0, None, closed="left"), None],   # the method checks its own range
        "discretization": [str, None],
        "n_bins": [Interval(Integral, 2, None, closed="left")],
        "base": [Interval(Real, 1, None, closed="neither")],
        "solver": [str],
        "psd_fix": [str, None],
        "nystrom_rate": [Interval(Real, 0, 1, closed="right"), None],
        "preselected": ["array-like", str, Integral, None],
    }
    _forwarded = ("similarity", "relevance", "alpha", "discretization", "n_bins", "base", "solver", "psd_fix",
                  "nystrom_rate", "preselected")

    def __init__(self, n_features_to_select=None, *, method="qpfs", similarity="mi", relevance=None, alpha=None,
                 discretization="mean_sd", n_bins=3, base=2, solver="auto", psd_fix=None, nystrom_rate=None,
                 preselected=None, method_params=None, random_state=0):
        self.n_features_to_select = n_features_to_select
        self.method = method
        self.similarity = similarity
        self.relevance = relevance
        self.alpha = alpha
        self.discretization = discretization
        self.n_bins = n_bins
        self.base = base
        self.solver = solver
        self.psd_fix = psd_fix
        self.nystrom_rate = nystrom_rate
        self.preselected = preselected
        self.method_params = method_params
        self.random_state = random_state


class SpecCMISelector(BioQPFSSelector):
    """SPEC_CMI family (Nguyen et al., KDD 2014): ``"spec_cmi"``, ``"spec_cmi_nystrom"``, ``"sdp_cmi"``.

    Weights are the dominant eigenvector of the conditional-MI matrix (section 3.1).

    Parameters
    ----------
    n_features_to_select : int or float, default=None
        See :class:`BioQPFSSelector`.
    method : str, default="spec_cmi"
    nystrom_rate : float in (0, 1], default=None
        Nystrom row-sampling rate gamma (section 3.4); ``None``: the method's default (exact for
        ``"spec_cmi"``).
    method_params : dict, default=None
        Other parameters of the method (``discretization``, ``n_projections`` for ``"sdp_cmi"`` ...).
    random_state : int, RandomState instance or None, default=0
    """

    _parameter_constraints: dict = {
        **BioQPFSSelector._parameter_constraints,
        "nystrom_rate": [Interval(Real, 0, 1, closed="right"), None],
    }
    _forwarded = ("nystrom_rate",)

    def __init__(self, n_features_to_select=None, *, method="spec_cmi", nystrom_rate=None, method_params=None,
                 random_state=0):
        self.n_features_to_select = n_features_to_select
        self.method = method
        self.nystrom_rate = nystrom_rate
        self.method_params = method_params
        self.random_state = random_state


class IKMQPFSSelector(BioQPFSSelector):
    """Clustering family (Prasad & Biswas): ``"ikm_qpfs"``, ``"ikma_qpfs"``, ``"tlkm_qpfs"``.

    QPFS on k-means cluster representatives of the genes (section 4.1); genes that are not kept
    representatives get the last rank.  The paper chose tau and k' by cross-validation (section 5):
    with this class that is a ``GridSearchCV`` over ``tau`` / ``n_clusters``.

    Parameters
    ----------
    n_features_to_select : int or float, default=None
        See :class:`BioQPFSSelector`.
    method : str, default="ikm_qpfs"
    n_clusters : int, default=None
        Initial number of clusters k' (``None``: the method's default).
    tau : float in [0, 1], default=None
        Cluster-radius threshold (``None``: the method's default).
    max_levels : int, default=None
        Levels L of IKM/IKMA-QPFS (``None``: the method's default).
    n_split : int, default=None
        Sub-clusters k per split in IKM/IKMA-QPFS (``None``: the method's default).
    method_params : dict, default=None
        Other parameters of the method (``alpha``, ``discretization``, ``max_split`` ...).
    random_state : int, RandomState instance or None, default=0

    Notes
    -----
    A parameter left at ``None`` is not passed, so each family member keeps its own default; one
    set to a value the chosen method does not take is a ``TypeError`` (e.g. ``max_levels`` with
    ``"tlkm_qpfs"``).
    """

    _parameter_constraints: dict = {
        **BioQPFSSelector._parameter_constraints,
        "n_clusters": [Interval(Integral, 1, None, closed="left"), None],
        "tau": [Interval(Real, 0, 1, closed="both"), None],
        "max_levels": [Interval(Integral, 1, None, closed="left"), None],
        "n_split": [Interval(Integral, 2, None, closed="left"), None],
    }
    _forwarded = ("n_clusters", "tau", "max_levels", "n_split")

    def __init__(self, n_features_to_select=None, *, method="ikm_qpfs", n_clusters=None, tau=None, max_levels=None,
                 n_split=None, method_params=None, random_state=0):
        self.n_features_to_select = n_features_to_select
        self.method = method
        self.n_clusters = n_clusters
        self.tau = tau
        self.max_levels = max_levels
        self.n_split = n_split
        self.method_params = method_params
        self.random_state = random_state


class BaselineSelector(BioQPFSSelector):
    """Greedy and reference baselines: ``"mrmr_mid"``, ``"mrmr_miq"``, ``"maxrel"``, ``"jmi"``, ``"cife"``,
    ``"random"`` (and the transformation-based ``"ldfs"``/``"hsfs"``), whichever are registered.  It is
    :class:`BioQPFSSelector` with another default ``method``, so any registered method is accepted.

    Parameters of the chosen method go in ``method_params``; see :class:`BioQPFSSelector`.
    """

    def __init__(self, n_features_to_select=None, *, method="mrmr_mid", method_params=None, random_state=0):
        super().__init__(n_features_to_select, method=method, method_params=method_params,
                         random_state=random_state)


def registered_families():
    """Which estimator class serves each registered method: the family named by its ``register(...)`` line."""
    return {name: globals()[FAMILIES[family(name)]] for name in methods()}


def _dask_fit_input(estimator, X):
    """A Dask ``X`` for ``fit``, as scikit-learn's ``validate_data`` would take it but never read: 2-D, with known
    chunk sizes (:func:`bioqpfs._kernels.counting_dask.sample_chunked` refuses others, naming the fix) and at least
    2 features; ``n_features_in_`` is set (a Dask array has no feature names).  Its values are read by
    :func:`bioqpfs.select`, chunk by chunk by the methods of ``DASK_METHODS`` (README "Large data (Dask)")."""
    from ._kernels.counting_dask import sample_chunked

    sample_chunked(X)  # refuses a non-2-D X or unknown chunk sizes; lazy, nothing computed
    if X.shape[1] < 2:
        raise ValueError(f"Found array with {X.shape[1]} feature(s) (shape={X.shape}) while a minimum of 2 is "
                         f"required by {type(estimator).__name__}.")
    estimator.n_features_in_ = X.shape[1]
    if hasattr(estimator, "feature_names_in_"):
        del estimator.feature_names_in_
    return X


def _n_rows(X):
    """The samples of ``X`` (an array, a sparse matrix, a DataFrame or a nested list); ``None`` when it has no length
    (left to scikit-learn's ``validate_data`` to refuse)."""
    shape = getattr(X, "shape", None)
    if shape is not None and len(shape) >= 1:
        return int(shape[0])
    try:
        return len(X)
    except TypeError:
        return None


def _check_unique_columns(X):
    """A DataFrame with a column name twice is refused naming them (scikit-learn's feature-name check fails deep in
    narwhals: "DuplicateError")."""
    columns = getattr(X, "columns", None)
    if columns is None or not hasattr(columns, "duplicated"):
        return
    repeated = list(dict.fromkeys(columns[columns.duplicated()]))
    if repeated:
        raise ValueError(f"X has repeated column names ({', '.join(map(repr, repeated[:5]))}"
                         f"{' ...' if len(repeated) > 5 else ''}); each gene needs its own name: make them unique "
                         "(e.g. X.columns = anndata.utils.make_index_unique(X.columns)) or drop the duplicates")


def _check_finite(X, names):
    """NaN/Inf in X refused naming the genes (bioqpfs's message), as :func:`bioqpfs.select` does."""
    from ._validation import check_matrix

    check_matrix(X, feature_names=None if names is None else list(names), min_samples=1)

