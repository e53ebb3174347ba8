"""Issue 12 items 4 and 5: parameters declared per method and checked before any work; aligned defaults."""
import inspect
import time

import numpy as np
import pytest

import bioqpfs
from bioqpfs import estimators, evaluate, measures
from bioqpfs._registry import method_function, methods
from bioqpfs._validation import Interval, InvalidParameterError, Options

METHODS = sorted(methods())


@pytest.fixture(scope="module")
def wide():
    """60 samples x 20,000 genes: any real work on it takes seconds, a parameter check microseconds."""
    rng = np.random.default_rng(0)
    return rng.normal(size=(60, 20_000)).astype(np.float32), np.repeat(["a", "b", "c"], 20)


def _choice_params():
    out = []
    for method in METHODS:
        for name, rule in method_function(method).parameter_constraints.items():
            if isinstance(rule, Options):
                out.append((method, name))
    return out


@pytest.mark.parametrize("method,name", _choice_params())
def test_a_typo_in_any_option_value_fails_at_once(wide, method, name):
    X, y = wide
    t = time.perf_counter()
    with pytest.raises(ValueError, match=rf"{method}: {name} must be .*, got 'bogus'"):
        bioqpfs.select(X, y, method=method, n_genes=5, **{name: "bogus"})
    assert time.perf_counter() - t < 1.0


@pytest.mark.parametrize("kw", [dict(solver="quadprg"), dict(solver="quadprg", nystrom_rate=0.2),
                                dict(solver="quadprg", nystrom_rate=0.2, nystrom_qp="lowrank"),
                                dict(psd_fix="clips", solver="spg"), dict(nystrom_qp="low", nystrom_rate=0.2),
                                dict(discretization="meansd", nystrom_rate=0.2), dict(class_weight="balance"),
                                dict(similarity="corr"), dict(alpha=1.5), dict(nystrom_rate=0.0),
                                dict(eig_threshold=-1.0), dict(preselected_share=1.0)])
def test_qpfs_typos_fail_before_any_work_on_every_path(wide, kw):
    """Before: solver='quadprg' failed only after the Q matrix (4.7 s at 8,000 genes); with nystrom_rate it ran."""
    X, y = wide
    t = time.perf_counter()
    with pytest.raises(ValueError, match=f"qpfs: {next(iter(kw)) if len(kw) == 1 else '(solver|psd_fix|nystrom_qp|discretization)'}"):
        bioqpfs.qpfs(X, y, n_genes=5, **kw)
    assert time.perf_counter() - t < 1.0


def test_a_typo_in_an_option_name_fails_at_once(wide):
    X, y = wide
    for method in METHODS:
        t = time.perf_counter()
        with pytest.raises(TypeError, match=f"method {method!r} does not take parameter"):
            bioqpfs.select(X, y, method=method, n_genes=5, solvr="spg")
        assert time.perf_counter() - t < 1.0


def test_errors_suggest_the_closest_value():
    with pytest.raises(ValueError, match=r"got 'quadprg' \(did you mean 'quadprog'\?\)"):
        bioqpfs.qpfs(np.zeros((4, 3)), [0, 0, 1, 1], solver="quadprg")


def test_constraints_are_declared_for_every_method():
    for method in METHODS:
        table = method_function(method).parameter_constraints
        params = inspect.signature(method_function(method)).parameters
        assert set(table) <= set(params)
        for name, rule in table.items():
            assert rule == "bool" or isinstance(rule, (Options, Interval)), (method, name)
        if "discretization" in params and method not in ("tlkm_qpfs", "ikm_qpfs", "ikma_qpfs"):
            assert isinstance(table["discretization"], Options), method


def test_one_positive_integer_rule_on_every_face():
    X, y = np.random.default_rng(0).normal(size=(20, 6)), np.repeat([0, 1], 10)
    for call in (lambda: bioqpfs.select(X, y, method="maxrel", n_genes=0),
                 lambda: bioqpfs.select(X, y, method="maxrel", n_genes=2.0),
                 lambda: bioqpfs.select(X, y, method="maxrel", n_genes=True)):
        with pytest.raises(InvalidParameterError, match="n_genes must be an integer >= 1"):
            call()
    with pytest.raises(InvalidParameterError, match="repeats must be an integer >= 1, got 0"):
        evaluate.error_curve(X, y, ["maxrel"], n_genes=[2], cv=2, repeats=0)


