"""Shared pieces of the benchmarks: synthetic data, and the raw-GEMM reference.

:func:`synthetic`: N samples, 3 classes, genes loading on 40 latent factors (5 shifted by the class).
:func:`poisson_types`, :func:`planted_sparse`: sparse single-cell-like counts (log1p), cell types.
:func:`benchmark_data_dir`, :func:`load_benchmark`: the papers' data folder (``BIOQPFS_BENCHMARK_DATA``, default
``../shared/data/benchmarks`` beside the checkout).

:func:`gemm_seconds`: the counting kernel's cost is compared with the indicator products it needs, measured in the same
process.  To keep the reference honest it is the faster of two schedules of exactly those GEMMs
(upper block triangle, one product per class):

* ``big``: multithreaded BLAS on large (2,048-gene) blocks;
* ``own``: the kernel's own schedule -- cache-sized blocks on its worker pool, one BLAS thread each.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np


def synthetic(m, n=100, seed=0):
    """(X float32 (n x m), y) -- genes are noisy copies of 40 factors, 5 of which depend on the class."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), [34, 33, 33])
    Z = rng.standard_normal((n, 40))
    Z[:, :5] += 1.2 * (y[:, None] == (np.arange(5) % 3)[None, :])
    factor = rng.integers(0, 40, size=m)
    load = rng.uniform(0.3, 1.0, size=m)
    X = Z[:, factor] * load + rng.standard_normal((n, m)) * np.sqrt(1 - load ** 2)
    return X.astype(np.float32), y


def benchmark_data_dir():
    """The papers' data folder: ``$BIOQPFS_BENCHMARK_DATA``, else ``../shared/data/benchmarks`` beside the checkout."""
    return os.environ.get("BIOQPFS_BENCHMARK_DATA",
                          os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data",
                                       "benchmarks"))


def load_benchmark(name):
    """(X, y, names) of ``name`` by the data folder's ``load.py``; exits saying where the folder was looked for and
    how to point at it when it is not there (it was an ImportError of ``load``)."""
    path = benchmark_data_dir()
    if not os.path.exists(os.path.join(path, f"{name}.npz")) or not os.path.exists(os.path.join(path, "load.py")):
        raise SystemExit(f"dataset {name!r} is read from the papers' benchmark data folder (load.py, {name}.npz), "
                         f"not found in {os.path.abspath(path)}: set BIOQPFS_BENCHMARK_DATA to that folder")
    sys.path.insert(0, os.path.abspath(path))
    try:
        from load import load
    finally:
        sys.path.pop(0)
    return load(name)


def poisson_types(n, m, *, n_types=8, de_fraction=0.1, seed=0, chunk=10000, rate_scale=0.6):
    """Single-cell-like (X CSR float32 log1p counts, y) -- n cells of ``n_types`` types, m genes.

    Counts are Poisson with gene rates ~ Gamma(0.5, ``rate_scale``) (mostly zeros, as in droplet data: 21% non-zero
    with the default 0.6, 10% with 0.2, 5% with 0.08); a ``de_fraction`` of the genes is type-dependent (rate x 3-8
    in one random type).  Built in chunks of cells, so 100,000 cells never exist densely.
    """
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_types, size=n)
    lam = np.repeat(rng.gamma(0.5, rate_scale, size=m)[None, :], n_types, axis=0)
    for j in np.flatnonzero(rng.random(m) < de_fraction):
        lam[rng.integers(0, n_types), j] *= rng.uniform(3, 8)
    blocks = []
    for s in range(0, n, chunk):
        B = sp.csr_matrix(rng.poisson(lam[y[s:s + chunk]]).astype(np.float32))
        B.data = np.log1p(B.data)
        blocks.append(B)
    return sp.vstack(blocks, format="csr"), y


def planted_sparse(n, m, *, n_planted=50, n_types=5, seed=0):
    """(X CSR float32 log1p counts, y) -- n cells x m genes; genes 0..n_planted-1 are up in one type each."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_types, size=n)
    lam = np.tile(rng.gamma(0.5, 0.4, size=m), (n_types, 1))
    for j in range(n_planted):
        lam[j % n_types, j] = 6 * lam[j % n_types, j] + 1.0
    X = sp.csr_matrix(rng.poisson(lam[y]).astype(np.float32))
    X.data = np.log1p(X.data)
    return X, y


def gemm_seconds(table, *, classes=False, n_bins=None, repeats=3):
    """Best seconds of the indicator GEMMs for ``table``; returns ``(best, big, own)``.

    ``classes``: one product per class (the CMI kernels) instead of one over all samples;
    ``n_bins``: indicator columns per gene (default: the kernel's materialised ``table.nb``; pass
    ``table.n_bins`` for the naive all-bins count).
    """
    from bioqpfs import _progress  # here, so synthetic() imports without bioqpfs (the ITMO_FS venv)
    from bioqpfs._kernels import information as info

    nb = table.nb if n_bins is None else n_bins
    m = table.n_genes
    parts = table.backend.class_rows if classes else [slice(0, table.n_samples)]  # the numpy backend's
    src = table.backend.by_class if classes else table.codes
    C = len(parts)

    def onehot(genes, c):
        sub = src[parts[c], genes]
        return np.concatenate([sub == a for a in range(nb)], axis=1).astype(np.float32)

    def run(bs, pooled):
        pairs = [(i0, j0) for i0 in range(0, m, bs) for j0 in range(i0, m, bs)]
        bufs = {}

        def gemm(pair):
            i0, j0 = pair
            for c in range(C):
                A = onehot(slice(i0, min(m, i0 + bs)), c)
                B = A if j0 == i0 else onehot(slice(j0, min(m, j0 + bs)), c)
                n = A.shape[1] * B.shape[1]
                key = threading.get_ident()
                if bufs.get(key) is None or bufs[key].size < n:
                    bufs[key] = np.empty(n, np.float32)
                np.matmul(A.T, B, out=bufs[key][:n].reshape(A.shape[1], B.shape[1]))

        best = np.inf
        for _ in range(repeats):
            t = time.perf_counter()
            if pooled:
                info.run_tasks(gemm, pairs, _progress.bar(0, ""))
            else:
                for p in pairs:
                    gemm(p)
            best = min(best, time.perf_counter() - t)
        return best

    big = run(2048, pooled=False)
    own = run(info._block_size(table, table, C, n_out=m * m), pooled=True)
    return min(big, own), big, own
