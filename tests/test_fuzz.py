"""Property-based fuzzing of the public API with hypothesis (issue 18, item 4).

Random shapes (1 gene, 2 samples, one sample per class), dtypes (bool, int8-int64, uint8-uint64,
float16/32/64), containers (dense, CSR/CSC/COO with explicit zeros, DataFrame), NaN/Inf at random
positions and label types (str, int, float integers, bool, Categorical with unused categories,
pandas nullable Int64/string, missing labels) against :func:`bioqpfs.select` (every registered method),
``bioqpfs.measures.*``, :func:`bioqpfs.tl.select_genes` and the CLI's table reader.

Invariants: either a ``ValueError``/``TypeError``/``MemoryError`` raised by bioqpfs itself (the raising
frame is in the package, not in numpy/scipy/pandas) whose message names the offending input, or a result
whose ranking is a permutation of (a prefix of) the genes, with finite weights >= 0 (summing to 1 for the
simplex methods); the inputs are never modified and a second seeded run gives the identical outcome.

Profiles: ``ci`` (the default; few examples, derandomised, so the suite is reproducible and adds well under
a minute on 2 cores) and ``long`` for a local hunt (50x the examples, random, failures kept in
``.hypothesis/``)::

    HYPOTHESIS_PROFILE=long python -m pytest -q tests/test_fuzz.py
"""
import argparse
import copy
import os
import tempfile
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, assume, event, given, settings  # the dev extra installs it
from hypothesis import strategies as st

import bioqpfs
from bioqpfs import measures

_SCALE = {"ci": 1, "long": 50}
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("long", deadline=None, print_blob=True, suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in _SCALE:
    raise ValueError(f"HYPOTHESIS_PROFILE={PROFILE!r}: use 'ci' (default) or 'long'")
settings.load_profile(PROFILE)


def examples(n):
    """``n`` examples in the ci profile, 50 times as many in the long one."""
    return settings(max_examples=n * _SCALE[PROFILE])


PACKAGE = os.path.dirname(bioqpfs.__file__)
DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
          np.float16, np.float32, np.float64]
SIMPLEX = {"qpfs", "eqpfs", "tlkm_qpfs", "ikm_qpfs", "ikma_qpfs"}   # weights on the probability simplex
#: words one of which a message about a bad (X, y) must contain: it names the input or the quantity at fault
INPUT_WORDS = ("X", "y", "gene", "sample", "class", "label", "n_genes", "feature", "value")


