"""How good is a panel?  Cross-validated classification error as a function of panel size.

The protocol is the papers': a linear SVM with C = 1 (QPFS paper section 3.1, "c is set to 1.0 in all
experiments"; SPEC_CMI paper section 4.3) trained on the top-k genes, error estimated by 10-fold
cross-validation (QPFS section 3.1: 10-fold CV repeated; SPEC_CMI section 4.3: 10-fold when there are
at least 100 samples) or leave-one-out (SPEC_CMI section 4.3 below 100 samples; IKM-QPFS paper
section 5 for the microarray sets).  Modelled on SpaPROS's evaluation suite: several selectors side
by side, one tidy table out.

Selection bias
--------------
Choosing genes on all samples and then cross-validating the classifier on the same samples
reports an optimistic error (Ambroise & McLachlan, PNAS 2002): the test folds already influenced
which genes were picked.  By default every method given *by name* is therefore refit on the
training part of each fold (``refit_selection=None`` -> refit), so the test samples never see the
selection.  ``refit_selection=False`` reproduces the "select once on all data" shortcut.
A precomputed :class:`~bioqpfs.Selection`, a stored ``tl`` result or a gene list is a fixed panel:
it cannot be refit, and its error is optimistic if it was chosen on these same samples (the
table's ``refit`` column says which rows were refit).
"""
from __future__ import annotations

import time
from numbers import Integral
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import _device, _progress, _threads
from ._anndata import (
    check_annotations,
    check_mask,
    check_use_raw,
    counts_warning,
    matrix_name,
    obs_batch,
    obs_labels,
    obs_rep_for,
)
from ._jit import announce_compilation
from ._kernels.counting_dask import compute, is_dask_array
from ._registry import batch_methods, select
from ._registry import methods as _methods
from ._selection import Selection
from ._validation import (
    check_labels,
    check_matrix,
    check_positive_int,
    frame_feature_names,
    gene_list,
    gene_positions,
    memory_guard,
    one_names_warning,
    preselected_in_mask,
    sample_names_of,
    seed_of,
)
from .selectors._common import label_levels, single_class_levels, warn_single_class_levels

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, Literal

    from anndata import AnnData
    from numpy.typing import ArrayLike
    from sklearn.base import BaseEstimator
    from sklearn.model_selection import BaseCrossValidator

    from ._typing import MaskLike, MatrixLike, SeedLike

__all__ = ["error_curve", "compare", "suggest_n_genes", "make_classifier", "DEFAULT_N_GENES", "DEFAULT_METRICS"]

DEFAULT_N_GENES = (5, 10, 20, 50)


def make_classifier(classifier: str | BaseEstimator = "linear_svm") -> BaseEstimator:
    """The classifier of the protocol, by name, or a clone of a given scikit-learn classifier.

    ``"linear_svm"``: ``SVC(kernel="linear", C=1)`` -- LIBSVM's linear SVM as in the QPFS and SPEC_CMI
    papers; ``"liblinear"``: ``LinearSVC(C=1)`` -- LIBLINEAR's L2-regularised L2-loss SVM of the
    IKM-QPFS paper (section 5); ``"knn3"``: 3-nearest neighbours (SPEC_CMI section 4.3 on Gisette/Madelon);
    ``"logreg"``: ``StandardScaler`` + ``LogisticRegression(C=1)``, what panel users on single-cell data
    often fit.  The classifier always sees the panel's columns as a dense array (see :func:`error_curve`),
    so scaling pipelines work on sparse data too.
    """
    from sklearn.base import clone, is_classifier, is_clusterer, is_regressor

    if isinstance(classifier, str):
        from sklearn.linear_model import LogisticRegression
        from sklearn.neighbors import KNeighborsClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVC, LinearSVC

        table = {"linear_svm": lambda: SVC(kernel="linear", C=1.0),
                 "liblinear": lambda: LinearSVC(C=1.0),
                 "knn3": lambda: KNeighborsClassifier(n_neighbors=3),
                 "logreg": lambda: make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))}
        if classifier not in table:
            raise ValueError(f"unknown classifier {classifier!r}; use one of {sorted(table)} or pass a "
                             "scikit-learn classifier instance")
        return table[classifier]()
    if not (is_classifier(classifier) or hasattr(classifier, "fit") and hasattr(classifier, "predict")):
        raise TypeError(f"classifier must be a name or a scikit-learn classifier, got {type(classifier).__name__}")
    if is_regressor(classifier):  # it would predict numbers, scored as (almost always wrong) class labels
        raise TypeError(f"classifier {type(classifier).__name__} is a regressor; pass a classifier, e.g. "
                        "'logreg' or sklearn.linear_model.LogisticRegression()")
    if is_clusterer(classifier):  # its cluster numbers would be scored as class labels (an error near 1 - 1/C)
        raise TypeError(f"classifier {type(classifier).__name__} is a clustering estimator; pass a classifier, e.g. "
                        "'logreg' or sklearn.linear_model.LogisticRegression()")
    return clone(classifier)


def _seeded(clf, seed):
    """``clf`` with every ``random_state`` left at ``None`` (its own, or a pipeline step's) set to ``seed``.

    scikit-learn draws a seed from NumPy's global RNG at every fit of such an estimator (``SVC``, ``LinearSVC``,
    ``RandomForestClassifier`` ...): the error curve then changed the caller's ``np.random`` state, and a
    stochastic classifier's scores followed that state instead of error_curve's ``random_state``.
    """
    if not hasattr(clf, "get_params"):
        return clf
    unset = {key: seed for key, value in clf.get_params(deep=True).items()
             if key.rsplit("__", 1)[-1] == "random_state" and value is None}
    return clf.set_params(**unset) if unset else clf


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------
def _is_anndata(data):
    import anndata as ad

    return isinstance(data, ad.AnnData)


