"""The batch benchmark's quick mode runs, and its synthetic batches and batch effect are what its docstring says."""
import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import bench_batch as bb  # noqa: E402


def test_confounded_batches_spread_classes_unevenly():
    y = np.repeat(["A", "B", "C"], 300)
    batch = bb.confounded_batches(y, seed=0)
    share = np.array([[np.mean(batch[y == c] == b) for b in ("b0", "b1", "b2")] for c in "ABC"])
    np.testing.assert_allclose(share.sum(axis=1), 1)
    assert np.ptp(share, axis=0).max() > 0.2, "the batches must be associated with the class"


@pytest.mark.parametrize("sparse", [False, True])
def test_batch_effect_shifts_a_fraction_of_genes_per_batch_and_keeps_zeros(sparse):
    rng = np.random.default_rng(0)
    X = rng.random((90, 200)) * (rng.random((90, 200)) < 0.5)
    batch = np.repeat(["b0", "b1", "b2"], 30)
    given = sp.csr_matrix(X) if sparse else X.copy()
    out = bb.add_batch_effect(given, batch, fraction=0.1, size=1.0, seed=0)
    D = (out.toarray() if sparse else out) - X
    if sparse:
        assert np.all(D[X == 0] == 0), "zeros stay zeros"
    for b in ("b0", "b1", "b2"):
        shifted = np.flatnonzero(np.abs(D[batch == b]).max(axis=0) > 0)
        assert 5 <= shifted.size <= 40   # ~10 % of 200 genes
    assert np.array_equal(given.toarray() if sparse else given, X), "the input is not modified"


def test_quick_mode_pairs_both_arms_on_the_same_folds():
    df, table = bb.main(["--quick"])
    assert set(df["batch_aware"]) == {False, True}
    counts = df.groupby(["method", "batch_aware"]).size()
    assert (counts == counts.iloc[0]).all() and counts.iloc[0] == 3   # one fold per held-out batch, both arms
    assert set(table["method"]) == {"qpfs", "mrmr_mid"} and table["with_batch"].between(0, 1).all()


def test_overhead_mode_times_both_arms_on_both_faces():
    table, _ = bb.main(["--overhead", "--quick"])
    assert set(table["face"]) == {"select", "tl"} and set(table["method"]) == {"qpfs", "mrmr_mid"}
    assert (table["without"] > 0).all() and (table["with_batch"] > 0).all()
    np.testing.assert_allclose(table["ratio"], table["with_batch"] / table["without"])


@pytest.mark.parametrize("argv", [["--quick", "--ks", "10"], ["--quick", "--methods", "qpfs"],
                                  ["--overhead", "--quick", "--repeats", "3"], ["--quick", "--large"],
                                  ["--overhead", "--quick", "--ks", "10"], ["--methods", "qpfs,nope"]])
def test_flags_the_mode_would_not_use_are_refused(argv):
    """``--quick`` replaced --ks/--methods/--repeats and --large, --overhead replaced --ks, and --large/--repeats
    did nothing without --overhead: all silently.  An unknown method label was a KeyError."""
    with pytest.raises(SystemExit):
        bb.main(argv)
