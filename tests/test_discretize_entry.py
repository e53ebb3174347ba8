"""The one discretisation entry point (``_kernels.discretize.codes``) and its vector form (issue 12, item 2)."""
from __future__ import annotations

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp

from bioqpfs import measures
from bioqpfs._kernels import discretize as disc


def test_codes_dispatches_every_rule_to_its_kernel(rng):
    X = rng.normal(size=(40, 7))
    X[:, 3] = np.where(rng.random(40) < 0.6, 0.0, np.abs(X[:, 3]))  # zero-inflated gene
    y = rng.integers(0, 3, 40)
    normal = [0, 1, 2, 4, 5, 6]  # every bin used: no compaction, so the codes are the oracle's bins (QPFS 2.5)
    np.testing.assert_array_equal(disc.codes(X)[0][:, normal], ref.mean_sd_codes(X[:, normal]))
    for rule, kw, direct in [("quantile", {"n_bins": 4}, lambda: disc.quantile_codes(X, 4)),
                             ("zero_quantile", {"n_bins": 4}, lambda: disc.zero_quantile_codes(X, 4)),
                             ("mdl", {"y_codes": y}, lambda: disc.mdl_codes(X, y))]:
        got, want = disc.codes(X, rule, **kw), direct()
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    with pytest.raises(ValueError, match="pass the class labels"):
        disc.codes(X, "mdl")
    with pytest.raises(ValueError, match="unknown discretization 'bins'"):
        disc.codes(X, "bins")
    # the measures face and the selectors' helper are the same function, not a second dispatch
    assert measures.codes_and_levels is disc.codes
    assert measures.resolve_discretization is disc.resolve_discretization


def test_auto_resolves_by_the_zero_fraction(rng):
    dense = rng.normal(size=(30, 5))
    sparse = sp.random(30, 5, density=0.3, random_state=0, format="csr")
    assert disc.resolve_discretization(dense, "auto") == "mean_sd"
    assert disc.resolve_discretization(sparse, "auto") == "zero_quantile"
    np.testing.assert_array_equal(disc.codes(sparse, "auto", n_bins=3)[0], disc.zero_quantile_codes(sparse, 3)[0])


def test_integer_codes_are_read_as_integers():
    """discretization=None on integer codes: no float64 round trip, which merged levels 2**53 and 2**53 + 1."""
    big = 2**53
    levels = np.array([[big, 0], [big + 1, 1], [big, 0], [big + 1, 1]], dtype=np.int64)
    codes, n_levels = disc.codes(levels, None)
    np.testing.assert_array_equal(n_levels, [2, 2])
    np.testing.assert_array_equal(codes[:, 0], [0, 1, 0, 1])
    # through the public face too: the gene has two equally likely levels, 1 bit
    np.testing.assert_allclose(measures.entropy(levels, discretization=None), [1.0, 1.0])
    u8 = np.array([[0, 3], [255, 3], [7, 1]], dtype=np.uint8)
    np.testing.assert_array_equal(disc.codes(u8, None)[0], [[0, 1], [2, 1], [1, 0]])


@pytest.mark.parametrize("scale", [1.0, 2.0**600, 2.0**-600])
def test_vector_codes_is_the_matrix_rule_at_any_scale(rng, scale):
    """k-means' vector form gives the codes of the matrix rule, also for values whose squares overflow or
    underflow (the extreme-value guard the k-means copy lacked: at 2**600 every value fell in one bin)."""
    V = rng.normal(size=(57, 6)) * rng.uniform(0.1, 5, 6) + rng.normal(size=6)
    out = np.empty(57, dtype=np.uint8)
    for j in range(V.shape[1]):
        v = V[:, j] * scale
        assert disc.vector_codes(v.copy(), disc.VECTOR_RULES["mean_sd"], 3, out) == 3
        np.testing.assert_array_equal(out, ref.mean_sd_codes(V[:, j:j + 1])[:, 0])
        np.testing.assert_array_equal(out, disc.codes(v[:, None])[0][:, 0])
        disc.vector_codes(v.copy(), disc.VECTOR_RULES["quantile"], 4, out)
        np.testing.assert_array_equal(out, disc.codes(v[:, None], "quantile", n_bins=4)[0][:, 0])
