"""The same values in another representation give the same answer, or a named refusal (hunt, stop 53)."""
import re
import warnings

import numpy as np
import pytest

import bioqpfs
from bioqpfs import measures


def _data():
    rng = np.random.default_rng(0)
    codes = np.repeat([0, 1, 2], 12)
    X = rng.poisson(2.0, size=(codes.size, 16)).astype(np.float64)
    X[:, :4] += 4 * (codes[:, None] == np.arange(4)[None, :] % 3)
    return X, codes


def _select(X, y, method="qpfs"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bioqpfs.select(X, y, method=method, n_genes=4, random_state=0)


@pytest.mark.parametrize("dtype", [">i8", ">i4", ">u2"])
def test_big_endian_labels_are_the_same_classes(dtype):
    # labels read from a big-endian file ('>i8'): pandas' hash tables refused them with "Big-endian buffer not
    # supported on little-endian compiler", from deep inside the factorisation
    X, codes = _data()
    big = codes.astype(dtype)
    ref = _select(X, codes)
    sel = _select(X, big)
    np.testing.assert_array_equal(sel.ranking, ref.ranking)
    np.testing.assert_array_equal(sel.weights, ref.weights)
    np.testing.assert_array_equal(measures.relevance(X, big), measures.relevance(X, codes))
    assert big.dtype == np.dtype(dtype)    # the caller's array is not byte-swapped in place


def test_big_endian_discrete_Yd_columns():
    X, _ = _data()
    D = measures.discretize(X)
    native = measures.mutual_information(D, D[:, :2].astype(np.int32), discretization=None)
    big = measures.mutual_information(D, D[:, :2].astype(">i4"), discretization=None)
    np.testing.assert_array_equal(big, native)


def test_multiindex_columns_are_refused_naming_the_fix():
    # np.asarray(X.columns) made tuples of a MultiIndex: numpy's "setting an array element with a sequence"
    import pandas as pd

    X, codes = _data()
    df = pd.DataFrame(X, columns=pd.MultiIndex.from_tuples([(f"g{j}", "x") for j in range(X.shape[1])]))
    with pytest.raises(ValueError, match=r"MultiIndex columns.*feature_names="):
        _select(df, codes)
    names = [f"g{j}" for j in range(X.shape[1])]
    np.testing.assert_array_equal(bioqpfs.select(df, codes, n_genes=4, feature_names=names).ranking,
                                  bioqpfs.select(X, codes, n_genes=4).ranking)


@pytest.mark.parametrize("shape", ["column", "row"])
def test_sparse_label_vector_is_its_dense_labels(shape):
    # a sparse column/row of labels was refused as "y must be 1-D, got shape (n, 1)", a shape taken from a dense y
    import scipy.sparse as sp

    X, codes = _data()
    y = sp.csr_matrix(codes[:, None] if shape == "column" else codes[None, :])
    np.testing.assert_array_equal(_select(X, y).ranking, _select(X, codes).ranking)
    np.testing.assert_array_equal(measures.relevance(X, y), measures.relevance(X, codes))


def test_sparse_label_levels_and_estimator_y():
    # a sparse y of two levels failed with an IndexError on a 0-d array; the estimator's fit with pandas'
    # "unhashable type: 'csr_matrix'" from pandas' factorisation
    import scipy.sparse as sp

    from bioqpfs.estimators import QPFSSelector

    X, codes = _data()
    levels = np.stack([codes // 2, codes], axis=1)
    np.testing.assert_array_equal(_select(X, sp.csr_matrix(levels)).ranking, _select(X, levels).ranking)
    dense = QPFSSelector(n_features_to_select=4, random_state=0).fit(X, codes)
    with warnings.catch_warnings():   # scikit-learn's DataConversionWarning for a column vector, as for a dense one
        warnings.simplefilter("ignore")
        sparse = QPFSSelector(n_features_to_select=4, random_state=0).fit(X, sp.csr_matrix(codes[:, None]))
    np.testing.assert_array_equal(sparse.get_support(indices=True), dense.get_support(indices=True))


def test_repeated_dataframe_columns_warn_as_var_names_do():
    # select() on a DataFrame with repeated column names returned a panel named, e.g., [a, b, a] without a word;
    # tl.select_genes warns for repeated var_names and the estimators refuse them
    import pandas as pd

    X, codes = _data()
    df = pd.DataFrame(X, columns=["a", "b", "a"] + [f"g{j}" for j in range(3, X.shape[1])])
    with pytest.warns(UserWarning, match=r"columns of X are not unique .*\ba\b.*make_index_unique"):
        sel = bioqpfs.select(df, codes, n_genes=4, random_state=0)
    np.testing.assert_array_equal(sel.ranking, bioqpfs.select(X, codes, n_genes=4, random_state=0).ranking)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        bioqpfs.select(pd.DataFrame(X), codes, n_genes=4, random_state=0)   # unique (default) columns: silent


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_backed_sparse_dataset_is_read_as_its_matrix(fmt, tmp_path):
    # adata.X of a backed sparse h5ad (anndata's CSRDataset) was "X must be numeric, got dtype object" for select()
    # and the measures (np.asarray wrapped it in a 0-d object array), "Expected 2D array, got scalar array" for fit
    import anndata as ad
    import scipy.sparse as sp

    from bioqpfs.estimators import QPFSSelector

    X, codes = _data()
    ad.AnnData(getattr(sp, f"{fmt}_matrix")(X)).write_h5ad(tmp_path / "a.h5ad")
    backed = ad.read_h5ad(tmp_path / "a.h5ad", backed="r")
    try:
        np.testing.assert_array_equal(_select(backed.X, codes).ranking, _select(X, codes).ranking)
        np.testing.assert_array_equal(measures.relevance(backed.X, codes), measures.relevance(X, codes))
        est = QPFSSelector(n_features_to_select=4, random_state=0).fit(backed.X, codes)
        np.testing.assert_array_equal(est.get_support(indices=True),
                                      QPFSSelector(n_features_to_select=4, random_state=0).fit(X, codes)
                                      .get_support(indices=True))
        assert est.transform(backed.X).shape == (X.shape[0], 4)
    finally:
        backed.file.close()


def test_float16_labels_are_their_values():
    # float16 labels (integer values) failed inside pandas: "float16 indexes are not supported"; non-integer ones
    # the same way instead of the continuous-labels refusal
    X, codes = _data()
    np.testing.assert_array_equal(_select(X, codes.astype(np.float16)).ranking, _select(X, codes).ranking)
    with pytest.raises(ValueError, match="continuous"):
        _select(X, (codes + 0.5).astype(np.float16))


def test_a_column_of_preselected_positions_is_refused_as_nested():
    # preselected=np.array([[5], [7]]) was refused as "gene names given but no feature_names to look them up in"
    X, codes = _data()
    for nested in (np.array([[5], [7]]), [[5], [7]]):
        with pytest.raises(ValueError, match=r"preselected: got a nested list or a 2-D array.*np.ravel"):
            bioqpfs.select(X, codes, n_genes=4, preselected=nested)
    np.testing.assert_array_equal(bioqpfs.select(X, codes, n_genes=4, preselected=np.ravel([[5], [7]])).selected[:2],
                                  [5, 7])


@pytest.mark.parametrize("y_of", [lambda c: c + 1j * (c == 2), lambda c: np.array(list(c + 0j), dtype=object),
                                  lambda c: __import__("pandas").Categorical(c * 1j)])
def test_complex_labels_are_refused_naming_the_value(y_of):
    # complex labels were taken as classes without a word (each value a class), while a complex X is refused
    X, codes = _data()
    with pytest.raises(ValueError, match=r"Complex data not supported as class labels: y holds complex numbers \(e\.g\. .*j\).*as strings"):
        _select(X, y_of(codes))
    np.testing.assert_array_equal(_select(X, codes.astype(str)).ranking, _select(X, codes).ranking)


def _times():
    import pandas as pd

    stamps = pd.date_range("2024-01-01 09:00", periods=3, freq="D")
    return {"datetime64": lambda c: stamps.values[c], "Timestamp": lambda c: np.array(list(stamps[c]), dtype=object),
            "tz": lambda c: pd.Series(stamps[c]).dt.tz_localize("UTC"),
            "timedelta": lambda c: (stamps - stamps[0]).values[c],
            "Period": lambda c: pd.Series(stamps[c]).dt.to_period("D"),
            "Interval": lambda c: pd.arrays.IntervalArray.from_breaks([0, 1, 2, 3])[c]}


@pytest.mark.parametrize("kind", sorted(_times()))
def test_time_labels_group_samples_but_one_per_sample_is_refused(kind):
    # datetime/timedelta/Period/Interval labels: samples grouped by day stay classes (the codes' panel); one time per
    # sample (a measurement, not a class) was taken as classes with at most a warning, now it is refused
    import pandas as pd

    X, codes = _data()
    as_labels = _times()[kind]
    np.testing.assert_array_equal(_select(X, as_labels(codes)).ranking, _select(X, codes).ranking)
    each = np.arange(codes.size) % 30       # 30 values for 36 samples: 24 samples alone in their class
    if kind in ("datetime64", "Timestamp", "tz", "timedelta"):
        stamps = pd.date_range("2024-01-01 09:00", periods=30, freq="37min")
        each_y = {"datetime64": stamps.values[each], "Timestamp": np.array(list(stamps[each]), dtype=object),
                  "tz": pd.Series(stamps[each]).dt.tz_localize("UTC"),
                  "timedelta": (stamps - stamps[0]).values[each]}[kind]
    elif kind == "Period":
        each_y = pd.Series(pd.date_range("2024-01-01", periods=30, freq="D")[each]).dt.to_period("D")
    else:
        each_y = pd.arrays.IntervalArray.from_breaks(np.arange(31))[each]
    with pytest.raises(ValueError, match=r"y looks continuous: \w+ values where 24 of 36 samples are alone.*group"):
        _select(X, each_y)
    with pytest.warns(UserWarning, match="alone in their class"):   # an explicit Categorical: classes, as ever
        bioqpfs.select(X, pd.Categorical(each_y), n_genes=4, random_state=0)


def test_repeated_feature_names_warn_once_on_every_face():
    # select(..., feature_names=[a, b, a]) (and the selector functions, error_curve) returned a panel named, e.g.,
    # [a, b, a] without a word, while a DataFrame's repeated columns warn and the estimators refuse them
    import anndata as ad
    import pandas as pd

    from bioqpfs.evaluate import error_curve
    from bioqpfs.selectors.qpfs import qpfs

    X, codes = _data()
    names = ["a", "b", "a"] + [f"g{j}" for j in range(3, X.shape[1])]
    faces = {"select": lambda: bioqpfs.select(X, codes, n_genes=4, random_state=0, feature_names=names),
             "qpfs": lambda: qpfs(X, codes, n_genes=4, random_state=0, feature_names=names),
             "error_curve": lambda: error_curve(X, codes, ["qpfs"], n_genes=[2, 4], feature_names=names,
                                                random_state=0)}
    for face, call in faces.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = call()
        repeated = [str(w.message) for w in caught if "not unique" in str(w.message)]
        assert len(repeated) == 1, (face, repeated)
        assert re.search(r"feature_names are not unique \(1 repeated name\(s\): a\).*make_index_unique", repeated[0])
        assert next(w for w in caught if "not unique" in str(w.message)).filename == __file__, face   # the user's line
        if face == "select":
            np.testing.assert_array_equal(out.ranking, bioqpfs.select(X, codes, n_genes=4, random_state=0).ranking)
    df = pd.DataFrame(X, columns=names)   # a DataFrame: its columns' warning, not a second one for feature_names
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error_curve(df, codes, ["qpfs"], n_genes=[2, 4], random_state=0)
        bioqpfs.select(df, codes, n_genes=4, random_state=0)
    assert [str(w.message)[:28] for w in caught if "not unique" in str(w.message)] == ["the columns of X are not uni"] * 2
    adata = ad.AnnData(X, obs=pd.DataFrame({"g": codes.astype(str)}, index=[f"c{i}" for i in range(codes.size)]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.var_names = [f"g{j}" for j in range(X.shape[1] - 2)] + ["z", "z"]
    with warnings.catch_warnings(record=True) as caught:   # tl: its var_names warning alone
        warnings.simplefilter("always")
        bioqpfs.tl.select_genes(adata, "g", n_genes=4, random_state=0)
    assert [str(w.message)[:24] for w in caught if "not unique" in str(w.message)] == ["adata.var_names are not "]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        bioqpfs.select(X, codes, n_genes=4, random_state=0, feature_names=[f"g{j}" for j in range(X.shape[1])])


def test_tl_groupby_of_complex_or_time_columns_as_select():
    # tl.select_genes(groupby=<complex or datetime column>) took each value as a class, as select() did: the same
    # refusals now, naming the column and the fix written for it
    import anndata as ad
    import pandas as pd

    X, codes = _data()
    stamps = pd.date_range("2024-01-01 09:00", periods=30, freq="37min")
    each = np.arange(codes.size) % 30
    obs = pd.DataFrame({"complex": codes + 1j, "day": pd.date_range("2024-01-01", periods=3, freq="D")[codes],
                        "text": pd.Categorical(codes.astype(str)), "stamp": stamps[each],
                        "since": (stamps - stamps[0])[each]}, index=[f"c{i}" for i in range(codes.size)])
    adata = ad.AnnData(X, obs=obs)

    def panel(groupby):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return list(bioqpfs.tl.select_genes(adata.copy(), groupby, n_genes=4, random_state=0,
                                                copy=True).uns["bioqpfs"]["selected"])

    with pytest.raises(ValueError, match=re.escape("Complex data not supported as class labels: adata.obs['complex'] "
                                                   "holds complex numbers (e.g. 1j)") + r".*adata\.obs\['complex'\]\.astype\(str\)"):
        panel("complex")
    assert panel("day") == panel("text")            # grouped by day: classes, as the same groups written as text
    for column, kind in (("stamp", "datetime"), ("since", "timedelta")):
        with pytest.raises(ValueError, match=re.escape(f"adata.obs['{column}'] looks continuous: {kind} values where "
                                                       "24 of 36") + r".*" + re.escape(f"adata.obs['{column}'].dt.floor")):
            panel(column)
        with pytest.raises(ValueError, match=f"y looks continuous: {kind} values"):   # select: the same refusal
            _select(X, obs[column].to_numpy())


def test_repeated_name_check_reads_numpy_stringdtype_names():
    """The repeated-names check cast the names with ``astype(str)``, which numpy refuses for its variable-width
    ``StringDType`` (what anndata >= 0.12 may read string arrays back as): "cannot cast dtype StringDType()"."""
    from bioqpfs._validation import warn_repeated_names

    names = np.array(["a", "b", "a"], dtype=np.dtypes.StringDType())
    with pytest.warns(UserWarning, match="1 repeated name"):
        assert list(warn_repeated_names(names, "feature_names", "make them unique")) == ["a"]
    assert len(warn_repeated_names(np.array(["a", "b"], dtype=np.dtypes.StringDType()), "x", "y")) == 0
