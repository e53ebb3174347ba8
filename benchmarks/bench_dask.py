"""Selection on a Dask X on a LocalCluster of 2 worker processes against the in-memory run (issue 13).

    python benchmarks/bench_dask.py                        # 20,000 and 40,000 cells x 500 genes (~1 min)
    python benchmarks/bench_dask.py --quick                # smoke run: 4,000 cells x 100 genes, chunks of 1,000
    python benchmarks/bench_dask.py --cells 50000 100000 200000 --genes 2000 --methods qpfs spec_cmi  # the issue's
    python benchmarks/bench_dask.py --cells 200000 --genes 20000 --methods qpfs_nystrom --no-memory   # shapes (long)
    python benchmarks/bench_dask.py --cells 40000 --genes 300 --threads --discretization mean_sd zero_quantile

Data: ``_common.poisson_types`` (sparse Poisson log1p counts, 8 cell types, ~80% zeros), written to an h5ad
file (``--format zarr``: a zarr store, chunks of ``--chunk`` cells' values) and read back lazily with
``anndata.experimental.read_elem_lazy`` (a Dask array of CSR chunks of ``--chunk`` cells, read by the workers
from the file).  Per shape, discretisation and method (``qpfs``: exact
QPFS; ``spec_cmi``: exact SPEC_CMI; ``qpfs_nystrom``: QPFS+Nystrom at ``--nystrom-rate``; ``eqpfs``; the greedy
``mrmr_mid`` and ``jmi``, one counting pass per gene picked): ``select`` in memory
(the CSR matrix; skipped with ``--no-memory``) and on the cluster (a fresh ``LocalCluster`` per run, 2 processes x
1 thread, so each worker's peak is that run's; ``--threads``: Dask's threaded scheduler in this process instead),
wall seconds, the peak RSS of each worker process during the run (VmHWM, interpreter included) and whether the two
results are identical (ranking equal, weights to 1e-9: ``qpfs_cover``'s class-wise QP solutions differ by ~1.5e-12
between the two, within the solver's accuracy).  ``--batches B``: every selection with ``batch=`` (B random
batches).  With ``--codes`` the discretisation alone
(``measures.discretize``, codes computed) is timed too.  The machine is shared: the load average is printed.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import poisson_types  # noqa: E402


def _peak_rss_mb(reset=False):
    """Peak resident memory of this process in MB since it started or since the last ``reset``: Linux's VmHWM
    (``ru_maxrss`` is no use for a worker: it keeps the peak of the process it was forked from, here the one
    holding X).  ``reset``: start a new peak now (``/proc/self/clear_refs``)."""
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return None
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM"))
    except OSError:  # not Linux: the lifetime peak
        return None if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _best(repeat, func, *args, result=False, **kwargs):
    """The fastest of ``repeat`` runs of ``func`` in seconds (and its result with ``result``)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = func(*args, **kwargs)
        times.append(time.perf_counter() - t)
    return (min(times), out) if result else min(times)


