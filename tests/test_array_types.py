"""Every registered method on every array type (issue 12 item 8): dense equals sparse, inputs untouched,
a seeded run repeats exactly, and the result survives an h5ad round trip."""
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import bioqpfs
from bioqpfs._registry import methods

METHODS = sorted(methods())
#: small enough for every method (sdp_cmi included) to run in about a second
N_PER_CLASS, M = 12, 24
PARAMS = {"sdp_cmi": {"n_projections": 20}, "ikm_qpfs": {"n_clusters": 6}, "ikma_qpfs": {"n_clusters": 6},
          "tlkm_qpfs": {"n_clusters": 6}}


def _data():
    rng = np.random.default_rng(7)
    y = np.repeat(["a", "b", "c"], N_PER_CLASS)
    X = rng.poisson(1.0, size=(y.size, M)).astype(np.float64)   # zero-inflated, as single-cell counts
    codes = np.unique(y, return_inverse=True)[1]
    X[:, :4] += 3 * (codes[:, None] == np.arange(4)[None, :] % 3)
    X[:, 4] = X[:, 0] + rng.poisson(0.2, size=y.size)           # a redundant copy of gene 0
    return X, y


def _select(X, y, method, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bioqpfs.select(X, y, method=method, n_genes=4, random_state=3, **PARAMS.get(method, {}), **kw)


def _copy(X):
    return X.copy()


def _equal(a, b):
    if sp.issparse(a):
        return sp.issparse(b) and a.format == b.format and a.dtype == b.dtype and (a != b).nnz == 0
    return not sp.issparse(b) and a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_on_every_array_type(method, array_type):
    X0, y = _data()
    X = array_type(X0)
    before = _copy(X)
    sel = _select(X, y, method)
    assert _equal(X, before), "the input matrix was modified"
    again = _select(X, y, method)
    np.testing.assert_array_equal(again.ranking, sel.ranking)              # seeded: repeats exactly
    np.testing.assert_array_equal(again.weights, sel.weights)
    dense = _select(array_type(X0).toarray() if sp.issparse(X) else X, y, method)
    np.testing.assert_array_equal(sel.ranking, dense.ranking)              # sparse = dense of the same dtype
    np.testing.assert_allclose(sel.weights, dense.weights, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_survives_h5ad(method, array_type, tmp_path):
    X0, y = _data()
    a = ad.AnnData(array_type(X0), obs=pd.DataFrame({"cls": pd.Categorical(y)}, index=[f"c{i}" for i in range(y.size)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(M)]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bioqpfs.tl.select_genes(a, "cls", method=method, n_genes=4, random_state=3, **PARAMS.get(method, {}))
    a.write_h5ad(tmp_path / "a.h5ad")
    b = ad.read_h5ad(tmp_path / "a.h5ad")
    pd.testing.assert_frame_equal(bioqpfs.get.selection_df(b, method), bioqpfs.get.selection_df(a, method))
    assert list(b.uns[method]["selected"]) == list(a.uns[method]["selected"])
    sel = _select(array_type(X0), y, method)                               # the array route agrees with tl
    assert list(a.uns[method]["selected"]) == [f"g{j}" for j in sel.selected]
