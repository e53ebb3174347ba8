"""Greedy MI baselines against plain-loop implementations of the published criteria."""
import numpy as np
import pytest
import reference as ref

import bioqpfs
from bioqpfs import measures
from bioqpfs.selectors import baselines


def _data(rng, n=80, m=25, n_classes=3):
    y = rng.integers(0, n_classes, n)
    X = rng.normal(size=(n, m))
    X[:, 3] += 1.5 * y
    X[:, 7] = X[:, 3] + 0.3 * rng.normal(size=n)  # redundant copy of gene 3
    X[:, 11] += 1.0 * (y == 1)
    X[:, 15] = np.where(rng.random(n) < 0.5, X[:, 11], rng.normal(size=n))
    return X, y


@pytest.mark.parametrize("method", ["mrmr_mid", "mrmr_miq", "jmi", "cife"])
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_matches_plain_loop(method, seed):
    rng = np.random.default_rng(seed)
    X, y = _data(rng)
    k = 10
    sel = bioqpfs.select(X, y, method=method, n_genes=k)
    codes = measures.discretize(X)
    expect = ref.greedy_mi_selection(codes.astype(np.int64), y, method, k)
    assert sel.ranking.tolist() == expect
    assert sel.selected.tolist() == expect
    # greedy score recorded at selection time equals the reference score of the first pick (= relevance)
    F = np.array([ref.mutual_info(codes[:, j].astype(np.int64), y) for j in range(X.shape[1])])
    np.testing.assert_allclose(sel.relevance, F, atol=1e-10)
    assert sel.extra_columns["greedy_score"][expect[0]] == pytest.approx(F[expect[0]])


def test_jmi_cife_scores_match_definitions(rng):
    X, y = _data(rng, n=60, m=16, n_classes=2)
    codes = measures.discretize(X).astype(np.int64)
    for method in ("jmi", "cife"):
        sel = bioqpfs.select(X, y, method=method, n_genes=4)
        S = sel.ranking.tolist()
        j = S[3]
        if method == "jmi":
            expect = sum(ref.mutual_info(codes[:, j] * 10 + codes[:, t], y) for t in S[:3])
        else:
            expect = ref.mutual_info(codes[:, j], y) - sum(
                ref.mutual_info(codes[:, j], codes[:, t]) - ref.cmi(codes[:, j], codes[:, t], y) for t in S[:3])
        assert sel.extra_columns["greedy_score"][j] == pytest.approx(expect, abs=1e-9)


def test_mrmr_avoids_redundant_copy_maxrel_does_not(rng):
    n = 120
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 10))
    X[:, 0] += 2.0 * y
    X[:, 1] = X[:, 0] + 0.01 * rng.normal(size=n)  # near copy
    X[:, 2] += 1.2 * y
    top_rel = bioqpfs.select(X, y, method="maxrel").ranking[:2].tolist()
    assert sorted(top_rel) == [0, 1]
    top_mrmr = bioqpfs.select(X, y, method="mrmr_mid", n_genes=2).ranking.tolist()
    assert top_mrmr[0] in (0, 1) and top_mrmr[1] == 2


def test_maxrel_ranks_every_gene_by_relevance(rng):
    X, y = _data(rng)
    sel = bioqpfs.select(X, y, method="maxrel", n_genes=5)
    codes = measures.discretize(X).astype(np.int64)
    F = np.array([ref.mutual_info(codes[:, j], y) for j in range(X.shape[1])])
    assert sel.ranking.size == X.shape[1]
    order = sorted(range(X.shape[1]), key=lambda j: (-round(F[j], 12), j))
    assert sel.ranking.tolist() == order
    np.testing.assert_allclose(sel.weights, F, atol=1e-10)


def test_default_length_constant_genes_and_inputs_untouched(rng):
    X, y = _data(rng, m=60)
    X[:, 5] = 2.0
    X0 = X.copy()
    with pytest.warns(UserWarning, match="constant"):
        sel = bioqpfs.select(X, y, method="mrmr_mid")
    assert sel.ranking.size == baselines.DEFAULT_N_RANKED
    assert 5 not in sel.ranking.tolist()
    np.testing.assert_array_equal(X, X0)
    w = sel.weights[sel.ranking]
    assert np.all(np.diff(w) < 0) and w[0] == 1.0
    assert np.count_nonzero(sel.weights) == baselines.DEFAULT_N_RANKED
    # asking for every gene: the constant one comes last
    with pytest.warns(UserWarning):
        full = bioqpfs.select(X, y, method="cife", n_genes=60)
    assert full.ranking[-1] == 5 and sorted(full.ranking.tolist()) == list(range(60))


