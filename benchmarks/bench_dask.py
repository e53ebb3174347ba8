"""QPFS on a Dask X on a LocalCluster of 2 worker processes against the in-memory run (issue 13).

    python benchmarks/bench_dask.py                        # quick: 20,000 and 40,000 cells x 500 genes (~1 min)
    python benchmarks/bench_dask.py --cells 50000 100000 200000 --genes 2000   # the issue's shapes (long)

Data: ``_common.poisson_types`` (sparse Poisson log1p counts, 8 cell types, ~90% zeros), written to an h5ad
file and read back lazily with ``anndata.experimental.read_elem_lazy`` (a Dask array of CSR chunks of
``--chunk`` cells, read by the workers from the file).  Per shape: ``select(X, y, method="qpfs")`` with
``discretization="mean_sd"`` in memory (the CSR matrix) and on the cluster (a fresh ``LocalCluster`` per
shape, 2 processes x 1 thread), wall seconds, the peak RSS of each worker process (``ru_maxrss``, interpreter
included) and whether the two results are identical.  The machine is shared: the load average is printed.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import poisson_types  # noqa: E402


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs="+", default=[20000, 40000])
    ap.add_argument("--genes", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=10000)
    ap.add_argument("--n-genes", type=int, default=20)
    args = ap.parse_args(argv)

    import anndata as ad
    import h5py
    import pandas as pd
    from anndata.experimental import read_elem_lazy
    from distributed import Client, LocalCluster

    import bioqpfs

    warnings.simplefilter("ignore")
    print("| cells x genes | in memory | Dask, 2 workers | ratio | peak RSS per worker (MB) | identical | load |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.cells:
            X, y = poisson_types(n, args.genes, seed=n)
            path = os.path.join(tmp, f"x{n}.h5ad")
            ad.AnnData(X, obs=pd.DataFrame(index=[str(i) for i in range(n)])).write_h5ad(path)
            bioqpfs.select(X[:500], y[:500], method="qpfs", n_genes=5, discretization="mean_sd")  # compile
            t = time.perf_counter()
            want = bioqpfs.select(X, y, method="qpfs", n_genes=args.n_genes, discretization="mean_sd")
            t_mem = time.perf_counter() - t
            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
                    Client(cl) as client, h5py.File(path, "r") as f:
                D = read_elem_lazy(f["X"], chunks=(args.chunk, args.genes))
                t = time.perf_counter()
                got = bioqpfs.select(D, y, method="qpfs", n_genes=args.n_genes, discretization="mean_sd")
                t_dask = time.perf_counter() - t
                rss = sorted(client.run(_peak_rss_mb).values())
            same = np.array_equal(got.ranking, want.ranking) and np.array_equal(got.weights, want.weights)
            print(f"| {n:,} x {args.genes:,} | {t_mem:.1f} s | {t_dask:.1f} s | {t_dask / t_mem:.2f} | "
                  f"{', '.join(f'{r:.0f}' for r in rss)} | {same} | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
