"""X's column moments are computed once per selector call (``counting_dask.pass_memo`` +
``correlation.shared_column_moments``): prepare's constant-gene test, the mean +- sd thresholds and ikm_qpfs's
standardisation share them, carried over to the gene subset by ``take_genes`` where the slice is the same bits --
and nothing is kept between calls."""
import gc
import importlib
import warnings
import weakref

import numpy as np
import pytest
import scipy.sparse as sp

import bioqpfs
from bioqpfs._kernels import correlation
from bioqpfs._kernels.counting_dask import pass_memo, take_genes

#: every module that has bound the moments function (today only correlation's own global is called)
MOMENT_MODULES = ["bioqpfs._kernels.correlation", "bioqpfs._kernels.discretize", "bioqpfs.selectors.ikm_qpfs",
                  "bioqpfs.selectors._common", "bioqpfs.selectors.transform"]
METHODS = [("qpfs", {}), ("qpfs", {"nystrom_rate": 0.3}), ("spec_cmi", {}), ("mrmr_miq", {}), ("ikm_qpfs", {}),
           (None, {})]


def _counts(n=240, m=30, seed=0, zero_gene=None, const_gene=None):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n // 3)
    mu = rng.gamma(0.8, 1.0, size=m)[None, :] * np.exp(rng.normal(0, 0.8, size=(3, m)))[y]
    X = np.log1p(rng.poisson(mu)).astype(np.float32)
    if zero_gene is not None:
        X[:, zero_gene] = 0
    if const_gene is not None:
        X[:, const_gene] = 1.25
    return X, y.astype(str)


@pytest.fixture
def moment_calls(monkeypatch):
    """Counts the computations of the column moments of an in-memory X (wherever a module bound the function)."""
    calls = []
    orig = correlation.scaled_column_moments

    def counted(X):
        calls.append(X.shape)
        return orig(X)

    for name in MOMENT_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "scaled_column_moments"):
            monkeypatch.setattr(module, "scaled_column_moments", counted)
    return calls


def _select(X, y, method, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bioqpfs.select(X, y, n_genes=8, method=method, random_state=0, **kw)


@pytest.mark.parametrize("layout", ["csr", "csc", "dense-F", "dense-C"])
@pytest.mark.parametrize("method,kw", METHODS, ids=lambda v: str(v))
def test_moments_once_per_call(moment_calls, method, kw, layout):
    """qpfs (exact, Nystrom), spec_cmi, mrmr_miq, ikm_qpfs and the default recipe: one computation per call (it
    was 2, 3 for ikm_qpfs), with or without a constant gene dropped, where the subset's moments are a slice of X's
    (sparse, F-ordered dense); at most two for a C-ordered dense X, whose gene subset (always a copy, F-ordered) has
    its columns summed in another order (other last bits)."""
    for const in (None, 4):
        X, y = _counts(const_gene=const)
        X = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "dense-F": np.asfortranarray,
             "dense-C": np.ascontiguousarray}[layout](X)
        moment_calls.clear()
        _select(X, y, method, kw)
        once = len(moment_calls)
        assert once == 1 or (layout == "dense-C" and once == 2), moment_calls
        _select(X, y, method, kw)  # a second call computes them again: nothing outlives a call
        assert len(moment_calls) == 2 * once


@pytest.mark.parametrize("layout", ["csr", "csc", "dense-F", "dense-C"])
def test_subset_moments_are_the_slice_bit_for_bit(layout):
    """take_genes carries the moments over only where the slice is what the subset's own computation gives (an
    all-zero gene, a constant non-zero gene, a gene of extreme scale dropped; one gene kept)."""
    X, _ = _counts(n=300, m=40, zero_gene=3, const_gene=9)
    X = X.astype(np.float64)
    X[:, 12] *= 1e300  # a scaled gene (s != 1)
    make = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "dense-F": np.asfortranarray,
            "dense-C": np.ascontiguousarray}[layout]
    X = make(X)
    carried = layout != "dense-C"
    for genes in (np.setdiff1d(np.arange(40), [3]), np.setdiff1d(np.arange(40), [3, 9, 12]), np.array([17]),
                  np.array([12, 30])):
        with pass_memo():
            whole = correlation.shared_column_moments(X)
            sub = take_genes(X, genes)
            got = correlation.shared_column_moments(sub)
            own = correlation.scaled_column_moments(sub)
        for a, b, c in zip(got, own, whole):
            np.testing.assert_array_equal(a, b)
            if carried:
                np.testing.assert_array_equal(a, c[genes])


def test_memo_is_per_object_and_per_call():
    """Within a call: the same object answers from the memo, a copy (equal values) or another X does not; the
    memo holds no array alive; after the call nothing is kept."""
    X, _ = _counts()
    X = sp.csr_matrix(X)
    with pass_memo():
        first = correlation.shared_column_moments(X)
        assert correlation.shared_column_moments(X) is first
        copy = X.copy()
        assert correlation.shared_column_moments(copy) is not first
        Y = sp.csr_matrix(X.toarray() * 2)
        np.testing.assert_array_equal(correlation.shared_column_moments(Y)[0], correlation.scaled_column_moments(Y)[0])
        alive = weakref.ref(Y)
        del Y
        gc.collect()
        assert alive() is None  # the memo keeps no array alive
    assert correlation.shared_column_moments(X) is not first  # outside a call: computed afresh


@pytest.mark.parametrize("layout", ["csr", "dense-F"])
@pytest.mark.parametrize("method,kw", [("qpfs", {}), ("mrmr_miq", {}), ("ikm_qpfs", {}), (None, {})],
                         ids=lambda v: str(v))
def test_two_matrices_in_a_row_get_their_own_results(method, kw, layout):
    """Calls on two different X in a row, and on the same object changed in place between two calls, give what a
    first call on each gives: no moments leak from one call into the next."""
    make = sp.csr_matrix if layout == "csr" else np.asfortranarray
    X1, y = _counts(seed=1)
    X2, _ = _counts(seed=2, const_gene=5)
    want1, want2 = _select(make(X1), y, method, kw), _select(make(X2), y, method, kw)
    A = make(X1.copy())
    got1 = _select(A, y, method, kw)
    if sp.issparse(A):  # the same object, now holding X2
        B = sp.csr_matrix(X2)
        A.data, A.indices, A.indptr = B.data.copy(), B.indices.copy(), B.indptr.copy()
    else:
        A[...] = X2
    got2 = _select(A, y, method, kw)
    for got, want in ((got1, want1), (got2, want2)):
        np.testing.assert_array_equal(got.ranking, want.ranking)
        np.testing.assert_array_equal(got.weights, want.weights)
    assert not np.array_equal(want1.weights, want2.weights)