# ---------------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------------
@st.composite
def matrices(draw, max_m=6, containers=("dense", "csr", "csc", "coo", "frame")):
    """``(X, dense float64 copy of its values, has_non_finite)``; most are valid, faults are injected rarely
    (so that the success path is exercised too)."""
    n = draw(st.sampled_from([2, 3, 4] + [6, 9, 12] * 3))
    m = draw(st.integers(1, max_m))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    container = draw(st.sampled_from(containers))
    assume(not (container in ("csr", "csc", "coo") and dtype == np.float16))  # scipy.sparse has no float16
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = draw(st.sampled_from(["normal"] * 3 + ["counts", "sparse"] * 2 + ["constant", "tiny", "huge"]))
    if shape == "normal":
        v = rng.normal(size=(n, m)) * 3
    elif shape == "counts":
        v = rng.poisson(2.0, size=(n, m)).astype(float)
    elif shape == "sparse":
        v = rng.gamma(1.0, 2.0, size=(n, m)) * (rng.random((n, m)) < 0.3)
    elif shape == "constant":
        v = np.full((n, m), float(rng.integers(-3, 4)))
    elif shape == "tiny":
        v = rng.normal(size=(n, m)) * 1e-300
    else:
        v = rng.normal(size=(n, m)) * 1e300
    if dtype.kind == "b":
        values = v > 0
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = np.clip(np.rint(np.abs(v) if dtype.kind == "u" else v), info.min // 2, info.max // 2).astype(dtype)
    else:
        with np.errstate(over="ignore"):
            values = v.astype(dtype)
        specials = st.tuples(st.integers(0, n - 1), st.integers(0, m - 1), st.sampled_from([np.nan, np.inf, -np.inf]))
        for i, j, special in draw(st.lists(specials, min_size=1, max_size=2)) if draw(st.integers(0, 5)) == 0 else []:
            values[i, j] = special
    non_finite = dtype.kind == "f" and not np.isfinite(values).all()
    if container == "frame":
        X = pd.DataFrame(values, columns=[f"g{j}" for j in range(m)])
    elif container == "dense":
        X = values
    else:
        explicit = rng.random((n, m)) < 0.3   # explicit zeros: stored entries whose value is 0
        keep = (values != 0) | explicit
        r, c = np.nonzero(keep)
        X = sp.coo_matrix((values[r, c], (r, c)), shape=(n, m)).asformat(container)
    with np.errstate(over="ignore"):
        return X, values.astype(np.float64), non_finite


@st.composite
def labels(draw, n):
    """``(y, n_classes, has_missing)`` for ``n`` samples, in one of the label types users pass."""
    if draw(st.integers(0, 5)) == 0 and n <= 6:
        codes = np.arange(n)                     # one sample per class
    else:
        k = min(n, draw(st.sampled_from([1, 2, 2, 3, 3, 4])))
        codes = np.asarray(draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)))
    names = np.array(["b", "a", "c", "d", "e", "f", "g", "h", "i"])
    kind = draw(st.sampled_from(["str", "int", "float", "bool", "categorical", "Int64", "string", "list"]))
    missing = kind in ("categorical", "Int64", "string") and draw(st.integers(0, 5)) == 0
    if kind == "str":
        y = names[codes]
    elif kind == "int":
        y = codes * 3 - 1
    elif kind == "float":
        y = codes.astype(float) + 1.0
    elif kind == "bool":
        y = codes % 2 == 0
    elif kind == "categorical":
        y = pd.Categorical(names[codes], categories=list(names[: codes.max() + 1]) + ["unused"])
    elif kind == "Int64":
        y = pd.array(codes, dtype="Int64")
    elif kind == "string":
        y = pd.array(names[codes], dtype="string")
    else:
        y = [str(c) for c in codes]
    if missing:
        y = y.copy()
        y[draw(st.integers(0, n - 1))] = None   # NaN / <NA> in the nullable and categorical types
    n_classes = len(np.unique(codes % 2 if kind == "bool" else codes))
    return y, n_classes, missing


# ---------------------------------------------------------------------------------------------------
# invariants
# ---------------------------------------------------------------------------------------------------
def snapshot(x):
    """A deep copy of an input, for the 'never modified' check."""
    return x.copy() if sp.issparse(x) else copy.deepcopy(x)


def assert_unchanged(before, after):
    assert type(before) is type(after)
    if sp.issparse(before):
        assert before.format == after.format and before.dtype == after.dtype and before.nnz == after.nnz
        for attr in ("data", "indices", "indptr", "row", "col"):
            if hasattr(before, attr):
                np.testing.assert_array_equal(getattr(before, attr), getattr(after, attr))
    elif isinstance(before, pd.DataFrame):
        pd.testing.assert_frame_equal(before, after)
    elif isinstance(before, pd.Categorical):
        assert before.categories.equals(after.categories) and before.ordered == after.ordered
        np.testing.assert_array_equal(before.codes, after.codes)
    elif isinstance(before, list):
        assert before == after
    else:
        before_a, after_a = np.asarray(before), np.asarray(after)
        assert before_a.dtype == after_a.dtype
        assert_same_values(before_a, after_a)


def assert_same_values(a, b):
    if isinstance(a, pd.api.extensions.ExtensionArray) or a.dtype == object:
        assert pd.Series(a).equals(pd.Series(b))
    else:
        np.testing.assert_array_equal(a, b)