def _default(func, name):
    return inspect.signature(func).parameters[name].default


def test_one_seeded_random_state_default_everywhere():
    assert _default(bioqpfs.select, "random_state") == 0
    assert _default(bioqpfs.tl.select_genes, "random_state") == 0
    assert _default(evaluate.error_curve, "random_state") == 0
    for method in METHODS:
        assert _default(method_function(method), "random_state") == 0, method
    for cls in (estimators.BioQPFSSelector, estimators.QPFSSelector, estimators.SpecCMISelector,
                estimators.IKMQPFSSelector, estimators.BaselineSelector):
        assert cls().random_state == 0, cls.__name__
    from bioqpfs.cli import _parser

    assert _parser().parse_args(["select", "x.h5ad", "--groupby", "g", "-o", "o.h5ad"]).random_state == 0


def test_unseeded_calls_repeat():
    """Before: two select(method="ikm_qpfs") calls without random_state gave different panels."""
    X = np.random.default_rng(3).normal(size=(40, 300))
    y = np.repeat([0, 1], 20)
    X[:, :5] += 2 * y[:, None]
    for method in ("ikm_qpfs", "random", "spec_cmi_nystrom"):
        a = bioqpfs.select(X, y, method=method, n_genes=5)
        b = bioqpfs.select(X, y, method=method, n_genes=5)
        np.testing.assert_array_equal(a.ranking, b.ranking)


def test_psd_fix_and_positional_order_aligned():
    # None: the method's own default (qpfs: "none"; eqpfs: "shift"), what a fitted selector records
    assert estimators.QPFSSelector().psd_fix is None and _default(bioqpfs.qpfs, "psd_fix") == "none"
    X = np.random.default_rng(0).normal(size=(30, 6))
    y = np.repeat([0, 1, 2], 10)
    for method in ("qpfs", "eqpfs"):
        fitted = estimators.QPFSSelector(2, method=method).fit(X, y)
        assert fitted.selection_.params["psd_fix"] == _default(method_function(method), "psd_fix")
    for cls in (estimators.BioQPFSSelector, estimators.QPFSSelector, estimators.SpecCMISelector,
                estimators.IKMQPFSSelector, estimators.BaselineSelector):
        positional = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                      if p.kind == p.POSITIONAL_OR_KEYWORD][1:]
        assert positional == ["n_features_to_select"], cls.__name__
        assert cls(7).n_features_to_select == 7


def test_one_discretisation_name_and_default_across_measures():
    for func in (measures.discretize, measures.mutual_information, measures.entropy,
                 measures.conditional_mutual_information, measures.relevance):
        assert _default(func, "discretization") == "mean_sd", func.__name__
    X = np.random.default_rng(1).normal(size=(30, 4))
    y = np.repeat([0, 1, 2], 10)
    codes = measures.discretize(X)
    np.testing.assert_array_equal(measures.mutual_information(X), measures.mutual_information(codes, discretization=None))
    np.testing.assert_array_equal(measures.entropy(X), measures.entropy(codes, discretization=None))
    np.testing.assert_allclose(measures.conditional_mutual_information(X, y),
                               measures.conditional_mutual_information(codes, y, discretization=None))


@pytest.mark.parametrize("method", ["spec_cmi", "spec_cmi_nystrom"])
def test_eigensolver_tolerance_must_not_be_negative(method):
    """tol=-1 was accepted (an Interval without a lower bound) and handed to the eigensolver."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 10)
    X = rng.normal(size=(30, 6))
    X[:, 0] += y
    with pytest.raises(ValueError, match=f"{method}: tol must be >= 0, got -1"):
        bioqpfs.select(X, y, method=method, n_genes=2, tol=-1)
