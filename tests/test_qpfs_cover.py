"""Class-covering QPFS (method "qpfs_cover", issue 22): per-class relevance, round-robin, coverage, faces.

Oracles: dict-counting weighted MI (tests/reference.py), plain numpy means, QPFS solved directly per class.
"""
import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp

import bioqpfs
from bioqpfs._kernels.ranking import rank_descending, round_robin
from bioqpfs.selectors import _common
from bioqpfs.selectors.qpfs import alpha_hat, solve_qpfs


def planted(seed=0, n_big=(120, 100, 80), n_rare=5, m=30):
    """Three large types with two strong markers each (genes 0-5) and a rare type whose only marker is gene 6;
    the other genes are noise.  Zero-inflated like log counts."""
    rng = np.random.default_rng(seed)
    sizes = (*n_big, n_rare)
    y = np.repeat(np.arange(4), sizes)
    n = y.size
    X = rng.gamma(1.0, 0.5, size=(n, m)) * (rng.random((n, m)) < 0.5)
    for t in range(3):
        for g in (2 * t, 2 * t + 1):
            X[y == t, g] += 3.0 + rng.normal(0, 0.3, size=(y == t).sum())
    X[y == 3, 6] += 3.0 + rng.normal(0, 0.3, size=n_rare)
    return X, np.array([f"type{t}" for t in y])


def test_one_vs_rest_relevance_matches_dict_reference():
    rng = np.random.default_rng(3)
    n, m = 57, 6
    y = np.repeat([0, 1, 2], [30, 20, 7])
    codes = rng.integers(0, 3, size=(n, m)).astype(np.uint8)
    table = _common.info_table(codes, y, discretization=None, n_bins=3)
    got = _common.one_vs_rest_relevance(table, y, 3, class_weight="balanced", base=2)
    plain = _common.one_vs_rest_relevance(table, y, 3, class_weight=None, base=2)
    for c in range(3):
        inc = y == c
        w = np.where(inc, 1.0 / (2 * inc.sum()), 1.0 / (2 * (~inc).sum()))   # the two sides weigh the same
        want = [ref.weighted_mutual_info(codes[:, i], inc.astype(int), w) for i in range(m)]
        np.testing.assert_allclose(got[c], want, atol=1e-12)
        np.testing.assert_allclose(plain[c], [ref.mutual_info(codes[:, i], inc.astype(int)) for i in range(m)],
                                   atol=1e-12)



def test_one_vs_rest_relevance_is_the_mi_of_each_class_indicator():
    """F[c, i] = I(1[C = c]; X_i) by brute force, from an ungrouped or a class-grouped table alike (the counts come
    from the table's counting backend; the samples are never reordered)."""
    rng = np.random.default_rng(4)
    y = rng.permutation(np.repeat([0, 1, 2, 3], [25, 12, 9, 4]))
    codes = rng.integers(0, 4, size=(y.size, 5)).astype(np.uint8)
    want = np.array([[ref.mutual_info(y == c, codes[:, i]) for i in range(5)] for c in range(4)])
    for grouped in (False, True):
        table = _common.info_table(codes, y, discretization=None, n_bins=4, grouped=grouped)
        np.testing.assert_allclose(_common.one_vs_rest_relevance(table, y, 4, class_weight=None, base=2), want,
                                   atol=1e-12)


@pytest.mark.parametrize("fmt", [np.asarray, sp.csr_matrix, sp.csc_matrix])
def test_higher_in_class_matches_numpy(fmt):
    X, y = planted()
    codes = np.unique(y, return_inverse=True)[1]
    got = _common.higher_in_class(fmt(X), codes, 4)
    want = np.array([X[codes == c].mean(0) > X[codes != c].mean(0) for c in range(4)])
    np.testing.assert_array_equal(got, want)


def test_round_robin():
    order, owner = round_robin([[5, 1, 2], [5, 3], [4]])
    # round 1: 5 (group 0), 5 again (taken: group 1 is covered by it), 4; round 2: 1, 3; round 3: 2
    np.testing.assert_array_equal(order, [5, 4, 1, 3, 2])
    np.testing.assert_array_equal(owner, [0, 2, 0, 1, 0])
    np.testing.assert_array_equal(round_robin([[5, 1, 2], [5, 3], [4]], n=3)[0], [5, 4, 1])
    assert round_robin([[], []])[0].size == 0
    # after r rounds: the union of the top-r lists
    rng = np.random.default_rng(0)
    lists = [rng.permutation(12)[:8] for _ in range(4)]
    order, _ = round_robin(lists)
    for r in range(1, 9):
        top = set(np.concatenate([li[:r] for li in lists]).tolist())
        assert set(order[:len(top)].tolist()) == top


def test_rare_type_marker_covered_where_plain_qpfs_misses_it():
    X, y = planted()
    paper = bioqpfs.select(X, y, method="qpfs", n_genes=4)
    assert 6 not in paper.selected          # I(X; C) with frequencies: the 5-cell type's marker is not worth a slot
    balanced = bioqpfs.select(X, y, method="qpfs", n_genes=4, class_weight="balanced", discretization="auto")
    assert 6 not in balanced.selected       # nor with every type weighted equally (the 0.2 default recipe)
    cover = bioqpfs.select(X, y, method="qpfs_cover", n_genes=4)
    assert 6 in cover.selected
    # one gene per type at k = C, each a planted marker of the type it was taken for
    assert sorted(cover.extra_columns["class"][cover.selected]) == ["type0", "type1", "type2", "type3"]
    marker_of = {0: "type0", 1: "type0", 2: "type1", 3: "type1", 4: "type2", 5: "type2", 6: "type3"}
    for g in cover.selected:
        assert marker_of[int(g)] == cover.extra_columns["class"][g]
    assert cover.diagnostics["n_added"] == [1, 1, 1, 1]


