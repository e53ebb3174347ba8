import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp

import bioqpfs
from bioqpfs import measures
from bioqpfs._kernels import counting_numpy
from bioqpfs._kernels import information as info


def _codes(rng, n=40, m=7, levels=(3, 3, 2, 4, 3, 1, 3)):
    return np.stack([rng.integers(0, k, size=n) for k in levels[:m]], axis=1)


@pytest.mark.parametrize("levels", [(3, 3, 3, 3, 3, 1, 3), (3, 3, 2, 5, 3, 1, 4)])  # 3-bin kernel and generic kernel
def test_mi_matrix_matches_contingency_tables(rng, levels):
    X = _codes(rng, levels=levels)
    Q = measures.mutual_information(X, discretization=None)   # X holds codes
    np.testing.assert_allclose(Q, ref.mi_matrix(X), atol=1e-10, rtol=0)
    np.testing.assert_allclose(np.diag(Q), [ref.entropy(X[:, g]) for g in range(X.shape[1])], atol=1e-10)


def test_mi_natural_log_and_rows(rng):
    X = _codes(rng)
    full = measures.mutual_information(X, discretization=None, base=np.e)
    np.testing.assert_allclose(full, ref.mi_matrix(X, base=np.e), atol=1e-10)
    rows = np.array([5, 0, 3])
    np.testing.assert_allclose(measures.mutual_information(X, discretization=None, rows=rows, base=np.e), full[rows], atol=1e-14, rtol=0)


@pytest.mark.parametrize("levels", [(3, 3, 3, 3, 3, 1, 3), (3, 3, 2, 5, 3, 1, 4)])
def test_cmi_matrix_and_rows(rng, levels):
    X = _codes(rng, levels=levels)
    y = rng.integers(0, 3, size=X.shape[0])
    C = measures.conditional_mutual_information(X, y, discretization=None)
    np.testing.assert_allclose(C, ref.cmi_matrix(X, y), atol=1e-10)
    np.testing.assert_allclose(measures.conditional_mutual_information(X, y, discretization=None, rows=[4, 1]), C[[4, 1]], atol=1e-12)


def test_mi_given_class(rng):
    X = _codes(rng)
    y = rng.integers(0, 2, size=X.shape[0])
    table = info.CodeTable(X, groups=y)
    got = info.pairwise_information(table, None, "mi_given_class")
    np.testing.assert_allclose(got, ref.mi_given_class_matrix(X, y), atol=1e-10)


@pytest.mark.parametrize("kind", ["cmi", "cmi_mean", "mi_given_class"])
def test_class_conditional_kinds_with_genes_constant_within_classes(rng, kind):
    """Many small classes, sparse codes: most genes are constant within most classes (one class is empty, one has a
    single sample), the case the fused pass takes a shortcut for -- still the plug-in values."""
    n, m, C = 60, 17, 12
    y = rng.integers(0, C, n)
    y[y == 7] = 8  # class 7 empty
    y[np.flatnonzero(y == 3)[1:]] = 4  # class 3 holds one sample
    X = np.where(rng.random((n, m)) < 0.85, 0, rng.integers(1, 3, size=(n, m))).astype(np.uint8)
    X[:, 0] = 2  # constant everywhere
    X[y == 5, 1] = 1  # constant within one class only
    table = info.CodeTable(X, np.full(m, 3), groups=y)
    assert table.n_classes == C
    got = info.pairwise_information(table, None, kind, base=2.0)
    if kind == "mi_given_class":
        want = ref.mi_given_class_matrix(X, y)
    elif kind == "cmi":
        want = ref.cmi_matrix(X, y)
    else:
        want = ref.spec_cmi_q(X, y)[0]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_mi_against_labels_and_relevance(rng):
    X = _codes(rng)
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, size=X.shape[0])]
    yi = np.unique(y, return_inverse=True)[1]
    expect = [ref.mutual_info(X[:, g], yi) for g in range(X.shape[1])]
    np.testing.assert_allclose(measures.mutual_information(X, y, discretization=None)[:, 0], expect, atol=1e-10)
    np.testing.assert_allclose(measures.relevance(X, y, discretization=None), expect, atol=1e-10)


