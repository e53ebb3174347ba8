"""Bad input at the core: validators, measures, discretisation/correlation kernels, selector inputs."""
import numpy as np
import pandas as pd
import pytest
import reference as ref
import scipy.sparse as sp

import bioqpfs
from bioqpfs import measures
from bioqpfs._kernels import discretize as disc
from bioqpfs._kernels import information as info
from bioqpfs._validation import check_labels
from bioqpfs.selectors import _common


def _data(rng, n=40, m=6):
    X = rng.normal(size=(n, m))
    y = np.repeat([0, 1], n // 2)
    X[:, 0] += 2 * y
    return X, y


# ---- item 3: label columns with more than 255 levels -------------------------------------------
def test_mi_with_label_column_of_300_levels(rng):
    yy = np.arange(600) % 300
    g = (yy >= 256).astype(float)
    noise = rng.integers(0, 3, 600).astype(float)
    Q = measures.mutual_information(np.c_[g, noise], yy)
    # g is a function of the label, so I(g; y) = H(g); I(noise; y) = H(noise) - H(noise | y) by counting
    h_cond = sum(ref.entropy(noise[yy == c]) * np.mean(yy == c) for c in range(300))
    np.testing.assert_allclose(Q[:, 0], [ref.entropy(g), ref.entropy(noise) - h_cond], atol=1e-10)


def test_genes_with_more_than_255_levels_are_refused_by_name():
    X = np.c_[np.arange(600) % 300, np.arange(600) % 2].astype(float)
    with pytest.raises(ValueError, match="gene 0 has 300 distinct levels"):
        measures.mutual_information(X, discretization=None)   # codes as given
    X[:, 0] *= 100  # wide span: the other code path
    with pytest.raises(ValueError, match="gene 0 has 300 distinct levels"):
        measures.entropy(X, discretization=None)


# ---- item 4: labels Series aligned by index ----------------------------------------------------
def test_labels_series_is_aligned_to_dataframe_rows(rng):
    X, y = _data(rng)
    names = [f"s{i}" for i in range(X.shape[0])]
    df = pd.DataFrame(X, index=names)
    shuffled = pd.Series(y, index=names).sample(frac=1, random_state=1)
    assert not np.array_equal(shuffled.to_numpy(), y)
    # equal up to rounding: a DataFrame's array is column-major, and BLAS may sum in another order
    # for that layout (seen with numpy 2.5's OpenBLAS: 1 ulp)
    np.testing.assert_allclose(measures.relevance(df, shuffled), measures.relevance(X, y), rtol=1e-13, atol=0)
    np.testing.assert_allclose(measures.relevance(df, shuffled, kind="hall"), measures.relevance(X, y, kind="hall"),
                               rtol=1e-13, atol=0)
    a = bioqpfs.select(df, shuffled, method="maxrel", n_genes=2)
    b = bioqpfs.select(X, y, method="maxrel", n_genes=2)
    np.testing.assert_allclose(a.weights, b.weights, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(a.ranking, b.ranking)
    codes, classes = check_labels(shuffled, len(y), sample_names=pd.Index(names))
    np.testing.assert_array_equal(classes[codes], y)


def test_labels_series_with_foreign_index_is_an_error(rng):
    X, y = _data(rng)
    df = pd.DataFrame(X, index=[f"s{i}" for i in range(X.shape[0])])
    other = pd.Series(y, index=[f"cell{i}" for i in range(X.shape[0])])
    with pytest.raises(ValueError, match=r"does not match the sample names.*s0, s1.*cell0"):
        bioqpfs.select(df, other, method="maxrel", n_genes=2)
    # a default RangeIndex carries no names: positional, as for arrays
    np.testing.assert_array_equal(measures.relevance(df, pd.Series(y)), measures.relevance(X, y))
    # no sample names (plain array X): positional
    np.testing.assert_array_equal(measures.relevance(X, other), measures.relevance(X, y))



def test_default_index_labels_with_samples_named_by_shuffled_numbers_are_refused(rng):
    """A shuffled DataFrame (df.sample(frac=1): its index a permutation of 0..n-1) and labels in a Series with the
    default index: the labels were reordered by name, against the documented "a default index is positional", and
    the panel was noise (select, measures and the estimator alike).  Ambiguous: refused, with both remedies."""
    from bioqpfs.estimators import BioQPFSSelector

    X, y = _data(rng)
    order = rng.permutation(X.shape[0])
    df = pd.DataFrame(X[order])
    df.index = order
    labels = pd.Series(y[order])
    for call in (lambda: bioqpfs.select(df, labels, method="maxrel", n_genes=2),
                 lambda: measures.relevance(df, labels),
                 lambda: BioQPFSSelector(2, method="maxrel").fit(df, labels)):
        with pytest.raises(ValueError, match=r"default index 0\.\.39 and the samples are named by the same numbers"
                                             r".*y\.to_numpy\(\)"):
            call()
    # either remedy gives the panel of the plain arrays
    want = measures.relevance(X[order], y[order])
    np.testing.assert_allclose(measures.relevance(df, labels.to_numpy()), want, rtol=1e-13)
    np.testing.assert_allclose(measures.relevance(df, labels.set_axis(df.index)), want, rtol=1e-13)


def test_blank_and_nan_text_labels_are_missing_not_classes(rng):
    """A blank label ("" or spaces: a blank cell of a sample sheet) or "nan" (astype(str) of a missing value) was a
    class of its own in Python (the default recipe gave it panel slots, noise genes) while the CLI reads the same
    cell as missing and refuses it.  Refused as a missing label; an unused blank category is no label at all."""
    X, y = _data(rng)
    for bad in ("", "  ", "nan"):
        labels = y.astype(object)
        labels[[3, 7]] = bad
        with pytest.raises(ValueError, match=rf"2 empty or 'nan' label\(s\) \({bad!r}; at samples 3, 7\)"):
            bioqpfs.select(X, labels, n_genes=3)
    cat = pd.Categorical(y.astype(str), categories=[*sorted(set(y.astype(str))), ""])  # "" unused
    np.testing.assert_array_equal(bioqpfs.select(X, cat, method="maxrel", n_genes=3).ranking,
                                  bioqpfs.select(X, y.astype(str), method="maxrel", n_genes=3).ranking)

# ---- item 5: continuous labels ---------------------------------------------------------------
def test_continuous_labels_are_refused(rng):
    X, _ = _data(rng)
    with pytest.raises(ValueError, match=r"looks? continuous \(40 distinct values for 40 samples"):
        bioqpfs.select(X, rng.normal(size=40), method="qpfs", n_genes=2)
    with pytest.raises(ValueError, match="non-integer"):
        check_labels(np.r_[np.zeros(20), np.full(20, 0.5)], 40)  # two "classes", but not integer floats
    # integer-valued with one sample per value (ids, ages): a warning, since small CV folds look alike
    with pytest.warns(UserWarning, match="40 of 40 samples are alone in their class"):
        measures.relevance(X, np.arange(40) * 10)


def test_labels_the_continuous_rule_must_not_refuse(rng):
    """Regressions found by the second audit: all of these are legitimate class labels."""
    import warnings

    import pandas as pd

    X, y = _data(rng)
    doses = pd.Categorical(np.array([0.5, 1.5])[y])  # explicit categories with non-integer values
    assert check_labels(doses, 40)[1].size == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_labels(["a", "b"], 2)  # 2 samples, 2 classes: too few samples for the singleton warning
        check_labels(np.repeat(np.arange(5), 1), 5)  # a 5-sample training fold of 5 classes of 2
        check_labels(list("ABCDEE"), 6)
    # Yd columns of mutual_information are arbitrary discrete variables: no continuous rules
    Yd = np.r_[np.arange(51), np.zeros(9)]
    Yh = np.r_[np.zeros(20), np.full(20, 0.5), np.ones(20)]
    codes = measures.discretize(rng.normal(size=(60, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert measures.mutual_information(codes, np.c_[Yd, Yh]).shape == (3, 2)


def test_real_class_labels_are_not_mistaken_for_continuous():
    y = np.repeat(np.arange(4), [20, 20, 12, 11]).astype(float)  # 63 samples, 4 classes, float-coded
    assert check_labels(y, 63)[1].size == 4
    y2 = np.repeat(np.arange(300), 2)  # 300 classes of 2 samples, and every leave-one-out fold of it
    assert check_labels(y2, 600)[1].size == 300
    assert check_labels(np.delete(y2, 7), 599)[1].size == 300


# ---- item 6: complex X -----------------------------------------------------------------------
@pytest.mark.parametrize("make", [np.asarray, sp.csr_matrix, sp.csc_matrix])
def test_complex_matrix_is_refused(rng, make):
    X, y = _data(rng)
    Xc = make(X + 1j * rng.normal(size=X.shape))
    for call in (lambda: measures.discretize(Xc), lambda: measures.correlation(Xc),
                 lambda: bioqpfs.select(Xc, y, method="qpfs", n_genes=2)):
        with pytest.raises(TypeError, match="complex"):
            call()


# ---- item 9: base ------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [0, 1, -2, 0.5, np.nan, np.inf, "2", True])
def test_invalid_base_is_refused(rng, base):
    X, y = _data(rng)
    codes = measures.discretize(X)
    calls = [lambda: measures.mutual_information(codes, base=base),
             lambda: measures.mutual_information(codes, y, base=base),
             lambda: measures.entropy(codes, base=base),
             lambda: measures.conditional_mutual_information(codes, y, base=base),
             lambda: measures.relevance(X, y, base=base),
             lambda: info.pairwise_information(info.CodeTable(codes), None, "mi", base=base),
             lambda: _common.similarity_and_relevance(X, y, similarity="correlation", relevance="hall",
                                                     discretization="mean_sd", n_bins=3, base=base),
             lambda: bioqpfs.select(X, y, method="qpfs", n_genes=2, base=base)]
    for call in calls:
        with pytest.raises(ValueError, match="base must be a finite number > 1"):
            call()


# ---- item 10: extreme magnitudes -----------------------------------------------------------------
@pytest.mark.parametrize("factor", [1e307, 1e-300])
@pytest.mark.parametrize("make", [np.asarray, sp.csc_matrix])
def test_extreme_magnitudes_give_the_same_results_as_ordinary_scale(rng, factor, make):
    X, y = _data(rng)
    Xh = X.copy()
    Xh[:, 0] *= factor
    Xh = make(Xh)
    before = Xh.copy()
    # mean +- sd bins, correlations and relevances are scale invariant
    np.testing.assert_array_equal(measures.discretize(Xh), measures.discretize(X))
    np.testing.assert_allclose(measures.relevance(Xh, y), measures.relevance(X, y), rtol=1e-12)
    np.testing.assert_allclose(measures.relevance(Xh, y, kind="hall"), measures.relevance(X, y, kind="hall"),
                               rtol=1e-12)
    np.testing.assert_allclose(measures.correlation(Xh), measures.correlation(X), rtol=1e-12, atol=1e-15)
    assert bioqpfs.select(Xh, y, method="qpfs", n_genes=1).selected[0] == 0
    np.testing.assert_array_equal(sp.csc_matrix(Xh).toarray(), sp.csc_matrix(before).toarray())  # not modified


def test_mean_sd_edges_unchanged_on_ordinary_data(rng):
    X = rng.normal(loc=5, scale=3, size=(57, 9))
    mean, sd, s = disc._column_mean_sd(X)
    np.testing.assert_array_equal(s, 1.0)
    # bit-identical to the plain formulas (R's mean and sd)
    np.testing.assert_array_equal(mean, X.mean(axis=0))
    np.testing.assert_array_equal(sd, np.sqrt(X.var(axis=0, ddof=1)))
    lo, hi = X.mean(axis=0) - X.std(axis=0, ddof=1), X.mean(axis=0) + X.std(axis=0, ddof=1)
    np.testing.assert_array_equal(measures.discretize(X), (X > lo).astype(int) + (X > hi))


# ---- item 13: feature_names length -----------------------------------------------------------------
def test_feature_names_of_wrong_length_are_refused(rng):
    X, y = _data(rng)
    with pytest.raises(ValueError, match="feature_names has 2 entries but X has 6 genes"):
        bioqpfs.select(X, y, method="qpfs", n_genes=2, feature_names=["a", "b"])


# ---- item 16: sparse matrix without stored entries ---------------------------------------------------
@pytest.mark.parametrize("make", [sp.csr_matrix, sp.csc_matrix, sp.csr_array])
def test_sparse_matrix_without_entries(make):
    X = make((20, 5))
    y = np.repeat([0, 1], 10)
    np.testing.assert_array_equal(measures.discretize(X), np.zeros((20, 5)))
    np.testing.assert_array_equal(measures.correlation(X), np.zeros((5, 5)))
    np.testing.assert_array_equal(measures.relevance(X, y, kind="hall"), np.zeros(5))
    with pytest.raises(ValueError, match="every gene is constant"):
        bioqpfs.select(X, y, method="qpfs", n_genes=2)


# ---- item 19: dtype, rows, n_bins ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [int, "float16", str, "nonsense", np.complex128, None])
def test_output_dtype_must_be_float32_or_float64(rng, dtype):
    X, y = _data(rng)
    codes = measures.discretize(X)
    for call in (lambda: measures.mutual_information(codes, dtype=dtype),
                 lambda: measures.conditional_mutual_information(codes, y, dtype=dtype),
                 lambda: measures.correlation(X, dtype=dtype)):
        with pytest.raises(TypeError, match="dtype must be numpy.float32 or numpy.float64"):
            call()
    assert measures.mutual_information(codes, dtype="float32").dtype == np.float32


def test_scalar_rows_get_a_clear_error(rng):
    X, y = _data(rng)
    codes = measures.discretize(X)
    for call in (lambda: measures.mutual_information(codes, rows=5),
                 lambda: measures.conditional_mutual_information(codes, y, rows=5),
                 lambda: measures.correlation(X, rows=5)):
        with pytest.raises(TypeError, match=r"rows=\[5\]"):
            call()


@pytest.mark.parametrize("n_bins", [2.5, "3", None, True])
def test_n_bins_must_be_an_integer(rng, n_bins):
    X, y = _data(rng)
    with pytest.raises(TypeError, match="n_bins must be an integer between 2 and 255"):
        measures.discretize(X, "quantile", n_bins=n_bins)
    with pytest.raises(TypeError, match="n_bins must be an integer"):
        measures.relevance(X, y, discretization="quantile", n_bins=n_bins)


def test_labels_series_rangeindex_matching_shuffled_rows_is_refused(rng):
    """Labels with the default index 0..n-1 beside a shuffled integer sample index (df.sample(frac=1)) were
    aligned by name; in the original order they name the rows, in the DataFrame's order they are positional, and
    nothing tells the two apart: refused (the names-vs-positions test above has both remedies)."""
    X, y = _data(rng)
    order = rng.permutation(len(y))
    df = pd.DataFrame(X[order], index=order)  # e.g. df.sample(frac=1): a shuffled integer index
    with pytest.raises(ValueError, match="it is unclear whether y is in sample order or names the samples"):
        check_labels(pd.Series(y), len(y), sample_names=df.index, name="y")


def test_anndata_passed_as_matrix_gets_a_pointer_to_tl(rng):
    import anndata as ad

    X, y = _data(rng)
    with pytest.raises(TypeError, match="is an AnnData.*tl.select_genes"):
        bioqpfs.select(ad.AnnData(X), y, method="qpfs", n_genes=2)


def test_np_asarray_of_a_sparse_matrix_is_named(rng):
    """np.asarray(csr) is a 0-d object array wrapping the matrix (no conversion): say so, not "dtype object"."""
    X, y = _data(rng)
    with pytest.raises(TypeError, match=r"0-d NumPy object array holding a scipy.sparse matrix.*pass the sparse"):
        bioqpfs.select(np.asarray(sp.csr_matrix(X)), y, method="qpfs", n_genes=2)
    with pytest.raises(TypeError, match="must be numeric, got dtype object"):  # other object arrays: as before
        bioqpfs.select(np.array([["a"] * X.shape[1]] * X.shape[0], dtype=object), y, method="qpfs", n_genes=2)


def test_dataframe_with_annotation_columns_names_them(rng):
    """A DataFrame holding a categorical or text column failed with "X must be numeric, got dtype object", without
    saying which column; the message names them now (a pandas Series of text too keeps the plain message)."""
    X, y = _data(rng)
    frame = pd.DataFrame(X, columns=[f"g{j}" for j in range(X.shape[1])])
    frame["donor"] = pd.Categorical(["d1", "d2"] * (X.shape[0] // 2) + ["d1"] * (X.shape[0] % 2))
    frame["note"] = "ok"
    with pytest.raises(TypeError, match=r"X must be numeric, but 2 column\(s\) are not: donor, note \(category\)"):
        bioqpfs.select(frame, y, method="qpfs", n_genes=2)
    np.testing.assert_array_equal(bioqpfs.select(frame.drop(columns=["donor", "note"]), y, method="qpfs",
                                                 n_genes=2).ranking,
                                  bioqpfs.select(X, y, method="qpfs", n_genes=2).ranking)
