"""The panel benchmark's quick mode runs, and its protocol pieces do what the note and README claim."""
import os
import sys

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import bench_panels as bp  # noqa: E402


def test_round_robin_takes_each_groups_next_marker_in_turn():
    names = np.array(["a", "b", "c", "d", "e"])
    cols = [["a", "b", "c"], ["a", "d", "e"], ["e", "c", "b"]]
    # rank 1 of each group: a, (a dup), e ; rank 2: b, d, (c) ...
    np.testing.assert_array_equal(bp._round_robin(cols, names, 4), [0, 4, 1, 3])


def test_peers_visit_the_classes_in_the_default_recipes_order():
    """Cluster ids as text: pandas sorted them "0", "1", "10", "2", ... for the peers' round-robin while the
    default recipe visits them by value, so at k < C different classes went without a marker (louvain, k = 10)."""
    import bioqpfs

    rng = np.random.default_rng(0)
    y = np.repeat([str(c) for c in range(12)], 10)
    X = rng.normal(size=(y.size, 36))
    for c in range(12):
        X[y == str(c), 3 * c] += 4.0             # one marker per cluster, up in it
    names = [f"g{j}" for j in range(36)]
    sel = bioqpfs.select(X, y, n_genes=12, feature_names=names)
    first_round = np.asarray(sel.extra_columns["class"])[sel.ranking[:12]]   # the class each panel gene is for
    categories = list(bp._adata(X, y, names).obs["g"].cat.categories)
    assert categories == [str(c) for c in range(12)]
    assert [str(c) for c in first_round] == categories
    markers = bp.scanpy_markers("wilcoxon")(X, y, names, [11])[11]
    assert [int(names[j][1:]) // 3 for j in markers] == list(range(11))   # the 11 first clusters, as bioqpfs


def test_selection_sees_only_the_training_fold():
    seen = []

    def spy(X, y, names, ks):
        seen.append(X.shape[0])
        return {k: np.arange(k) for k in ks}

    X, y, names = bp.simulate_counts(n_cells=200, n_genes=30, seed=0, fractions=(0.5, 0.3, 0.2))
    df = bp.run([(X, y, names)], {"spy": spy}, [3], n_splits=4, n_repeats=1, verbose=False)
    assert seen == [150] * 4
    assert set(df.classifier) == {"lr", "knn15"} and len(df) == 4 * 2


def test_paired_differences_and_wins():
    rows = []
    for f, (a, b) in enumerate([(0.8, 0.7), (0.6, 0.7), (0.9, 0.9)]):
        for m, v in (("ours", a), ("wilcoxon", b)):
            rows.append(dict(dataset="d", method=m, fold=f, k=10, classifier="lr", balanced_accuracy=v, f1_macro=v,
                             seconds=0.0))
    p = bp.paired(pd.DataFrame(rows), "wilcoxon")
    assert p.loc[0, "wins"] == "1/1/1"
    assert p.loc[0, "mean_diff"] == pytest.approx(0.0, abs=1e-12)


def test_quick_mode_runs(capsys):
    df = bp.main(["--quick"])
    out = capsys.readouterr().out
    assert "paired balanced accuracy" in out and "bioqpfs default" in out
    assert {"bioqpfs default", "wilcoxon", "hvg"} <= set(df.method)
    assert df.balanced_accuracy.between(0, 1).all()


def test_seeds_pool_their_folds_and_a_failing_method_is_left_out():
    """Several seeds give disjoint fold sets (numbered on, each row with its seed); a method failing on one fold is
    dropped from the dataset (it was averaged over the folds done before: compared on other folds than its peers);
    a panel of the wrong size is an error, not a scored panel."""
    X, y, names = bp.simulate_counts(n_cells=120, n_genes=20, seed=0, fractions=(0.5, 0.5))
    calls = []

    def good(X, y, names, ks):
        return {k: np.arange(k) for k in ks}

    def flaky(X, y, names, ks):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("fold 3")
        return {k: np.arange(k) for k in ks}

    df = bp.run([(X, y, names)], {"good": good, "flaky": flaky}, [3], n_splits=2, n_repeats=1, verbose=False,
                seeds=(0, 1))
    assert set(df.method) == {"good"} and sorted(df.fold.unique()) == [0, 1, 2, 3]
    assert df.groupby("fold").seed.first().tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="short returned 2 genes"):
        bp.run([(X, y, names)], {"short": lambda X, y, n, ks: {k: np.arange(k - 1) for k in ks}}, [3], n_splits=2,
               n_repeats=1, verbose=False)


def test_quick_refuses_flags_it_overrides():
    with pytest.raises(SystemExit):
        bp.main(["--quick", "--datasets", "pbmc68k"])


@pytest.mark.parametrize("argv", [["--quick", "--methods", "bioqpfs default,wilcoxn"], ["--quick", "--methods", "maxrel"],
                                  ["--datasets", "colom,srbct", "--ks", "5"]])
def test_methods_and_datasets_that_would_not_run_are_refused(argv):
    """A misspelt method label was dropped silently (a typo in "wilcoxon" left out the paired tables); a method
    that --quick does not run left nothing to run; a misspelt dataset was a KeyError after the first datasets ran."""
    with pytest.raises(SystemExit):
        bp.main(argv)