def test_arbitrary_integer_codes_are_mapped(rng):
    X = _codes(rng, levels=(3, 3, 3, 3, 3, 3, 3))
    recoded = np.where(X == 0, -2, np.where(X == 1, 0, 2))  # {-2, 0, 2} as in the benchmark files
    np.testing.assert_allclose(measures.mutual_information(recoded, discretization=None),
                               measures.mutual_information(X, discretization=None), atol=1e-14)
    np.testing.assert_array_equal(measures.discretize(X + 1, discretization=None), X)
    with pytest.warns(FutureWarning, match="renamed discretization"):   # the old name still works
        np.testing.assert_array_equal(measures.discretize(X + 1, method=None), X)
    with pytest.raises(ValueError, match="integer-coded"):
        measures.mutual_information(X + 0.5, discretization=None)


def test_mean_sd_discretisation_matches_r_sd(rng):
    X = rng.normal(size=(30, 6)) * [1, 2, 3, 4, 5, 6]
    X[:, 5] = 3.0  # constant gene: one bin
    codes = measures.discretize(X)
    expect = ref.mean_sd_codes(X)
    # compact codes: for the constant gene, everything is bin 0
    np.testing.assert_array_equal(codes[:, :5], expect[:, :5])
    assert (codes[:, 5] == 0).all()


def test_quantile_discretisation(rng):
    X = rng.normal(size=(40, 3))
    codes = measures.discretize(X, "quantile", n_bins=4)
    for g in range(3):
        assert sorted(np.bincount(codes[:, g]).tolist()) == [10, 10, 10, 10]
        order = np.argsort(X[:, g])
        assert (np.diff(codes[order, g].astype(int)) >= 0).all()


def test_mdl_discretisation_matches_fayyad_irani_reference(rng):
    y = rng.integers(0, 3, size=60)
    X = np.column_stack([y + rng.normal(scale=s, size=60) for s in (0.1, 0.5, 1.0, 3.0)] + [rng.normal(size=60)])
    X = np.round(X, 1)  # ties
    codes = measures.discretize(X, "mdl", y=y)
    for g in range(X.shape[1]):
        cuts = ref.mdl_cuts(X[:, g].tolist(), y.tolist())
        np.testing.assert_array_equal(codes[:, g], np.searchsorted(cuts, X[:, g], side="left"))
    assert codes[:, 0].max() >= 2  # the clean gene separates the three classes
    with pytest.raises(ValueError, match="supervised"):
        measures.discretize(X, "mdl")


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_dense_and_sparse_identical(rng, fmt):
    X = rng.poisson(0.7, size=(50, 12)).astype(np.float32)
    X[:, 3] = 0.0
    y = rng.integers(0, 2, size=50)
    S = sp.csr_matrix(X) if fmt == "csr" else sp.csc_matrix(X)
    for method in ("mean_sd", "quantile"):
        np.testing.assert_array_equal(measures.discretize(S, method), measures.discretize(X, method))
    np.testing.assert_array_equal(measures.mutual_information(S, discretization="mean_sd"),
                                  measures.mutual_information(X, discretization="mean_sd"))
    np.testing.assert_allclose(measures.correlation(S), measures.correlation(X), atol=1e-12)
    np.testing.assert_allclose(measures.relevance(S, y, kind="hall"), measures.relevance(X, y, kind="hall"), atol=1e-12)


def test_correlation_and_hall(rng):
    X = rng.normal(size=(25, 5))
    X[:, 2] = 1.0
    y = rng.integers(0, 3, size=25)
    R = measures.correlation(X)
    expect = np.abs(np.corrcoef(X[:, [0, 1, 3, 4]], rowvar=False))
    keep = [0, 1, 3, 4]
    np.testing.assert_allclose(R[np.ix_(keep, keep)], expect, atol=1e-12)
    assert (R[2] == 0).all() and (R[:, 2] == 0).all()
    np.testing.assert_allclose(measures.correlation(X, rows=[4, 0]), R[[4, 0]])
    F = measures.relevance(X, y, kind="hall")
    np.testing.assert_allclose(F[keep], ref.hall(X[:, keep], y), atol=1e-12)
    assert F[2] == 0