METHODS = {"qpfs": ("qpfs", {}), "spec_cmi": ("spec_cmi", {}), "qpfs_nystrom": ("qpfs", {"nystrom_rate": None}),
           "eqpfs": ("eqpfs", {}), "mrmr_mid": ("mrmr_mid", {}), "jmi": ("jmi", {}),
           "qpfs_cover": ("qpfs_cover", {})}  # the default recipe (class-balanced)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 4,000 cells x 100 genes in chunks of 1,000")
    ap.add_argument("--cells", type=int, nargs="+", default=[20000, 40000])
    ap.add_argument("--genes", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=10000)
    ap.add_argument("--n-genes", type=int, default=20)
    ap.add_argument("--methods", nargs="+", default=["qpfs"], choices=sorted(METHODS))
    ap.add_argument("--nystrom-rate", type=float, default=0.05)
    ap.add_argument("--discretization", nargs="+", default=["mean_sd"],
                    choices=["mean_sd", "quantile", "zero_quantile", "auto"])
    ap.add_argument("--threads", action="store_true", help="Dask's threaded scheduler instead of a LocalCluster")
    ap.add_argument("--no-memory", action="store_true", help="skip the in-memory runs (shapes that do not fit)")
    ap.add_argument("--codes", action="store_true", help="also time the discretisation alone")
    ap.add_argument("--format", choices=["h5ad", "zarr"], default="h5ad", help="file the data are read from")
    ap.add_argument("--repeat", type=int, default=1, help="runs per timing; the fastest is printed (shared machine)")
    ap.add_argument("--batches", type=int, default=0, help="select with batch= (this many random batches)")
    args = ap.parse_args(argv)
    if args.quick:
        if args.cells != [20000, 40000] or args.genes != 500 or args.chunk != 10000:
            ap.error("--quick sets 4,000 cells x 100 genes in chunks of 1,000: drop --cells/--genes/--chunk, or "
                     "--quick")
        args.cells, args.genes, args.chunk = [4000], 100, 1000

    import anndata as ad
    import dask.array as da
    import h5py
    import pandas as pd
    import zarr
    from anndata.experimental import read_elem_lazy
    from distributed import Client, LocalCluster

    import bioqpfs

    warnings.simplefilter("ignore")
    print("| cells x genes | discretization | method | in memory | Dask | ratio | peak RSS per worker (MB) "
          "| identical | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.cells:
            X, y = poisson_types(n, args.genes, seed=n)
            path = os.path.join(tmp, f"x{n}.{args.format}")
            adata = ad.AnnData(X, obs=pd.DataFrame(index=[str(i) for i in range(n)]))
            if args.format == "zarr":  # zarr chunks of about one Dask chunk's values
                adata.write_zarr(path, chunks=(max(1, int(X.nnz / n * args.chunk)),))
            else:
                adata.write_h5ad(path)
            del adata
            if args.no_memory:
                del X
            X0, y0 = poisson_types(2000, 50)
            for rule in args.discretization:  # compile (numba caches on disk: the workers load the kernels)
                for name in args.methods:
                    method, params = METHODS[name]
                    params = {k: 0.2 if k == "nystrom_rate" else v for k, v in params.items()}
                    for x0 in (X0, da.from_array(X0, chunks=(500, 50))):
                        bioqpfs.select(x0, y0, method=method, n_genes=5, discretization=rule, **params)
            for rule in args.discretization:
                for name in args.methods:
                    method, params = METHODS[name]
                    params = {k: args.nystrom_rate if k == "nystrom_rate" else v for k, v in params.items()}
                    run = dict(method=method, n_genes=args.n_genes, discretization=rule, **params)
                    if args.batches:
                        run["batch"] = np.random.default_rng(0).integers(0, args.batches, n)
                    t_mem = want = c_mem = None
                    if not args.no_memory:
                        if args.codes:
                            c_mem = _best(args.repeat, bioqpfs.measures.discretize, X, discretization=rule)
                        t_mem, want = _best(args.repeat, bioqpfs.select, X, y, result=True, **run)
                    with contextlib.ExitStack() as stack:
                        client = None
                        if not args.threads:
                            cl = stack.enter_context(LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                                                  dashboard_address=None))
                            client = stack.enter_context(Client(cl))
                        f = (zarr.open_group(path, mode="r") if args.format == "zarr" else
                             stack.enter_context(h5py.File(path, "r")))
                        D = read_elem_lazy(f["X"], chunks=(args.chunk, args.genes))
                        c_dask = _best(args.repeat, lambda: bioqpfs.measures.discretize(D, discretization=rule)
                                       .compute()) if args.codes else None
                        if client:
                            client.run(_peak_rss_mb, reset=True)
                        else:
                            _peak_rss_mb(reset=True)
                        t_dask, got = _best(args.repeat, bioqpfs.select, D, y, result=True, **run)
                        rss = sorted(client.run(_peak_rss_mb).values()) if client else [_peak_rss_mb()]
                    same = "-" if want is None else (
                        np.array_equal(got.ranking, want.ranking)
                        and np.allclose(got.weights, want.weights, rtol=0, atol=1e-9))
                    mem = "-" if t_mem is None else f"{t_mem:.1f} s" + (f" ({c_mem:.2f} s)" if args.codes else "")
                    dsk = f"{t_dask:.1f} s" + (f" ({c_dask:.2f} s)" if args.codes else "")
                    ratio = "-" if t_mem is None else f"{t_dask / t_mem:.2f}"
                    print(f"| {n:,} x {args.genes:,} | {rule} | {name} | {mem} | {dsk} | {ratio} | "
                          f"{', '.join(f'{r:.0f}' for r in rss)} | {same} | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
