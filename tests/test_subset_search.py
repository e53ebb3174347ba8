"""Swap local search on fixed-size subsets (bioqpfs._kernels.subset_search).

Oracles: exhaustive enumeration of all k-subsets and plain-loop evaluation of the objective
(tests/reference.py), never the kernel's own incremental bookkeeping.
"""
import itertools

import numpy as np
import pytest
from reference import best_subset_bruteforce, is_swap_local_optimum, subset_value_loops

from bioqpfs._kernels.subset_search import subset_value, swap_search


def _qip_instance(rng, m):
    """Symmetric non-negative Q (SPEC_CMI QIP shape)."""
    A = rng.random((m, m)) ** 2
    return (A + A.T) / 2


def _qpfs_instance(rng, m, k):
    """QPFS-shaped instance: Q a PSD similarity (MI-like), F relevance, k-aware coefficients."""
    Z = rng.standard_normal((30, m)) @ rng.standard_normal((m, m)) * 0.3 + rng.standard_normal((30, m))
    Q = np.abs(np.corrcoef(Z, rowvar=False))
    F = rng.random(m)
    alpha = rng.uniform(0.2, 0.8)
    return Q, F, alpha / k, -(1 - alpha) / (2 * k * k)


@pytest.mark.parametrize("kind", ["qip", "qpfs"])
def test_local_optimum_value_and_global_rate(kind):
    rng = np.random.default_rng(11 if kind == "qip" else 12)
    hits = n = 0
    for _ in range(40):
        m = int(rng.integers(7, 12))
        k = int(rng.integers(2, 6))
        if kind == "qip":
            Q, a, lin, quad = _qip_instance(rng, m), None, 0.0, 1.0
        else:
            Q, a, lin, quad = _qpfs_instance(rng, m, k)
        start = rng.choice(m, size=k, replace=False)
        S, value, n_swaps = swap_search(Q, a, start, quad=quad, lin=lin)
        assert S.dtype.kind == "i" and sorted(set(S.tolist())) == sorted(S.tolist()) and S.size == k
        assert value == pytest.approx(subset_value_loops(Q, a, S, quad, lin), rel=1e-12, abs=1e-12)
        assert value >= subset_value_loops(Q, a, start, quad, lin) - 1e-12
        assert is_swap_local_optimum(Q, a, sorted(S.tolist()), quad, lin)
        _, opt = best_subset_bruteforce(Q, a, k, quad, lin)
        assert value <= opt + 1e-12
        n += 1
        hits += value >= opt - 1e-12 * max(1.0, abs(opt))
    # from a random start a local optimum need not be global; measured 35/40 (qip), 40/40 (qpfs)
    assert hits >= 0.8 * n, f"global optimum on only {hits} of {n} instances"


def test_finds_planted_optimum_from_worst_start():
    """A planted dense block is found even when starting from the k features outside it."""
    rng = np.random.default_rng(3)
    m = 30
    Q = rng.random((m, m)) * 0.1
    Q = (Q + Q.T) / 2
    block = [3, 8, 15, 22, 27]
    Q[np.ix_(block, block)] += 1.0
    start = [0, 1, 2, 4, 5]
    S, value, n_swaps = swap_search(Q, None, start, quad=1.0, lin=0.0)
    assert sorted(S.tolist()) == block
    assert n_swaps == 5
    assert value == pytest.approx(subset_value_loops(Q, None, block), rel=1e-12)


def test_fixed_members_never_leave_and_match_constrained_bruteforce():
    rng = np.random.default_rng(5)
    for _ in range(15):
        m, k = 10, 4
        Q, a, lin, quad = _qpfs_instance(rng, m, k)
        start = rng.choice(m, size=k, replace=False)
        fixed = start[:2]
        S, value, _ = swap_search(Q, a, start, quad=quad, lin=lin, fixed=fixed)
        assert set(fixed.tolist()) <= set(S.tolist())
        assert is_swap_local_optimum(Q, a, sorted(S.tolist()), quad, lin, fixed=set(fixed.tolist()))
        _, opt = best_subset_bruteforce(Q, a, k, quad, lin, fixed=fixed)
        assert value <= opt + 1e-12


def test_candidates_restrict_who_enters():
    rng = np.random.default_rng(6)
    Q = _qip_instance(rng, 12)
    Q[:, 11] += 5.0
    Q[11, :] += 5.0  # feature 11 is the best by far, but not a candidate
    start = [0, 1, 2]
    cands = [0, 1, 2, 3, 4, 5, 6]
    S, value, _ = swap_search(Q, None, start, quad=1.0, lin=0.0, candidates=cands)
    assert set(S.tolist()) <= set(cands)
    assert is_swap_local_optimum(Q, None, sorted(S.tolist()), 1.0, 0.0, candidates=cands)
    _, opt = best_subset_bruteforce(Q, None, 3, candidates=cands)
    assert value <= opt + 1e-12
    # a boolean mask means the same
    mask = np.zeros(12, bool)
    mask[cands] = True
    S2, value2, _ = swap_search(Q, None, start, quad=1.0, lin=0.0, candidates=mask)
    assert S2.tolist() == S.tolist() and value2 == value
    # a start member outside the candidates may stay, but cannot come back once it has left
    S3, _, _ = swap_search(Q, None, [11, 0, 1], quad=1.0, lin=0.0, candidates=cands)
    assert 11 in S3.tolist()