def test_counts_add_over_sample_chunks(rng, monkeypatch):
    """Sufficient statistics: forcing tiny sample chunks gives the same matrices."""
    X = _codes(rng, n=90, levels=(3, 3, 3, 3, 3, 3, 3))
    y = rng.integers(0, 3, size=90)
    full_mi = measures.mutual_information(X)
    full_cmi = measures.conditional_mutual_information(X, y)
    monkeypatch.setattr(counting_numpy, "ONEHOT_BUDGET", 4 * 7 * 2 * 7)  # 7 samples per chunk
    np.testing.assert_array_equal(measures.mutual_information(X), full_mi)
    np.testing.assert_allclose(measures.conditional_mutual_information(X, y), full_cmi, atol=1e-13)


def test_blocked_matches_single_block(rng, monkeypatch):
    X = rng.normal(size=(30, 70))
    full = measures.mutual_information(X, discretization="mean_sd")
    monkeypatch.setattr(info, "_GEMM_BUDGET", 16 * 20 * 20)  # 20-gene blocks -> 4 x 4 block pairs
    np.testing.assert_allclose(measures.mutual_information(X, discretization="mean_sd"), full, atol=1e-14)
    np.testing.assert_allclose(full, full.T, atol=0)


def test_inputs_not_modified(rng):
    X = rng.normal(size=(20, 4))
    y = rng.integers(0, 2, size=20)
    X0, y0 = X.copy(), y.copy()
    measures.mutual_information(X, discretization="mean_sd")
    measures.relevance(X, y)
    measures.conditional_mutual_information(X, y, discretization="quantile")
    measures.correlation(X)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)


