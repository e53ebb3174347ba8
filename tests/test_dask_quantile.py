"""Quantile and zero/non-zero + quantile codes of a Dask X (issue 13 item 2): exact, in bounded memory.

Oracles: the in-memory codes (``np.quantile`` on the whole column), ``np.quantile`` / ``np.sort`` of each
column for the edges and order statistics themselves, and the in-memory selections for the default recipe
(``discretization="auto"``, which is ``"zero_quantile"`` on sparse single-cell data).
"""
from __future__ import annotations

import dask.array as da  # the dev extra installs the dask extra on both CI legs: a missing install must fail
import numpy as np
import pytest
import scipy.sparse as sp

from bioqpfs._kernels import discretize
from bioqpfs._kernels.discretize_dask import (
    _float_keys,
    _key_values,
    dask_codes,
    dask_order_statistics,
    dask_quantile_edges,
    prefetch_quantile_edges,
)

RULES = {"quantile": discretize.quantile_codes, "zero_quantile": discretize.zero_quantile_codes}


def dask_of(X, chunks, sparse=False):
    """X (dense) as a Dask array with these sample chunks; ``sparse``: CSR chunks."""
    out = da.from_array(X, chunks=(chunks, X.shape[1]))
    if sparse:
        out = out.map_blocks(sp.csr_matrix, dtype=X.dtype, meta=sp.csr_matrix((0, 0), dtype=X.dtype))
    return out


@pytest.fixture
def hard(rng):
    """Single-cell-like columns plus every corner the search must get right."""
    n, m = 160, 14
    X = np.log1p(rng.poisson(0.8, (n, m)).astype(float))  # heavy ties, ~45% zeros
    X[:, 1] = rng.normal(size=n)  # no zeros, negative values
    X[:, 2] = 0.0  # all zero
    X[:, 3] = 4.5  # constant, no zeros
    X[:, 4] = 0.0
    X[17, 4] = 2.0  # one non-zero
    X[:, 5] = rng.lognormal(size=n) * 1e300 * (rng.random(n) < 0.5)
    X[:, 6] = rng.lognormal(size=n) * 1e-300 * (rng.random(n) < 0.8)
    X[:, 7] = -rng.lognormal(size=n) * (rng.random(n) < 0.7)  # negative non-zeros
    X[:, 8] = rng.normal(size=n) * 1e300  # huge, both signs: differences overflow
    X[:, 9] = np.where(rng.random(n) < 0.5, 0.0, 5e-324)  # the smallest subnormal
    X[:, 10] = rng.integers(1, 4, n).astype(float)  # three tied values, no zeros
    X[:3, 11] = [1.0, -1.0, 2.0]  # three non-zeros
    return X


LAYOUTS = [((160,), False), ((50, 0, 33, 77), False), ((1, 99, 60), True), ((40, 40, 0, 40, 40), True)]


