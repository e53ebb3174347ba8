"""Batch-aware statistics on held-out batches: panel quality with and without ``batch=`` (issue 15).

Protocol: leave-one-batch-out cross-validation (:func:`bioqpfs.evaluate.error_curve` with
``cv="leave_one_batch_out"``): every fold selects the panel on all batches but one and tests the classifier on the
held-out batch -- how a panel carries over to a new donor or study.  Both arms use the same folds; the only
difference is ``batch_selection`` (the training batches passed to the selector, or not).  Classifier:
``StandardScaler + LogisticRegression`` (``classifier="logreg"``); score: balanced accuracy on the held-out batch.

Datasets (all with 3+ batches, since a training fold must hold at least two for the batch-aware statistics to
differ from the plain ones):

* ``pbmc68k_phase``: scanpy's ``pbmc68k_reduced().raw`` (700 cells x 765 genes), ``bulk_labels``, the cell-cycle
  ``phase`` (G1 / S / G2M) as the batches -- a weak, biological "batch";
* ``pbmc68k_confounded``: the same cells in 3 synthetic batches, each cell type spread unevenly over them
  (Dirichlet(0.7) proportions per type), and a batch effect: in each batch 10 % of the genes shifted by
  +1 (log scale) where expressed -- batch shifts that correlate with the cell type through the uneven spread;
* ``srbct_confounded``: the bundled SRBCT microarray (83 x 2,308, 4 tumour types) in 3 synthetic batches the same
  way, shift 1 gene-sd on 10 % of the genes.

Methods: the default recipe (:data:`bioqpfs.DEFAULT_PANEL`: qpfs_cover), qpfs, spec_cmi, mrmr_mid.  ``--quick``
(the test suite's smoke run): a small simulated set, two methods, one size.

``--overhead``: the cost of ``batch_key`` (issue 15 asks for at most 1.3x the time without).  For every method, the
selection on all samples with and without the batches, best of ``--repeats`` interleaved runs in this process
(these machines are noisy: the ratio is what counts), both through ``bioqpfs.select(..., batch=)`` and through
``bioqpfs.tl.select_genes(adata, ..., batch_key=)``; on pbmc68k_reduced with ``phase`` as batches, SRBCT in 3
confounded batches, and (``--large``) simulated sparse counts of 20,000 cells x 1,000 genes in 3 batches.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd
import scipy.sparse as sp


def _default_recipe():
    from bioqpfs import DEFAULT_PANEL

    return DEFAULT_PANEL["method"], dict(DEFAULT_PANEL["params"])


METHODS = {"default (qpfs_cover)": _default_recipe(), "qpfs": ("qpfs", {}), "spec_cmi": ("spec_cmi", {}),
           "mrmr_mid": ("mrmr_mid", {})}


def confounded_batches(y, n_batches=3, concentration=0.7, seed=0):
    """One synthetic batch per sample: each class spread over the batches with Dirichlet proportions, so that the
    batch and the class are associated (as donors or studies that sampled cell types unevenly)."""
    rng = np.random.default_rng(seed)
    batch = np.empty(len(y), dtype=object)
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        p = rng.dirichlet(np.full(n_batches, concentration))
        batch[rows] = np.array([f"b{i}" for i in range(n_batches)])[rng.choice(n_batches, size=rows.size, p=p)]
    return batch


def add_batch_effect(X, batch, *, fraction=0.1, size=1.0, seed=0):
    """A copy of X where, in each batch, a random ``fraction`` of the genes is shifted by ``size`` gene-sd (dense
    X) or by ``size`` where expressed (sparse X: zeros stay zeros, as for log counts)."""
    rng = np.random.default_rng(seed)
    m = X.shape[1]
    if sp.issparse(X):
        X = X.tocsr(copy=True).astype(np.float64)
        for b in np.unique(batch):
            genes = rng.random(m) < fraction
            for r in np.flatnonzero(batch == b):
                lo, hi = X.indptr[r], X.indptr[r + 1]
                X.data[lo:hi] += size * genes[X.indices[lo:hi]]
        return X
    X = np.array(X, dtype=np.float64)
    sd = X.std(axis=0)
    for b in np.unique(batch):
        genes = rng.random(m) < fraction
        X[np.ix_(batch == b, genes)] += size * sd[genes]
    return X


def _pbmc():
    import scanpy as sc

    ad = sc.datasets.pbmc68k_reduced()
    return ad.raw.to_adata().X, ad.obs["bulk_labels"].astype(str).to_numpy(), ad.obs["phase"].astype(str).to_numpy()


def _srbct():
    import bioqpfs

    ad = bioqpfs.datasets.load("srbct")
    return np.asarray(ad.X, dtype=np.float64), ad.obs["class"].astype(str).to_numpy()


def datasets(quick=False):
    """{name: (X, y, batch)}."""
    if quick:
        rng = np.random.default_rng(5)
        y = np.repeat(["A", "B", "C"], 60)
        X = rng.normal(size=(y.size, 60))
        X[:, :6] += 1.5 * (y[:, None] == np.array(["A", "B", "C", "A", "B", "C"])[None, :])
        batch = confounded_batches(y, seed=5)
        return {"sim_quick": (add_batch_effect(X, batch, seed=5), y, batch)}
    X, y, phase = _pbmc()
    batch = confounded_batches(y, seed=1)
    Xs, ys = _srbct()
    sbatch = confounded_batches(ys, seed=2)
    return {"pbmc68k_phase": (X, y, phase),
            "pbmc68k_confounded": (add_batch_effect(sp.csr_matrix(X), batch, seed=1), y, batch),
            "srbct_confounded": (add_batch_effect(Xs, sbatch, seed=2), ys, sbatch)}


def run(data, methods, ks, verbose=True):
    """Long table: dataset, method, batch_aware, n_genes, fold, balanced_accuracy."""
    import bioqpfs

    rows = []
    for name, (X, y, batch) in data.items():
        for label, (method, params) in methods.items():
            for aware in (False, True):
                t0 = time.perf_counter()
                _, folds = bioqpfs.evaluate.error_curve(
                    X, y, {label: (method, params)}, n_genes=ks, cv="leave_one_batch_out", batch=batch,
                    batch_selection=aware, classifier="logreg", return_folds=True)
                folds = folds.assign(dataset=name, batch_aware=aware, seconds=time.perf_counter() - t0)
                rows.append(folds[["dataset", "method", "batch_aware", "n_genes", "fold", "balanced_accuracy",
                                   "n_test", "seconds"]])
                if verbose:
                    print(f"# {name} {label} batch_aware={aware}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return pd.concat(rows, ignore_index=True)


def paired(df):
    """Per dataset, method and size: mean held-out balanced accuracy without and with batches, the mean paired
    difference over the held-out batches and wins / ties / losses of the batch-aware arm."""
    key = ["dataset", "method", "n_genes", "fold"]
    wide = df.pivot_table(index=key, columns="batch_aware", values="balanced_accuracy").reset_index()
    wide["diff"] = wide[True] - wide[False]
    out = []
    for (d, m, k), g in wide.groupby(["dataset", "method", "n_genes"], sort=False):
        diff = g["diff"].to_numpy()
        out.append(dict(dataset=d, method=m, n_genes=k, without=g[False].mean(), with_batch=g[True].mean(),
                        diff=diff.mean(), wins=f"{(diff > 1e-12).sum()}/{(abs(diff) <= 1e-12).sum()}/"
                                               f"{(diff < -1e-12).sum()}"))
    return pd.DataFrame(out)


def _simulated_atlas(n_cells=20000, n_genes=1000, seed=0):
    from bench_panels import simulate_counts

    X, y, _ = simulate_counts(n_cells=n_cells, n_genes=n_genes, seed=seed)
    batch = np.random.default_rng(seed).choice(np.array(["b0", "b1", "b2"]), size=n_cells)
    return X, y, batch


def overhead(data, methods, *, n_genes=20, repeats=5, verbose=True):
    """Seconds with and without the batches, best of ``repeats`` interleaved runs, per dataset, method and face
    (``"select"``: :func:`bioqpfs.select`; ``"tl"``: :func:`bioqpfs.tl.select_genes` with ``batch_key``), and
    their ratio.  Each (method, face) is run once untimed first (JIT compilation, caches)."""
    import warnings

    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # constant genes etc.: the same in both arms
        for name, (X, y, batch) in data.items():
            for label, (method, params) in methods.items():
                for face, run_once in _faces(X, y, batch, method, params, n_genes).items():
                    best = {False: np.inf, True: np.inf}
                    for aware in (False, True):
                        run_once(aware)
                    for _ in range(repeats):
                        for aware in (False, True):
                            t0 = time.perf_counter()
                            run_once(aware)
                            best[aware] = min(best[aware], time.perf_counter() - t0)
                    ratio = best[True] / best[False]
                    rows.append(dict(dataset=name, method=label, face=face, without=best[False],
                                     with_batch=best[True], ratio=ratio))
                    if verbose:
                        print(f"# {name} {label} {face}: {best[False]:.3f} s -> {best[True]:.3f} s ({ratio:.2f}x)",
                              file=sys.stderr)
    return pd.DataFrame(rows)


def _faces(X, y, batch, method, params, n_genes):
    """``{face: run(with_batch)}``: the selection through :func:`bioqpfs.select` and through ``tl.select_genes``."""
    import anndata as ad

    import bioqpfs

    adata = ad.AnnData(X, obs=pd.DataFrame({"label": y, "batch": batch}, index=[f"c{i}" for i in range(len(y))]))
    return {
        "select": lambda aware: bioqpfs.select(X, y, method=method, n_genes=n_genes,
                                               batch=batch if aware else None, **params),
        "tl": lambda aware: bioqpfs.tl.select_genes(adata, "label", method=method, n_genes=n_genes,
                                                    batch_key="batch" if aware else None, copy=True,
                                                    progress=False, **params),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: small simulated data, two methods, one size")
    ap.add_argument("--ks", default="10,20")
    ap.add_argument("--methods", default=None, help="comma-separated labels (default: all)")
    ap.add_argument("--overhead", action="store_true", help="time with / without batch_key instead of panel quality")
    ap.add_argument("--large", action="store_true", help="--overhead: add 20,000 simulated cells x 1,000 genes")
    ap.add_argument("--repeats", type=int, default=5, help="--overhead: best of this many runs")
    args = ap.parse_args(argv)
    if args.quick and (args.ks != "10,20" or args.methods or args.repeats != 5 or args.large):
        ap.error("--quick sets its own methods, size and repeats: drop --ks/--methods/--repeats/--large, or --quick")
    if not args.overhead and (args.large or args.repeats != 5):
        ap.error("--large and --repeats belong to --overhead: add --overhead, or drop them")
    if args.overhead and args.ks != "10,20":
        ap.error("--overhead times 20-gene panels: --ks sizes the panel-quality run only")
    unknown = sorted(set(args.methods.split(",")) - set(METHODS)) if args.methods else []
    if unknown:
        ap.error(f"unknown --methods {', '.join(unknown)}; the labels are: {', '.join(METHODS)}")
    ks = [int(k) for k in args.ks.split(",")]
    methods = dict(METHODS)
    if args.quick:
        ks, methods = [5], {k: METHODS[k] for k in ("qpfs", "mrmr_mid")}
    elif args.methods:
        methods = {k: METHODS[k] for k in args.methods.split(",")}
    t0 = time.perf_counter()
    if args.overhead:
        data = {k: v for k, v in datasets(args.quick).items() if k != "pbmc68k_confounded"}
        if args.large and not args.quick:
            data["sim_20000x1000"] = _simulated_atlas()
        table = overhead(data, methods, n_genes=5 if args.quick else 20, repeats=1 if args.quick else args.repeats)
        with pd.option_context("display.width", 160, "display.max_columns", 20):
            print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        print(f"\n# {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        return table, table
    df = run(datasets(args.quick), methods, ks)
    table = paired(df)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"\n# {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return df, table


if __name__ == "__main__":
    main()