def test_bad_inputs():
    X = np.ones((5, 3))
    X[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite values in 1 gene"):
        measures.discretize(X)
    with pytest.raises(ValueError, match="1 class"):
        measures.relevance(np.random.default_rng(0).normal(size=(5, 3)), ["a"] * 5)
    with pytest.raises(ValueError, match="missing value"):
        measures.relevance(np.random.default_rng(0).normal(size=(4, 3)), ["a", None, "b", "a"])
    with pytest.raises(ValueError, match="unknown discretization"):
        measures.discretize(np.ones((4, 2)), "kmeans")
    with pytest.raises(ValueError, match="rows must lie"):
        measures.mutual_information(np.zeros((4, 2), int), rows=[0, 5])


def test_grouped_table_gives_pooled_mi(rng):
    """kind='mi' on a CodeTable grouped by class must count every sample, not only the first class."""
    X = _codes(rng, levels=(3, 3, 3, 3, 3, 3, 3))
    y = rng.integers(0, 3, size=X.shape[0])
    grouped = info.pairwise_information(info.CodeTable(X, groups=y), None, "mi")
    np.testing.assert_allclose(grouped, ref.mi_matrix(X), atol=1e-10)
    rows = info.pairwise_information(info.CodeTable(X, groups=y), None, "mi", rows=np.array([2, 0]))
    np.testing.assert_allclose(rows, ref.mi_matrix(X)[[2, 0]], atol=1e-10)


@pytest.mark.parametrize("workers", [1, 3])
def test_worker_threads_give_identical_matrices(rng, monkeypatch, workers):
    """Block pairs run on a thread pool; the result must not depend on the number of workers."""
    X = _codes(rng, n=60, m=45, levels=(3,) * 45)
    X5 = rng.integers(0, 5, size=(60, 37))
    y = rng.integers(0, 3, size=60)
    Y = rng.integers(0, 4, size=(60, 2))
    monkeypatch.setattr(info, "_GEMM_BUDGET", 16 * 8 * 8)  # 8-gene blocks: many block pairs

    def all_kinds():
        return [measures.mutual_information(X), measures.mutual_information(X5),
                measures.mutual_information(X, rows=[40, 3, 4, 5, 17]), measures.mutual_information(X, Y),
                measures.conditional_mutual_information(X, y), measures.conditional_mutual_information(X5, y)]

    monkeypatch.setattr(info, "n_workers", lambda: 1)
    serial = all_kinds()
    monkeypatch.setattr(info, "n_workers", lambda: workers)
    for a, b in zip(all_kinds(), serial):
        np.testing.assert_array_equal(a, b)
    # and against the plain-loop oracle
    np.testing.assert_allclose(serial[0], ref.mi_matrix(X), atol=1e-10)
    np.testing.assert_array_equal(serial[0], serial[0].T)


def test_worker_error_propagates_and_stops(rng, monkeypatch):
    X = _codes(rng, n=40, m=40, levels=(3,) * 40)
    monkeypatch.setattr(info, "_GEMM_BUDGET", 16 * 8 * 8)
    monkeypatch.setattr(info, "n_workers", lambda: 2)
    calls = []
    real = counting_numpy.NumpyCounting.joint

    def failing(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("simulated")
        return real(*a, **k)

    monkeypatch.setattr(counting_numpy.NumpyCounting, "joint", failing)
    with pytest.raises(MemoryError, match="simulated"):
        measures.mutual_information(X)


def test_cmi_mean_kind_is_the_symmetrised_cmi(rng):
    """kind='cmi_mean' (SPEC_CMI's Q) = (C + C^T) / 2 off the diagonal, I(X_i; C) on it, exactly symmetric."""
    X = _codes(rng, n=70, m=7)
    y = rng.integers(0, 3, size=70)
    C = ref.cmi_matrix(X, y)
    expect = 0.5 * (C + C.T)
    np.fill_diagonal(expect, np.diag(C))
    codes, levels = measures.codes_and_levels(X, None)
    table = info.CodeTable(codes, levels, groups=y)
    Q = info.pairwise_information(table, None, "cmi_mean")
    np.testing.assert_allclose(Q, expect, atol=1e-10)
    np.testing.assert_array_equal(Q, Q.T)
    np.testing.assert_allclose(info.pairwise_information(table, None, "cmi_mean", rows=[5, 1]), Q[[5, 1]], atol=1e-13)


def _child_mi(X):
    return measures.mutual_information(X)


def test_pool_works_in_forked_child(rng, monkeypatch):
    """multiprocessing with fork after the worker pool exists must not deadlock."""
    import multiprocessing as mp

    X = _codes(rng, n=40, m=40, levels=(3,) * 40)
    monkeypatch.setattr(info, "_GEMM_BUDGET", 16 * 8 * 8)
    monkeypatch.setattr(info, "n_workers", lambda: 2)
    expect = measures.mutual_information(X)  # creates the pool in the parent
    with mp.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(_child_mi, (X,)).get(timeout=60)
    np.testing.assert_array_equal(got, expect)


# --------------------------------------------------------------------------------------------
# inputs a user passes to the measures (hunt of stop 47): each was a silent wrong answer or a misleading message
# --------------------------------------------------------------------------------------------
def test_mutual_information_matches_a_labels_series_by_sample_name():
    import pandas as pd

    rng = np.random.default_rng(0)
    y = np.repeat(["a", "b"], 30)
    X = pd.DataFrame(rng.normal(size=(60, 3)), index=[f"s{i}" for i in range(60)], columns=["g0", "g1", "g2"])
    X["g0"] += 3 * (y == "a")
    shuffled = pd.Series(y, index=X.index).sample(frac=1, random_state=1)
    aligned = measures.mutual_information(X, y)[:, 0]
    np.testing.assert_allclose(measures.mutual_information(X, shuffled)[:, 0], aligned)   # was by position: 0.008
    np.testing.assert_allclose(measures.mutual_information(X, shuffled.to_frame("cls"))[:, 0], aligned)
    np.testing.assert_allclose(aligned, measures.relevance(X, shuffled))
    with pytest.raises(ValueError, match="the index of Yd column 0 does not match the sample names"):
        measures.mutual_information(X, pd.Series(y, index=[f"other{i}" for i in range(60)]))
    with pytest.raises(ValueError, match=r"Yd must be 1-D \(one variable\) or 2-D .* got shape \(60, 2, 2\)"):
        measures.mutual_information(X, np.zeros((60, 2, 2), dtype=int))


def test_measure_arguments_get_messages_about_themselves():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = np.repeat([0, 1], 20)
    assert measures.mutual_information(X, rows=[]).shape == (0, 3)      # was "an array of dtype float64"
    for func in (measures.mutual_information, measures.entropy):          # they take no labels
        with pytest.raises(ValueError, match=f"{func.__name__}: discretization='mdl' is supervised .*"
                                             f"discretize\\(X, 'mdl', y=labels\\)"):
            func(X, discretization="mdl")
    with pytest.raises(ValueError, match="pass the class labels as y="):
        measures.discretize(X, "mdl")
    # y is used by 'mdl' only: a single-class y was checked (and refused) for mean +- sd, which ignores it
    with pytest.warns(UserWarning, match="y is not used by discretization='mean_sd'"):
        codes = measures.discretize(X, "mean_sd", y=np.zeros(40))
    np.testing.assert_array_equal(codes, measures.discretize(X, "mean_sd"))
    assert measures.discretize(X, "mdl", y=y).shape == (40, 3)


def test_a_frame_of_float_and_bool_columns_is_numeric():
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"g0": rng.normal(size=40), "g1": rng.normal(size=40) > 0})
    np.testing.assert_allclose(measures.entropy(frame), measures.entropy(frame.astype(float)))   # was "dtype object"
    assert bioqpfs.select(frame.assign(g2=rng.normal(size=40)), np.repeat([0, 1], 20), method="maxrel",
                          n_genes=2).n_features == 3