def test_random_is_seeded_permutation(rng):
    X, y = _data(rng)
    a = bioqpfs.select(X, y, method="random", n_genes=5, random_state=3)
    b = bioqpfs.select(X, y, method="random", n_genes=5, random_state=3)
    c = bioqpfs.select(X, y, method="random", n_genes=5, random_state=4)
    assert a.ranking.tolist() == b.ranking.tolist() != c.ranking.tolist()
    assert sorted(a.ranking.tolist()) == list(range(X.shape[1]))
    assert a.ranking.tolist() == np.random.default_rng(3).permutation(X.shape[1]).tolist()


def test_errors_are_clear(rng):
    X, y = _data(rng)
    with pytest.raises(ValueError, match="n_genes"):
        bioqpfs.select(X, y, method="jmi", n_genes=1000)
    with pytest.raises(ValueError, match="discretization"):
        bioqpfs.select(X, y, method="mrmr_mid", discretization="bogus")
    with pytest.raises(ValueError, match="at least 2 classes"):
        bioqpfs.select(X, np.zeros(X.shape[0]), method="maxrel")


def test_selection_reachable_from_tl(rng):
    import anndata as ad
    X, y = _data(rng)
    import pandas as pd

    adata = ad.AnnData(X.astype(np.float32), obs=pd.DataFrame({"c": pd.Categorical(y.astype(str))},
                                                              index=[f"s{i}" for i in range(X.shape[0])]))
    bioqpfs.tl.select_genes(adata, "c", method="mrmr_mid", n_genes=4)
    key = [k for k in adata.uns if "mrmr" in k][0]
    assert len(adata.uns[key]["selected"]) == 4


def test_miq_gives_no_infinite_score_to_a_gene_without_relevance():
    """0 / 0 was scored +inf: a gene carrying nothing about the classes, independent of the first pick, was taken
    second, ahead of a relevant gene (a donor marker under batch=, whose within-batch F is 0, the same way)."""
    y = np.repeat([0, 1, 2], 12)
    noise = np.tile([0, 1, 2, 0, 1, 2, 0, 0, 1, 1, 2, 2], 3)  # the same pattern in every class: F = 0, I(.; y) = 0
    g2 = np.where(np.random.default_rng(1).random(36) < 0.8, y, (y + 1) % 3)
    X = np.stack([y, noise, g2], 1)
    assert ref.mutual_info(noise, y) == pytest.approx(0, abs=1e-12)
    sel = baselines.mrmr_miq(X, y, n_genes=2, discretization=None)
    assert list(sel.selected) == [0, 2]
    assert np.isfinite(sel.extra_columns["greedy_score"][2])


def test_miq_zero_redundancy_within_round_off_ties_and_goes_to_the_higher_relevance():
    """Candidates independent of the first pick (I = 0 exactly) came out as +-4e-16: the negative ones scored +inf,
    the positive ones a finite 1e14, so a less relevant gene was picked (the documented tie rule: higher F)."""
    rng = np.random.default_rng(0)
    n_c = int(rng.integers(5, 20))
    y = np.repeat([0, 1, 2, 3], n_c)
    g0 = y // 2
    cols = [g0]
    for _ in range(8):  # each the same level counts in both g0 groups: I(X_j; g0) = 0 exactly
        levels = np.sort(rng.integers(0, 3, 2 * n_c))
        cols.append(np.concatenate([rng.permutation(levels), rng.permutation(levels)]))
    X = np.stack(cols, 1)
    assert max(abs(ref.mutual_info(X[:, j], g0)) for j in range(1, 9)) < 1e-12
    F = [ref.mutual_info(X[:, j], y) for j in range(9)]
    sel = baselines.mrmr_miq(X, y, n_genes=2, discretization=None)
    assert int(sel.selected[1]) == 1 + int(np.argmax(F[1:]))
    assert np.isinf(sel.extra_columns["greedy_score"][sel.selected[1]])
