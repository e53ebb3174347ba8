import subprocess
import sys

import anndata as ad
import numpy as np
import pandas as pd
import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "bioqpfs.cli", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture
def h5ad(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=40)
    X = rng.normal(size=(40, 10)).astype(np.float32)
    X[:, 0] += 2 * y
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": pd.Categorical(np.array(["a", "b"])[y])}, index=[f"c{i}" for i in range(40)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(10)]))
    p = tmp_path / "in.h5ad"
    a.write_h5ad(p)
    return p


def test_select_writes_h5ad_and_tsv(h5ad, tmp_path):
    out, tsv = tmp_path / "out.h5ad", tmp_path / "out.tsv"
    r = run("select", str(h5ad), "--groupby", "cls", "--n-genes", "3", "-o", str(out), "--tsv", str(tsv), "--quiet")
    assert r.returncode == 0, r.stderr
    b = ad.read_h5ad(out)
    assert b.var["qpfs_selected"].sum() == 3 and b.uns["qpfs"]["selected"][0] == "g0"
    df = pd.read_csv(tsv, sep="\t")
    assert list(df.columns[:4]) == ["gene", "rank", "weight", "selected"] and df["gene"][0] == "g0"
    assert not list(tmp_path.glob(".tmp-*"))


def test_bad_inputs_exit_codes(h5ad, tmp_path):
    r = run("select", str(h5ad), "--groupby", "missing", "-o", str(tmp_path / "o.h5ad"))
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith(
        "bioqpfs: error: groupby='missing' is not a column")
    assert "Traceback" not in r.stderr
    r = run("select", str(h5ad), "--groupby", "cls", "-o", str(h5ad))
    assert r.returncode == 1 and "is the input file" in r.stderr
    r = run("select", str(h5ad), "--groupby", "cls", "--method", "nope", "-o", str(tmp_path / "o.h5ad"))
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = run("select", str(tmp_path / "absent.h5ad"), "--groupby", "cls", "-o", str(tmp_path / "o.h5ad"))
    assert r.returncode == 1 and "does not exist" in r.stderr
    assert not (tmp_path / "o.h5ad").exists()


def test_nan_in_x(tmp_path, h5ad):
    a = ad.read_h5ad(h5ad)
    a.X[2, 4] = np.nan
    a.write_h5ad(tmp_path / "nan.h5ad")
    r = run("select", str(tmp_path / "nan.h5ad"), "--groupby", "cls", "-o", str(tmp_path / "o.h5ad"))
    assert r.returncode == 1 and "NaN or infinite values in 1 gene(s): g4" in r.stderr


def test_datasets_listing_and_export(tmp_path):
    r = run("datasets")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("srbct\t")
    r = run("datasets", "colon", "-o", str(tmp_path / "colon.h5ad"))
    assert r.returncode == 0 and ad.read_h5ad(tmp_path / "colon.h5ad").shape == (62, 2000)