def test_integer_levels_past_the_int64_range_are_kept_apart():
    """discretization=None: the span of a gene's levels was taken in int64, which wrapped (levels merged,
    silently) or gave numpy errors; uint64 values >= 2**63 wrapped to negative."""
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    X = np.array([[lo, 0], [lo + 3, 3], [hi, 1], [lo, 2]], dtype=np.int64)
    np.testing.assert_array_equal(measures.discretize(X, None), [[0, 0], [1, 3], [2, 1], [0, 2]])
    np.testing.assert_allclose(measures.entropy(X, discretization=None), [1.5, 2.0])
    U = np.array([[0, 0], [2 ** 63, 1], [0, 2], [2 ** 63 + 5, 0]], dtype=np.uint64)
    np.testing.assert_array_equal(measures.discretize(U, None)[:, 0], [0, 1, 0, 2])
    np.testing.assert_allclose(measures.entropy(U, discretization=None), [1.5, 1.5])


def test_a_frame_with_a_non_numeric_column_and_default_labels_is_refused_by_name():
    """The default column labels are the ints 0, 1, ...: the message looked the dtype up by the label's text
    ("0"), and a KeyError '0' from pandas came instead of the TypeError naming the column."""
    import pandas as pd

    frame = pd.DataFrame(np.random.default_rng(0).normal(size=(10, 3)))
    frame[1] = frame[1].astype(str)
    with pytest.raises(TypeError, match=r"1 column\(s\) are not: 1 \((object|str)\)"):
        measures.mutual_information(frame)


def test_mi_against_no_columns_is_an_empty_matrix():
    """Yd with 0 columns (an empty selection of covariates) failed deep in numpy ("zero-size array to reduction
    operation maximum"); it is the n_genes x 0 result."""
    import pandas as pd

    X = np.random.default_rng(0).normal(size=(20, 4))
    for Yd in (np.zeros((20, 0)), pd.DataFrame(index=range(20))):
        out = measures.mutual_information(X, Yd, dtype=np.float32)
        assert out.shape == (4, 0) and out.dtype == np.float32