def cover_ranking_by_hand(X, codes, Z, extra=None, own_bins=None, self_redundancy="entropy", wait=0.25):
    """Class-covering QPFS re-derived by hand: Q and each one-vs-rest F_c by the dict-counting oracles of
    reference.py on the codes Z (class-balanced; with ``own_bins=(n_bins, zero_rule)`` F_c on each gene's own
    class-balanced equal-frequency bins instead, ``reference.per_class_bins_mi``), F_c averaged with ``extra[c]``
    when given, zero for genes not higher in c; Q_ii = 0 with ``self_redundancy="constant"``; one QPFS per class
    (the package's solver, checked against brute force in test_qpfs), each class ranking its candidates by
    weight, then F_c, then index; the rank-r merge skipping genes already taken, where a class whose next gene has
    an F_c under ``wait`` times the best next gene's of the round adds nothing in that round."""
    m = Z.shape[1]
    n_classes = int(codes.max()) + 1
    w = 1.0 / np.bincount(codes)[codes]                              # every class weighs the same
    Q = np.array([[ref.weighted_mutual_info(Z[:, i], Z[:, j], w) if i != j or self_redundancy == "entropy" else 0.0
                   for j in range(m)] for i in range(m)])
    rankings, relevance = [], []
    for c in range(n_classes):
        inc = codes == c
        w_c = np.where(inc, 1.0 / inc.sum(), 1.0 / (~inc).sum())      # c against the rest, both halves equal
        if own_bins is None:
            f = np.array([ref.weighted_mutual_info(Z[:, i], inc.astype(int), w_c) for i in range(m)])
        else:
            f = np.array([ref.per_class_bins_mi(X[:, i], inc, *own_bins) for i in range(m)])
        if extra is not None:
            f = 0.5 * (f + extra[c])
        f = np.where(X[inc].mean(0) > X[~inc].mean(0), f, 0.0)
        x, _ = solve_qpfs(Q, f, alpha_hat(Q, f)[0], psd_fix="shift")
        cand = np.flatnonzero((x > 0) | (f > 1e-12))
        # ties by F_c, then index (the package's rule); 1e-6 relative here, as Q's zero diagonal
        # (self_redundancy="constant") amplifies the dict-counted Q's last bits to ~1e-9 in mirror-image genes' weights
        rankings.append(list(cand[rank_descending([x[cand], f[cand]], cand, rel_tol=1e-6)]))
        relevance.append(f)
    want = []
    while any(rankings):
        heads = [(c, r[0]) for c, r in enumerate(rankings) if r]
        bar = wait * max([relevance[c][g] for c, g in heads if g not in want], default=0.0)
        for c, g in heads:
            if g in want:
                rankings[c].pop(0)
            elif relevance[c][g] >= bar:
                want.append(int(rankings[c].pop(0)))
    return want


def test_ranking_is_round_robin_of_per_class_qpfs():
    """Independent re-derivation: Q, F_c by dict counting, one QPFS per class, rank-r merge skipping taken genes."""
    X, y = planted(seed=1)
    sel = bioqpfs.select(X, y, method="qpfs_cover")
    codes = np.unique(y, return_inverse=True)[1]
    Z = ref.zero_quantile_codes(X, 3)
    want = cover_ranking_by_hand(X, codes, Z)
    np.testing.assert_array_equal(sel.ranking[:len(want)], want)
    assert sorted(sel.ranking.tolist()) == list(range(X.shape[1]))


