"""Bad and edge-case input to the selectors: alpha at the ends of [0, 1], degenerate (information-free)
data, invalid random_state, ambiguous or too many preselected genes, and the no-NaN guarantee."""
import inspect
import warnings

import numpy as np
import pytest

import bioqpfs
from bioqpfs import _registry
from bioqpfs._kernels import simplex_qp, spectral

SOLVERS = ("auto", "quadprog", "spg")
PSD_FIXES = ("shift", "clip", "none")


@pytest.fixture
def data():
    """40 samples x 10 genes; gene 2 is strongly class-dependent (planted), the others are noise."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 10))
    y = np.repeat(["a", "b"], 20)
    X[:, 2] += 4.0 * (y == "b")
    return X, y


@pytest.fixture
def uninformative():
    """Both classes hold the same 3 samples: no gene says anything about them, F is exactly 0 under any
    discretisation.   It was 4 samples where every gene takes two values twice, which mean +- sd put in one bin;
    such genes are cut at the mean now and carry information."""
    rng = np.random.default_rng(1)
    H = rng.normal(size=(3, 8))
    return np.vstack([H, H]), np.array(["a", "a", "a", "b", "b", "b"])


# -- item 2: alpha = 1 is the MaxRel linear program, alpha = 0 pure redundancy, never NaN -----------------

@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("psd_fix", PSD_FIXES)
def test_alpha_one_puts_all_weight_on_the_most_relevant_gene(data, solver, psd_fix):
    X, y = data
    sel = bioqpfs.select(X, y, method="qpfs", n_genes=3, alpha=1.0, solver=solver, psd_fix=psd_fix)
    expected = np.zeros(10)
    expected[2] = 1.0  # the planted gene
    np.testing.assert_array_equal(sel.weights, expected)
    # QPFS section 2: "if alpha = 1 ... equivalent to the MaxRel criterion"
    np.testing.assert_array_equal(sel.ranking, bioqpfs.select(X, y, method="maxrel", n_genes=10).ranking)


@pytest.mark.parametrize("solver", SOLVERS)
def test_alpha_one_spreads_weight_equally_over_tied_genes(data, solver):
    X, y = data
    X2 = np.c_[X, X[:, 2]]  # gene 10 is an exact copy of the planted gene 2: equal relevance
    sel = bioqpfs.select(X2, y, method="qpfs", n_genes=2, alpha=1.0, solver=solver)
    expected = np.zeros(11)
    expected[[2, 10]] = 0.5
    np.testing.assert_allclose(sel.weights, expected, atol=0, rtol=1e-15)
    assert list(sel.selected) == [2, 10]


@pytest.mark.parametrize("nystrom_qp", ["auto", "subspace", "lowrank"])
def test_alpha_one_nystrom(data, nystrom_qp):
    X, y = data
    sel = bioqpfs.select(X, y, method="qpfs", n_genes=3, alpha=1.0, nystrom_rate=0.5, nystrom_qp=nystrom_qp,
                         random_state=0)
    assert np.isfinite(sel.weights).all()
    assert sel.weights[2] == 1.0 and sel.selected[0] == 2


@pytest.mark.parametrize("method", ["tlkm_qpfs", "ikm_qpfs", "ikma_qpfs"])
def test_alpha_one_cluster_methods(data, method):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # at alpha=1 only the top representative survives
        sel = bioqpfs.select(X, y, method=method, n_genes=3, alpha=1.0, random_state=0)
    assert np.isfinite(sel.weights).all()
    assert sel.weights[2] == 1.0 and sel.selected[0] == 2


@pytest.mark.parametrize("solver", SOLVERS)
def test_alpha_zero_pure_redundancy_every_solver(data, solver):
    X, y = data
    sel = bioqpfs.select(X, y, method="qpfs", n_genes=3, alpha=0.0, solver=solver, psd_fix="shift")
    ref = bioqpfs.select(X, y, method="qpfs", n_genes=3, alpha=0.0, solver="quadprog", psd_fix="shift")
    assert np.isfinite(sel.weights).all() and abs(sel.weights.sum() - 1) < 1e-12
    np.testing.assert_allclose(sel.weights, ref.weights, atol=1e-6)


@pytest.mark.parametrize("method", ["tlkm_qpfs", "ikm_qpfs", "ikma_qpfs"])
def test_alpha_zero_cluster_methods(data, method):
    X, y = data
    sel = bioqpfs.select(X, y, method=method, n_genes=3, alpha=0.0, random_state=0)
    assert np.isfinite(sel.weights).all() and abs(sel.weights.sum() - 1) < 1e-12


@pytest.mark.parametrize("solver", SOLVERS)
def test_kernel_zero_quadratic_term_is_the_linear_program(solver):
    a = np.array([0.2, 0.7, 0.1, 0.7])
    G = simplex_qp.QPMatrix(np.eye(4), scale=0.0)
    x, info = simplex_qp.solve(G, a, solver=solver)
    np.testing.assert_array_equal(x, [0.0, 0.5, 0.0, 0.5])
    assert info["kkt_residual"] == 0.0


def test_selection_refuses_non_finite_weights():
    with pytest.raises(ValueError, match="not finite"):
        bioqpfs.Selection("qpfs", np.array([np.nan, 0.5, 0.5]), np.array([1, 2, 0]))


# -- item 11: information-free data (2 samples) -----------------------------------------------------------

@pytest.mark.parametrize("method", ["spec_cmi", "sdp_cmi"])
def test_spectral_methods_on_information_free_data_raise_clearly(uninformative, method):
    X, y = uninformative
    with pytest.raises(ValueError, match="no gene carries information"):
        bioqpfs.select(X, y, method=method, n_genes=2)


@pytest.mark.parametrize("method", ["tlkm_qpfs", "ikm_qpfs", "ikma_qpfs"])
def test_cluster_methods_on_information_free_data_raise_clearly(uninformative, method):
    X, y = uninformative
    with pytest.raises(ValueError, match="no gene carries information"):
        bioqpfs.select(X, y, method=method, n_genes=2, random_state=0)


def test_qpfs_on_information_free_data_raises_even_with_alpha(uninformative):
    X, y = uninformative
    for alpha in (None, 0.0, 1.0):
        with pytest.raises(ValueError, match="no gene carries information"):
            bioqpfs.select(X, y, method="qpfs", n_genes=2, alpha=alpha)


def test_dominant_eigenvector_of_zero_matrix_needs_no_eigensolver():
    lam, x, info = spectral.dominant_eigenvector(np.zeros((5, 5)))
    assert lam == 0.0 and info["method"] == "zero matrix"
    np.testing.assert_allclose(x, np.full(5, 1 / np.sqrt(5)))


# -- item 12: random_state ------------------------------------------------------------------------------

@pytest.mark.parametrize("method", sorted(_registry._METHODS))
@pytest.mark.parametrize("seed", ["abc", -1, 1.5, True])
def test_bad_random_state_rejected_for_every_method(data, method, seed):
    X, y = data
    with pytest.raises(ValueError, match="random_state must be None, a non-negative integer"):
        bioqpfs.select(X, y, method=method, n_genes=3, random_state=seed)


@pytest.mark.parametrize("call", [
    lambda X, y, s: bioqpfs.qpfs(X, y, n_genes=3, nystrom_rate=0.5, random_state=s),
    lambda X, y, s: bioqpfs.spec_cmi(X, y, n_genes=3, nystrom_rate=0.5, random_state=s),
    lambda X, y, s: bioqpfs.spec_cmi(X, y, n_genes=3, random_state=s),
])
def test_bad_random_state_rejected_in_direct_calls(data, call):
    X, y = data
    with pytest.raises(ValueError, match="random_state"):
        call(X, y, -1)


def test_registry_does_not_draw_from_a_random_state_object(data):
    X, y = data
    rs = np.random.RandomState(3)
    before = rs.get_state()[1].copy()
    bioqpfs.select(X, y, method="maxrel", n_genes=3, random_state=rs)  # deterministic method
    np.testing.assert_array_equal(rs.get_state()[1], before)


# -- items 14 and 15: preselected genes -------------------------------------------------------------------

@pytest.mark.parametrize("method", ["qpfs", "eqpfs"])
def test_preselected_ambiguous_duplicate_name(data, method):
    X, y = data
    names = np.array([f"g{i}" for i in range(10)])
    names[7] = "g0"
    with pytest.raises(ValueError, match=r"g0 occur more than once"):
        bioqpfs.select(X, y, method=method, n_genes=3, preselected=["g0"], feature_names=names)
    sel = bioqpfs.select(X, y, method=method, n_genes=3, preselected=["g3"], feature_names=names)
    assert sel.selected[0] == 3  # a unique name is still fine


@pytest.mark.parametrize("method", ["qpfs", "eqpfs"])
def test_preselected_more_than_n_genes_is_an_error(data, method):
    X, y = data
    with pytest.raises(ValueError, match=r"n_genes=1 but 3 genes are preselected"):
        bioqpfs.select(X, y, method=method, n_genes=1, preselected=[0, 1, 2])
    sel = bioqpfs.select(X, y, method=method, n_genes=3, preselected=[0, 1, 2])
    assert list(sel.selected) == [0, 1, 2]


@pytest.mark.parametrize("method", ["tlkm_qpfs", "ikm_qpfs", "ikma_qpfs"])
@pytest.mark.parametrize("base", [1, -2, 0])
def test_clustering_methods_validate_base(method, base):
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 20)
    X = rng.normal(size=(40, 30))
    X[:, 0] += 2 * y
    with pytest.raises(ValueError, match="base must be"):
        bioqpfs.select(X, y, method=method, n_genes=2, base=base)


def test_n_bins_given_with_a_discretization_that_ignores_it_warns_at_the_users_line():
    """``n_bins=5`` with ``discretization="mean_sd"`` (three levels), ``"mdl"`` or ``None`` was silently ignored:
    a warning now says so, pointing at the caller's line whichever face was used; with the quantile rules, or
    n_bins=3, nothing is said."""
    import warnings

    import anndata as ad
    import pandas as pd

    import bioqpfs
    from bioqpfs.selectors.qpfs import qpfs

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 20)
    X = rng.normal(size=(60, 12))
    X[:, :4] += 2.0 * (y[:, None] == np.arange(4) % 3)  # genes MDL can cut
    adata = ad.AnnData(X, obs=pd.DataFrame({"c": pd.Categorical(y)}, index=[str(i) for i in range(60)]))
    calls = [lambda **kw: bioqpfs.select(X, y, method="qpfs", n_genes=3, **kw),
             lambda **kw: qpfs(X, y, **kw),
             lambda **kw: bioqpfs.tl.select_genes(adata, "c", method="spec_cmi", n_genes=3, copy=True, **kw)]
    for call in calls:
        for disc, message in [(None, "discretization='mean_sd' \\(always three levels"),
                              ("mdl", "discretization='mdl' \\(as many levels as its cuts\\)")]:
            kw = dict(n_bins=5) if disc is None else dict(n_bins=5, discretization=disc)
            with pytest.warns(UserWarning, match=r"n_bins=5 is not used with " + message) as record:
                call(**kw)
            assert any(w.filename == __file__ for w in record if "n_bins" in str(w.message))
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*n_bins.*")
            call(n_bins=5, discretization="quantile")
            call(n_bins=3, discretization="mean_sd")
    with pytest.warns(UserWarning, match=r"n_bins=4 is not used with discretization=None \(the levels of the given"):
        bioqpfs.measures.mutual_information(np.round(X).astype(int) % 3, discretization=None, n_bins=4)
    # a value no rule could use is a mistake, refused whatever the rule (it was only "not used" with mean_sd)
    for call in calls + [lambda **kw: bioqpfs.measures.mutual_information(X, **kw)]:
        with pytest.raises(ValueError, match=r"n_bins must be between 2 and 255, got -1"):
            call(n_bins=-1)
        with pytest.raises(ValueError, match=r"n_bins must be between 2 and 255, got 256"):
            call(n_bins=256, discretization="mdl")


# -- messages name the user's genes -----------------------------------------------------------------------

_DISCRETISING = sorted(m for m in _registry._METHODS
                       if "discretization" in inspect.signature(_registry.method_function(m)).parameters)


@pytest.mark.parametrize("method", _DISCRETISING)
@pytest.mark.parametrize("names", [None, list("abcdef")], ids=["positions", "names"])
def test_not_integer_coded_gene_is_named_in_x_not_among_the_non_constant_genes(method, names):
    """discretization=None with a non-integer gene: the selectors that leave the constant genes out before coding
    (qpfs, spec_cmi, the IKM family...) named it by its position among the non-constant genes (gene 2 here, a
    gene with integer values), or by no name at all; the message names gene 3 of X, or 'd'."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(30, 6)).astype(float)
    X[:, 0] = 1.0          # constant: left out before coding
    X[:, 3] += 0.5         # not integer-coded
    y = np.tile([0, 1, 2], 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=rf"gene\(s\) {'d' if names else 3} hold non-integer values"):
            bioqpfs.select(X, y, method=method, n_genes=2, discretization=None, feature_names=names)