@pytest.mark.parametrize("value", [0.1, 4.2, -3.3e-7])
def test_a_constant_gene_whose_mean_rounds_has_no_correlation(value):
    """QPFS eq. 3 and Hall's relevance are undefined for a constant gene: 0 by the documented rule.  A gene equal
    to 0.1 everywhere has a centred sum of squares of ~1e-32 from the rounding of its mean, not 0: it was scaled by
    1 / sqrt(1e-32) and got a correlation of 1 with itself, noise with the others and a Hall relevance above the
    real genes'."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    X[:, 1] = value
    y = np.repeat([0, 1], 25)
    C = measures.correlation(X)
    assert not C[1].any() and not C[:, 1].any()
    assert C[0, 0] == C[2, 2] == 1.0
    assert measures.relevance(X, y, kind="hall")[1] == 0.0
    np.testing.assert_allclose(measures.relevance(X, y, kind="hall")[[0, 2]],
                               measures.relevance(X[:, [0, 2]], y, kind="hall"))


def test_a_constant_gene_has_mst_relevance_exactly_zero():
    """A constant gene gets the permutation expectation of cross edges, F = 0 (bioqpfs._kernels.mst); its tied
    group's sum rounded differently from the closed form and gave F = 1.1e-16, ranking it above genes at chance."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 4))
    X[:, 1] = 3.0
    y = rng.integers(0, 2, 50)
    F = measures.relevance(X, y, kind="mst")
    assert F[1] == 0.0
    np.testing.assert_array_equal(F[[0, 2, 3]], measures.relevance(X[:, [0, 2, 3]], y, kind="mst"))


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_codes_in_a_numpy_matrix_give_ndarray_codes():
    """discretization=None took any ndarray subclass as it was: discretize(np.matrix) returned an np.matrix (whose
    ``*`` is a matrix product and whose columns stay 2-D), not the documented ndarray."""
    codes = np.random.default_rng(0).integers(0, 3, size=(20, 4))
    out = measures.discretize(np.matrix(codes), None)
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, measures.discretize(codes, None))


def test_a_masked_array_with_masked_values_is_refused():
    """np.asarray of a masked array keeps the values under the mask: the missing entries were counted as data and
    the measures returned the unmasked matrix's values, silently; codes with discretization=None as well."""
    rng = np.random.default_rng(0)
    X = np.ma.masked_array(rng.normal(size=(30, 4)), mask=np.zeros((30, 4), bool))
    X.mask[3, 2] = True
    with pytest.raises(ValueError, match=r"masked array with 1 masked \(missing\) value\(s\) in 1 gene\(s\): 2"):
        measures.mutual_information(X)
    with pytest.raises(ValueError, match="masked"):
        measures.correlation(X)
    codes = np.ma.masked_array(rng.integers(0, 3, size=(30, 4)), mask=X.mask)
    with pytest.raises(ValueError, match="masked"):
        measures.entropy(codes, discretization=None)
    X.mask[:] = False   # nothing masked: the plain values
    np.testing.assert_array_equal(measures.mutual_information(X), measures.mutual_information(X.data))