def test_round_robin_lets_a_group_with_weak_items_wait():
    """With scores, a group whose next item scores under min_relative x the round's best next item adds nothing in
    that round and keeps the item; 0 is the plain round-robin."""
    lists = [[0, 1, 2, 3], [4, 5, 6]]
    scores = [np.array([1.0, 0.9, 0.8, 0.7, 0, 0, 0]), np.array([0, 0, 0, 0, 0.1, 0.05, 0.3])]
    np.testing.assert_array_equal(round_robin(lists, scores=scores, min_relative=0.0)[0], [0, 4, 1, 5, 2, 6, 3])
    order, owner = round_robin(lists, scores=scores, min_relative=0.25)
    # rounds: best 1.0 (4 waits: 0.1 < 0.25); best 0.9 (waits); 0.8 (waits); 0.7 -> 0.1 < 0.175 waits; then alone
    np.testing.assert_array_equal(order, [0, 1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(owner, [0, 0, 0, 0, 1, 1, 1])
    # a shared item taken earlier still counts for the waiting group (it moves on)
    np.testing.assert_array_equal(round_robin([[0, 1], [1, 2]], scores=[np.array([1, 1, 0.]), np.array([0, .1, .1])],
                                              min_relative=0.5)[0], [0, 1, 2])


def test_two_classes_whose_markers_all_go_one_way_do_not_fill_the_panel_with_noise():
    """10 strong markers all higher in B, none in A: with direction="up" class A can only take genes higher in A
    (noise, tiny positive F_c), and the strict round-robin gave it every other slot (5 of a 10-gene panel were
    noise; plain QPFS finds all 10).  A waits while its genes are under a quarter of B's."""
    rng = np.random.default_rng(0)
    y = np.repeat(["A", "B"], 30)
    X = rng.normal(size=(60, 200))
    X[:, :10] += 2.0 * (y == "B")[:, None]
    for method in (None, "qpfs_cover"):
        panel = bioqpfs.select(X, y, method=method, n_genes=10).selected
        assert np.isin(panel, np.arange(10)).sum() >= 9, method
    strict = bioqpfs.select(X, y, n_genes=10, min_relative_relevance=0).selected
    assert np.isin(strict, np.arange(10)).sum() == 5  # the test can tell
    # one gene: class A came first in sorted order and its first gene was noise
    assert bioqpfs.select(X, y, n_genes=1).selected[0] < 10
    assert bioqpfs.select(X, y, n_genes=1, min_relative_relevance=0).selected[0] >= 10

def test_panel_does_not_depend_on_the_order_of_the_label_categories():
    """The round-robin went round the classes in the labels' category order: tl (a Categorical) and evaluate or a
    CSV in the CLI (strings, sorted) gave different default panels on the same data.  The classes are visited in
    sorted label order now: a Categorical in any category order, its strings and numeric codes agree."""
    import pandas as pd

    X, y = planted(seed=3)
    want = bioqpfs.select(X, y, n_genes=3)  # the default recipe; 3 genes for 4 types: the order decides who is out
    assert set(want.extra_columns["class"][want.selected]) == {"type0", "type1", "type2"}  # sorted: type3 last
    for categories in (["type3", "type2", "type1", "type0"], ["type1", "type3", "type0", "type2"]):
        got = bioqpfs.select(X, pd.Categorical(y, categories=categories), n_genes=3)
        np.testing.assert_array_equal(got.ranking, want.ranking)
        np.testing.assert_array_equal(got.weights, want.weights)
    numbers = np.array([int(v[-1]) for v in y]) * 5  # 0, 5, 10, 15: numbers sort by value, not as text
    got = bioqpfs.select(X, numbers, n_genes=3)
    np.testing.assert_array_equal(got.ranking, want.ranking)
    # the same ids as text (a CSV column, scanpy's leiden, R factors): by value too ("5" before "10"; as text type1
    # would come last and lose its slot)
    got = bioqpfs.select(X, numbers.astype(str), n_genes=3)
    np.testing.assert_array_equal(got.ranking, want.ranking)


def test_sparse_equals_dense_and_input_untouched():
    X, y = planted(seed=2)
    Xs = sp.csr_matrix(X)
    before = Xs.copy()
    a = bioqpfs.select(X, y, method="qpfs_cover", n_genes=6)
    b = bioqpfs.select(Xs, y, method="qpfs_cover", n_genes=6)
    np.testing.assert_array_equal(a.ranking, b.ranking)
    np.testing.assert_allclose(a.weights, b.weights, atol=1e-12)
    assert (Xs != before).nnz == 0


def test_direction_both_counts_genes_low_in_a_class():
    X, y = planted(seed=3)
    X[:, 7] = 5.0 + np.random.default_rng(0).normal(0, 0.1, size=X.shape[0])
    X[y == "type3", 7] = 0.0                                     # a gene *absent* from the rare type only
    up = bioqpfs.select(X, y, method="qpfs_cover", n_genes=4)
    both = bioqpfs.select(X, y, method="qpfs_cover", n_genes=4, direction="both")
    assert up.extra_columns["class"][7] != "type3"
    assert both.extra_columns["class"][7] == "type3" or 6 in both.selected


@pytest.mark.parametrize("kw, match", [
    (dict(direction="down"), "qpfs_cover: direction must be 'up' or 'both', got 'down'"),
    (dict(alpha=1.5), r"qpfs_cover: alpha must lie in \[0, 1\].*got 1.5"),
    (dict(psd_fix="eig"), "qpfs_cover: psd_fix must be .*got 'eig'"),
    (dict(class_weight="equal"), "qpfs_cover: class_weight must be None or 'balanced', got 'equal'"),
    (dict(discretization="bins"), "qpfs_cover: discretization must be .*got 'bins'"),
])
def test_bad_parameters(kw, match):
    X, y = planted()
    with pytest.raises(ValueError, match=match):
        bioqpfs.select(X, y, method="qpfs_cover", n_genes=4, **kw)


def test_class_without_candidate_is_warned_and_reported():
    X, y = planted()
    X[y == "type3"] = 0.0                                        # the rare type is higher in no gene
    with pytest.warns(UserWarning, match="cannot cover them: type3"):
        sel = bioqpfs.select(X, y, method="qpfs_cover", n_genes=4)
    assert sel.diagnostics["uncovered_classes"] == ["type3"]


def test_faces_tl_and_estimator():
    import anndata as ad
    import pandas as pd

    from bioqpfs.estimators import BioQPFSSelector, registered_families

    X, y = planted()
    a = ad.AnnData(sp.csr_matrix(X), obs=pd.DataFrame({"cell_type": pd.Categorical(y)},
                                                      index=[f"c{i}" for i in range(X.shape[0])]))
    bioqpfs.tl.select_genes(a, "cell_type", method="qpfs_cover", n_genes=4)
    ref_sel = bioqpfs.select(X, y, method="qpfs_cover", n_genes=4)
    assert a.var["qpfs_cover_selected"].to_numpy().nonzero()[0].tolist() == sorted(ref_sel.selected.tolist())
    assert set(a.var.loc[a.var["qpfs_cover_selected"], "qpfs_cover_class"]) == {"type0", "type1", "type2", "type3"}
    assert registered_families()["qpfs_cover"] is BioQPFSSelector
    est = BioQPFSSelector(4, method="qpfs_cover").fit(X, y)
    np.testing.assert_array_equal(est.order_, ref_sel.ranking)


@pytest.mark.parametrize("zero_diagonal", [False, True], ids=["diagonal", "zero diagonal"])
@pytest.mark.parametrize("m", [60, 700])   # LAPACK below 500 genes, Lanczos above
def test_shared_eigenvalue_gives_the_per_call_psd_fix(m, zero_diagonal, monkeypatch):
    """One eigen-solve for the C per-class problems: the same shift and optimum as a solve per call; with a zero
    diagonal (``self_redundancy="constant"``) the margin is scaled by the given value too, with no eigen-solve."""
    from bioqpfs._kernels import simplex_qp
    from bioqpfs.selectors.qpfs import min_eigenvalue_with_safety

    rng = np.random.default_rng(m)
    A = rng.normal(size=(m, m))
    Q = (A + A.T) / 2 + 0.5 * np.eye(m)                    # indefinite
    if zero_diagonal:
        np.fill_diagonal(Q, 0.0)
    F = rng.random(m)
    q_min = min_eigenvalue_with_safety(Q)
    assert q_min < 0
    for alpha in (0.3, 0.8):
        x1, d1 = solve_qpfs(Q, F, alpha, psd_fix="shift")
        with monkeypatch.context() as patch:
            patch.setattr(simplex_qp, "smallest_eigenvalue", None)   # the given value serves the margin too
            x2, d2 = solve_qpfs(Q, F, alpha, psd_fix="shift", q_min_eigenvalue=q_min)
        assert d2["eigen_method"] == "given" and d1["eigen_method"] != "given"
        assert d2["psd_shift"] == pytest.approx(d1["psd_shift"], rel=1e-6)
        np.testing.assert_allclose(x2, x1, atol=1e-7)


@pytest.mark.parametrize("rule", ["zero_quantile", "quantile"])
@pytest.mark.parametrize("n_bins", [3, 4])
def test_per_class_bins_relevance_equals_weighted_quantile_bins_by_brute_force(rule, n_bins):
    """``relevance_bins="per_class"``: with a fine grid finer than the data (every distinct value its own fine bin),
    each class's merged bins are exactly the bins cut at the class-balanced weighted quantiles of the gene's values
    (tests/reference.py: plain loops over the sorted values), and F[c] their balanced MI; a gene without zeros
    gets n_bins such bins of all its values."""
    rng = np.random.default_rng(11)
    y = np.repeat([0, 1, 2], [22, 12, 6])
    n, m = y.size, 7
    X = np.round(rng.gamma(1.5, 1.0, size=(n, m)), 2) * (rng.random((n, m)) < 0.7)
    X[:, 5] = rng.normal(size=n) + 5.0            # no zeros
    X[y == 2, 3] += 4.0                          # a rare type high on a gene expressed broadly
    got = _common.per_class_bin_relevance(X, y, 3, rule=rule, n_bins=n_bins, class_weight="balanced", base=2,
                                          fine_bins=200)
    want = np.array([[ref.per_class_bins_mi(X[:, g], y == c, n_bins, rule == "zero_quantile") for g in range(m)]
                     for c in range(3)])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_per_class_bins_put_a_graded_marker_of_a_rare_type_above_a_dropout_marker():
    """The case behind ``relevance_bins="per_class"`` (pbmc68k_reduced's CD34+ cells): a gene detected in nearly
    every cell, highest in a rare type, against a gene detected only in part of that type.  With the shared
    zero_quantile codes (cut at the median of all detected values) the dropout gene is the type's top gene; with
    its own bins the graded gene is, and the default recipe takes it first for that type."""
    rng = np.random.default_rng(2)
    y = np.repeat([0, 1, 2, 3], [300, 250, 200, 12])
    n = y.size
    X = rng.gamma(1.0, 0.4, size=(n, 20)) * (rng.random((n, 20)) < 0.4)
    for t in range(3):
        X[y == t, t] += 2.0 + rng.normal(0, 0.3, size=(y == t).sum())
    graded = rng.gamma(4.0, 0.5, size=n) * (rng.random(n) < 0.95)
    graded[y == 3] = 6.0 + rng.normal(0, 0.3, size=12)
    X[:, 10] = graded                                               # graded, detected in 95% of the cells
    X[:, 11] = 0.0
    X[np.flatnonzero(y == 3)[:7], 11] = 2.0 + rng.random(7)         # detected in 7 of the 12 cells
    F_shared = _common.one_vs_rest_relevance(_common.info_table(X, y, discretization="zero_quantile", n_bins=3,
                                                                class_weight="balanced"), y, 4,
                                             class_weight="balanced", base=2)
    F_own = _common.per_class_bin_relevance(X, y, 4, rule="zero_quantile", n_bins=3, class_weight="balanced", base=2)
    assert F_shared[3, 11] > F_shared[3, 10]
    assert F_own[3, 10] > F_own[3, 11]
    sel = bioqpfs.select(X, y, n_genes=4)                            # the default recipe
    assert sel.params["relevance_bins"] == sel.params["relevance_bins_used"] == "per_class"
    assert 10 in sel.selected and 11 not in sel.selected
    assert 11 in bioqpfs.select(X, y, n_genes=4, relevance_bins="shared", relevance="mi").selected


def test_per_class_bins_leave_mean_sd_codes_alone_and_one_batch_changes_nothing():
    """Mean +- sd (dense microarray data under "auto") keeps the shared codes; with one batch the per-class bins
    give the result without batches."""
    rng = np.random.default_rng(6)
    y = np.repeat([0, 1, 2], [20, 15, 10])
    X = rng.normal(size=(45, 15))
    X[:, :3] += 2.0 * (y[:, None] == np.arange(3))
    a = bioqpfs.select(X, y, method="qpfs_cover", n_genes=5, relevance_bins="per_class")
    b = bioqpfs.select(X, y, method="qpfs_cover", n_genes=5, relevance_bins="shared")
    np.testing.assert_array_equal(a.ranking, b.ranking)
    np.testing.assert_allclose(a.weights, b.weights, rtol=0, atol=1e-12)  # threaded sums: 1e-16 run to run
    assert a.params["relevance_bins_used"] == "shared" and a.params["discretization_used"] == "mean_sd"
    Z, yz = planted(seed=4)
    one = bioqpfs.select(Z, yz, n_genes=8, batch=np.zeros(yz.size, dtype=int))
    none = bioqpfs.select(Z, yz, n_genes=8)
    np.testing.assert_array_equal(one.ranking[:20], none.ranking[:20])
    np.testing.assert_allclose(one.weights, none.weights, atol=1e-12)
    for sparse in (False, True):  # sparse input is never densified for the codes, and gives the same panel
        Zs = sp.csr_matrix(Z) if sparse else Z
        np.testing.assert_array_equal(bioqpfs.select(Zs, yz, n_genes=8).ranking[:20], none.ranking[:20])


def test_per_class_bins_refuse_counts_that_would_not_fit(monkeypatch):
    """The per-(class, batch) fine-bin counts are estimated before they are made: refused with what to do instead."""
    monkeypatch.setattr("bioqpfs._validation.available_memory", lambda: (1000, "available physical memory"))
    X, y = planted()
    with pytest.raises(MemoryError, match=r"per-class relevance bins' counts \(4 classes x 1 batches x 30 genes.*"
                                          r"relevance_bins='shared'"):
        _common.per_class_bin_relevance(X, np.unique(y, return_inverse=True)[1], 4, rule="zero_quantile", n_bins=3,
                                        class_weight="balanced", base=2)


@pytest.mark.parametrize("one_class_at_a_time", [False, True], ids=["all classes", "class groups"])
@pytest.mark.parametrize("fmt", ["dense", "csr", "csc"])
def test_pair_order_information_equals_the_mann_whitney_oracle(fmt, one_class_at_a_time, monkeypatch):
    """Up to 255 samples every distinct value has its own bin: exact (ties included, a sparse matrix's
    zeros one tied level); beyond, the 255 ordered levels give the AUROC within 1e-3 here.  The same when the
    classes' counts are taken one class at a time (the memory bound for many types x many genes)."""
    if one_class_at_a_time:
        monkeypatch.setattr(_common, "PAIR_ORDER_GROUP_BYTES", 1)
    rng = np.random.default_rng(11)
    y = np.repeat([0, 1, 2], [40, 25, 7])
    X = rng.normal(size=(y.size, 12)) * (rng.random((y.size, 12)) < 0.6)
    X[:, :3] = np.round(X[:, :3])                 # heavy ties
    X[y == 2, 5] += 4.0                            # a perfect marker of the rare class: one bit
    X[y == 0, 6] -= 3.0                            # a marker low in class 0: as informative as a high one
    X = {"dense": X, "csr": sp.csr_matrix(X), "csc": sp.csc_matrix(X)}[fmt]
    want = ref.pair_order_information(X, y, 3)
    got = _common.pair_order_information(X, y, 3, base=2)
    np.testing.assert_allclose(got, want / np.log(2), rtol=0, atol=1e-12)
    codes = np.round(2 * X.toarray() if sp.issparse(X) else 2 * X).astype(np.int64) + 20   # given integer levels
    np.testing.assert_allclose(_common.pair_order_information(codes, y, 3, base=np.e, rule=None),
                               ref.pair_order_information(codes, y, 3), rtol=0, atol=1e-12)
    assert np.isclose(want[2, 5], np.log(2)) and want[0, 6] > 0.5
    big_y = np.repeat([0, 1], [700, 300])
    big = rng.normal(size=(1000, 4)) + 0.8 * big_y[:, None] * np.arange(4)
    np.testing.assert_allclose(_common.pair_order_information(big, big_y, 2, base=np.e),
                               ref.pair_order_information(big, big_y, 2), rtol=0, atol=1e-3)


@pytest.mark.parametrize("one_class_at_a_time", [False, True], ids=["all classes", "class groups"])
def test_pair_order_information_with_batches_is_the_weighted_sum_of_each_batch(one_class_at_a_time, monkeypatch):
    if one_class_at_a_time:
        monkeypatch.setattr(_common, "PAIR_ORDER_GROUP_BYTES", 1)
    rng = np.random.default_rng(12)
    y = np.tile([0, 1, 2, 0], 30)
    batch = np.repeat(["a", "b", "c"], [50, 40, 30])
    X = rng.normal(size=(y.size, 8)) + 1.5 * (y[:, None] == 1) * np.arange(8) / 8 + 3.0 * (batch == "b")[:, None]
    strata = _common.check_batch(batch, X, batch_weights="equal")
    got = _common.pair_order_information(X, y, 3, base=np.e, batch=strata)
    want = sum(w * ref.pair_order_information(X[strata.codes == b], y[strata.codes == b], 3)
               for b, w in enumerate(strata.weights))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("gene_blocks", [False, True], ids=["one block", "gene blocks"])
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_nearest_class_pair_order_equals_the_mann_whitney_oracle(fmt, gene_blocks, monkeypatch):
    """``nearest=True``: the mean of the rest term and ln 2 - H_2(min_d A_cd) from scipy's Mann-Whitney U of
    every pair of classes (exact up to 255 samples), with the counts taken in one block or a few genes at a
    time.  A gene high in class 0 and in the small class 2 scores high against the rest but ~0 against the
    nearest class (class 2 for class 0); a gene high in class 0 alone scores high against both."""
    if gene_blocks:
        monkeypatch.setattr(_common, "PAIR_ORDER_BLOCK_BYTES", 1)
    rng = np.random.default_rng(21)
    y = np.repeat([0, 1, 2, 3], [40, 30, 8, 12])
    X = rng.normal(size=(y.size, 9)) * (rng.random((y.size, 9)) < 0.7)
    X[:, :2] = np.round(X[:, :2])                  # heavy ties
    X[np.isin(y, [0, 2]), 4] += 3.0                # high in class 0 and in its small neighbour 2
    X[y == 0, 5] += 3.0                            # high in class 0 alone
    X = {"dense": X, "csr": sp.csr_matrix(X)}[fmt]
    rest, near = ref.pair_order_information(X, y, 4), ref.nearest_class_pair_order_information(X, y, 4)
    got = _common.pair_order_information(X, y, 4, base=2, nearest=True)
    np.testing.assert_allclose(got, 0.5 * (rest + near) / np.log(2), rtol=0, atol=1e-12)
    assert rest[0, 4] > 0.3 and near[0, 4] < 0.05 and min(rest[0, 5], near[0, 5]) > 0.6


def test_nearest_class_pair_order_with_batches_averages_each_pairs_auroc_over_the_batches_holding_it():
    """A_cd is the batch-weighted mean over the batches holding both classes (class 3 lives in batch "b" only, so
    its pairs come from that batch alone), the rest term the weighted sum of each batch's."""
    rng = np.random.default_rng(22)
    batch = np.repeat(["a", "b", "c"], [40, 40, 30])
    y = np.tile([0, 1, 2, 0, 1], 22)
    y[(batch == "b") & (np.arange(y.size) % 4 == 0)] = 3
    X = rng.normal(size=(y.size, 6)) + 1.5 * (y[:, None] == np.arange(6) % 4) + 2.0 * (batch == "c")[:, None]
    strata = _common.check_batch(batch, X, batch_weights="equal")
    got = _common.pair_order_information(X, y, 4, base=np.e, batch=strata, nearest=True)
    rest = sum(w * ref.pair_order_information(X[strata.codes == b], y[strata.codes == b], 4)
               for b, w in enumerate(strata.weights))
    near = ref.nearest_class_pair_order_information(X, y, 4, batches=strata.codes, batch_weights=strata.weights)
    np.testing.assert_allclose(got, 0.5 * (rest + near), rtol=0, atol=1e-12)


def test_self_redundancy_constant_is_the_qp_on_q_with_a_zero_diagonal():
    """``self_redundancy="constant"``: every per-class QP on the dict-counted Q with Q_ii = 0, made definite by the
    shift (Nguyen et al. 2014, eq. 13), alpha_hat on that Q; the panel differs from Q_ii = H(X_i)'s here."""
    X, y = planted(seed=3)
    codes = np.unique(y, return_inverse=True)[1]
    Z = ref.zero_quantile_codes(X, 3)
    sel = bioqpfs.select(X, y, method="qpfs_cover", self_redundancy="constant")
    assert sel.params["self_redundancy"] == "constant"
    want = cover_ranking_by_hand(X, codes, Z, self_redundancy="constant")
    np.testing.assert_array_equal(sel.ranking[:len(want)], want)
    assert want != cover_ranking_by_hand(X, codes, Z)


def order_term_by_hand(X, codes, n_classes):
    """The default recipe's pair-order term in bits: the mean of the Mann-Whitney information against the rest and
    against the nearest class (reference.py)."""
    return 0.5 * (ref.pair_order_information(X, codes, n_classes)
                  + ref.nearest_class_pair_order_information(X, codes, n_classes)) / np.log(2)


def test_relevance_auto_adds_pair_order_information_on_every_kind_of_data():
    """The default recipe: on dense data (shared mean +- sd codes) each class's F_c is the mean of the MI and the
    pair-order information against the rest, and Q has no self-redundancy.  Re-derived independently: Q (zero
    diagonal) and the MI by dict counting on mean +- sd codes, the pair-order term from scipy's Mann-Whitney U, one
    QPFS per class, the round-robin merge.  On single-cell data (per-class bins) the pair-order term also looks at
    the nearest class (README "Panel quality"; by hand in test_default_recipe_on_sparse_data_by_hand);
    ``relevance="mi"`` leaves the pair-order term out."""
    rng = np.random.default_rng(13)
    y = np.repeat([0, 1, 2], [30, 20, 12])
    m = 14
    X = rng.normal(size=(y.size, m))
    X[:, :6] += 1.5 * (y[:, None] == np.arange(6) % 3)
    sel = bioqpfs.select(X, y, n_genes=6)
    assert sel.params["relevance"] == "auto" and sel.params["relevance_used"] == "mi_order"
    assert sel.params["discretization_used"] == "mean_sd" and sel.params["self_redundancy"] == "constant"
    want = cover_ranking_by_hand(X, y, ref.mean_sd_codes(X), extra=ref.pair_order_information(X, y, 3) / np.log(2),
                                 self_redundancy="constant")
    np.testing.assert_array_equal(sel.ranking[:len(want)], want)
    assert sel.ranking[:len(want)].tolist() != bioqpfs.select(X, y, n_genes=6, relevance="mi").ranking[:len(want)].tolist()
    Z, yz = planted()
    on_counts = bioqpfs.select(Z, yz, n_genes=8).params  # zero_quantile codes, per-class bins
    assert (on_counts["relevance_used"], on_counts["self_redundancy"]) == ("mi_order_nearest", "constant")
    assert bioqpfs.select(Z, yz, n_genes=8, relevance="mi").params["relevance_used"] == "mi"
    assert bioqpfs.select(X, y, method="qpfs_cover", n_genes=6).params["relevance_used"] == "mi"  # the method


def test_default_recipe_on_sparse_data_by_hand(monkeypatch):
    """The default recipe on zero-inflated CSR data (155 cells: the pair-order term is exact): Q by dict counting
    on the shared zero_quantile codes; each F_c the mean of the MI on the gene's own class-balanced equal-frequency
    bins (reference.per_class_bins_mi, plain loops over the sorted values; the package's fine grid made finer than
    the data) and the pair-order information from scipy's Mann-Whitney U (against the rest and the nearest class);
    one QPFS per class on Q with a zero diagonal; the round-robin."""
    from functools import partial

    from bioqpfs.selectors import qpfs_cover as cover_module

    monkeypatch.setattr(cover_module, "per_class_bin_relevance",
                        partial(_common.per_class_bin_relevance, fine_bins=1000))
    X, y = planted(seed=5, n_big=(60, 50, 40), n_rare=5)
    X = np.round(X, 2)
    sel = bioqpfs.select(sp.csr_matrix(X), y, n_genes=8)
    assert (sel.params["discretization_used"], sel.params["relevance_bins_used"], sel.params["relevance_used"],
            sel.params["self_redundancy"]) == ("zero_quantile", "per_class", "mi_order_nearest", "constant")
    codes = np.unique(y, return_inverse=True)[1]
    want = cover_ranking_by_hand(X, codes, ref.zero_quantile_codes(X, 3), own_bins=(3, True),
                                 extra=order_term_by_hand(X, codes, 4), self_redundancy="constant")
    np.testing.assert_array_equal(sel.ranking[:len(want)], want)
    without = bioqpfs.select(sp.csr_matrix(X), y, n_genes=8, relevance="mi")
    assert without.ranking[:len(want)].tolist() != want  # the pair-order term changes this panel


def test_pair_order_information_ranks_a_clean_marker_above_a_subtype_marker():
    """The Leukemia case (ALL = B-ALL + T-ALL against AML): a gene separating the whole class with a small
    overlap but three outlying values (AUROC 0.98) gets almost no MI from three mean +- sd bins (the outliers
    widen the sd, so nearly every sample falls in the middle bin), and a gene high in the large subtype only
    (AUROC 0.90) out-scores it.  The ranks ignore the outliers: the pair-order information, and the default
    recipe's mean of the two, put the class marker first."""
    rng = np.random.default_rng(14)
    y = np.repeat([0, 1], [47, 25])
    X = rng.normal(size=(y.size, 10))
    X[:, 0] = np.where(np.arange(y.size) < 38, 3.0, 0.0) + rng.normal(0, 0.3, y.size)   # the subtype marker
    X[:, 1] = np.where(y == 0, 1.0, 0.0) + rng.normal(0, 0.35, y.size)                  # the class marker ...
    X[[0, 1, 2], 1] = 15.0                                                               # ... with 3 outliers
    table = _common.info_table(X, y, discretization="mean_sd", n_bins=3, class_weight="balanced")
    F_mi = _common.one_vs_rest_relevance(table, y, 2, class_weight="balanced", base=2)[0]
    F_order = _common.pair_order_information(X, y, 2, base=2)[0]
    assert F_mi[0] > F_mi[1] and F_order[1] > F_order[0]
    assert F_mi[1] + F_order[1] > F_mi[0] + F_order[0]
    assert bioqpfs.select(X, y, n_genes=1).selected.tolist() == [1]
    assert bioqpfs.select(X, y, n_genes=1, relevance="mi").selected.tolist() == [0]


def test_pair_order_information_refuses_counts_that_would_not_fit(monkeypatch):
    monkeypatch.setattr("bioqpfs._validation.available_memory", lambda: (1000, "available physical memory"))
    X, y = planted()
    with pytest.raises(MemoryError, match=r"pair-order information's counts \(4 classes x 1 batches x 30 genes.*"
                                          r"relevance='mi'"):
        _common.pair_order_information(X, np.unique(y, return_inverse=True)[1], 4, base=2)


def test_the_recipes_memory_refusal_names_remedies_it_takes(monkeypatch):
    """The default recipe's Q guard suggested nystrom_rate=..., which qpfs_cover refuses (TypeError); the pair-order
    guard ended in a bare "; classes".  Each remedy named is one the call can follow."""
    monkeypatch.setattr("bioqpfs._validation.available_memory", lambda: (1000, "available physical memory"))
    X, y = planted()
    with pytest.raises(MemoryError) as err:
        bioqpfs.select(X, y, n_genes=3)
    message = str(err.value)
    assert "mutual information" in message and "method='qpfs' with nystrom_rate" in message
    assert "use QPFS+Nystrom (nystrom_rate" not in message
    with pytest.raises(MemoryError, match=r"fewer classes \(merge the rarest, or a coarser groupby\)$"):
        _common.pair_order_information(X, np.unique(y, return_inverse=True)[1], 4, base=2, nearest=True)


def test_class_qps_side_by_side_equal_one_after_the_other(monkeypatch):
    """The class QPs solved on 2 worker threads give the bits of the same QPs solved in turn on one; the worker
    count is bounded by memory, and ``psd_fix="clip"`` (a dense eigen-solve per problem) runs them in turn."""
    from bioqpfs.selectors import _qp

    X, y = planted(seed=1)
    one = bioqpfs.select(X, y, method="qpfs_cover", n_jobs=1)
    two = bioqpfs.select(X, y, method="qpfs_cover", n_jobs=2)
    np.testing.assert_array_equal(two.ranking, one.ranking)
    assert np.array_equal(two.weights, one.weights)
    monkeypatch.setattr(bioqpfs._threads, "_cores", lambda: 8)   # 4 workers asked for: below the cores anywhere
    with bioqpfs._threads.limited(4):
        assert _qp.class_qp_workers(2000, "shift") == 4
        assert _qp.class_qp_workers(2000, "clip") == 1
        monkeypatch.setattr(_qp, "available_memory", lambda: (3 * 3 * 8 * 2000 ** 2, None))
        assert _qp.class_qp_workers(2000, "shift") == 1  # half the memory holds one working set


def _sparse_types(seed, n=600, m=40, n_types=4):
    """Poisson counts (log1p, CSR) of ``n_types`` types, a fifth of the genes up in one type each."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_types, n)
    rate = np.tile(rng.gamma(0.6, 0.5, m), (n_types, 1))
    for g in range(0, m, 5):
        rate[g % n_types, g] *= 6
    return sp.csr_matrix(np.log1p(rng.poisson(rate[y]).astype(float))), y


@pytest.mark.parametrize("batch_discretization", [None, "global", "per_batch"])
def test_class_level_counts_from_sorted_columns_equal_the_codes(batch_discretization):
    """A sparse X is counted from its sorted columns (no codes) where one set of codes serves all samples; the
    counts equal those of the dense X's codes counted by the backend."""
    X, y = _sparse_types(5)
    batch = None if batch_discretization is None else _common.check_batch(
        np.arange(y.size) % 3, X, batch_discretization=batch_discretization)
    for rule, n_bins in [("zero_quantile", 32), ("quantile", 255), ("zero_quantile", 3)]:
        a = _common.ClassLevelCounts(X, rule, n_bins, y, 4, batch)
        b = _common.ClassLevelCounts(X.toarray(), rule, n_bins, y, 4, batch)
        assert (a._sorted is not None) == (batch_discretization != "per_batch") and b._sorted is None
        assert a.width == b.width
        np.testing.assert_array_equal(a.sizes, b.sizes)
        np.testing.assert_array_equal(a.counts(), b.counts())
        np.testing.assert_array_equal(a.counts(genes=slice(3, 17), first=1, last=3),
                                      b.counts(genes=slice(3, 17), first=1, last=3))
        np.testing.assert_array_equal(a.pooled(), b.pooled())
        assert a.counts().sum() == y.size * X.shape[1]


def test_default_recipe_sorts_a_sparse_x_once_and_equals_dense_input(monkeypatch):
    from bioqpfs._kernels import discretize as disc

    X, y = _sparse_types(6)
    built = []
    original = disc.SortedColumns.__init__

    def counting_init(self, Xs):
        built.append(Xs.shape)
        original(self, Xs)

    monkeypatch.setattr(disc.SortedColumns, "__init__", counting_init)
    from bioqpfs._kernels import information as info
    counting_q, shared_during_q = info.pairwise_information, []

    def spy(*args, **kwargs):  # the sorted form is dropped before Q is counted: the two never meet in memory
        shared_during_q.append(disc._SHARED_SORTED.get())
        return counting_q(*args, **kwargs)
    monkeypatch.setattr(info, "pairwise_information", spy)
    sparse = bioqpfs.select(X, y, n_genes=10)
    assert len(built) == 1  # the codes of Q, the per-class bins and the pair-order levels share one sort
    assert shared_during_q == [None]
    dense = bioqpfs.select(X.toarray(), y, n_genes=10)
    assert len(built) == 1
    assert sparse.params["relevance_used"] == "mi_order_nearest"
    np.testing.assert_array_equal(sparse.ranking, dense.ranking)
    np.testing.assert_array_equal(sparse.weights, dense.weights)


@pytest.mark.parametrize("zero_genes", [0, 2])
def test_default_recipe_holds_no_copy_of_a_sparse_x_while_q_is_counted(monkeypatch, zero_genes):
    """Without constant genes the recipe works on the caller's CSR itself (no column-indexed copy); with them the
    copy without the constant genes is released before the MI matrix, where the recipe's memory peaks."""
    import gc
    import weakref

    from bioqpfs._kernels import discretize as disc
    from bioqpfs._kernels import information as info

    X, y = _sparse_types(7)
    X = X[:, np.flatnonzero(np.diff(X.tocsc().indptr))]  # this draw has an all-zero gene
    if zero_genes:
        X = sp.hstack([X, sp.csr_matrix((X.shape[0], zero_genes))], format="csr")
    worked_on = []
    original = disc.SortedColumns.__init__

    def recording_init(self, Xs):
        worked_on.append(weakref.ref(Xs))
        original(self, Xs)

    monkeypatch.setattr(disc.SortedColumns, "__init__", recording_init)
    counting_q, alive_during_q = info.pairwise_information, []

    def spy(*args, **kwargs):
        gc.collect()
        alive_during_q.append(worked_on[0]() is not None)
        return counting_q(*args, **kwargs)

    monkeypatch.setattr(info, "pairwise_information", spy)
    before = (X.data.copy(), X.indices.copy(), X.indptr.copy())
    sel = bioqpfs.select(X, y, n_genes=10)
    assert len(worked_on) == 1
    if zero_genes:
        assert alive_during_q == [False]  # the copy is gone
        assert list(sel.ranking[-zero_genes:]) == list(range(X.shape[1] - zero_genes, X.shape[1]))
    else:
        assert worked_on[0]() is X  # no copy at all
    for now, then in zip((X.data, X.indices, X.indptr), before):  # and the caller's matrix is untouched
        np.testing.assert_array_equal(now, then)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_take_genes_indexes_only_what_it_must(fmt):
    """Every gene of a sparse X, in order: X itself.  Leaving out only empty genes: the same arrays as scipy's
    index (entries, order, canonical flag), X's values shared.  Any other subset, or a dense X (whose F-ordered
    copy the dense kernels' float sums follow), is indexed: equal values, a new matrix."""
    from bioqpfs._kernels.counting_dask import take_genes

    X, _ = _sparse_types(3)
    X = sp.hstack([sp.csr_matrix((X.shape[0], 2)), X, sp.csr_matrix((X.shape[0], 1))], format=fmt)
    m = X.shape[1]
    empty = np.flatnonzero(np.diff(X.tocsc().indptr) == 0)
    assert {0, 1, m - 1} <= set(empty)
    every = np.arange(m)
    assert take_genes(X, every) is X
    for genes in (np.setdiff1d(every, empty), np.setdiff1d(every, [0, m - 1]), every[2:-1]):
        sub, want = take_genes(X, genes), X[:, genes]
        assert sub.format == fmt and sub.shape == want.shape and np.shares_memory(sub.data, X.data)
        assert sub.has_canonical_format == want.has_canonical_format
        for got, expected in ((sub.data, want.data), (sub.indices, want.indices), (sub.indptr, want.indptr)):
            np.testing.assert_array_equal(got, expected)
            assert got.dtype == expected.dtype
    not_empty = np.setdiff1d(every, empty)[0]
    for genes in (np.setdiff1d(every, [not_empty]), every[::-1], np.r_[every, 0], every[[5, 3]]):
        sub = take_genes(X, genes)
        assert sub is not X and not np.shares_memory(sub.data, X.data)
        np.testing.assert_array_equal(sub.toarray(), X.toarray()[:, genes])
    D = X.toarray()
    sub = take_genes(D, every)
    assert sub is not D and sub.flags.f_contiguous
    np.testing.assert_array_equal(sub, D)