def _data(data, labels, *, layer, use_raw, mask_var, feature_names, runs=None, chunk_size=None, progress=False):
    """(X over all genes, y labels, gene names, candidate gene indices, the labels the selections get).

    ``runs(names, n_vars, cand)``: the ``(method, params)`` selections that will run on X; a backed AnnData's
    X is then read lazily in sample chunks when all of them can count it so
    (:func:`bioqpfs._anndata.obs_rep_for`).  Hierarchical labels (a list of ``.obs`` columns, or a 2-D array /
    DataFrame, coarse to fine): ``y`` is the finest level (folds, classifier, scores), the selections get every
    level (an object array, one column per level, each aligned to the samples as 1-D labels are).
    """
    if _is_anndata(data):
        from scanpy import logging as logg

        check_annotations(data)
        names = data.var_names.to_numpy().astype(str)
        mask = check_mask(data, mask_var)
        X, whole = obs_rep_for(data, [] if runs is None else runs(names, data.n_vars, np.flatnonzero(mask)),
                               layer=layer, use_raw=use_raw, chunk_size=chunk_size, progress=progress)
        name = matrix_name(layer, check_use_raw(data, layer, use_raw)[0])   # in the errors of its checks (NaN, inf)
        logg.info(f"evaluate: expression from {check_use_raw(data, layer, use_raw)[1]}"
                  + (f" (the matrix stored in the file read whole: {whole})" if whole else
                     " (read lazily in sample chunks)" if is_dask_array(X) else ""))
        counts = counts_warning(data, X, layer, check_use_raw(data, layer, use_raw)[0],
                                what="the panels are selected and scored on them as given")
        if counts is not None:
            logg.warning(counts)
        # a list is .obs column names, unless it holds one label per cell that are not all column names
        columns = isinstance(labels, str) or (isinstance(labels, (list, tuple)) and (
            len(labels) != data.n_obs or all(isinstance(c, str) and c in data.obs.columns for c in labels)))
        y = obs_labels(data, labels) if columns else labels
    else:
        if layer is not None or use_raw or isinstance(mask_var, str):
            raise ValueError("layer=, use_raw= and a mask_var column name need an AnnData; with an array pass "
                             "mask_var as a boolean array")
        if isinstance(labels, str) or (isinstance(labels, (list, tuple)) and labels
                                       and all(isinstance(c, str) for c in labels) and len(labels) != np.shape(data)[0]):
            what = "a column name" if isinstance(labels, str) else "a list of .obs column names"
            raise ValueError(f"labels={labels!r} is {what}, which needs an AnnData; pass the label array")
        X, y, name = data, labels, "X"
        if feature_names is None and isinstance(X, pd.DataFrame):  # as bioqpfs.select: the columns name the genes
            feature_names = frame_feature_names(X.columns)
        names = None if feature_names is None else np.asarray(feature_names).astype(str)
        n_vars = np.shape(X)[1]
        mask = np.ones(n_vars, dtype=bool) if mask_var is None else np.asarray(mask_var)
        if mask.dtype != bool or mask.shape != (n_vars,):
            raise ValueError(f"mask_var must be a boolean array with one entry per gene ({n_vars})")
    X = check_matrix(X, feature_names=names, name=name)
    if sp.issparse(X):
        X = X.tocsr()
    # a labels Series is aligned to the samples by its index (check_labels' rules)
    n_levels = label_levels(y)
    frame = (y if isinstance(y, pd.DataFrame) else pd.DataFrame(np.asarray(y, dtype=object))) if n_levels > 1 else None
    columns = [frame.iloc[:, i] for i in range(n_levels)] if frame is not None else [y]
    levels = []
    for i, column in enumerate(columns):  # a coarse level may hold one class (left out by the selector)
        codes, classes = check_labels(column, X.shape[0], name="labels", sample_names=sample_names_of(data),
                                      min_classes=2 if i == n_levels - 1 else 1)
        levels.append(classes[codes])
    present = [pd.unique(np.asarray(v, dtype=object)) for v in levels]  # pd.unique: mixed label types do not sort
    single = single_class_levels(present) if n_levels > 1 else []
    if single:  # left out once here, not by every fold's selection
        names_of = list(y.columns) if isinstance(y, pd.DataFrame) else [f"level {i}" for i in range(n_levels)]
        warn_single_class_levels(names_of, present, single, stacklevel=3)
        levels = [v for i, v in enumerate(levels) if i not in single]
    y_select = np.column_stack([np.asarray(v, dtype=object) for v in levels]) if len(levels) > 1 else levels[0]
    return X, _sortable(levels[-1]), names, np.flatnonzero(mask), y_select


def _sortable(values):
    """``values`` (labels or batches checked by check_labels), as their texts when they mix numbers and text
    (``1, 'b'``): the folds and the classifiers sort them, which numpy cannot do for mixed types.  The texts are
    distinct, since check_labels refuses one class written in two ways (``1`` beside ``'1'``)."""
    try:
        np.unique(values)
    except TypeError:
        return np.asarray([str(v) for v in values], dtype=object)
    return values


def _batches(data, batch, n_samples):
    """The batch of every sample as a numpy array (``None`` without): an ``.obs`` column of an AnnData, or values
    checked as :func:`bioqpfs.select` checks ``batch=`` (length, missing values)."""
    if batch is None:
        return None
    if isinstance(batch, str):
        if not _is_anndata(data):
            raise ValueError(f"batch={batch!r} is a column name, which needs an AnnData; pass one batch per sample")
        batch = obs_batch(data, batch)
    codes, names = check_labels(batch, n_samples, name="batch", min_classes=1, sample_names=sample_names_of(data),
                                check_continuous=False)
    return _sortable(np.asarray(names, dtype=object)[codes])


def _gene_indices(genes, names, n_vars, label):
    genes = gene_list(genes, label)
    if not genes:
        raise ValueError(f"{label}: the gene list is empty")
    return gene_positions(genes, names, n_vars, label)


def _read_once(selections):
    """``selections`` with every one-shot iterator in it (a generator of selections, or of a panel's genes) made a
    list, so that it can be read more than once: error_curve reads it to plan the read of a lazy X, then again."""
    from collections.abc import Iterator

    def once(value):
        return list(value) if isinstance(value, Iterator) else value

    selections = once(selections)
    if isinstance(selections, dict):
        return {label: once(spec) for label, spec in selections.items()}
    if isinstance(selections, list):
        return [once(spec) for spec in selections]
    return selections


#: the arguments of :func:`bioqpfs.select` that error_curve sets for every selection (a method parameter cannot)
RESERVED_PARAMS = frozenset({"n_genes", "random_state", "feature_names", "method"})


