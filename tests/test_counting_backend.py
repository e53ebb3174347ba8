"""The counting backend interface (issue 12 item 6): a second backend is one class implementing the contract.

``NaiveCounting`` below implements :class:`bioqpfs._kernels.counting.CountingBackend` the simplest way
(``np.add.at`` over samples, one gene pair at a time, no GEMM, no chunks, no class reordering).  Plugged into
the unchanged coefficient algebra and block plan it must give the default backend's MI, CMI, I(X; X | C) and
class relevance -- exactly for integer counts, to rounding with sample weights -- which is what a Dask or cupy
backend has to satisfy too.
"""
from __future__ import annotations

import numpy as np
import pytest
import reference as ref

from bioqpfs._kernels import counting
from bioqpfs._kernels import information as info
from bioqpfs._kernels.counting_numpy import NumpyCounting


class NaiveCounting(counting.CountingBackend):
    """Reference backend: counts by np.add.at, sample by sample, in the input order."""

    @classmethod
    def accepts(cls, codes):
        return isinstance(codes, np.ndarray)

    def __init__(self, codes, *, n_bins, groups=None, weights=None, count_dtype=np.float32):
        self._codes = np.asarray(codes)
        self.n_samples, self.n_genes = self._codes.shape
        self.n_bins, self.nb = n_bins, n_bins - 1
        self.groups = np.zeros(self.n_samples, np.int64) if groups is None else np.asarray(groups)
        self.n_classes = int(self.groups.max()) + 1 if self.n_samples else 1
        self.weights = weights
        self.count_dtype = count_dtype
        self.w = np.ones(self.n_samples) if weights is None else np.asarray(weights, dtype=np.float64)

    def codes_of(self, genes):
        return self._codes[:, genes]

    def margins(self):
        full = np.zeros((self.n_classes, self.n_genes, self.n_bins))
        for g in range(self.n_genes):
            np.add.at(full, (self.groups, g, self._codes[:, g]), self.w)
        return full[:, :, :self.nb]

    def joint(self, genes_I, genes_J, *, per_class, other=None, out=None):
        cols = self if other is None else other
        I = np.arange(self.n_genes)[genes_I]
        J = np.arange(cols.n_genes)[genes_J]
        C = self.n_classes if per_class else 1
        cls = self.groups if per_class else np.zeros(self.n_samples, np.int64)
        G = np.zeros((C, self.nb, I.size, cols.nb, J.size))
        for ii, i in enumerate(I):
            for jj, j in enumerate(J):
                a, b = self._codes[:, i], cols.codes_of(j)
                keep = (a < self.nb) & (b < cols.nb)  # only the materialised bins
                np.add.at(G, (cls[keep], a[keep], ii, b[keep], jj), self.w[keep])
        return G.reshape(C, self.nb * I.size, cols.nb * J.size).astype(self.count_dtype)


@pytest.fixture(params=[3, 5], ids=["3 bins", "5 bins"])
def coded(request, rng):
    n, m = 90, 23
    y = rng.integers(0, 3, n)
    codes = rng.integers(0, request.param, size=(n, m)).astype(np.uint8)
    codes[:, 4] = (y + rng.integers(0, 2, n)) % request.param  # one informative gene
    return codes, y


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "balanced"])
@pytest.mark.parametrize("kind", ["mi", "cmi", "cmi_mean", "mi_given_class"])
def test_naive_backend_gives_the_default_backends_matrices(coded, kind, weighted):
    codes, y = coded
    groups = None if kind == "mi" and not weighted else y
    w = info.class_sample_weights(y, "balanced") if weighted else None
    default = info.CodeTable(codes, groups=groups, weights=w)
    naive = info.CodeTable(codes, groups=groups, weights=w, backend=NaiveCounting)
    assert isinstance(default.backend, NumpyCounting) and isinstance(naive.backend, NaiveCounting)
    for rows in (None, np.array([5, 0, 17])):
        want = info.pairwise_information(default, None, kind, rows=rows)
        got = info.pairwise_information(naive, None, kind, rows=rows, n_workers=2)
        if weighted:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        else:
            np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(info.class_relevance(naive, y), info.class_relevance(default, y), atol=1e-13)


def test_gene_by_column_matrices_with_another_backend(coded, rng):
    codes, y = coded
    Y = np.stack([y, rng.integers(0, 7, y.size)], axis=1)
    got = info.pairwise_information(info.CodeTable(codes, backend=NaiveCounting),
                                    info.CodeTable(Y, backend=NaiveCounting), "mi")
    want = np.array([[ref.mutual_info(codes[:, i], Y[:, j]) for j in range(2)] for i in range(codes.shape[1])])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_samples_are_not_reordered(coded):
    """The table keeps the input order (a grouped table used to hold a class-sorted copy of the codes)."""
    codes, y = coded
    table = info.CodeTable(codes, groups=y)
    assert table.codes is codes or np.shares_memory(table.codes, codes)
    np.testing.assert_array_equal(table.codes, codes)


def test_backend_selection():
    assert counting.backend_for(np.zeros((2, 2), np.uint8)) is NumpyCounting
    assert counting.backend_for(np.zeros((2, 2), np.uint8), "numpy") is NumpyCounting
    with pytest.raises(ValueError, match="unknown counting backend 'gpu'"):
        counting.backend_for(np.zeros((2, 2)), "gpu")
    with pytest.raises(TypeError, match="no counting backend accepts codes of type list"):
        counting.backend_for([[0, 1]])