def assert_clean_error(err, *, non_finite=False, missing=False, one_class=False, other=(), words=INPUT_WORDS):
    """A ValueError/TypeError/MemoryError raised in bioqpfs's own code, with a message naming the input.

    When the input has known faults (NaN/Inf in X, a missing label, a single class, ``other``), the message must
    name one of them; otherwise it must name the input or quantity at fault (one of ``words``)."""
    assert isinstance(err, (ValueError, TypeError, MemoryError)), repr(err)
    tb = err.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename
    assert os.path.abspath(where).startswith(PACKAGE + os.sep), f"raised in {where}, not by bioqpfs: {err!r}"
    msg = str(err)
    assert msg.strip(), repr(err)
    faults = [("NaN", "infinite")] * non_finite + [("missing", "NaN", "NA")] * missing + [("class",)] * one_class
    faults += list(other)
    if faults:  # one of the known faults, or a condition of the data the strategies do not predict
        assert any(w in msg for fault in faults + [("no gene carries information", "constant", "single sample")]
                   for w in fault), msg
    else:
        assert any(w in msg for w in words), msg


def outcome(call):
    """``("ok", result)`` or ``("error", exception)``, warnings silenced (constant genes, one-sample classes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return "ok", call()
        except Exception as e:  # noqa: BLE001 - classified by the caller
            return "error", e


def assert_ranking(sel, m):
    r = np.asarray(sel.ranking)
    assert r.dtype.kind in "iu" and len(np.unique(r)) == r.size and r.size >= 1
    assert ((0 <= r) & (r < m)).all()
    s = np.asarray(sel.selected)
    np.testing.assert_array_equal(s, r[: s.size])


# ---------------------------------------------------------------------------------------------------
# bioqpfs.select: every registered method
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", sorted(bioqpfs.methods()))
@examples(12)
@given(data=st.data())
def test_select_fuzz(method, data):
    X, values, non_finite = data.draw(matrices())
    n, m = values.shape
    n_labels = n + data.draw(st.sampled_from([0] * 18 + [-1, 1]))   # at times one label too few or too many
    y, n_classes, missing = data.draw(labels(max(n_labels, 1)))
    n_genes = data.draw(st.sampled_from([None, 0, -1, 2.0, 2.5, True, "3"]) if data.draw(st.integers(0, 7)) == 0
                        else st.integers(1, m + 1))
    bad_n_genes = (n_genes is None and method == "sdp_cmi") or (  # the SDP relaxation needs k
        n_genes is not None and not (isinstance(n_genes, int) and not isinstance(n_genes, bool) and n_genes >= 1))
    X0, y0 = snapshot(X), snapshot(y)

    def run():
        return bioqpfs.select(X, y, method=method, n_genes=n_genes, random_state=0)

    first = outcome(run)
    event(f"outcome: {first[0]}")   # pytest --hypothesis-show-statistics: the share of examples that succeed
    assert_unchanged(X0, X)
    assert_unchanged(y0, y)
    second = outcome(run)
    if first[0] == "error":
        assert_clean_error(first[1], non_finite=non_finite, missing=missing, one_class=n_classes < 2,
                           other=[("n_genes",)] * bad_n_genes + [("sample", "length", "rows")] * (n_labels != n))
        assert second[0] == "error" and str(second[1]) == str(first[1])
        return
    assert not non_finite and not missing and n_classes >= 2 and n_labels == n, "bad input was accepted"
    assert not bad_n_genes or n_genes == 2.0, f"n_genes={n_genes!r} was accepted"
    sel = first[1]
    assert_ranking(sel, m)
    if n_genes is not None:
        assert len(sel.selected) == min(int(n_genes), m)
    w = np.asarray(sel.weights, dtype=np.float64)
    assert w.shape == (m,) and np.isfinite(w).all(), w
    # the one exception to w >= 0: SPEC_CMI + Nystrom with a mixed-sign eigenvector of the approximated Q
    # ranks by the section 3.4 dummy-variable weights, which may be negative (found by the long profile)
    assert (w >= 0).all() or sel.diagnostics.get("ranking_rule") == "dummy_variable", w
    if method in SIMPLEX:
        assert abs(w.sum() - 1.0) <= 1e-9, w.sum()
    assert second[0] == "ok", second[1]
    np.testing.assert_array_equal(second[1].ranking, sel.ranking)
    np.testing.assert_array_equal(second[1].weights, sel.weights)


# ---------------------------------------------------------------------------------------------------
# bioqpfs.measures.*
# ---------------------------------------------------------------------------------------------------
MEASURES = ["discretize", "mutual_information", "conditional_mutual_information", "relevance", "correlation",
            "entropy"]


@pytest.mark.parametrize("name", MEASURES)
@examples(15)
@given(data=st.data())
def test_measures_fuzz(name, data):
    X, values, non_finite = data.draw(matrices(containers=("dense", "csr", "csc", "coo")))
    n, m = values.shape
    y, n_classes, missing = data.draw(labels(n))
    disc = data.draw(st.sampled_from(["mean_sd", "quantile", "zero_quantile", "auto", None]))
    n_bins = data.draw(st.integers(2, 4))
    X0, y0 = snapshot(X), snapshot(y)
    if name == "discretize":
        method = data.draw(st.sampled_from(["mean_sd", "quantile", "zero_quantile", "mdl", "auto"]))
        call = lambda: measures.discretize(X, method, n_bins=n_bins, y=y if method == "mdl" else None)  # noqa: E731
        uses_y = method == "mdl"
    elif name == "mutual_information":
        call = lambda: measures.mutual_information(X, discretization=disc, n_bins=n_bins)  # noqa: E731
        uses_y = False
    elif name == "conditional_mutual_information":
        call = lambda: measures.conditional_mutual_information(X, y, discretization=disc, n_bins=n_bins)  # noqa: E731
        uses_y = True
    elif name == "relevance":
        kind = data.draw(st.sampled_from(["mi", "hall", "mst", "mst_cpx"]))
        call = lambda: measures.relevance(X, y, kind=kind, n_bins=n_bins)  # noqa: E731
        uses_y = True
    elif name == "correlation":
        call = lambda: measures.correlation(X)  # noqa: E731
        uses_y = False
    else:
        call = lambda: measures.entropy(X, discretization=disc, n_bins=n_bins)  # noqa: E731
        uses_y = False
    first = outcome(call)
    event(f"outcome: {first[0]}")
    assert_unchanged(X0, X)
    assert_unchanged(y0, y)
    second = outcome(call)
    if first[0] == "error":
        assert_clean_error(first[1], non_finite=non_finite, missing=uses_y and missing,
                           one_class=uses_y and n_classes < 2, words=INPUT_WORDS + ("discretization", "codes", "level", "integer", "bins"))
        assert second[0] == "error" and str(second[1]) == str(first[1])
        return
    assert not non_finite, "NaN/Inf accepted"
    out = np.asarray(first[1])
    assert np.isfinite(out.astype(np.float64)).all(), out
    np.testing.assert_array_equal(np.asarray(second[1]), out)
    if name == "discretize":
        assert out.shape == (n, m) and out.dtype.kind in "iu"
    elif name in ("mutual_information", "conditional_mutual_information", "correlation"):
        assert out.shape == (m, m) and (out >= -1e-12).all()
        if name == "conditional_mutual_information":   # I(X_i; C | X_j) <= H(C) <= log2(classes); asymmetric
            assert (out <= np.log2(n_classes) + 1e-9).all(), out
        else:
            np.testing.assert_allclose(out, out.T, rtol=1e-12, atol=1e-12)
        if name == "mutual_information":   # I(X_i; X_j) <= min(H(X_i), H(X_j)) = the diagonal
            assert (out <= np.minimum.outer(np.diag(out), np.diag(out)) + 1e-9).all(), out
        if name == "correlation":
            assert (out <= 1 + 1e-12).all()
    else:
        assert out.shape == (m,) and (out >= -1e-12).all()
        if name == "entropy" or (name == "relevance" and kind == "mi"):
            bound = np.log2(n_classes) if name == "relevance" else np.log2(n)   # bits
            assert (out <= bound + 1e-9).all(), (out, bound)


# ---------------------------------------------------------------------------------------------------
# bioqpfs.tl.select_genes
# ---------------------------------------------------------------------------------------------------
@examples(25)
@given(data=st.data())
def test_select_genes_fuzz(data):
    import anndata as ad

    X, values, non_finite = data.draw(matrices(containers=("dense", "csr", "csc")))
    n, m = values.shape
    y, n_classes, missing = data.draw(labels(n))
    method = data.draw(st.sampled_from([None, "qpfs", "maxrel", "mrmr_mid", "spec_cmi", "random"]))
    n_genes = data.draw(st.integers(1, m + 1))
    obs = pd.DataFrame({"grp": pd.Series(y, index=[f"c{i}" for i in range(n)]) if not isinstance(y, list)
                        else pd.Series(y, index=[f"c{i}" for i in range(n)], dtype=object)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata = ad.AnnData(X, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(m)]))
    X0, obs0 = snapshot(adata.X), adata.obs.copy()
    call = lambda: bioqpfs.tl.select_genes(adata, "grp", method=method, n_genes=n_genes, copy=True)  # noqa: E731
    first, second = outcome(call), outcome(call)
    event(f"outcome: {first[0]}")
    assert_unchanged(X0, adata.X)
    pd.testing.assert_frame_equal(obs0, adata.obs)
    assert list(adata.var.columns) == [] and len(adata.uns) == 0
    if first[0] == "error":
        assert_clean_error(first[1], non_finite=non_finite, missing=missing, one_class=n_classes < 2,
                           words=INPUT_WORDS + ("grp", "groupby", "obs"))
        assert second[0] == "error" and str(second[1]) == str(first[1])
        return
    assert not non_finite and not missing and n_classes >= 2, "bad input was accepted"
    key = method or "bioqpfs"
    res = first[1]
    w, rank, chosen = (res.var[f"{key}_{c}"].to_numpy() for c in ("weight", "rank", "selected"))
    assert np.isfinite(w).all() and (w >= 0).all()
    ranked = np.sort(rank[~np.isnan(rank)])
    np.testing.assert_array_equal(ranked, np.arange(1, ranked.size + 1))
    assert chosen.sum() == min(n_genes, m) == len(res.uns[key]["selected"])
    assert set(res.var_names[chosen]) == set(res.uns[key]["selected"])
    pd.testing.assert_frame_equal(second[1].var, res.var)


# ---------------------------------------------------------------------------------------------------
# the CLI's table reader
# ---------------------------------------------------------------------------------------------------
CELLS = ["1", "-2.5", "0", "3e2", "", "nan", "NA", "inf", "abc", "1e400", " 4 ", '"5"', "0x1F", "1,5"]
NAMES = ["g1", "g2", "g3", "g1", "", "Gene A", "ünï", "a;b", "123", "nan", "cls"]
LABELS = ["A", "B", "C", "", "1", "1.0", "NA", "A "]


@examples(60)
@given(data=st.data())
def test_table_reader_fuzz(data):
    from bioqpfs.cli import _read_table

    n = data.draw(st.integers(1, 5))
    m = data.draw(st.integers(0, 4))
    sep = data.draw(st.sampled_from([",", "\t"]))
    suffix = data.draw(st.sampled_from([".csv", ".tsv"]))
    orientation = data.draw(st.sampled_from(["samples-by-genes", "genes-by-samples"]))
    inline = orientation == "samples-by-genes" and data.draw(st.booleans())
    clean = data.draw(st.booleans())
    if clean:   # a well-formed table: the delimiter its name says, unique names, numbers, two classes
        sep = "," if suffix == ".csv" else "\t"
        samples, genes = [f"s{i}" for i in range(n)], [f"g{j}" for j in range(m)]
        cells = [[data.draw(st.sampled_from(CELLS[:4])) for _ in range(m)] for _ in range(n)]
        labs = data.draw(st.lists(st.sampled_from(LABELS[:2]), min_size=n, max_size=n))
    else:
        samples = data.draw(st.lists(st.sampled_from(["s1", "s2", "s3", "s4", "s5", "s1", "", "x"]), min_size=n,
                                     max_size=n))
        genes = data.draw(st.lists(st.sampled_from(NAMES), min_size=m, max_size=m))
        cells = [[data.draw(st.sampled_from(CELLS)) for _ in range(m)] for _ in range(n)]
        labs = data.draw(st.lists(st.sampled_from(LABELS), min_size=n, max_size=n))
    if orientation == "samples-by-genes":
        header = ["id", *genes, *(["cls"] if inline else [])]
        rows = [[s, *c, *([lab] if inline else [])] for s, c, lab in zip(samples, cells, labs)]
    else:
        header = ["id", *samples]
        rows = [[g, *(cells[i][j] for i in range(n))] for j, g in enumerate(genes)]
    ragged = data.draw(st.integers(0, 6)) == 0 and rows
    if ragged:
        rows[-1] = rows[-1][:-1]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "expr" + suffix)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(sep.join(r) for r in [header, *rows]) + "\n")
        lab_path = None
        if not inline:
            lab_path = os.path.join(d, "labels.tsv")
            with open(lab_path, "w", encoding="utf-8") as fh:
                fh.write("\n".join(["id\tcls", *(f"{s}\t{lab}" for s, lab in zip(samples, labs))]) + "\n")
        args = argparse.Namespace(input=path, labels=lab_path, orientation=orientation, groupby="cls")
        kind, result = outcome(lambda: _read_table(args))
        event(f"outcome: {kind}")
        if kind == "error":
            assert_clean_error(result, words=("expr" + suffix, "labels.tsv", "--labels", "--orientation", "cls"))
            return
    assert result.n_obs >= 1 and result.X.dtype == np.float64 and result.X.shape == (result.n_obs, result.n_vars)
    assert result.obs_names.is_unique and result.var_names.is_unique
    assert "cls" in result.obs and len(result.obs["cls"]) == result.n_obs
    if clean and not ragged:   # the values and labels as written (parsed independently with float())
        np.testing.assert_array_equal(result.X, np.array([[float(c) for c in row] for row in cells]).reshape(n, m))
        assert list(result.obs_names) == samples and list(result.var_names) == genes
        assert list(result.obs["cls"].astype(str)) == labs


# ---------------------------------------------------------------------------------------------------
# what the fuzzer found, kept as plain regression tests
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, orientation, missing", [
    ("id\ns1\ns2\n", "samples-by-genes", "genes"),      # sample ids, no gene column
    ("id\ns1\ns2\n", "genes-by-samples", "samples"),
    ("id,g1\n", "samples-by-genes", "samples"),         # a header without lines
    ("id,g1\n", "genes-by-samples", "genes"),
])
def test_table_without_genes_or_samples_is_refused_naming_the_file(tmp_path, text, orientation, missing):
    """Before: an AnnData with 0 genes (or 0 samples) was returned, or a header-only table was reported as
    'non-numeric gene column(s)'."""
    from bioqpfs.cli import _read_table

    (tmp_path / "t.csv").write_text(text)
    (tmp_path / "l.tsv").write_text("id\tcls\ns1\tA\ns2\tB\n")
    args = argparse.Namespace(input=str(tmp_path / "t.csv"), labels=str(tmp_path / "l.tsv"),
                              orientation=orientation, groupby="cls")
    with pytest.raises(ValueError, match=rf"t\.csv has no {missing}: read as {orientation}"):
        _read_table(args)


def test_spec_cmi_is_the_same_in_every_call_when_q_is_a_multiple_of_the_identity():
    """Found by the long profile: one sample per class made every I(X_i; C | X_j) 0, so Q = H(C) I and every
    vector is a dominant eigenvector.  ARPACK's Lanczos broke down on the all-ones start vector and restarted
    from its own random generator, whose state moves from call to call: the same seeded call returned other
    weights and rankings ([0 2 1], [2 0 1], [0 1 2], [1 0 2] ... in one process).  Now the start vector is
    returned: every gene alike (uniform weights), ranked by index.  One sample per class is refused now; here
    every gene's three levels name the three classes, two samples each: the same Q = H(C) I."""
    from bioqpfs._kernels import spectral
    from bioqpfs.measures import conditional_mutual_information

    X = np.repeat(np.array([[-5, 0, 5], [0, 5, -5], [5, -5, 0]], dtype=np.int8), 2, axis=0)
    y = np.repeat(np.array(["b", "a", "c"]), 2)
    np.testing.assert_allclose(conditional_mutual_information(X, y), np.log2(3) * np.eye(3), atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [bioqpfs.select(X, y, method="spec_cmi", n_genes=1, random_state=0) for _ in range(4)]
    for run in runs:
        np.testing.assert_array_equal(run.ranking, [0, 1, 2])
        np.testing.assert_allclose(run.weights, np.full(3, 1 / np.sqrt(3)), rtol=1e-12)
    for n in (3, 12, 40):   # the kernel on c I (independent reference: every unit vector is dominant, lambda = c)
        results = [spectral.dominant_eigenvector(2.5 * np.eye(n)) for _ in range(3)]
        for lam, x, _ in results:
            assert lam == pytest.approx(2.5, rel=1e-12)
            np.testing.assert_array_equal(x, results[0][1])


@examples(40)
@given(data=st.data())
def test_dask_quantile_codes_equal_the_in_memory_codes(data):
    """Issue 13 item 2: quantile / zero_quantile codes of a Dask X are the in-memory codes, for random values
    (drawn from a small pool: ties, zeros, both signs, subnormal to 1.7e308), sample chunkings (empty chunks
    included), dense or CSR chunks, and search parameters that force many refinement passes."""
    import dask.array as da
    import scipy.sparse as sp

    from bioqpfs._kernels import discretize
    from bioqpfs._kernels.discretize_dask import dask_codes

    n, m = data.draw(st.integers(1, 40), label="n"), data.draw(st.integers(1, 4), label="m")
    pool = data.draw(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=6)) + [0.0]
    X = np.array(data.draw(st.lists(st.sampled_from(pool), min_size=n * m, max_size=n * m))).reshape(n, m)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4), label="cuts"))
    chunks = tuple(int(c) for c in np.diff([0, *cuts, n]))
    rule = data.draw(st.sampled_from(["quantile", "zero_quantile"]), label="rule")
    n_bins = data.draw(st.integers(2, 6), label="n_bins")
    search = dict(hist_bins=data.draw(st.sampled_from([None, 2, 4])),
                  collect_max=data.draw(st.sampled_from([None, 1, 3])))
    D = da.from_array(X, chunks=(chunks, m))
    if data.draw(st.booleans(), label="csr"):
        D = D.map_blocks(sp.csr_matrix, dtype=X.dtype, meta=sp.csr_matrix((0, 0)))
    want, want_levels = discretize.codes(X, rule, n_bins=n_bins)
    with np.errstate(all="ignore"):
        codes, levels = dask_codes(D, rule, n_bins=n_bins, _search=search)
    np.testing.assert_array_equal(codes.compute(), want)
    np.testing.assert_array_equal(levels, want_levels)