def test_order_by_marginal_contribution_and_independent_of_start_order():
    rng = np.random.default_rng(8)
    Q, a, lin, quad = _qpfs_instance(rng, 15, 5)
    start = np.array([9, 2, 14, 0, 7])
    S, value, _ = swap_search(Q, a, start, quad=quad, lin=lin)
    contrib = [value - subset_value_loops(Q, a, [j for j in S if j != i], quad, lin) for i in S]
    assert all(contrib[t] >= contrib[t + 1] - 1e-12 for t in range(len(S) - 1))
    for perm in itertools.islice(itertools.permutations(start), 0, 120, 17):
        S2, v2, _ = swap_search(Q, a, np.array(perm), quad=quad, lin=lin)
        assert S2.tolist() == S.tolist() and v2 == value


def test_ties_in_contribution_are_broken_by_index():
    Q = np.ones((6, 6))
    S, value, n = swap_search(Q, None, [5, 3, 1], quad=1.0, lin=0.0)
    assert S.tolist() == [1, 3, 5] and n == 0 and value == 9.0
    # contributions equal only up to round-off are still ties
    Q2 = Q.copy()
    Q2[3, 3] += 1e-14
    S2, _, _ = swap_search(Q2, None, [5, 3, 1], quad=1.0, lin=0.0)
    assert S2.tolist() == [1, 3, 5]


def test_float32_and_row_access_only_matrix():
    rng = np.random.default_rng(9)
    Q = _qip_instance(rng, 40)
    start = np.arange(6)
    S64, v64, _ = swap_search(Q, None, start, quad=1.0, lin=0.0)
    S32, v32, _ = swap_search(Q.astype(np.float32), None, start, quad=1.0, lin=0.0)
    assert S32.tolist() == S64.tolist()
    assert v32 == pytest.approx(v64, rel=1e-6)

    class Rows:
        """Only .shape and Q[rows] (rows increasing), like an h5py dataset."""

        shape = Q.shape
        reads = 0

        def __getitem__(self, rows):
            rows = np.asarray(rows)
            assert np.all(np.diff(rows) > 0)
            Rows.reads += rows.size
            return Q[rows]

    with pytest.raises(TypeError, match="diag="):
        swap_search(Rows(), None, start)
    Sr, vr, n = swap_search(Rows(), None, start, quad=1.0, lin=0.0, diag=np.diag(Q))
    assert Sr.tolist() == S64.tolist() and vr == pytest.approx(v64, rel=1e-12)
    assert Rows.reads == start.size + n  # k rows, then one per swap: never M x M
    assert subset_value(Q, None, Sr, lin=0.0) == pytest.approx(subset_value_loops(Q, None, Sr), rel=1e-12)


def test_sparse_matrix_gives_the_dense_result():
    import scipy.sparse as sps

    rng = np.random.default_rng(13)
    Q = _qip_instance(rng, 30)
    Q[Q < 0.5] = 0.0
    start = [0, 1, 2, 3]
    S, v, n = swap_search(Q, None, start, quad=1.0, lin=0.0)
    for fmt in (sps.csr_matrix, sps.csr_array):
        Ss, vs, ns = swap_search(fmt(Q), None, start, quad=1.0, lin=0.0)
        assert Ss.tolist() == S.tolist() and vs == pytest.approx(v, rel=1e-12) and ns == n


def test_max_swaps_and_inputs_untouched():
    rng = np.random.default_rng(10)
    Q = _qip_instance(rng, 20)
    a = rng.random(20)
    Q0, a0 = Q.copy(), a.copy()
    start = np.array([4, 1, 0])
    S0, v0, n0 = swap_search(Q, a, start, max_swaps=0)
    assert n0 == 0 and sorted(S0.tolist()) == [0, 1, 4]
    assert v0 == pytest.approx(subset_value_loops(Q, a, [0, 1, 4]), rel=1e-12)
    S1, _, n1 = swap_search(Q, a, start, max_swaps=1)
    assert n1 <= 1
    np.testing.assert_array_equal(Q, Q0)
    np.testing.assert_array_equal(a, a0)
    assert start.tolist() == [4, 1, 0]


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(Q=np.ones((3, 4))), ValueError, "square"),
    (dict(start=[]), ValueError, "empty"),
    (dict(start=[1, 1, 2]), ValueError, "repeated indices"),
    (dict(start=[0, 9]), ValueError, "out of range"),
    (dict(start=[0.5, 1]), TypeError, "integer"),
    (dict(fixed=[3]), ValueError, "fixed feature 3 is not in start"),
    (dict(a=np.ones(3)), ValueError, "one entry per feature"),
    (dict(a=np.array([1, np.nan, 0, 0, 0])), ValueError, "non-finite"),
    (dict(candidates=np.ones(3, bool)), ValueError, "boolean mask"),
    (dict(max_swaps=-1), ValueError, "max_swaps"),
    (dict(quad=np.nan), ValueError, "quad"),
    (dict(Q=np.where(np.eye(5) > 0, np.nan, 1.0)), ValueError, "non-finite"),
])
def test_bad_input(kwargs, exc, match):
    args = dict(Q=np.ones((5, 5)), a=np.zeros(5), start=[0, 1])
    args.update(kwargs)
    Q, a, start = args.pop("Q"), args.pop("a"), args.pop("start")
    with pytest.raises(exc, match=match):
        swap_search(Q, a, start, **args)
