"""Outputs of every registered method and of the measures on two datasets, for the bit-identity test.

``python tests/kernel_reference.py OUT.json`` records a summary of each (sha256, 64 values) with whatever ``bioqpfs`` is on the path; the
file ``tests/data/kernel_reference.json`` was recorded from main before the issue-12 kernel redesign
(one discretisation entry point, one I(X;C) function, the counting-backend split), so
``tests/test_kernel_identity.py`` fails if that redesign changed any bit of any result.  Re-recorded once, on
purpose, when weighted counts became exact per-weight-value counts scaled once (``counting.weight_level_runs``):
the 20 class-weighted outputs of 188 changed bits, all within the tolerant check (values to 3e-14, QP weights to
4e-8) except two rankings of ``qpfs_cover`` on Colon, where three genes whose QP weights tie to 1e-7 (0.035726)
swapped places 16-20; the other 168 outputs are still bit-identical to the pre-redesign record.  Re-recorded a
second time, on purpose, when the class-weighted margins became the same exact counts per weight value times the
value (``NumpyCounting.margins``; before: a float64 GEMV over the weights per bin): 33 class-weighted outputs
changed, values within 3e-14, ``qpfs_cover``'s weights within 3e-7 (genes tied to that swapped places 15-21 on
Colon), and ``qpfs`` balanced on Colon moved to another vertex of a flat optimum (Q is singular at 62 samples:
weights differ by 0.08, the objective by 4e-14, positions 3-16 of its ranking reordered).  Re-recorded a third
time, on purpose, when the active-set polish began to keep the Cholesky factor of its working set
(``simplex_qp._FaceFactor``, its triangular solves by numpy blocks and numba so that class QPs run on threads): on
one machine (an Intel Xeon with AVX-512) six QP weight vectors (Colon's qpfs,
qpfs quantile, eqpfs, qpfs_cover and its balanced run; the sparse set's eqpfs) changed in their last bits, by at
most 1.9e-15, and no ranking changed.  That record was made on this Intel machine, so its other differences to
the AMD EPYC record before are the CPU's (``tests/test_kernel_identity.py`` lists them).  Two entries re-recorded
on purpose when the class-covering round-robin began to let a class wait while its next gene is weak
(``qpfs_cover(min_relative_relevance=0.25)``): the two ``qpfs_cover`` rankings on Colon, which differ from
``min_relative_relevance=0`` from positions 50 and 46 on (their first 45 genes are the same).
"""
from __future__ import annotations

import sys
import warnings

import numpy as np
import scipy.sparse as sp


def datasets():
    """Two datasets: a microarray subset (Colon, 62 x 240) and zero-inflated counts (300 x 120, 5 classes, CSR)."""
    import bioqpfs.datasets as ds

    ad = ds.colon()
    X1 = np.asarray(ad.X, dtype=np.float64)[:, :240]
    y1 = np.asarray(ad.obs.iloc[:, 0].astype(str))
    rng = np.random.default_rng(12)
    n, m = 300, 120
    y2 = rng.integers(0, 5, n)
    lam = rng.gamma(0.5, 1.0, size=(5, m))
    counts = rng.poisson(lam[y2] * rng.uniform(0.5, 2.0, size=(n, 1)))
    X2 = sp.csr_matrix(np.log1p(counts.astype(np.float64)))
    return {"colon": (X1, y1), "sparse": (X2, y2)}


def record():
    import bioqpfs
    from bioqpfs import measures

    out = {}
    for dname, (X, y) in datasets().items():
        codes = measures.discretize(X)
        for disc in ("mean_sd", "quantile", "zero_quantile", "mdl", "auto"):
            kw = dict(discretization=disc, n_bins=4 if disc != "mean_sd" else 3)
            if disc != "mdl":
                out[f"{dname}/mi/{disc}"] = measures.mutual_information(X, **kw)
                out[f"{dname}/entropy/{disc}"] = measures.entropy(X, **kw)
            out[f"{dname}/discretize/{disc}"] = measures.discretize(X, disc, n_bins=kw["n_bins"], y=y)
            out[f"{dname}/cmi/{disc}"] = measures.conditional_mutual_information(X, y, **kw)
            out[f"{dname}/relevance/{disc}"] = measures.relevance(X, y, **kw)
            out[f"{dname}/relevance_bal/{disc}"] = measures.relevance(X, y, class_weight="balanced", **kw)
            out[f"{dname}/cmi_bal/{disc}"] = measures.conditional_mutual_information(X, y, class_weight="balanced",
                                                                                    **kw)
        out[f"{dname}/mi/codes"] = measures.mutual_information(codes, discretization=None)
        out[f"{dname}/mi/rows"] = measures.mutual_information(X, rows=[3, 1, 7])
        out[f"{dname}/mi/Yd"] = measures.mutual_information(X, np.stack([np.asarray(y).astype(str),
                                                                         np.arange(len(y)) % 3], axis=1))
        out[f"{dname}/mi/f32"] = measures.mutual_information(X, dtype=np.float32)
        for method in bioqpfs.methods():
            Xm = X[:, :30] if method in ("sdp_cmi", "ldfs", "hsfs") else X
            variants = [("", {})]
            if method in ("qpfs", "maxrel", "mrmr_mid", "jmi", "spec_cmi", "ikm_qpfs", "qpfs_cover"):
                variants.append(("/balanced", {"class_weight": "balanced"}))
            if method in ("ikm_qpfs", "tlkm_qpfs", "qpfs", "mrmr_miq", "cife"):
                variants.append(("/quantile", {"discretization": "quantile", "n_bins": 4}))
            for tag, params in variants:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        sel = bioqpfs.select(Xm, y, method=method, n_genes=10, random_state=0, n_jobs=1, **params)
                except (TypeError, ValueError) as e:  # a method that refuses the option: record that
                    out[f"{dname}/select/{method}{tag}/error"] = np.array(type(e).__name__)
                    continue
                out[f"{dname}/select/{method}{tag}/ranking"] = np.asarray(sel.ranking)
                out[f"{dname}/select/{method}{tag}/weights"] = np.asarray(sel.weights, dtype=np.float64)
    return out


def fingerprint():
    """What bit-identity depends on beyond the code: numpy's version and the CPU (numpy's SIMD log, BLAS)."""
    import platform

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"numpy {np.__version__}; {platform.machine()}; {cpu}"


def summary(a):
    """sha256 of the bytes (bit identity), dtype, shape, and 64 evenly spaced values (a tolerant check elsewhere)."""
    import hashlib

    a = np.ascontiguousarray(a)
    flat = a.ravel()
    idx = np.unique(np.linspace(0, flat.size - 1, 64).astype(np.int64)) if flat.size else np.zeros(0, np.int64)
    sample = flat[idx].tolist() if a.dtype.kind in "fiub" else [str(v) for v in flat[idx]]
    return {"sha256": hashlib.sha256(a.tobytes()).hexdigest(), "dtype": str(a.dtype), "shape": list(a.shape),
            "index": idx.tolist(), "sample": sample}


if __name__ == "__main__":
    import json

    res = {k: summary(v) for k, v in record().items()}
    with open(sys.argv[1], "w") as fh:  # one array per line: a diff names what changed
        fh.write('{"fingerprint": %s,\n"arrays": {\n' % json.dumps(fingerprint()))
        fh.write(",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(res.items())))
        fh.write("\n}}\n")
    print(len(res), "arrays")