def test_masked_entries_of_yd_are_missing_values():
    """relevance(X, y) refused masked labels as missing, but mutual_information(X, Yd) read Yd through np.asarray,
    which keeps the values under the mask: the masked samples were counted with their hidden labels, silently."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 3)), rng.integers(0, 2, 30)
    Yd = np.ma.masked_array(np.c_[y, 1 - y], mask=np.zeros((30, 2), bool))
    Yd.mask[4, 1] = True
    with pytest.raises(ValueError, match=r"Yd column 1 has 1 missing value\(s\) \(at samples 4\)"):
        measures.mutual_information(X, Yd)
    with pytest.raises(ValueError, match="missing value"):
        measures.mutual_information(X, Yd[:, 1])
    np.testing.assert_allclose(measures.mutual_information(X, Yd[:, 0]), measures.relevance(X, y)[:, None])


@pytest.mark.parametrize("fmt", ["csr_matrix", "csc_array"])
def test_mi_against_sparse_columns(fmt):
    """A scipy.sparse Yd (e.g. one-hot covariates) was wrapped by np.asarray into a 0-d object array and refused
    as "got shape ()"; it is read as its dense columns."""
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(30, 3)), rng.integers(0, 3, size=(30, 2))
    np.testing.assert_array_equal(measures.mutual_information(X, getattr(sp, fmt)(Y)),
                                  measures.mutual_information(X, Y))


@pytest.mark.parametrize("kind", ["hall", "mst"])
def test_discretization_given_to_a_continuous_relevance_warns(kind):
    """relevance(kind="hall", discretization="quantile") returned the continuous relevance without a word, as if
    the genes had been coded by quantiles; n_bins given to discretization="mean_sd" warns, so does this."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 3)), np.repeat([0, 1], 15)
    with pytest.warns(UserWarning, match="discretization='quantile' and n_bins=3 are not used"):
        F = measures.relevance(X, y, kind=kind, discretization="quantile")
    np.testing.assert_array_equal(F, measures.relevance(X, y, kind=kind))
    with pytest.warns(UserWarning, match="n_bins=5 are not used"):
        measures.relevance(X, y, kind=kind, n_bins=5)


@pytest.mark.parametrize("kind", ["hall", "mst", "mst_cpx"])
@pytest.mark.parametrize("n_bins", [-1, 0, 1, 256])
def test_a_continuous_relevance_refuses_an_n_bins_no_rule_could_use(kind, n_bins):
    """relevance(kind="hall"/"mst"/"mst_cpx", n_bins=-1) only warned "not used", while kind="mi" and every selector
    refuse an n_bins outside 2..255: a mistake, not an unused setting, refused the same way whatever the kind."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 3)), np.repeat([0, 1], 15)
    with pytest.raises(ValueError, match=f"relevance: n_bins must be between 2 and 255, got {n_bins}"):
        measures.relevance(X, y, kind=kind, n_bins=n_bins)
    with pytest.raises(TypeError, match="relevance: n_bins must be an integer"):
        measures.relevance(X, y, kind=kind, n_bins=2.5)


def test_messages_about_yd_name_the_dataframe_column():
    """A DataFrame Yd's bad column was named by its position ("Yd column 1"), which reads as the column named 1."""
    import pandas as pd

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 3)), rng.integers(0, 2, 30).astype(float)
    bad = y.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match=r"Yd column 'donor' has 1 missing value\(s\) \(at samples 3\)"):
        measures.mutual_information(X, pd.DataFrame({"batch": y, "donor": bad}))
    with pytest.raises(ValueError, match=r"Yd \('donor'\) has 1 missing value"):
        measures.mutual_information(X, pd.Series(bad, name="donor"))


@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_correlation_matrix_is_exactly_symmetric(fmt):
    """|Pearson| of genes i, j and of j, i came from different GEMM blocks and differed in the last bit (2e-16),
    so Q != Q.T where the information matrices are symmetric bit for bit (exact symmetry checks, e.g.
    scipy.linalg.issymmetric, failed).  1100 genes: more than one block of the mirroring."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 1100))
    A = X if fmt == "dense" else sp.csr_matrix(X)
    C = measures.correlation(A)
    np.testing.assert_array_equal(C, C.T)
    np.testing.assert_allclose(C, np.abs(np.corrcoef(X.T)), rtol=0, atol=1e-14)


def test_discretize_refuses_two_different_rules():
    """discretize(X, "quantile", method="mean_sd") coded by mean +- sd: the deprecated name silently overrode the
    rule given by its new name."""
    X = np.random.default_rng(0).normal(size=(30, 2))
    with pytest.raises(TypeError, match="discretization='quantile' and its deprecated name method='mean_sd'"):
        measures.discretize(X, "quantile", n_bins=5, method="mean_sd")
    with pytest.warns(FutureWarning):
        np.testing.assert_array_equal(measures.discretize(X, "quantile", method="quantile"),
                                      measures.discretize(X, "quantile"))
