"""Input checks shared by every face: one place that turns bad input into a clear error.

Kernels assume validated input; the public functions (``measures``, selectors,
``tl``) call these first.  Every message names what is wrong (which gene/sample/
label) and what to do about it.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["check_matrix", "check_labels", "check_n_genes", "check_random_state", "check_base", "describe_indices",
           "memory_guard"]


def describe_indices(idx, names=None, limit=5) -> str:
    """Format the first few offending indices (or their names) for an error message."""
    idx = np.asarray(idx).ravel()
    shown = [str(names[i]) if names is not None else str(int(i)) for i in idx[:limit]]
    more = f" and {idx.size - limit} more" if idx.size > limit else ""
    return ", ".join(shown) + more


def check_matrix(X, *, name="X", feature_names=None, allow_sparse=True, min_samples=2):
    """Validate an expression matrix (samples x genes); never modifies or copies needlessly.

    Returns a 2-D float array (``float32``/``float64`` kept, other dtypes cast to
    ``float64``) or a CSR/CSC matrix with the same guarantee.  NaN/Inf raise a
    ``ValueError`` naming the first affected genes.
    """
    if sp.issparse(X):
        if not allow_sparse:
            raise TypeError(f"{name} is sparse but this function needs a dense array; call {name}.toarray() first")
        X = X.tocsr() if X.format not in ("csr", "csc") else X
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        data = X.data
    else:
        if hasattr(X, "to_numpy"):
            X = X.to_numpy()
        X = np.asarray(X)
        if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
            raise TypeError(f"{name} must be numeric, got dtype {X.dtype}")
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        data = X
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (samples x genes), got shape {X.shape}")
    n, m = X.shape
    if m == 0:
        raise ValueError(f"{name} has no genes (shape {X.shape})")
    if n < min_samples:
        raise ValueError(f"{name} has {n} sample(s); at least {min_samples} are needed")
    if not np.isfinite(data).all():
        if sp.issparse(X):
            Xc = X.tocsc()
            bad_cols = np.unique(np.repeat(np.arange(m), np.diff(Xc.indptr))[~np.isfinite(Xc.data)])
        else:
            bad_cols = np.flatnonzero(~np.isfinite(X).all(axis=0))
        raise ValueError(
            f"{name} contains NaN or infinite values in {bad_cols.size} gene(s): "
            f"{describe_indices(bad_cols, feature_names)}; impute or remove them first "
            "(e.g. drop those genes, or fill missing values)"
        )
    return X


def check_labels(y, n_samples, *, name="labels", min_classes=2):
    """Validate class labels; return ``(codes, classes)`` with codes in ``0..C-1``.

    Accepts strings, integers, booleans, pandas Categoricals.  Missing labels
    (None/NaN/pd.NA) are an error that names the samples, never silently dropped.
    """
    import pandas as pd

    if isinstance(y, (pd.Series, pd.Index)):
        y = y.array
    if isinstance(y, pd.Categorical) or isinstance(getattr(y, "dtype", None), pd.CategoricalDtype):
        cat = pd.Categorical(y)
    else:
        arr = np.asarray(y, dtype=object) if not isinstance(y, np.ndarray) else y
        if arr.ndim != 1:
            arr = np.ravel(arr) if arr.ndim == 2 and 1 in arr.shape else arr
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {np.shape(y)}")
        cat = pd.Categorical(arr)
    if len(cat) != n_samples:
        raise ValueError(f"{name} has {len(cat)} entries but the data have {n_samples} samples")
    missing = np.flatnonzero(np.asarray(cat.isna()))
    if missing.size:
        raise ValueError(
            f"{name} has {missing.size} missing value(s) (at samples {describe_indices(missing)}); "
            "remove those samples or give them a label"
        )
    cat = cat.remove_unused_categories()
    classes = np.asarray(cat.categories)
    if classes.size < min_classes:
        raise ValueError(
            f"{name} has {classes.size} class(es) ({', '.join(map(str, classes))}); "
            f"gene selection needs at least {min_classes} classes to measure relevance"
        )
    return np.asarray(cat.codes, dtype=np.intp), classes


def check_n_genes(n_genes, n_available, *, what="genes"):
    """Validate a requested panel size against the number of candidate genes."""
    if n_genes is None:
        return None
    if isinstance(n_genes, bool) or not isinstance(n_genes, (int, np.integer)):
        raise TypeError(f"n_genes must be a positive integer, got {n_genes!r}")
    if n_genes < 1:
        raise ValueError(f"n_genes must be >= 1, got {n_genes}")
    if n_genes > n_available:
        raise ValueError(
            f"n_genes={n_genes} but only {n_available} candidate {what} are available; "
            f"ask for at most {n_available}"
        )
    return int(n_genes)


def check_random_state(random_state, *, name="random_state"):
    """``None``, a non-negative int, or a NumPy ``Generator``/``RandomState``/``SeedSequence``/``BitGenerator``
    -> a ``numpy.random.Generator``.  A ``RandomState`` is turned into one integer seed (drawn from it)."""
    if random_state is None or isinstance(random_state, (np.random.Generator, np.random.SeedSequence,
                                                         np.random.BitGenerator)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(int(random_state.randint(np.iinfo(np.int32).max)))
    if isinstance(random_state, (bool, np.bool_)) or not isinstance(random_state, (int, np.integer)) \
            or random_state < 0:
        raise ValueError(f"{name} must be None, a non-negative integer or a numpy.random.Generator, "
                         f"got {random_state!r}")
    return np.random.default_rng(int(random_state))


def check_base(base, *, name="base"):
    """Logarithm base of information measures: a finite number > 0 and != 1 (2: bits, e: nats)."""
    if isinstance(base, (bool, np.bool_)) or not isinstance(base, (int, float, np.integer, np.floating)) \
            or not np.isfinite(base) or base <= 0 or base == 1:
        raise ValueError(f"{name} must be a finite number > 0 and != 1 (2 for bits, e for nats), got {base!r}")
    return float(base)


def _available_memory_bytes():
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_guard(n_bytes, what, suggestion, *, fraction=0.8):
    """Refuse an allocation that would not fit in available memory, before attempting it."""
    avail = _available_memory_bytes()
    if avail is not None and n_bytes > fraction * avail:
        raise MemoryError(
            f"{what} needs about {n_bytes / 2**30:.1f} GiB but only {avail / 2**30:.1f} GiB are available; "
            f"{suggestion}"
        )