@pytest.mark.parametrize("n_bins", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("chunks,sparse", LAYOUTS, ids=["dense one chunk", "dense uneven+empty", "csr uneven",
                                                        "csr with empty chunk"])
def test_codes_equal_the_in_memory_codes(hard, rule, n_bins, chunks, sparse):
    want, want_levels = RULES[rule](hard, n_bins)
    codes, levels = discretize.codes(dask_of(hard, chunks, sparse), rule, n_bins=n_bins)
    assert isinstance(codes, da.Array) and codes.dtype == np.uint8
    np.testing.assert_array_equal(levels, want_levels)
    np.testing.assert_array_equal(codes.compute(), want)
    assert levels[2] == 1 and levels[3] == 1  # the all-zero and the constant gene
    if rule == "zero_quantile":
        assert levels[4] == 2  # the one non-zero: detected or not


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_edges_are_bit_identical_to_np_quantile_through_many_passes(hard, rng, sparse):
    """Tiny histograms (2 bins) and collections (at most 1 value) force the multi-pass path; a tiny budget splits
    the targets over passes.  Oracle: np.quantile of each whole column (of its non-zero values)."""
    D = dask_of(hard, (50, 0, 33, 77), sparse)
    for nb in (3, 5):
        edges, offset, passes = dask_quantile_edges(D, nb, nonzero_only=False, hist_bins=2, collect_max=1,
                                                    budget=2000)
        np.testing.assert_array_equal(edges, np.quantile(hard, np.arange(1, nb) / nb, axis=0))
        assert offset is None and passes > 10
        edges, offset, _ = dask_quantile_edges(D, nb, nonzero_only=True, hist_bins=4, collect_max=2)
        for g in range(hard.shape[1]):
            v = hard[:, g][hard[:, g] != 0]
            full = v.size == hard.shape[0]
            want = np.quantile(v, np.arange(1, nb) / nb) if full else \
                np.quantile(v, np.arange(1, nb - 1) / (nb - 1)) if v.size else np.zeros(0)
            np.testing.assert_array_equal(edges[:want.size, g], want, err_msg=f"gene {g}")
            assert np.isinf(edges[want.size:, g]).all() and offset[g] == (0 if full else 1)


def _nonzero_quantile_oracle(X, nb):
    """np.quantile of each gene's non-zero values: ``nb`` bins for a gene without zeros, else ``nb - 1`` cuts of
    ``nb - 1`` bins after the zero bin (``+inf`` padded), and the offsets of the zero_quantile rule."""
    edges, offset = np.full((nb - 1, X.shape[1]), np.inf), np.ones(X.shape[1], dtype=np.uint8)
    for g in range(X.shape[1]):
        v = X[:, g][X[:, g] != 0]
        full = v.size == X.shape[0]
        want = np.quantile(v, np.arange(1, nb) / nb) if full else \
            np.quantile(v, np.arange(1, nb - 1) / (nb - 1)) if v.size else np.zeros(0)
        edges[:want.size, g], offset[g] = want, 0 if full else 1
    return edges, offset


@pytest.mark.parametrize("negative", [False, True], ids=["non-negative", "negative non-zeros"])
def test_prefetched_edges_of_several_rules_are_np_quantile_from_one_search(hard, negative, monkeypatch):
    """The default recipe's three rules (3 and 32 bins of the non-zero values, 255 levels of all values) searched
    together: one search among all values, a non-zero value's rank shifted by its gene's zeros (every non-zero
    value positive), else one search per kind.  Oracle: np.quantile of each column / of its non-zero values."""
    from bioqpfs._kernels import discretize_dask
    from bioqpfs._kernels.counting_dask import pass_memo

    searches = []
    search = discretize_dask.dask_order_statistics
    monkeypatch.setattr(discretize_dask, "dask_order_statistics", lambda *a, **k: searches.append(1) or search(*a, **k))
    X = hard if negative else np.abs(hard)
    D = dask_of(X, (50, 0, 33, 77), True)
    requests = [(3, True), (32, True), (255, False)]
    with pass_memo():
        prefetch_quantile_edges(D, requests)
        got = [dask_quantile_edges(D, nb, nonzero_only=nz) for nb, nz in requests]
    for (nb, nonzero_only), (edges, offset, _) in zip(requests, got):
        if nonzero_only:
            want, want_offset = _nonzero_quantile_oracle(X, nb)
            np.testing.assert_array_equal(offset, want_offset)
        else:
            want = np.quantile(X, np.arange(1, nb) / nb, axis=0)
            assert offset is None
        np.testing.assert_array_equal(edges, want, err_msg=f"{nb} bins, nonzero_only={nonzero_only}")
    assert len(searches) == (2 if negative else 1)  # one search for all, or one per kind; none in the calls


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_every_groups_edges_in_the_same_passes_are_its_own_np_quantiles(hard, rng, sparse):
    """``groups=``: the edges of every group (batch) from its own samples, all searched in the same passes as
    (group, gene) pairs -- through the multi-pass path, with a group spread over the chunks, a group of one sample
    and an empty group.  Oracle: np.quantile of each group's column (of its non-zero values)."""
    groups = rng.integers(0, 3, hard.shape[0])
    groups[groups == 1] = 4  # group 1 empty
    groups[5] = 3  # group 3: one sample
    D = dask_of(hard, (50, 0, 33, 77), sparse)
    for nonzero_only, nb in ((False, 3), (True, 4)):
        edges, offset, passes = dask_quantile_edges(D, nb, nonzero_only=nonzero_only, groups=groups, hist_bins=2,
                                                    collect_max=1, budget=4000)
        single = max(dask_quantile_edges(dask_of(hard[groups == g], (int((groups == g).sum()),), sparse), nb, nonzero_only=nonzero_only,
                                         hist_bins=2, collect_max=1, budget=4000)[2] for g in (0, 2, 4))
        assert edges.shape == (nb - 1, 5, hard.shape[1]) and passes <= 2 * single, (passes, single)
        for g in (0, 2, 3, 4):
            Xg = hard[groups == g]
            for j in range(hard.shape[1]):
                v = Xg[:, j][Xg[:, j] != 0] if nonzero_only else Xg[:, j]
                full = v.size == Xg.shape[0]
                q = np.arange(1, nb) / nb if full else np.arange(1, nb - 1) / (nb - 1)
                want = np.quantile(v, q) if v.size else np.zeros(0)
                np.testing.assert_array_equal(edges[:want.size, g, j], want, err_msg=f"group {g} gene {j}")
                assert np.isinf(edges[want.size:, g, j]).all()
                if nonzero_only:
                    assert offset[g, j] == (0 if full else 1)


def test_interpolation_is_np_quantiles_to_the_bit(rng):
    """The edge between two order statistics: np.quantile's own interpolation (a + (b-a) t alone differs in the
    last bit for 14% of these; an edge one ulp off moves a value sitting on it to the next bin)."""
    from bioqpfs._kernels.discretize import numpy_lerp as _lerp

    a = rng.normal(size=3000)
    b, t = a + rng.lognormal(size=3000), rng.random(3000)
    want = np.array([np.quantile([x, y], g) for x, y, g in zip(a, b, t)])  # virtual index (2-1) g = g
    np.testing.assert_array_equal(_lerp(a, b, t), want)
    # and through the whole search: many columns of continuous values, every gamma
    X = rng.normal(size=(97, 40)) * (rng.random((97, 40)) < 0.7)
    for nb in (3, 4, 6, 7):
        edges, _, _ = dask_quantile_edges(dask_of(X, (40, 57), True), nb, nonzero_only=False)
        np.testing.assert_array_equal(edges, np.quantile(X, np.arange(1, nb) / nb, axis=0))


def test_order_statistics_equal_a_sort_with_explicit_sparse_zeros(rng):
    n, m = 120, 6
    X = np.round(rng.normal(size=(n, m)), 1) * (rng.random((n, m)) < 0.6)

    def with_explicit_zeros(x):
        c = sp.csr_matrix(x)
        c.data[::4] = 0.0  # stored zeros: zeros, not values
        return c

    D = da.from_array(X, chunks=(30, m)).map_blocks(with_explicit_zeros, dtype=X.dtype, meta=sp.csr_matrix((0, 0)))
    Xe = sp.vstack([with_explicit_zeros(X[i:i + 30]) for i in range(0, n, 30)]).toarray()
    for nonzero_only in (False, True):
        cols = [np.sort(Xe[:, g][Xe[:, g] != 0] if nonzero_only else Xe[:, g]) for g in range(m)]
        gene = np.repeat(np.arange(m), [c.size for c in cols])
        rank = np.concatenate([np.arange(c.size) for c in cols])
        values, passes = dask_order_statistics(D, gene, rank, nonzero_only=nonzero_only, hist_bins=4,
                                               collect_max=3)
        np.testing.assert_array_equal(values, np.concatenate(cols))
        assert passes >= 3


def test_float_keys_preserve_order_and_round_trip():
    v = np.array([-np.inf, -1.7e308, -1.0, -5e-324, -0.0, 0.0, 5e-324, 2.2e-308, 1e-300, 1.0, 1e300, np.inf])
    k = _float_keys(v)
    assert (np.diff(k.astype(object)) > 0).all()  # strictly increasing, -0.0 just below +0.0
    np.testing.assert_array_equal(_key_values(k), v)
    assert np.signbit(_key_values(k)[4]) and not np.signbit(_key_values(k)[5])


def test_n_bins_and_nonfinite_values_are_refused_clearly(hard):
    import bioqpfs

    D = dask_of(hard, 40, True)
    with pytest.raises(ValueError, match="n_bins must be between 2 and 255, got 1"):
        dask_codes(D, "quantile", n_bins=1)
    with pytest.raises(TypeError, match="n_bins must be an integer"):
        dask_codes(D, "zero_quantile", n_bins=2.5)
    Xn = hard.copy()
    Xn[99, 12] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite values in 1 gene.*12"):
        bioqpfs.select(dask_of(Xn, 40, True), np.arange(160) % 3, n_genes=3)


# ---- the default recipe ("auto" -> zero_quantile on sparse data) end to end ----------------------------------
@pytest.fixture
def cells(rng):
    n, m = 400, 30
    y = rng.integers(0, 4, n)
    lam = 0.3 + rng.random(m) * 2
    lam = np.tile(lam, (4, 1))
    lam[:, :6] *= 1 + 3 * rng.random((4, 6))
    X = np.log1p(rng.poisson(lam[y]).astype(float))  # ties, ~50% zeros
    X[:, 9] = 0.0
    return X, y


@pytest.mark.filterwarnings("ignore:1 constant gene")
def test_default_recipe_on_sparse_dask_equals_in_memory(cells):
    import bioqpfs
    from bioqpfs import measures

    X, y = cells
    D = dask_of(X, (128, 0, 100, 172), True)
    assert discretize.resolve_discretization(D, "auto") == "zero_quantile"
    got, want = bioqpfs.select(D, y, n_genes=8), bioqpfs.select(sp.csr_matrix(X), y, n_genes=8)
    np.testing.assert_array_equal(got.ranking, want.ranking)
    # the recipe's Q has a zero diagonal (self_redundancy="constant"): each QP is definite by the psd shift's margin
    # only, so last-bit differences of the chunked counts reach the weights at ~1e-9; the ranking is exact
    np.testing.assert_allclose(got.weights, want.weights, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(measures.discretize(D, discretization="auto").compute(),
                                  measures.discretize(X, discretization="auto"))
    np.testing.assert_array_equal(measures.relevance(D, y, discretization="auto"),
                                  measures.relevance(X, y, discretization="auto"))
    np.testing.assert_array_equal(D.compute().toarray(), X)  # input untouched


@pytest.mark.filterwarnings("ignore:1 constant gene")
def test_tl_default_recipe_on_an_anndata_with_dask_csr_x(cells):
    import anndata as ad
    import pandas as pd

    import bioqpfs

    X, y = cells
    obs = pd.DataFrame({"cell_type": pd.Categorical(np.array(list("abcd"))[y])},
                       index=[f"c{i}" for i in range(y.size)])
    mem = ad.AnnData(sp.csr_matrix(X), obs=obs)
    lazy = ad.AnnData(dask_of(X, (150, 150, 100), True), obs=obs)
    bioqpfs.tl.select_genes(mem, "cell_type", n_genes=6)
    bioqpfs.tl.select_genes(lazy, "cell_type", n_genes=6)
    assert isinstance(lazy.X, da.Array)
    assert lazy.uns["bioqpfs"]["params"]["discretization"] in ("auto", "zero_quantile")
    # the recipe's Q has a zero diagonal (self_redundancy="constant"): weights to ~1e-9, the ranking exact
    np.testing.assert_allclose(lazy.var["bioqpfs_weight"], mem.var["bioqpfs_weight"], rtol=0, atol=1e-8)
    np.testing.assert_array_equal(lazy.var["bioqpfs_rank"], mem.var["bioqpfs_rank"])
    assert list(lazy.uns["bioqpfs"]["selected"]) == list(mem.uns["bioqpfs"]["selected"])


def test_the_search_never_gathers_x_and_keeps_each_pass_within_the_budget(hard, monkeypatch):
    """Bounded memory: no Dask array (X, a column of it) is computed whole while the codes are made -- only
    per-chunk reductions run -- and every refinement pass's combined result stays within the budget."""
    from bioqpfs._kernels import discretize_dask

    D = dask_of(hard, (50, 0, 33, 77), True)
    sizes = []
    reduce = discretize_dask.reduce_chunks

    def recording(func, *args, **kwargs):
        out = reduce(func, *args, **kwargs)
        if func is discretize_dask._chunk_refine:
            sizes.append(sum(a.nbytes for a in out[:3]) + sum(a.nbytes for a in out[3]))
        return out

    def refuse(*args, **kwargs):
        raise AssertionError("a Dask array was computed whole")

    monkeypatch.setattr(discretize_dask, "reduce_chunks", recording)
    monkeypatch.setattr(da.Array, "compute", refuse)
    monkeypatch.setattr(da.Array, "__array__", refuse)
    codes, _ = dask_codes(D, "quantile", n_bins=4, _search=dict(budget=3000))
    monkeypatch.undo()
    assert len(sizes) > 2 and max(sizes) <= 3000
    np.testing.assert_array_equal(codes.compute(), discretize.quantile_codes(hard, 4)[0])


@pytest.mark.parametrize("rule", ["mean_sd", "quantile", "zero_quantile"])
def test_csr_chunks_with_duplicate_entries_are_summed_as_in_memory(cells, rule):
    """A non-canonical CSR chunk (each value stored as two halves) is the matrix of the sums, as check_matrix makes
    it in memory; the chunk-wise passes read stored entries, so without canonicalising they saw two values."""
    from bioqpfs import measures

    X, _ = cells

    def halves(x):
        c = sp.csr_matrix(x)
        return sp.csr_matrix((np.repeat(c.data / 2, 2), np.repeat(c.indices, 2), c.indptr * 2), shape=c.shape)

    D = da.from_array(X, chunks=(150, X.shape[1])).map_blocks(halves, dtype=X.dtype, meta=sp.csr_matrix((0, 0)))
    assert not halves(X[:150]).has_canonical_format
    np.testing.assert_array_equal(measures.discretize(D, discretization=rule).compute(),
                                  measures.discretize(X, discretization=rule))


def test_the_targets_of_a_bracket_share_one_histogram(rng, monkeypatch):
    """255 quantiles of continuous genes: ~500 targets per gene start in one bracket (the gene's range); the
    first refinement pass sends one histogram per gene, not one per target, and the passes stay few (it was
    one per target, each entry checked against all its gene's targets: 9 passes and 11x the time at 2,000 x
    2,000).  Oracle: np.quantile."""
    from bioqpfs._kernels import discretize_dask

    X = rng.lognormal(size=(400, 30))
    X[rng.random(X.shape) < 0.3] = 0
    sent = []
    refine = discretize_dask._chunk_refine

    def recording(x, targets, **kwargs):
        sent.append(len(targets[0]))
        return refine(x, targets, **kwargs)

    monkeypatch.setattr(discretize_dask, "_chunk_refine", recording)
    edges, _, passes = dask_quantile_edges(dask_of(X, (150, 150, 100), True), 255, nonzero_only=False)
    assert sent[0] == X.shape[1] and passes <= 4, (sent, passes)
    np.testing.assert_array_equal(edges, np.quantile(X, np.arange(1, 255) / 255, axis=0))


def test_a_refinement_chain_counts_each_chunk_into_its_running_histograms(rng, monkeypatch):
    """Memory of the exact quantile search: a chain link (large histograms: chained, as count matrices) counts its
    chunk into the chain's histograms and appends its collected values, with no histograms of its own; the order
    statistics are still a sort's."""
    from bioqpfs._kernels import counting_dask, discretize_dask

    monkeypatch.setattr(counting_dask, "CHAIN_BYTES", 1)  # every pass in chains
    monkeypatch.setattr(counting_dask, "parallel_slots", lambda: 2)
    into_flags, refine = [], discretize_dask._chunk_refine

    def spy(*args, into=None, **kwargs):
        into_flags.append(into is not None)
        return refine(*args, into=into, **kwargs)

    spy.adds_into = True
    monkeypatch.setattr(discretize_dask, "_chunk_refine", spy)
    n, m = 160, 5
    X = np.round(rng.normal(size=(n, m)), 2) * (rng.random((n, m)) < 0.7)
    D = da.from_array(X, chunks=(20, m))  # 8 chunks: 2 chains of 4
    cols = [np.sort(X[:, g]) for g in range(m)]
    gene = np.repeat(np.arange(m), n)
    rank = np.tile(np.arange(n), m)
    values, passes = dask_order_statistics(D, gene, rank, nonzero_only=False, hist_bins=4, collect_max=3)
    np.testing.assert_array_equal(values, np.concatenate(cols))
    refinements = passes - 1  # after the range pass
    assert len(into_flags) == 8 * refinements and sum(into_flags) == 6 * refinements  # each chain's first link apart