def _specs(selections, data, names, n_vars, cand, method_params):
    """Normalise ``selections`` to a list of (label, kind, payload).

    kind "method": payload (method name, params) -- can be refit;
    kind "fixed": payload = ranked gene indices into the full gene list.
    """
    if isinstance(selections, (str, Selection, pd.DataFrame)) or (
            isinstance(selections, tuple) and len(selections) == 2 and isinstance(selections[0], str)
            and isinstance(selections[1], dict)):
        selections = [selections]
    items = list(selections.items()) if isinstance(selections, dict) else [(None, s) for s in selections]
    if not items:
        raise ValueError("no selection or method to evaluate")
    method_params = {} if method_params is None else method_params
    if not isinstance(method_params, dict) or not all(isinstance(v, dict) for v in method_params.values()):
        raise TypeError(f"method_params must be a dict {{method name: {{param: value}}}}, got {method_params!r}")
    registered = _methods()
    out = []
    by_name = set()
    for label, spec in items:
        if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str) and isinstance(spec[1], dict):
            name, params = spec
        elif isinstance(spec, str):
            name, params = spec, None
        else:
            name = None
        if name is not None:
            if name not in registered:
                hint = ""
                if data is not None and f"{name}_rank" in data.var.columns:
                    hint = (f"; to evaluate the panel stored by tl under {name!r}, pass "
                            f"bioqpfs.get.selection_df(adata, {name!r})")
                elif names is not None and name in {str(g) for g in names}:
                    hint = (f"; {name!r} is a gene: a fixed panel is one item of the selections, a list of genes, so "
                            f"pass a list of panels ([[{name!r}, ...]] or {{'my panel': [{name!r}, ...]}})")
                raise ValueError(f"unknown method {name!r}; registered: {', '.join(sorted(registered))}{hint}")
            if params is None:
                by_name.add(name)
            params = dict(method_params.get(name, {}) if params is None else params)
            reserved = sorted(set(params) & RESERVED_PARAMS)
            if reserved:
                raise ValueError(f"the parameters of {label or name!r} set {', '.join(reserved)}, which error_curve "
                                 "sets itself (each fold's selection ranks max(n_genes) genes, seeded from "
                                 "random_state); pass n_genes= and random_state= to error_curve")
            out.append((label or name, "method", (name, params)))
            continue
        if isinstance(spec, Selection):
            if spec.feature_names is not None and names is not None:  # by gene name, as a list of genes is
                ranked = np.asarray(spec.feature_names)[spec.ranking]
                out.append((label or spec.method, "fixed", _gene_indices(ranked, names, n_vars,
                                                                         label or spec.method)))
                continue
            if spec.n_features == n_vars:
                ranking = spec.ranking
            elif spec.n_features == cand.size:
                ranking = cand[spec.ranking]
            else:
                raise ValueError(f"Selection {spec.method!r} has {spec.n_features} genes but the data have {n_vars} "
                                 f"({cand.size} after mask_var)")
            out.append((label or spec.method, "fixed", np.asarray(ranking, dtype=np.int64)))
        elif isinstance(spec, pd.DataFrame):
            if not {"gene", "rank"} <= set(spec.columns):
                raise ValueError("a DataFrame selection needs 'gene' and 'rank' columns (bioqpfs.get.selection_df)")
            ranked = spec[np.isfinite(spec["rank"].to_numpy(dtype=float))].sort_values("rank", kind="stable")
            out.append((label or "panel", "fixed", _gene_indices(ranked["gene"], names, n_vars, label or "panel")))
        else:
            lab = label or f"panel{len(out)}"
            out.append((lab, "fixed", _gene_indices(spec, names, n_vars, lab)))
    unused = [m for m in method_params if m not in by_name]
    if unused:
        raise ValueError(f"method_params for {', '.join(map(repr, unused))} would be ignored: method_params applies "
                         f"to the methods given by plain name ({', '.join(sorted(by_name)) or 'none here'}); "
                         "check the spelling, or give the parameters as (name, params)")
    labels = [o[0] for o in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ValueError(f"several selections are labelled {dup}; pass a dict {{label: selection}} to name them")
    return out


def _sizes(n_genes):
    """Validated panel sizes: an int or a sequence of ints, each >= 1 (sorted, duplicates removed)."""
    def ok(k):
        try:
            return check_positive_int(k, "n_genes") >= 1
        except ValueError:
            return False

    if isinstance(n_genes, (str, bytes)) or not (ok(n_genes) or np.iterable(n_genes)):
        raise TypeError(f"n_genes must be a positive integer or a list of them (e.g. [5, 10, 20]), got {n_genes!r}")
    values = [n_genes] if ok(n_genes) else list(n_genes)
    bad = [k for k in values if not ok(k)]
    if bad or not values:
        raise ValueError(f"n_genes must be positive integers, got {n_genes!r}"
                         + (f" (not a positive integer: {bad[0]!r})" if bad else ""))
    return sorted({int(k) for k in values})


def _auto_cv(y):
    """``cv=None``: the papers' 10-fold protocol, adapted to the smallest class.

    10-fold stratified CV (QPFS section 3.1, SPEC_CMI section 4.3) when every class has at least 10
    samples; k-fold with k = the smallest class's size when it has 2 to 9 (every test fold then holds
    each class); leave-one-out when a class has a single sample (no k-fold can stratify it).
    Returns ``(cv, reason)``.
    """
    classes, counts = np.unique(y, return_counts=True)
    smallest = int(counts.min())
    name = str(classes[int(np.argmin(counts))])
    if smallest >= 10:
        return 10, "10-fold stratified CV (the papers' protocol)"
    if smallest >= 2:
        return smallest, (f"{smallest}-fold stratified CV instead of the papers' 10-fold: the smallest class, "
                          f"{name!r}, has {smallest} samples")
    return "loo", f"leave-one-out CV: class {name!r} has a single sample, so no k-fold split can stratify it"


#: the cross-validation schemes named by a string
CV_NAMES = ("loo", "leave_one_batch_out")


def _splits(cv, y, repeats, random_state, batch=None):
    """[(repeat, fold, train, test)] for the requested scheme.

    ``batch``: the groups of ``"leave_one_batch_out"`` and of a scikit-learn group splitter (``GroupKFold``,
    ``StratifiedGroupKFold``, ...; other splitters ignore them).  A repeated splitter (``RepeatedStratifiedKFold``)
    numbers its folds by repeat, as ``repeats=`` does.
    """
    from sklearn.model_selection import LeaveOneGroupOut, LeaveOneOut, StratifiedKFold

    groups = None
    if isinstance(cv, str):
        if cv.lower() not in CV_NAMES:
            raise ValueError(f"cv must be None (automatic), an int (k-fold), one of {CV_NAMES} or a scikit-learn "
                             f"splitter, got {cv!r}")
        if cv.lower() == "leave_one_batch_out":
            if batch is None:
                raise ValueError("cv='leave_one_batch_out' needs the batches: pass batch= (an .obs column name or one "
                                 "batch per sample)")
            names = np.unique(batch)
            if names.size < 2:
                raise ValueError(f"cv='leave_one_batch_out' needs at least 2 batches, got only {names[0]!r}")
            schemes, groups = [LeaveOneGroupOut()], batch
        else:
            schemes = [LeaveOneOut()]      # deterministic: repeating it would give identical folds
    elif isinstance(cv, Integral) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"cv={cv}: k-fold cross-validation needs at least 2 folds")
        classes, counts = np.unique(y, return_counts=True)
        if counts.min() < cv:
            small = np.argsort(counts, kind="stable")[:int((counts < cv).sum())]
            named = ", ".join(f"{str(classes[i])!r} ({counts[i]})" for i in small[:5]) + \
                (f" and {small.size - 5} more" if small.size > 5 else "")
            raise ValueError(f"cv={cv} folds but {small.size} class(es) have fewer than {cv} samples: {named}; use "
                             "fewer folds, cv='loo', or cv=None (chosen from the class sizes), or leave those "
                             "classes' samples out (e.g. adata = adata[~adata.obs[groupby].isin([...])].copy())")
        if random_state is None:
            raise ValueError("random_state=None would make the folds irreproducible; pass an integer")
        schemes = [StratifiedKFold(n_splits=cv, shuffle=True, random_state=int(random_state) + r)
                   for r in range(repeats)]
    elif hasattr(cv, "split"):
        schemes, groups = [cv], batch
    else:
        raise ValueError(f"cv must be None (automatic), an int (k-fold), one of {CV_NAMES} or a scikit-learn "
                         f"splitter, got {cv!r}")
    out = []
    Xdummy = np.zeros((y.size, 1))
    for r, scheme in enumerate(schemes):
        try:
            folds = list(scheme.split(Xdummy, y, groups))
        except ValueError as e:
            if scheme is not cv:
                raise
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if groups is None and "groups" in text:
                raise ValueError(f"cv={type(cv).__name__} splits the samples by group: pass the groups as batch= (an "
                                 ".obs column name or one group per sample)") from e
            classes, counts = np.unique(y, return_counts=True)
            raise ValueError(f"cv={cv!r} cannot split these samples ({text.rstrip('.')}); the smallest class, "
                             f"{str(classes[np.argmin(counts)])!r}, has {counts.min()} sample(s): use fewer folds, or "
                             "cv=None (chosen from the class sizes)") from e
        n_repeats = getattr(scheme, "n_repeats", 1)
        per = len(folds) // n_repeats if (isinstance(n_repeats, Integral) and n_repeats >= 1 and folds
                                          and len(folds) % n_repeats == 0) else max(len(folds), 1)
        for i, (train, test) in enumerate(folds):
            out.append((r + i // per, i % per, np.asarray(train), np.asarray(test)))
    if not out:
        raise ValueError(f"cv={cv!r} gave no fold to test on")
    return out


def _check_repeats(repeats, cv, chosen):
    """Refuse ``repeats > 1`` with a scheme that does not repeat: leave-one-out and leave-one-batch-out give the same
    folds every time, and a splitter object is used as given (once), so ``repeats`` would be silently dropped.  When
    ``cv=None`` chose leave-one-out (a class of one sample) the user did not pick the scheme: a warning instead."""
    if repeats == 1 or (isinstance(cv, Integral) and not isinstance(cv, bool)):
        return
    if chosen:
        import warnings

        from ._validation import user_stacklevel

        warnings.warn(f"repeats={repeats} is not used: cv=None chose leave-one-out (a class has a single sample), "
                      "whose folds are the same every time, so the curve is computed once", UserWarning,
                      stacklevel=user_stacklevel())
        return
    if isinstance(cv, str):
        why = f"cv={cv!r} gives the same folds every time"
        instead = "pass an int k-fold cv to repeat shuffled folds"
    else:
        why = f"the splitter cv={type(cv).__name__} is used as given, once"
        instead = ("pass a repeated splitter instead (e.g. sklearn.model_selection.RepeatedStratifiedKFold("
                   f"n_repeats={repeats})), or an int k-fold cv")
    raise ValueError(f"repeats={repeats} applies to k-fold CV (cv an int), but {why}; drop repeats, or {instead}")


def _check_folds(splits, y):
    """Refuse a fold whose training part holds a single class (nothing can be fit); warn when test parts hold classes
    that their training parts lack: a classifier cannot predict a class it never saw, so those samples count as
    errors whatever the panel (a splitter that does not stratify, on labels sorted by class; leave-one-batch-out with
    a class found in one batch only; leave-one-out with a class of one sample)."""
    import warnings

    from ._validation import user_stacklevel

    unseen = []
    for r, f, train, test in splits:
        seen = np.unique(y[train])
        where = f"fold {f}" + (f" of repeat {r}" if r else "")
        if seen.size < 2:
            what = f"holds a single class, {str(seen[0])!r}" if seen.size else "is empty"
            raise ValueError(f"{where}: the training part {what}, so no selection or classifier can be fit; use a "
                             "stratified cv (cv=None or an int k-fold), or groups/batches that each hold several "
                             "classes")
        missing = np.setdiff1d(np.unique(y[test]), seen)
        if missing.size:
            unseen.append((where, missing, int(np.isin(y[test], missing).sum())))
    classes, counts = np.unique(y, return_counts=True)
    singletons = set(classes[counts == 1].tolist())
    if unseen and all(set(missing.tolist()) <= singletons for _, missing, _ in unseen):
        named = sorted({str(c) for _, missing, _ in unseen for c in missing})
        warnings.warn(f"class(es) {', '.join(map(repr, named[:5]))}{' ...' if len(named) > 5 else ''} have a single "
                      "sample: the fold that tests it has none of its class to train on, so it counts as an error "
                      "whatever the panel; drop or merge such classes", UserWarning, stacklevel=user_stacklevel())
    elif unseen:
        where, missing, n = unseen[0]
        warnings.warn(f"in {len(unseen)} of {len(splits)} folds the test part holds classes that the training part "
                      f"lacks (e.g. {where}: {', '.join(repr(str(c)) for c in missing[:5])}, {n} test sample(s)); "
                      "a classifier cannot predict a class it never saw, so those samples count as errors whatever "
                      "the panel; use a stratified cv (cv=None or an int k-fold)", UserWarning,
                      stacklevel=user_stacklevel())


#: metrics computed for every fold from the predictions, beside the chosen ``scoring``
DEFAULT_METRICS = ("error", "balanced_accuracy", "f1_macro")
#: the per-fold table's columns that say which fit a row is (beside one column per score)
FOLD_COLUMNS = ("method", "n_genes", "repeat", "fold", "n_test")


def _prediction_metrics(y_true, y_pred):
    """Error rate, balanced accuracy and macro-F1 of one test fold (scikit-learn's definitions)."""
    import warnings

    from sklearn.metrics import balanced_accuracy_score, f1_score

    with warnings.catch_warnings():   # a class predicted but absent from a small test fold: sklearn warns
        warnings.simplefilter("ignore")
        return {"error": float(np.mean(y_pred != y_true)),
                "balanced_accuracy": float(balanced_accuracy_score(y_true, y_pred)),
                "f1_macro": float(f1_score(y_true, y_pred, average="macro", zero_division=0))}


def resolve_scoring(scoring):
    """``(name, scorer or None)``: ``None`` for the metrics computed from the predictions anyway."""
    from sklearn.metrics import get_scorer, get_scorer_names

    if scoring is None:
        return "error", None
    if isinstance(scoring, str):
        if scoring in DEFAULT_METRICS:
            return scoring, None
        try:
            return scoring, get_scorer(scoring)
        except ValueError:
            import difflib

            close = difflib.get_close_matches(scoring, list(get_scorer_names()) + list(DEFAULT_METRICS), n=3)
            raise ValueError(f"unknown scoring {scoring!r}"
                             + (f" (did you mean {', '.join(map(repr, close))}?)" if close else "")
                             + "; use 'error', a name from sklearn.metrics.get_scorer_names() (e.g. "
                             "'balanced_accuracy', 'f1_macro', 'accuracy') or a callable scorer(estimator, X, y)"
                             ) from None
    if callable(scoring):
        if not hasattr(scoring, "_score_func"):  # a metric(y_true, y_pred) passed where a scorer is needed
            import inspect

            try:
                params = list(inspect.signature(scoring).parameters)
            except (TypeError, ValueError):
                params = []
            if params[:1] == ["y_true"] or "y_pred" in params[:2] or "y_score" in params[:2]:
                name = getattr(scoring, "__name__", "the function")
                raise TypeError(f"scoring={name} is a metric(y_true, y_pred), but scoring needs a scorer(estimator, "
                                f"X, y); wrap it: scoring=sklearn.metrics.make_scorer({name}), or give its name "
                                f"as a string (e.g. {name.removesuffix('_score')!r})")
        func = getattr(scoring, "_score_func", scoring)
        name = getattr(func, "__name__", None) or type(scoring).__name__
        name = name.removesuffix("_score") if name != "<lambda>" else "score"
        if name in DEFAULT_METRICS or name in FOLD_COLUMNS:
            # never overwrite the columns computed from the predictions, nor clash with the per-fold table's own
            # columns (a scorer named "fold" failed after the first fold's selection with dict()'s "got multiple
            # values for keyword argument 'fold'")
            name = f"{name}_scorer"
        return name, scoring
    raise TypeError(f"scoring must be None, a scorer name (str) or a callable scorer(estimator, X, y), "
                    f"got {type(scoring).__name__}")


def _check_scorer(scorer, score_name, clf, clf_name, panel, y, splits):
    """Score ``clf`` once on a small panel of every class's first samples, before any selection runs, so that a
    scorer that cannot score this classifier or these labels fails at once with what to do instead; then score it on
    the test fold of ``splits`` that holds the fewest classes: a score that needs every class in ``y_true`` (ROC AUC,
    log loss) is undefined on a fold of one sample (leave-one-out) and would otherwise fail, or be NaN, only after
    the whole cross-validation."""
    import warnings

    from sklearn.base import clone

    rows = np.concatenate([np.flatnonzero(y == c)[:5] for c in np.unique(y)])
    X_small = panel(rows)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = clone(clf).fit(X_small, y[rows])
    except Exception:  # the trial itself is not possible (e.g. a classifier that needs more samples): the CV says
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            float(scorer(fitted, X_small, y[rows]))
    except Exception as e:
        text = str(e).strip() or type(e).__name__
        n_classes = np.unique(y).size
        if "predict_proba" in text or "decision_function" in text:
            hint = (f"the classifier {clf_name!r} gives no class probabilities; use classifier='logreg' "
                    "or a score of the predictions (e.g. 'balanced_accuracy')")
        elif n_classes > 2 and ("average" in text or "multi_class" in text or "binary" in text
                                or "multiclass" in text):
            hint = (f"the labels have {n_classes} classes; use a multiclass score, e.g. 'f1_macro', "
                    "'precision_macro', 'recall_macro', or 'roc_auc_ovr' with classifier='logreg'")
        elif "pos_label" in text:   # a binary score ('f1', 'precision', 'recall') on labels that are not 0/1
            positive = np.unique(y)[-1]
            func = getattr(getattr(scorer, "_score_func", None), "__name__", "f1_score")
            hint = (f"it scores one positive class, pos_label, which is not among the labels {list(map(str, np.unique(y)))}; "
                    f"name it: scoring=sklearn.metrics.make_scorer(sklearn.metrics.{func}, pos_label={positive!r}), "
                    "or use a score of all classes (e.g. 'f1_macro', 'balanced_accuracy')")
        elif "convert" in text and "float" in text:
            hint = "it is a regression score; use a classification score (e.g. 'balanced_accuracy', 'f1_macro')"
        else:
            hint = "use a classification score, e.g. 'balanced_accuracy' or 'f1_macro'"
        raise ValueError(f"scoring={score_name!r} cannot score the classifier {clf_name!r} on these labels "
                         f"({text.splitlines()[0]}); {hint}") from e
    n_classes = np.unique(y).size
    r, f, _, test = min(splits, key=lambda s: (np.unique(y[s[3]]).size, s[3].size))
    held = np.unique(y[test]).size
    if held == n_classes:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = float(scorer(fitted, panel(test), y[test]))
        text = None if np.isfinite(value) else "it is NaN there"
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if text is not None:
        where = f"fold {f}" + (f" of repeat {r}" if r else "")
        raise ValueError(f"scoring={score_name!r} is undefined on a test fold that holds {held} of the {n_classes} "
                         f"classes ({where}: {test.size} sample(s); {text}); it needs every class in each test fold: "
                         "use k-fold CV (an int, or cv=None), or a score of the predictions (e.g. "
                         "'balanced_accuracy')")


def _score(scorer, score_name, clf, X_test, y_test, label, k, repeat, fold):
    """``scorer(clf, X_test, y_test)`` as a float; a failure names the fold, the selection and the panel size."""
    try:
        return float(scorer(clf, X_test, y_test))
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = f"fold {fold}" + (f" of repeat {repeat}" if repeat else "")
        raise ValueError(f"scoring={score_name!r} failed on {where} for {label!r} at n_genes={k}: {text}") from e


def _dense(block):
    """The panel's columns as a dense array (cheap: k columns), so any scikit-learn pipeline can centre them; a
    Dask block (a lazily read X) is computed: one pass over its sample chunks."""
    if is_dask_array(block):
        block = compute(block)
    return block.toarray() if sp.issparse(block) else np.asarray(block)


# --------------------------------------------------------------------------------------------
# the curve
# --------------------------------------------------------------------------------------------
@one_names_warning()   # names checked here and by the selector of every fold: warned once
def error_curve(data: AnnData | MatrixLike, labels: str | ArrayLike,
                selections: str | Selection | pd.DataFrame | Sequence[Any] | Mapping[str, Any], *,
                n_genes: int | Sequence[int] = DEFAULT_N_GENES, classifier: str | BaseEstimator = "linear_svm",
                cv: int | Literal["loo", "leave_one_batch_out"] | BaseCrossValidator | None = None, repeats: int = 1,
                scoring: str | Callable | None = None, refit_selection: bool | None = None,
                batch: str | ArrayLike | None = None, batch_selection: bool = True,
                method_params: Mapping[str, Mapping[str, Any]] | None = None, layer: str | None = None,
                use_raw: bool | None = None, mask_var: MaskLike = None, feature_names: Sequence[str] | None = None,
                random_state: SeedLike = 0, return_folds: bool = False, progress: bool | None = None,
                n_jobs: int | None = None, chunk_size: int | None = None,
                backend: str | None = None) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Cross-validated classification error of the top-k genes of one or several selections.

    Parameters
    ----------
    data : AnnData, array-like or sparse matrix, shape (n_samples, n_genes)
        Expression.  For an AnnData, ``layer``/``use_raw``/``mask_var`` choose the matrix and the
        candidate genes exactly as in :func:`bioqpfs.tl.select_genes`.  A backed AnnData
        (``read_h5ad(path, backed="r")``) is read in sample chunks from its file, never whole, when every
        method to run has a Dask path (as in :func:`bioqpfs.tl.select_genes`; fixed rankings need none):
        the selections count the training folds' rows chunk by chunk (a Dask X indexed by the fold's
        rows), and the classifiers read only the panel's columns, one pass over the chunks per fold and
        method.  Otherwise X is read whole after a memory check.  An AnnData of
        ``anndata.experimental.read_lazy`` needs its ``.obs``/``.var`` loaded first (the error says how).
    labels : str, list of str or array-like
        Class labels, or the ``.obs`` column holding them when ``data`` is an AnnData (with an AnnData a list is
        column names unless it holds one label per cell that are not all column names).  Hierarchical labels
        (a list of ``.obs`` columns, or an array / DataFrame with one column per level, coarse to fine): the
        selections refit in the folds get every level (README "Hierarchical labels"); the folds, the
        classifier and the scores use the finest level.
    selections : str, Selection, DataFrame, gene list, or a list/dict of them
        What to evaluate.  A registered **method name** (or ``(name, params)``) is run by this
        function (refit per fold by default, see below); a :class:`~bioqpfs.Selection`, a
        ``bioqpfs.get.selection_df(...)`` table or a ranked list of gene names/indices is a
        **fixed** ranking.  A dict gives the row labels (e.g. ``{"QPFS a=0.3": ("qpfs", {"alpha": .3})}``).
    n_genes : int or sequence of int
        Panel sizes k (positive integers; a string or float is an error); the classifier uses the
        top-k genes of each ranking.  Sizes beyond the
        genes a method ranked give no row (e.g. a fixed gene list shorter than the size); a fixed panel
        shorter than every size is an error.
    classifier : str or sklearn classifier
        ``"linear_svm"`` (default; SVC, linear kernel, C=1 as in the papers), ``"liblinear"``,
        ``"knn3"``, ``"logreg"`` (StandardScaler + LogisticRegression, C=1), or any classifier or
        pipeline instance (cloned for every fit; a regressor or a clusterer is refused).  It is fitted on the panel's columns as a dense
        array, so a pipeline that centres (``StandardScaler()``) works on sparse data too: the panel
        is small, and densifying k columns costs k x n_samples values.
    cv : None, int, "loo", "leave_one_batch_out" or sklearn splitter
        ``None`` (default): the papers' 10-fold stratified CV, with fewer folds when the smallest class
        has fewer than 10 samples (as many folds as it has samples) and leave-one-out when a class has
        a single sample; the choice is logged (scanpy's ``logg.info``) and stored in the ``cv`` column.
        ``int``: stratified k-fold, shuffled with seed ``random_state + r`` for repeat r;
        ``"loo"``: leave-one-out (the papers' choice below ~100 samples; the folds are always the same, so
        ``repeats`` > 1 is refused); ``"leave_one_batch_out"``: one fold per batch of ``batch``,
        testing on that batch and selecting and training on the others (how a panel carries over to an
        unseen donor or study; ``repeats`` > 1 is refused); a splitter object is used as given (once;
        ``repeats`` > 1 is refused, a repeated splitter repeats itself): a
        group splitter (``GroupKFold``, ``StratifiedGroupKFold`` ...) gets ``batch`` as its groups, and a
        repeated one (``RepeatedStratifiedKFold``) numbers its folds by repeat (the ``repeat`` column
        and the ``repeats`` count).  A fold whose training part holds a single class is refused; test
        samples of a class that their training part lacks (a splitter that does not stratify, a class
        found in one batch only) get a warning: no classifier can predict them.
    repeats : int
        Repetitions of k-fold CV with different shuffles (QPFS section 3.1 used 10 x 10-fold).  Only for an
        int ``cv`` (or ``cv=None``): with ``"loo"``, ``"leave_one_batch_out"`` or a splitter object a value
        above 1 is an error (it would be silently dropped); when ``cv=None`` chooses leave-one-out it is
        not used, with a warning.
    scoring : None, str or callable
        The score the table and :func:`bioqpfs.pl.error_curve` lead with (its name goes to the
        ``scoring`` column).  ``None`` or ``"error"``: the misclassification rate of the papers.  A
        scikit-learn scorer name (``sklearn.metrics.get_scorer_names()``, e.g. ``"accuracy"``,
        ``"roc_auc_ovr"``) or a callable ``scorer(estimator, X, y)`` (e.g. from
        :func:`sklearn.metrics.make_scorer`) adds ``mean_<name>``/``sd_<name>``/``se_<name>`` columns;
        its name is the scorer's (for a callable, its score function's name without ``_score``, with
        ``_scorer`` appended when it is that of a score always reported or of a per-fold table column:
        ``"error"``, ``"balanced_accuracy"``, ``"f1_macro"``, ``"method"``, ``"n_genes"``, ``"repeat"``,
        ``"fold"``, ``"n_test"``).
        Error, balanced accuracy and macro-F1 are always reported (``mean_error``,
        ``mean_balanced_accuracy``, ``mean_f1_macro`` ...): panel users weigh rare cell types
        equally, which balanced accuracy does and the error rate does not.  All scores are per test
        fold, then averaged; with leave-one-out a fold has one sample, so its balanced accuracy and
        macro-F1 are just its accuracy -- use k-fold for those.  A score that needs every class in a
        test fold (``"roc_auc"``, ``"neg_log_loss"``) is refused before the CV runs when a test fold
        lacks a class (leave-one-out, for one).  A score that is NaN on some fold fits makes that row's
        mean, sd and se NaN (with a warning), never a mean over the other folds.
    refit_selection : bool or None
        ``None`` (default): methods given by name are refit on the training samples of every fold,
        so selection never sees the test samples (no selection bias); fixed rankings are used as
        they are.  ``True``: the same, but a fixed ranking is an error (it cannot be refit).
        ``False``: methods are fit once on all samples and that ranking is cross-validated -- the
        optimistic protocol, useful only to reproduce published numbers.
    batch : str or array-like, optional
        The batch (donor, study, plate) of every sample: an ``.obs`` column name when ``data`` is an
        AnnData, else one value per sample.  It defines the folds of ``cv="leave_one_batch_out"`` and,
        with ``batch_selection=True``, every refit method that has batch-aware statistics
        (:func:`bioqpfs.batch_methods`) gets the training samples' batches (``batch=``, see
        :func:`bioqpfs.qpfs`); the other methods and fixed rankings run without them.  The summary then
        has a ``batch_aware`` column saying which rows used them.  They are also the groups of a
        group splitter given as ``cv`` (with ``batch_selection=False`` they serve the folds only).
    batch_selection : bool
        Pass the batches to the selections (default ``True``); ``False`` uses them for the folds only, to
        measure what the batch-aware statistics add on the same folds.
    method_params : dict, optional
        ``{method name: {param: value}}`` for methods given by plain name; a key that names no
        such method is an error (it would be ignored).  Batches go in ``batch=``, not here (the folds
        need them subset); ``n_genes``, ``random_state``, ``feature_names`` and ``method`` are set by
        error_curve itself and refused here.
    layer, use_raw, mask_var
        As in :func:`bioqpfs.tl.select_genes` (``mask_var`` may be a boolean array for arrays).
    feature_names : sequence of str, optional
        Gene names of an array ``data`` (to resolve gene-name lists).
    random_state : int, None or numpy.random.Generator
        Seeds the folds, every method's random choices and the classifier's (a ``random_state`` left at
        ``None`` in it or its pipeline's steps; fold f of repeat r gets ``random_state + 1000 * r + f``),
        so NumPy's global RNG is never used.  A NumPy Generator/RandomState is turned into one int seed
        drawn from it (pass ``numpy.random.default_rng()`` for a fresh draw on every call).  ``None`` only
        with ``cv="loo"``, ``"leave_one_batch_out"`` or a splitter (k-fold needs a seed): the folds are then
        the scheme's own, and the methods and the classifier are still seeded as with ``random_state=0``, so
        the table stays reproducible -- unlike :func:`bioqpfs.select`, where ``None`` is unseeded.
    return_folds : bool
        Also return the per-fold table (one row per repeat, fold, method, k).
    progress : bool, optional
        Progress bars on stderr (tqdm, via :mod:`bioqpfs._progress`): over the folds, and inside each
        selection; steps under a second show nothing, and the ETA is measured from the second fold on
        (the first may include numba's one-time compilation).  ``None`` (default): on when
        ``scanpy.settings.verbosity`` is info or higher, or inside a ``_progress.enabled()`` block (the CLI).
    n_jobs : int, optional
        Worker threads of the selections, as in :func:`bioqpfs.tl.select_genes` (``None``:
        ``scanpy.settings.n_jobs`` when set, else ``NUMBA_NUM_THREADS``).
    chunk_size : int, optional
        Samples per chunk when X of a backed AnnData is read lazily (see ``data``; default as in
        :func:`bioqpfs.tl.select_genes`).
    backend : {"auto", "cpu", "gpu"}, optional
        Where the selections count, as in :func:`bioqpfs.tl.select_genes` (the classifiers run on the CPU).

    Returns
    -------
    DataFrame
        One row per (method, n_genes): ``method``, ``n_genes``, ``mean_error`` (mean of the fold
        error rates, as ``1 - cross_val_score(...).mean()``), ``sd_error`` (sample standard
        deviation of the fold error rates), ``se_error`` (``sd_error / sqrt(n_folds)``), the same
        three for ``balanced_accuracy`` and ``f1_macro`` (and for the ``scoring`` if it is another
        one), ``scoring`` (the name of the chosen score), ``n_folds`` (fold fits averaged, over all
        repeats), ``refit``, ``cv`` (the scheme used: the number of folds, ``"loo"``,
        ``"leave_one_batch_out"`` or the splitter's class name), ``repeats``, ``classifier``,
        ``seconds_select`` (mean time per selection fit), and with ``batch`` ``batch_aware``.
        With ``return_folds=True``, ``(summary, folds)``; ``folds`` has one column per score.

    Examples
    --------
    >>> import bioqpfs
    >>> adata = bioqpfs.datasets.srbct()
    >>> df = bioqpfs.evaluate.error_curve(adata, "class", ["qpfs"], n_genes=[5, 10], cv=5)  # doctest: +SKIP
    """
    from scanpy import logging as logg
    from sklearn.base import clone

    ks = _sizes(n_genes)
    random_state = seed_of(random_state)
    repeats = check_positive_int(repeats, "repeats")
    _device.check_backend(backend)
    if refit_selection is not None and not isinstance(refit_selection, (bool, np.bool_)):
        # 0 and 1 equal False and True but were read by identity below (0 refit every fold, silently)
        raise ValueError(f"refit_selection must be None, True or False, got {refit_selection!r}")
    refit_selection = None if refit_selection is None else bool(refit_selection)  # np.False_ is False
    if batch_selection not in (True, False):
        raise ValueError(f"batch_selection must be True or False, got {batch_selection!r}")
    score_name, scorer = resolve_scoring(scoring)
    if chunk_size is not None:
        check_positive_int(chunk_size, "chunk_size")
    _threads.resolve(n_jobs)  # a bad n_jobs (or scanpy.settings.n_jobs) fails before X is read, not after

    with_batches = set(batch_methods()) if batch is not None and batch_selection else set()
    selections = _read_once(selections)  # read twice below (the lazy-read plan, then the specs)

    def runs(names, n_vars, cand):  # the selections that will run on X (a backed X is read lazily if all can)
        methods = [p for _, kind, p in _specs(selections, data, names, n_vars, cand, method_params) if kind == "method"]
        return [(name, {**params, "batch": batch} if name in with_batches else params) for name, params in methods]

    X, y, names, cand, y_select = _data(data, labels, layer=layer, use_raw=use_raw, mask_var=mask_var,
                                        feature_names=feature_names, runs=runs, chunk_size=chunk_size,
                                        progress=_progress.wanted(progress))
    if ks[-1] > cand.size:
        raise ValueError(f"n_genes up to {ks[-1]} but only {cand.size} candidate genes")
    adata = data if _is_anndata(data) else None
    batch = _batches(data, batch, y.size)
    specs = _specs(selections, adata, names, X.shape[1], cand, method_params)
    short = [(lab, payload.size) for lab, kind, payload in specs if kind == "fixed" and payload.size < ks[0]]
    if short:   # it would get no row at all: missing from the table, or an empty table
        lab, size = short[0]
        raise ValueError(f"the panel {lab!r} has {size} gene(s), fewer than the smallest n_genes ({ks[0]}), so it "
                         f"would get no row; include panel sizes up to {size} in n_genes, or pass a longer panel")
    aware = with_batches
    in_mask = np.zeros(X.shape[1], dtype=bool)
    in_mask[cand] = True
    for lab, kind, payload in specs:
        if kind == "method" and "batch" in payload[1]:
            raise ValueError(f"{lab!r}: pass the batches as error_curve(batch=...), not as a method parameter "
                             "(each fold needs its own subset of them)")
        if kind == "method" and payload[1].get("preselected") is not None:   # positions count in all genes, as tl's
            payload[1]["preselected"] = preselected_in_mask(payload[1]["preselected"], in_mask, names,
                                                            "adata.var" if adata is not None else "the data's genes")
    if refit_selection is True:
        fixed = [lab for lab, kind, _ in specs if kind == "fixed"]
        if fixed:
            raise ValueError(f"refit_selection=True but {fixed} are precomputed rankings, which cannot be refit "
                             "inside the folds; pass method names instead, or refit_selection=None")
    refit = refit_selection is not False
    seed0 = 0 if random_state is None else int(random_state)
    base_clf = make_classifier(classifier)   # seeded for each fit below (_seeded)
    clf_name = classifier if isinstance(classifier, str) else type(classifier).__name__
    chosen = cv is None
    if chosen:
        cv, why = _auto_cv(y)
        logg.info(f"evaluate: cv=None -> {why}")
    splits = _splits(cv, y, repeats, random_state, batch)
    _check_repeats(repeats, cv, chosen)
    _check_folds(splits, y)
    if scorer is not None:
        _check_scorer(scorer, score_name, _seeded(clone(base_clf), seed0), clf_name,
                      lambda rows: _dense(X[rows][:, cand[:min(2, cand.size)]]),
                      y, splits)
    Xc = X[:, cand]
    cand_names = None if names is None else names[cand]

    def run(name, params, rows, seed):
        t0 = time.perf_counter()
        if name in aware:
            params = {**params, "batch": batch[rows]}
        sel = select(Xc[rows], y_select[rows], method=name, n_genes=min(ks[-1], cand.size), random_state=seed,
                     feature_names=cand_names, **params)
        return cand[sel.ranking], time.perf_counter() - t0

    # the largest panel as a dense array (X's dtype), and a fold's training and test parts of it (fancy-indexed
    # copies) beside it
    widest = min(ks[-1], X.shape[1])
    memory_guard(3 * np.dtype(X.dtype).itemsize * X.shape[0] * widest,
                 f"the dense {X.shape[0]} x {widest} panels of the error curve",
                 [f"a smaller n_genes grid (its largest size, {widest}, sets the panel's width)", "samples"])
    rows = []
    rankings, seconds = {}, {}
    fold_seconds = {lab: [] for lab, _, _ in specs}
    with _progress.requested(progress), _threads.limited(n_jobs), _device.requested(backend), \
            announce_compilation(logg.info), _progress.bar(len(splits), "CV folds", unit="fold") as pbar:
        # fixed rankings, and methods fit once on all data when refit is off
        for lab, kind, payload in specs:
            if kind == "fixed":
                rankings[lab], seconds[lab] = payload, np.nan
            elif not refit:
                rankings[lab], seconds[lab] = run(*payload, np.arange(y.size), seed0)
        for r, f, train, test in splits:
            for lab, kind, payload in specs:
                if kind == "method" and refit:
                    try:
                        ranking, secs = run(*payload, train, seed0 + 1000 * r + f)
                    except ValueError as err:  # a condition of this training part, not of the data passed
                        raise ValueError(f"{lab!r} on the {len(train)} training samples of CV fold {f}"
                                         f"{f' (repeat {r})' if repeats > 1 else ''}, whose selection is refit "
                                         f"inside the fold: {err}") from err
                    fold_seconds[lab].append(secs)
                else:
                    ranking = rankings[lab]
                fitted = [k for k in ks if k <= ranking.size]
                panel = Ptr = Pte = None   # the previous panel and its parts freed before the next is built
                panel = _dense(X[:, ranking[:max(fitted)]]) if fitted else None  # all samples: one pass over X
                for k in fitted:
                    Ptr = Pte = None
                    Ptr, Pte = panel[train, :k], panel[test, :k]
                    clf = _seeded(clone(base_clf), seed0 + 1000 * r + f).fit(Ptr, y[train])
                    scores = _prediction_metrics(y[test], clf.predict(Pte))
                    if scorer is not None:
                        scores[score_name] = _score(scorer, score_name, clf, Pte, y[test], lab, k, r, f)
                    rows.append(dict(method=lab, n_genes=k, repeat=r, fold=f, **scores, n_test=test.size))
            pbar.update(1)
    metrics = list(DEFAULT_METRICS) + ([score_name] if scorer is not None else [])
    folds = pd.DataFrame(rows, columns=[*FOLD_COLUMNS[:-1], *metrics, FOLD_COLUMNS[-1]])
    g = folds.groupby(["method", "n_genes"], sort=False)
    summary = g.size().rename("n_folds").reset_index()
    stats = []
    undefined = folds[score_name].isna()
    if undefined.any():   # pandas' mean would skip them: a mean over fewer folds than n_folds says
        import warnings

        from ._validation import user_stacklevel

        first = folds[undefined].iloc[0]
        warnings.warn(f"scoring={score_name!r} is NaN on {int(undefined.sum())} of {len(folds)} fold fits (e.g. "
                      f"{first['method']!r} at n_genes={first['n_genes']}, fold {first['fold']}); their mean_"
                      f"{score_name}, sd_ and se_ are NaN; use a score defined on every test fold (e.g. "
                      "'balanced_accuracy')", UserWarning, stacklevel=user_stacklevel())
    for name in [score_name] + [m for m in metrics if m != score_name]:   # the chosen score first
        # skipna=False: a NaN fold score makes its row NaN instead of a mean over the other folds
        mean = g[name].agg(lambda s: s.mean(skipna=False)).to_numpy(dtype=float)
        sd = g[name].agg(lambda s: s.std(ddof=1, skipna=False)).to_numpy(dtype=float)
        stats += [(f"mean_{name}", mean), (f"sd_{name}", sd), (f"se_{name}", sd / np.sqrt(summary["n_folds"].to_numpy()))]
    for col, values in stats:
        summary[col] = values
    summary["scoring"] = score_name
    kinds = {lab: kind for lab, kind, _ in specs}
    payloads = {lab: payload for lab, _, payload in specs}
    summary["refit"] = [kinds[m] == "method" and refit for m in summary["method"]]
    summary["cv"] = str(cv).lower() if isinstance(cv, (str, Integral)) else type(cv).__name__
    summary["repeats"] = len({r for r, _, _, _ in splits})
    summary["classifier"] = clf_name
    summary["seconds_select"] = [np.mean(fold_seconds[m]) if fold_seconds[m] else seconds[m]
                                 for m in summary["method"]]
    order = {lab: i for i, (lab, _, _) in enumerate(specs)}
    summary = summary.sort_values(["method", "n_genes"], key=lambda s: s.map(order) if s.name == "method" else s,
                                  kind="stable").reset_index(drop=True)
    columns = ["method", "n_genes", *(c for c, _ in stats), "scoring", "n_folds", "refit", "cv", "repeats",
               "classifier", "seconds_select"]
    if batch is not None:
        summary["batch_aware"] = [kinds[m] == "method" and payloads[m][0] in aware for m in summary["method"]]
        columns.append("batch_aware")
    summary = summary[columns]
    return (summary, folds) if return_folds else summary


def suggest_n_genes(table: pd.DataFrame, *, score: str | None = None) -> int | pd.Series:
    """The panel size the one-standard-error rule picks from an :func:`error_curve` table.

    The one-SE rule (Breiman et al., *Classification and Regression Trees*, 1984, chapter 3;
    Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*, 2nd ed., section 7.10):
    take the size with the best mean cross-validated score, then return the **smallest** size whose
    mean is within one standard error of that best mean -- the most parsimonious panel that is not
    clearly worse than the best one.  The standard error is the best size's ``se_<score>``
    (``sd_<score> / sqrt(n_folds)``: the sample standard deviation over the fold scores divided by the
    square root of the number of fold fits, repeats included), read from ``sd_<score>`` and
    ``n_folds`` when the table has no ``se_`` column.

    Parameters
    ----------
    table : DataFrame
        From :func:`error_curve` or :func:`compare`: columns ``method``, ``n_genes``,
        ``mean_<score>`` and ``se_<score>`` (or ``sd_<score>`` and ``n_folds``).
    score : str, optional
        The score to apply the rule to; default the table's ``scoring`` column (``"error"`` when it
        has none).  ``"error"`` is a loss (lower is better: best = smallest mean, sizes within
        best + SE qualify); every other score -- ``balanced_accuracy``, ``f1_macro`` and scikit-learn
        scorers, which are all "higher is better" by scikit-learn's convention -- is a gain (best =
        largest mean, sizes within best - SE qualify).

    Returns
    -------
    int or Series
        An ``int`` when the table holds one method; with several, a ``Series`` of ints indexed by
        method (in table order, name ``"n_genes"``).  Ties for the best mean take the smallest of the
        tied sizes as "the best" (its SE sets the margin); a size exactly at the margin qualifies.

    Raises
    ------
    ValueError
        When the table lacks these columns, is empty, has a method with one size only (nothing to
        choose), a repeated ``(method, n_genes)`` row, or a NaN mean or standard error (e.g. one
        fold: no spread to measure).

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"method": "qpfs", "n_genes": [5, 10, 20], "mean_error": [0.30, 0.12, 0.10],
    ...                   "se_error": [0.03, 0.02, 0.03], "scoring": "error"})
    >>> suggest_n_genes(t)   # best 0.10 at 20 genes, 0.12 <= 0.10 + 0.03
    10
    """
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"table must be the DataFrame of bioqpfs.evaluate.error_curve, got {type(table).__name__}")
    if score is None:
        scored = list(dict.fromkeys(map(str, table["scoring"]))) if "scoring" in table.columns else []
        if len(scored) > 1:
            raise ValueError(f"the table's rows were scored by {', '.join(map(repr, scored))} (its 'scoring' column); "
                             "the rule needs one score: pass score=, e.g. score='error'")
        score = scored[0] if scored else "error"
    mean_col, se_col, sd_col = f"mean_{score}", f"se_{score}", f"sd_{score}"
    need = {"method", "n_genes", mean_col}
    if not need <= set(table.columns) or not ({se_col} <= set(table.columns) or {sd_col, "n_folds"} <= set(table.columns)):
        have = [c[5:] for c in table.columns if isinstance(c, str) and c.startswith("mean_")]
        raise ValueError(f"table needs columns method, n_genes, {mean_col} and {se_col} (or {sd_col} and n_folds), "
                         f"as bioqpfs.evaluate.error_curve returns; got {list(table.columns)}"
                         + (f"; scores in this table: {', '.join(have)}" if have else ""))
    if table.empty:
        raise ValueError("table has no rows: no panel size to choose from")
    sizes = pd.to_numeric(table["n_genes"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(sizes) & (sizes >= 1) & (sizes == np.round(sizes)))
    if bad.any():
        row = table[bad].iloc[0]
        value = row["n_genes"].item() if isinstance(row["n_genes"], np.generic) else row["n_genes"]
        raise ValueError(f"n_genes must be a positive whole number in every row, got {value!r} for method "
                         f"{row['method']!r}; pass the table error_curve returned")
    table = table.assign(n_genes=sizes.astype(np.int64))  # a copy: sizes stored as text sort as numbers
    dup = table.duplicated(["method", "n_genes"])
    if dup.any():
        row = table[dup].iloc[0]
        raise ValueError(f"table has several rows for method {row['method']!r} at n_genes={row['n_genes']}; "
                         "pass one error_curve table (not several concatenated)")
    se = (table[se_col] if se_col in table.columns
          else table[sd_col] / np.sqrt(table["n_folds"].to_numpy(dtype=float))).to_numpy(dtype=float)
    mean = table[mean_col].to_numpy(dtype=float)
    for what, values in ((mean_col, mean), ("standard error" if se_col in table.columns else sd_col, se)):
        bad = ~np.isfinite(values)
        if bad.any():
            row = table[bad].iloc[0]
            raise ValueError(f"{what} is NaN for method {row['method']!r} at n_genes={row['n_genes']} "
                             "(a single fold has no spread; use k-fold CV or repeats); the one-SE rule needs every "
                             "size's mean and standard error")
    sign = 1.0 if score == "error" else -1.0        # as a loss: lower is better
    methods = list(dict.fromkeys(table["method"]))
    chosen = {}
    for m in methods:
        rows = np.flatnonzero((table["method"] == m).to_numpy())
        rows = rows[np.argsort(table["n_genes"].to_numpy()[rows], kind="stable")]
        if rows.size < 2:
            raise ValueError(f"method {m!r} has a single panel size (n_genes={table['n_genes'].iloc[rows[0]]}): "
                             "nothing to choose; run error_curve with several n_genes")
        loss = sign * mean[rows]
        best = int(np.argmin(loss))                  # the smallest of tied best sizes
        margin = loss[best] + se[rows][best]
        ok = loss <= margin + 1e-12 * max(1.0, abs(margin))   # a size exactly at the margin qualifies
        chosen[m] = int(table["n_genes"].to_numpy()[rows][np.flatnonzero(ok)[0]])
    if len(methods) == 1:
        return chosen[methods[0]]
    return pd.Series(chosen, name="n_genes")


def compare(adata: AnnData, groupby: str | Sequence[str], methods: str | Sequence[str] | Mapping[str, Any] | None = None, *,
            n_genes: int | Sequence[int] = DEFAULT_N_GENES,
            method_params: Mapping[str, Mapping[str, Any]] | None = None,
            **kwargs) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Run several selectors side by side and return their error curves (one tidy DataFrame).

    Parameters
    ----------
    adata : AnnData
    groupby : str or list of str
        ``.obs`` column with the classes; or several, coarse to fine (hierarchical labels, as in
        :func:`error_curve`: then name methods of :func:`bioqpfs.hierarchy_methods`, the default list has others).
    methods : list of str or dict, optional
        Registered method names, or ``{label: name or (name, params)}`` to compare settings of one
        method (e.g. ``{"QPFS a=0.2": ("qpfs", {"alpha": 0.2}), "QPFS": "qpfs"}``); default: ``"qpfs"`` and whichever of ``"spec_cmi"``, ``"ikm_qpfs"``,
        ``"mrmr_mid"``, ``"maxrel"`` and ``"random"`` are registered (:func:`bioqpfs.methods`).
    n_genes : sequence of int
        Panel sizes.
    method_params : dict, optional
        ``{method: {param: value}}``.
    **kwargs
        Passed to :func:`error_curve` (``cv``, ``repeats``, ``scoring``, ``classifier``, ``refit_selection``,
        ``layer``, ``use_raw``, ``mask_var``, ``random_state``, ``return_folds``, ``progress``, ``n_jobs``).
        Every method is refit inside each training fold unless ``refit_selection=False``.

    Returns
    -------
    DataFrame
        As :func:`error_curve`, one block of rows per method, in the order given.
    """
    if methods is None:
        registered = _methods()
        methods = [m for m in ("qpfs", "spec_cmi", "ikm_qpfs", "mrmr_mid", "maxrel", "random") if m in registered]
    if isinstance(methods, str):
        methods = [methods]
    if not isinstance(methods, dict):      # a dict {label: method or (method, params)} is kept as is
        methods = list(methods)
    return error_curve(adata, groupby, methods, n_genes=n_genes, method_params=method_params, **kwargs)
