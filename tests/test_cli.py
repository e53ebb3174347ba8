import os
import stat
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
    r = run("select", str(h5ad), "--groupby", "cls", "--n-genes", "3", "-o", str(out), "--tsv", str(tsv), "--quiet",
            "--plot", str(tmp_path / "weights.png"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "weights.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    b = ad.read_h5ad(out)
    # no --method: the default recipe (class-covering QPFS) under the key "bioqpfs"; g0, higher in b, is b's gene
    # (rank 1 is class a's best gene: the round-robin visits the classes in label order)
    assert b.var["bioqpfs_selected"].sum() == 3 and "g0" in list(b.uns["bioqpfs"]["selected"])
    assert b.var.loc["g0", "bioqpfs_class"] == "b"
    assert b.uns["bioqpfs"]["params"]["preset"] == "default"
    df = pd.read_csv(tsv, sep="\t")
    assert list(df.columns[:4]) == ["gene", "rank", "weight", "selected"]
    assert df["gene"][0] == b.uns["bioqpfs"]["selected"][0]
    assert not list(tmp_path.glob(".*.bioqpfs-tmp-*"))  # atomic_path's temporary files (_io.TMP_MARK)
    # atomic writes keep the mode a plain open() gives (0666 & ~umask), not mkstemp's 0600
    mask = os.umask(0o022)
    os.umask(mask)
    for p in (out, tsv, tmp_path / "weights.png"):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~mask, p


def test_bad_inputs_exit_codes(h5ad, tmp_path):
    r = run("select", str(h5ad), "--groupby", "missing", "-o", str(tmp_path / "o.h5ad"))
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith(
        "bioqpfs: error: --groupby 'missing' is not a column")
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


def test_csv_both_orientations_and_labels_file(tmp_path):
    rng = np.random.default_rng(3)
    y = np.array(["a", "b"])[rng.integers(0, 2, size=30)]
    X = rng.normal(size=(30, 6))
    X[:, 2] += 2 * (y == "b")
    samples = [f"s{i}" for i in range(30)]
    genes = [f"g{j}" for j in range(6)]
    df = pd.DataFrame(X, index=samples, columns=genes)
    df.assign(cls=y).to_csv(tmp_path / "sxg.csv")
    df.T.to_csv(tmp_path / "gxs.tsv", sep="\t")
    pd.DataFrame({"cls": y}, index=samples).to_csv(tmp_path / "labels.csv")
    r1 = run("select", str(tmp_path / "sxg.csv"), "--orientation", "samples-by-genes", "--groupby", "cls", "--method", "qpfs",
             "--n-genes", "2", "-o", str(tmp_path / "a.h5ad"), "--quiet")
    r2 = run("select", str(tmp_path / "gxs.tsv"), "--orientation", "genes-by-samples", "--labels",
             str(tmp_path / "labels.csv"), "--groupby", "cls", "--n-genes", "2", "-o", str(tmp_path / "b.h5ad"), "--quiet",
             "--method", "qpfs")
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    a, b = ad.read_h5ad(tmp_path / "a.h5ad"), ad.read_h5ad(tmp_path / "b.h5ad")
    assert list(a.uns["qpfs"]["selected"]) == list(b.uns["qpfs"]["selected"]) and a.uns["qpfs"]["selected"][0] == "g2"
    r = run("select", str(tmp_path / "sxg.csv"), "--groupby", "cls", "-o", str(tmp_path / "c.h5ad"))
    assert r.returncode == 1 and "--orientation" in r.stderr
    r = run("select", str(tmp_path / "gxs.tsv"), "--orientation", "genes-by-samples", "--groupby", "cls",
            "-o", str(tmp_path / "c.h5ad"))
    assert r.returncode == 1 and "no labels" in r.stderr


def test_labels_file_with_an_h5ad_or_a_dataset_is_refused(h5ad, tmp_path):
    """--labels was read for tables only and silently ignored for an .h5ad (the panel came from .obs, exit 0)."""
    labels = tmp_path / "labels.csv"
    pd.DataFrame({"cls": ["b", "a"] * 20}, index=[f"c{i}" for i in range(40)]).to_csv(labels)
    for cmd in (["select", str(h5ad), "-o", str(tmp_path / "o.h5ad")], ["select", "--dataset", "srbct", "-o",
                                                                        str(tmp_path / "o.h5ad")],
                ["evaluate", str(h5ad), "-o", str(tmp_path / "o.tsv")]):
        r = run(*cmd, "--groupby", "cls", "--labels", str(labels), "--quiet")
        assert r.returncode == 1 and "--labels is read for a CSV/TSV input only" in r.stderr, r.stderr
    assert not (tmp_path / "o.h5ad").exists() and not (tmp_path / "o.tsv").exists()



def test_orientation_with_an_h5ad_or_a_dataset_is_refused(h5ad, tmp_path):
    """--orientation describes a table; with an .h5ad or --dataset it was ignored silently (exit 0).  A missing
    or damaged input file is still named first (test_bad_input_edges)."""
    for cmd in (["select", str(h5ad), "-o", str(tmp_path / "o.h5ad")],
                ["select", "--dataset", "srbct", "-o", str(tmp_path / "o.h5ad")],
                ["evaluate", str(h5ad), "-o", str(tmp_path / "o.tsv")]):
        r = run(*cmd, "--groupby", "cls", "--orientation", "genes-by-samples", "--quiet")
        assert r.returncode == 1 and "--orientation describes a CSV/TSV table" in r.stderr, r.stderr
    assert not (tmp_path / "o.h5ad").exists() and not (tmp_path / "o.tsv").exists()
    r = run("select", str(tmp_path / "absent.h5ad"), "--groupby", "cls", "--orientation", "genes-by-samples",
            "-o", str(tmp_path / "o.h5ad"))
    assert r.returncode == 1 and "does not exist" in r.stderr, r.stderr

def test_evaluate_writes_error_table(h5ad, tmp_path):
    out = tmp_path / "curve.tsv"
    r = run("evaluate", str(h5ad), "--groupby", "cls", "--methods", "qpfs", "--n-genes", "1,3", "--cv", "3",
            "-o", str(out), "--quiet", "--plot", str(tmp_path / "curve.pdf"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "curve.pdf").read_bytes()[:5] == b"%PDF-"
    df = pd.read_csv(out, sep="\t")
    assert list(df["n_genes"]) == [1, 3] and set(df["method"]) == {"qpfs"}
    assert ((df["mean_error"] >= 0) & (df["mean_error"] <= 1)).all()
    r = run("evaluate", str(h5ad), "--groupby", "cls", "--methods", "qpfs,bogus", "-o", str(out))
    assert r.returncode == 1 and "unknown method(s) bogus" in r.stderr
    r = run("evaluate", str(h5ad), "--groupby", "cls", "--n-genes", "0,x", "-o", str(out))
    assert r.returncode == 2


def test_evaluate_default_cv_on_srbct_and_scoring(tmp_path):
    """The README's flagship call: SRBCT's smallest class has 8 samples, so 10-fold CV is impossible;
    the default adapts (8-fold) instead of failing."""
    out = tmp_path / "ev.tsv"
    r = run("evaluate", "--dataset", "srbct", "--groupby", "class", "--methods", "maxrel", "--n-genes", "5",
            "--scoring", "balanced_accuracy", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "8-fold stratified CV" in r.stderr and "mean_balanced_accuracy" in r.stderr
    df = pd.read_csv(out, sep="\t")
    assert df["cv"].tolist() == [8] and df["scoring"].tolist() == ["balanced_accuracy"]
    assert {"mean_error", "mean_f1_macro", "mean_balanced_accuracy"} <= set(df.columns)
    r = run("evaluate", "--dataset", "srbct", "--groupby", "class", "--scoring", "bogus", "-o", str(out))
    assert r.returncode == 1 and "unknown scoring 'bogus'" in r.stderr


def test_use_raw_auto_yes_no(tmp_path):
    """An h5ad with .raw: 'auto' (default) and 'yes' select on .raw as scanpy's rank_genes_groups, 'no' on X."""
    rng = np.random.default_rng(3)
    y = np.repeat(["a", "b"], 15)
    X = rng.normal(size=(30, 6)).astype(np.float32)
    X[:, 4] += 3 * (y == "b")
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": pd.Categorical(y)}, index=[f"c{i}" for i in range(30)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(6)]))
    a.raw = a.copy()
    a.X = np.roll(X, 2, axis=1)            # X: the informative gene is now column 0 (g0); in .raw it is g4
    a.write_h5ad(tmp_path / "in.h5ad")
    top = {}
    for mode in ("auto", "yes", "no"):
        out = tmp_path / f"{mode}.h5ad"
        args = ["select", str(tmp_path / "in.h5ad"), "--groupby", "cls", "--n-genes", "1", "-o", str(out), "--quiet",
                "--method", "qpfs"]
        r = run(*args, *(["--use-raw", mode] if mode != "auto" else []))
        assert r.returncode == 0, r.stderr
        b = ad.read_h5ad(out)
        top[mode] = b.uns["qpfs"]["selected"][0]
        assert bool(b.uns["qpfs"]["params"]["use_raw"]) == (mode != "no")
    assert top == {"auto": "g4", "yes": "g4", "no": "g0"}


def test_select_n_genes_auto(h5ad, tmp_path):
    out = tmp_path / "auto.h5ad"
    r = run("select", str(h5ad), "--groupby", "cls", "--method", "mrmr_mid", "--n-genes", "auto", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "n_genes='auto'" in r.stderr and "one-SE rule" in r.stderr     # the choice is logged
    b = ad.read_h5ad(out)
    auto = b.uns["mrmr_mid"]["n_genes_auto"]
    assert list(auto["grid"]) == [5, 10]                                  # capped by the 10 genes
    assert b.var["mrmr_mid_selected"].sum() == auto["n_genes"] == b.uns["mrmr_mid"]["params"]["n_genes"]
    for bad in ("0", "-1", "five"):
        r = run("select", str(h5ad), "--groupby", "cls", "--n-genes", bad, "-o", str(tmp_path / "o.h5ad"))
        assert r.returncode == 2 and "expected a positive integer or 'auto'" in r.stderr, (bad, r.stderr)


def test_errors_name_the_cli_flags_not_the_python_keywords(tmp_path):
    """The CLI printed the API's words ("pass use_raw=False to use adata.X", "pass either layer= or use_raw=True"):
    each keyword of an option the command has is now its flag; API-only keywords stay as they are."""
    from bioqpfs import cli

    rng = np.random.default_rng(1)
    obs = pd.DataFrame({"cls": pd.Categorical(np.repeat(["a", "b"], 10))}, index=[f"c{i}" for i in range(20)])
    a = ad.AnnData(rng.normal(size=(20, 4)).astype(np.float32), obs=obs,
                   var=pd.DataFrame(index=["g0", "g1", "x1", "x2"]), layers={"L": rng.normal(size=(20, 4))})
    a.raw = ad.AnnData(rng.normal(size=(20, 2)).astype(np.float32), obs=obs, var=pd.DataFrame(index=["g0", "g1"]))
    a.write_h5ad(tmp_path / "in.h5ad")
    base = ["select", str(tmp_path / "in.h5ad"), "--groupby", "cls", "--n-genes", "1", "-o", str(tmp_path / "o.h5ad")]
    r = run(*base)
    assert r.returncode == 1 and "pass --use-raw no to use adata.X" in r.stderr and "use_raw" not in r.stderr
    r = run(*base, "--layer", "L", "--use-raw", "yes")
    assert r.returncode == 1 and "pass either --layer or --use-raw yes, not both" in r.stderr
    p = cli._parser()
    text = ("lazy=False reads it whole, chunk_size= / --chunk-size, discretization='mdl', n_genes=5, "
            "class_weight='balanced', copy=True, x.layer=1")
    assert cli._in_cli_words(text, p, "select") == (
        "--no-lazy reads it whole, --chunk-size, --discretization 'mdl', --n-genes 5, class_weight='balanced', "
        "copy=True, x.layer=1")


def test_evaluate_classifier_output_suffix_and_cli_words(h5ad, tmp_path):
    """--classifier (the error hints named it before it existed), the table's format from -o's suffix, and the
    hints' keywords in CLI words: 'cv=None' is '--cv auto', 'batch_key=None' is leaving --batch-key out."""
    base = ["evaluate", str(h5ad), "--groupby", "cls", "--methods", "maxrel", "--n-genes", "1,2", "--cv", "3",
            "--quiet"]
    r = run(*base, "--classifier", "logreg", "--scoring", "neg_log_loss", "-o", str(tmp_path / "t.csv"))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "t.csv")                                # comma-separated, from the suffix
    assert df["classifier"].tolist() == ["logreg"] * 2 and np.isfinite(df["mean_neg_log_loss"]).all()
    r = run(*base, "--scoring", "neg_log_loss", "-o", str(tmp_path / "t.tsv"))
    assert r.returncode == 1 and "gives no class probabilities; use --classifier 'logreg' or a score" in r.stderr
    r = run(*base, "-o", str(tmp_path / "t.h5ad"))
    assert r.returncode == 1 and "-o file" in r.stderr and "must end in one of .csv, .tsv" in r.stderr
    assert not (tmp_path / "t.h5ad").exists()
    r = run("evaluate", str(h5ad), "--groupby", "cls", "--methods", "maxrel", "--n-genes", "1,2", "--cv", "30",
            "-o", str(tmp_path / "t.tsv"))
    assert r.returncode == 1 and "--cv auto (chosen from the class sizes)" in r.stderr and "None" not in r.stderr
    from bioqpfs import cli

    text = cli._in_cli_words("drop the batch (batch=None / batch_key=None)", cli._parser(), "evaluate")
    assert text == "drop the batch (batch=None / no --batch-key)"


def test_datasets_output_needs_a_name(tmp_path):
    r = run("datasets", "-o", str(tmp_path / "x.h5ad"))
    assert r.returncode == 1 and "writes a dataset: name it, e.g. bioqpfs datasets" in r.stderr


def test_evaluate_refuses_a_method_named_twice(h5ad, tmp_path):
    r = run("evaluate", str(h5ad), "--groupby", "cls", "--methods", "maxrel,maxrel", "-o", str(tmp_path / "t.tsv"))
    assert r.returncode == 1 and "--methods names maxrel more than once" in r.stderr   # "pass a dict" before


# ---------------------------------------------------------------------------------------------------
# CLI defect hunt: tables read as written, faults named
# ---------------------------------------------------------------------------------------------------
def _planted(n=30, p=6, seed=3):
    rng = np.random.default_rng(seed)
    y = np.array(["a", "b"])[np.arange(n) % 2]
    X = rng.normal(size=(n, p))
    X[:, 2] += 3 * (y == "b")
    return pd.DataFrame(X, index=[f"s{i}" for i in range(n)], columns=[f"g{j}" for j in range(p)]), y


def _table_error(tmp_path, table, *extra, orientation="samples-by-genes", labels=None):
    args = ["select", str(table), "--orientation", orientation, "--groupby", "cls", "--method", "qpfs",
            "--n-genes", "2", "-o", str(tmp_path / "o.h5ad"), "--quiet", *extra]
    if labels is not None:
        args += ["--labels", str(labels)]
    r = run(*args)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "o.h5ad").exists()
    return r.stderr


def test_table_label_and_batch_columns_are_not_read_as_genes_with_labels(tmp_path):
    """Before: with --labels, the table's own --groupby/--batch-key columns stayed in X as genes (the class
    label ranked first with weight 1)."""
    df, y = _planted()
    t = df.copy()
    t.insert(0, "cls", (y == "b").astype(int))
    t.insert(1, "batch", [1, 2] * 15)
    t.to_csv(tmp_path / "expr.csv")
    pd.DataFrame({"cls": y, "batch": ["b1", "b2"] * 15}, index=df.index).to_csv(tmp_path / "labels.csv")
    err = _table_error(tmp_path, tmp_path / "expr.csv", "--batch-key", "batch", labels=tmp_path / "labels.csv")
    assert "column 'cls' is both in the table" in err and "drop it from one" in err
    t.drop(columns="cls").to_csv(tmp_path / "expr2.csv")
    err = _table_error(tmp_path, tmp_path / "expr2.csv", "--batch-key", "batch", labels=tmp_path / "labels.csv")
    assert "column 'batch' is both in the table" in err


def test_table_saved_without_row_names_is_refused(tmp_path):
    """Before: the first gene became the sample names, silently (60 x 19)."""
    df, y = _planted()
    df.assign(cls=y).to_csv(tmp_path / "noindex.csv", index=False)
    err = _table_error(tmp_path, tmp_path / "noindex.csv")
    assert "the first column 'g0' must name the samples" in err and "index=False" in err
    df.T.to_csv(tmp_path / "gxs.tsv", sep="\t", index=False)
    pd.DataFrame({"cls": y}, index=df.index).to_csv(tmp_path / "labels.csv")
    err = _table_error(tmp_path, tmp_path / "gxs.tsv", orientation="genes-by-samples", labels=tmp_path / "labels.csv")
    assert "the first column 's0' must name the genes" in err


def test_table_ids_are_kept_as_written_and_blank_ids_refused(tmp_path):
    """Before: 00002 became 2, Entrez 7159 became 7159.0, a blank id a gene named 'nan', and zero-padded sample
    ids in a labels file were reported as having no label."""
    df, y = _planted()
    g = df.T.copy()
    g.index = [f"{i:05d}" for i in range(6)]
    s = df.copy()
    s.index = [f"{i:03d}" for i in range(30)]
    s.T.to_csv(tmp_path / "padded.tsv", sep="\t")
    pd.DataFrame({"cls": y}, index=s.index).to_csv(tmp_path / "padded_labels.csv")
    g.to_csv(tmp_path / "probes.tsv", sep="\t")
    pd.DataFrame({"cls": y}, index=df.index).to_csv(tmp_path / "labels.csv")
    r = run("select", str(tmp_path / "probes.tsv"), "--orientation", "genes-by-samples", "--labels",
            str(tmp_path / "labels.csv"), "--groupby", "cls", "--method", "qpfs", "--n-genes", "2", "-o",
            str(tmp_path / "a.h5ad"), "--quiet")
    assert r.returncode == 0, r.stderr
    assert list(ad.read_h5ad(tmp_path / "a.h5ad").var_names) == [f"{i:05d}" for i in range(6)]
    r = run("select", str(tmp_path / "padded.tsv"), "--orientation", "genes-by-samples", "--labels",
            str(tmp_path / "padded_labels.csv"), "--groupby", "cls", "--method", "qpfs", "--n-genes", "2", "-o",
            str(tmp_path / "b.h5ad"), "--quiet")
    assert r.returncode == 0, r.stderr
    assert list(ad.read_h5ad(tmp_path / "b.h5ad").obs_names) == [f"{i:03d}" for i in range(30)]
    g.index = [str(7157 + i) for i in range(5)] + [""]
    g.index.name = "entrez"
    g.to_csv(tmp_path / "blank.tsv", sep="\t")
    err = _table_error(tmp_path, tmp_path / "blank.tsv", orientation="genes-by-samples", labels=tmp_path / "labels.csv")
    assert "blank.tsv: the first column 'entrez' names the genes, but 1 row(s) have an empty" in err
    g.index = [str(7157 + i) for i in range(5)] + ["NA"]
    g.to_csv(tmp_path / "na.tsv", sep="\t")
    err = _table_error(tmp_path, tmp_path / "na.tsv", orientation="genes-by-samples", labels=tmp_path / "labels.csv")
    assert "line 7 ('NA')" in err


def test_true_false_column_is_refused_as_annotation(tmp_path):
    """Before: an is_tumour TRUE/FALSE column was read as a gene (and ranked first)."""
    df, y = _planted()
    df.assign(cls=y, is_tumour=(y == "b")).to_csv(tmp_path / "expr.csv")
    err = _table_error(tmp_path, tmp_path / "expr.csv")
    assert "TRUE/FALSE values in" in err and "is_tumour" in err and "annotation" in err


def test_table_format_faults_are_named(tmp_path):
    """Before: a ';'-separated .csv was reported as missing labels, a '.csv' folder name made a .tsv 'comma-
    separated by name', a trailing tab was reported as a non-numeric 'sample' column, and a genes-by-samples
    table's annotation column was reported as its genes."""
    df, y = _planted()
    t = df.assign(cls=y)
    t.to_csv(tmp_path / "semicolon.csv", sep=";")
    err = _table_error(tmp_path, tmp_path / "semicolon.csv")
    assert "semicolon.csv is semicolon-separated" in err
    (tmp_path / "run.csv.d").mkdir()
    t.to_csv(tmp_path / "run.csv.d" / "expr.tsv", sep="\t")
    r = run("select", str(tmp_path / "run.csv.d" / "expr.tsv"), "--orientation", "samples-by-genes", "--groupby",
            "cls", "--method", "qpfs", "--n-genes", "2", "-o", str(tmp_path / "a.h5ad"), "--quiet")
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "run.csv.d" / "expr.tsv").read_text().splitlines()
    (tmp_path / "trailing.tsv").write_text("\n".join([lines[0]] + [x + "\t" for x in lines[1:]]) + "\n")
    err = _table_error(tmp_path, tmp_path / "trailing.tsv")
    assert "trailing.tsv has a tab at the end of every line" in err
    g = df.T.copy()
    g.insert(0, "symbol", [c.upper() for c in g.index])
    g.to_csv(tmp_path / "gxs.tsv", sep="\t")
    pd.DataFrame({"cls": y}, index=df.index).to_csv(tmp_path / "labels.csv")
    err = _table_error(tmp_path, tmp_path / "gxs.tsv", orientation="genes-by-samples", labels=tmp_path / "labels.csv")
    assert "non-numeric sample column(s) in" in err and ": symbol;" in err


def test_r_style_header_without_a_row_name_field_still_reads(tmp_path):
    """R's write.table writes the header one field short (no field for the row names): still read as before."""
    df, y = _planted()
    body = df.assign(cls=y)
    text = "\t".join(body.columns) + "\n" + "".join(
        s + "\t" + "\t".join(map(str, row)) + "\n" for s, row in zip(body.index, body.itertuples(index=False)))
    (tmp_path / "r.tsv").write_text(text)
    r = run("select", str(tmp_path / "r.tsv"), "--orientation", "samples-by-genes", "--groupby", "cls", "--method",
            "qpfs", "--n-genes", "2", "-o", str(tmp_path / "a.h5ad"), "--quiet")
    assert r.returncode == 0, r.stderr
    a = ad.read_h5ad(tmp_path / "a.h5ad")
    assert list(a.var_names) == list(df.columns) and list(a.obs_names) == list(df.index)


def test_tsv_option_follows_its_suffix_and_gzip_keeps_the_name(h5ad, tmp_path):
    """Before: --tsv panel.csv was tab-separated, any suffix was taken (--tsv x.xlsx wrote text), and a .gz output
    stored the temporary file's name in its gzip header (gunzip -N restored .x.tsv.gz.bioqpfs-tmp-...)."""
    r = run("select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "-o",
            str(tmp_path / "a.h5ad"), "--tsv", str(tmp_path / "panel.csv"), "--quiet")
    assert r.returncode == 0, r.stderr
    assert list(pd.read_csv(tmp_path / "panel.csv").columns[:4]) == ["gene", "rank", "weight", "selected"]
    r = run("select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "-o",
            str(tmp_path / "b.h5ad"), "--tsv", str(tmp_path / "panel.xlsx"), "--quiet")
    assert r.returncode == 1 and "--tsv file" in r.stderr and "must end in one of .csv, .tsv" in r.stderr
    assert not (tmp_path / "b.h5ad").exists() and not (tmp_path / "panel.xlsx").exists()
    r = run("select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "-o",
            str(tmp_path / "c.h5ad"), "--tsv", str(tmp_path / "panel.tsv.gz"), "--quiet")
    assert r.returncode == 0, r.stderr
    raw = (tmp_path / "panel.tsv.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b" and raw[3] & 0x08 and raw[10:raw.index(b"\0", 10)] == b"panel.tsv"
    assert list(pd.read_csv(tmp_path / "panel.tsv.gz", sep="\t").columns[:2]) == ["gene", "rank"]


def _fail_plot(monkeypatch):
    import errno

    from bioqpfs import cli

    def failing(draw, path, tmp=None):  # tmp: the staged file (before the fix, _save_plot wrote path itself)
        with open(tmp or path, "wb") as fh:
            fh.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", tmp or path)

    monkeypatch.setattr(cli, "_save_plot", failing)
    return cli


def test_failed_output_leaves_no_output_of_the_run(h5ad, tmp_path, monkeypatch, capsys):
    """Before: each output was committed on its own, so a failed --plot (or --tsv) write left the .h5ad (and the
    .tsv) of the run next to the files of an earlier run, and the run exited 1."""
    cli = _fail_plot(monkeypatch)
    outs = [tmp_path / "a.h5ad", tmp_path / "a.tsv", tmp_path / "a.png"]
    for p in outs:
        p.write_bytes(b"earlier run")
    rc = cli.main(["select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "--quiet",
                   "-o", str(outs[0]), "--tsv", str(outs[1]), "--plot", str(outs[2])])
    err = capsys.readouterr().err
    assert rc == 1 and "cannot write" in err and "a.png: no space left" in err, err
    assert [p.read_bytes() for p in outs] == [b"earlier run"] * 3
    rc = cli.main(["select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "--quiet",
                   "-o", str(tmp_path / "b.h5ad"), "--tsv", str(tmp_path / "b.tsv"), "--plot", str(tmp_path / "b.png")])
    assert rc == 1 and not list(tmp_path.glob("b.*"))
    rc = cli.main(["evaluate", str(h5ad), "--groupby", "cls", "--methods", "qpfs", "--n-genes", "2", "--cv", "2",
                   "--quiet", "-o", str(outs[1]), "--plot", str(outs[2])])
    assert rc == 1 and [p.read_bytes() for p in outs] == [b"earlier run"] * 3
    assert not list(tmp_path.glob(".*.bioqpfs-tmp-*"))


def test_atomic_outputs_undoes_the_moves_before_a_failed_one(tmp_path, monkeypatch):
    from bioqpfs import _io

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    real = os.replace

    def replace(src, dst):
        if os.fspath(dst) == str(b) and _io.TMP_MARK in os.fspath(src):
            raise OSError(5, "Input/output error", os.fspath(dst))
        return real(src, dst)

    monkeypatch.setattr(_io.os, "replace", replace)
    with pytest.raises(OSError):
        with _io.atomic_outputs() as stage:
            for p in (a, b):
                with open(stage(p), "w") as fh:
                    fh.write("new")
    assert a.read_text() == "old a" and not b.exists() and sorted(os.listdir(tmp_path)) == ["a.txt"]
    monkeypatch.setattr(_io.os, "replace", real)
    with _io.atomic_outputs() as stage:
        for p in (a, b):
            with open(stage(p), "w") as fh:
                fh.write("new")
    assert a.read_text() == b.read_text() == "new" and sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]


def _main(capsys, *argv):
    from bioqpfs import cli

    rc = cli.main(list(argv))
    return rc, capsys.readouterr().err


def test_error_rewriter_leaves_the_users_paths_alone(tmp_path, capsys, monkeypatch):
    """Before: a folder n_genes=20/ was reported as '--n-genes 20/e.csv is empty'."""
    monkeypatch.chdir(tmp_path)
    for folder in ("n_genes=20", "layer=raw"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "e.csv").write_text("")
        rc, err = _main(capsys, "select", f"{folder}/e.csv", "--orientation", "samples-by-genes", "--groupby", "cls",
                        "--quiet", "-o", "a.h5ad")
        assert rc == 1 and f"bioqpfs: error: {folder}/e.csv is empty" in err, err
    from bioqpfs.cli import _in_cli_words, _parser

    text = "cannot write /data/method=qpfs/out.h5ad: layer=None"
    assert _in_cli_words(text, _parser(), "select", ["/data/method=qpfs/out.h5ad"]) == \
        "cannot write /data/method=qpfs/out.h5ad: no --layer"


def test_preselected_file_with_a_byte_order_mark(h5ad, tmp_path, capsys):
    """Before: 'gene(s) not found among the genes: (BOM)g0' (the BOM of an Excel/Notepad file)."""
    (tmp_path / "panel.txt").write_bytes(b"\xef\xbb\xbfg0\r\ng3\r\n")
    rc, err = _main(capsys, "select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "--quiet",
                    "--preselected", str(tmp_path / "panel.txt"), "-o", str(tmp_path / "a.h5ad"))
    assert rc == 0, err
    assert list(ad.read_h5ad(tmp_path / "a.h5ad").uns["qpfs"]["selected"][:2]) == ["g0", "g3"]


def test_python_names_become_flags_and_bad_values_fail_early(h5ad, tmp_path, capsys):
    """Before: 'mask_var must be ...' (for a column with NA values), 'groupby_weights has', 'key_added must be',
    'nystrom_rate must lie', an 'adata = adata[...]' hint; --repeats 0 exited 1 after loading, and
    --preselected ' , ' was accepted."""
    a = ad.read_h5ad(h5ad)
    a.var["hv"] = pd.array([True] * 5 + [None] * 5, dtype="boolean")
    a.write_h5ad(tmp_path / "in.h5ad")
    base = ["select", str(tmp_path / "in.h5ad"), "--groupby", "cls", "--method", "qpfs", "--n-genes", "2", "--quiet",
            "-o", str(tmp_path / "o.h5ad")]
    for extra, expected in [(["--mask-var", "hv"], "--mask-var 'hv' has 5 missing value(s)"),
                            (["--groupby-weights", "1,1"], "error: --groupby-weights has 2 value(s)"),
                            (["--key-added", "a/b"], "error: --key-added must be"),
                            (["--nystrom-rate", "2"], "--nystrom-rate must lie in (0, 1], got 2.0"),
                            (["--preselected", " , "], "--preselected ' , ' lists no gene names")]:
        rc, err = _main(capsys, *base, *extra)
        assert rc == 1 and expected in err, (extra, err)
        assert "mask_var" not in err and "groupby_weights" not in err and "None" not in err
    df, y = _planted()
    df.assign(cls=np.where(np.arange(30) == 4, "", y)).to_csv(tmp_path / "na.csv")
    rc, err = _main(capsys, "select", str(tmp_path / "na.csv"), "--orientation", "samples-by-genes", "--groupby",
                    "cls", "--quiet", "-o", str(tmp_path / "o.h5ad"))
    assert rc == 1 and "missing value" in err and "adata =" not in err and "or give them a label" in err, err
    rc, err = _main(capsys, "evaluate", str(h5ad), "--groupby", "cls", "--repeats", "0", "--quiet",
                    "-o", str(tmp_path / "e.tsv"))
    assert rc == 2 and "--repeats: expected a positive number of repetitions, got '0'" in err


def test_lazy_with_a_table_is_refused(tmp_path):
    """--lazy with a CSV/TSV table was ignored silently (exit 0, the table read whole)."""
    table = tmp_path / "t.csv"
    pd.DataFrame(np.ones((4, 2)), index=list("abcd"), columns=["g0", "g1"]).assign(cls=list("xyxy")).to_csv(table)
    r = run("select", str(table), "--orientation", "samples-by-genes", "--groupby", "cls", "--lazy", "-o",
            str(tmp_path / "o.h5ad"), "--quiet")
    assert r.returncode == 1 and "--lazy reads an .h5ad or a zarr store" in r.stderr, r.stderr
    assert not (tmp_path / "o.h5ad").exists()


@pytest.mark.parametrize("suffix,sep", [(".tsv", "\t"), (".csv", ",")])
def test_gene_names_with_a_carriage_return_read_back_from_the_table(tmp_path, suffix, sep):
    """pandas' writer quotes the separator, quotes and newlines, not a carriage return, which ends a line for
    pandas' and R's readers: names 'g0<CR>' and 'g1<CR>X' read back as 42 rows for 40 genes, rank 1 without a gene."""
    rng = np.random.default_rng(0)
    y = np.repeat(["a", "b"], 20)
    X = rng.normal(size=(40, 12)) + 2.0 * (y == "b")[:, None] * (np.arange(12) < 2)
    names = [f"g{j}" for j in range(12)]
    names[0], names[1] = "g0\r", "g1\rX"
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": pd.Categorical(y)}, index=[f"c{i}" for i in range(40)]),
                   var=pd.DataFrame(index=names))
    a.write_h5ad(tmp_path / "in.h5ad")
    table = tmp_path / f"out{suffix}"
    r = run("select", str(tmp_path / "in.h5ad"), "--groupby", "cls", "--method", "maxrel", "--n-genes", "3", "-o",
            str(tmp_path / "out.h5ad"), "--tsv", str(table), "--quiet")
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(table, sep=sep)
    b = ad.read_h5ad(tmp_path / "out.h5ad")
    assert len(df) == 12 and df["rank"].tolist() == list(range(1, 13))
    assert df["gene"].tolist() == list(b.var_names[np.argsort(b.var["maxrel_rank"].to_numpy())])


def test_error_rewriter_leaves_paths_named_like_parameters_alone(tmp_path, capsys, monkeypatch):
    """Before: an empty n_genes.csv was reported as '--n-genes.csv is empty', a --labels file batch_key.csv as
    '--batch-key.csv' (a bare name with an underscore read as a parameter name)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "n_genes.csv").write_text("")
    rc, err = _main(capsys, "select", "n_genes.csv", "--orientation", "samples-by-genes", "--groupby", "cls",
                    "--quiet", "-o", "a.h5ad")
    assert rc == 1 and "bioqpfs: error: n_genes.csv is empty" in err, err
    pd.DataFrame(np.ones((2, 2)), index=["g0", "g1"], columns=["c0", "c1"]).to_csv(tmp_path / "gbs.csv")
    pd.DataFrame({"cls": ["a", "b"]}, index=["x0", "x1"]).to_csv(tmp_path / "batch_key.csv")
    rc, err = _main(capsys, "select", "gbs.csv", "--orientation", "genes-by-samples", "--groupby", "cls",
                    "--labels", "batch_key.csv", "--quiet", "-o", "a.h5ad")
    assert rc == 1 and "have no label in batch_key.csv" in err and "--batch-key" not in err, err
    from bioqpfs.cli import _in_cli_words, _parser

    assert _in_cli_words("mask_var.h5ad: mask_var must be boolean", _parser(), "select", ["mask_var.h5ad"]) == \
        "mask_var.h5ad: --mask-var must be boolean"


def test_an_output_may_not_overwrite_the_preselected_file(h5ad, tmp_path, capsys):
    """Before: --tsv (or -o, --plot) naming the --preselected file replaced the user's gene list with the ranked
    table, without --force (which the input and --labels files need)."""
    panel = tmp_path / "panel.txt"
    panel.write_text("g3\ng4\n")
    base = ["select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "--quiet",
            "--preselected", str(panel), "-o", str(tmp_path / "a.h5ad")]
    rc, err = _main(capsys, *base, "--tsv", str(panel))
    assert rc == 1 and "--tsv" in err and "is the --preselected file; choose another path or pass --force" in err, err
    assert panel.read_text() == "g3\ng4\n" and not (tmp_path / "a.h5ad").exists()
    rc, err = _main(capsys, *base, "--tsv", str(panel), "--force")
    assert rc == 0, err
    assert panel.read_text().startswith("gene\trank")
    rc, err = _main(capsys, "select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "--quiet",
                    "--preselected", "g3,g4", "-o", str(tmp_path / "b.h5ad"))    # names, not a file: no input
    assert rc == 0, err


def test_a_repeated_groupby_column_of_a_table_is_named(tmp_path, capsys):
    """Before: --groupby cls,cls with a samples-by-genes table failed with 'bioqpfs: error: cls' (a KeyError)."""
    df = pd.DataFrame(np.arange(12.0).reshape(4, 3), index=[f"s{i}" for i in range(4)], columns=["g0", "g1", "g2"])
    df.assign(cls=["a", "a", "b", "b"]).to_csv(tmp_path / "t.csv")
    for command in ("select", "evaluate"):
        rc, err = _main(capsys, command, str(tmp_path / "t.csv"), "--orientation", "samples-by-genes", "--groupby",
                        "cls,cls", "--quiet", "-o", str(tmp_path / ("o.h5ad" if command == "select" else "o.tsv")))
        assert rc == 1 and "--groupby lists column(s) 'cls' more than once; give each level once" in err, err


def test_discretization_none_is_named_as_given(h5ad, tmp_path, capsys):
    """Before: '--discretization none' on continuous data failed with 'no --discretization needs integer-coded
    data' (None read as the option's default), sending the user to the opposite of what they had passed."""
    rc, err = _main(capsys, "select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "2",
                    "--discretization", "none", "--quiet", "-o", str(tmp_path / "o.h5ad"))
    assert rc == 1 and "error: --discretization none needs integer-coded data" in err, err
    from bioqpfs.cli import _in_cli_words, _parser

    text = "discretization=None needs codes; cv=None; layer=None"
    assert _in_cli_words(text, _parser(), "select") == "--discretization none needs codes; cv=None; no --layer"


def test_preselected_directory_is_named_as_one(h5ad, tmp_path, capsys):
    """Before: --preselected DIR was looked up as a gene named DIR, and DIR/ was 'no such file'."""
    (tmp_path / "panels").mkdir()
    for value in (str(tmp_path / "panels"), str(tmp_path / "panels") + os.sep):
        rc, err = _main(capsys, "select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "2",
                        "--preselected", value, "--quiet", "-o", str(tmp_path / "o.h5ad"))
        assert rc == 1 and f"--preselected {value} is a directory" in err, err


def test_table_labels_are_names_not_numbers(tmp_path):
    """Before: the label column (of --labels, or of a samples-by-genes table) and the batch column were parsed as
    numbers: the labels 01 and 02 came out as the classes 1 and 2, and 1, 01 and 1.0 were silently one class.
    They are read as text now (the second is refused, as by the Python faces, naming the spellings); numeric
    labels still give the panel, the expression values stay numbers."""
    rng = np.random.default_rng(5)
    n = 36
    X = rng.normal(size=(n, 5))
    samples = [f"s{i}" for i in range(n)]
    df = pd.DataFrame(X, index=samples, columns=[f"g{j}" for j in range(5)])
    df.T.to_csv(tmp_path / "gxs.tsv", sep="\t")

    def faces(y, name):
        batch = [f"0{(i // 3) % 2}" for i in range(n)]
        with open(tmp_path / f"{name}_labels.csv", "w") as f:  # by hand: the values exactly as a user's file
            f.write("id,cls,batch\n" + "".join(f"{s},{c},{b}\n" for s, c, b in zip(samples, y, batch)))
        with open(tmp_path / f"{name}.csv", "w") as f:
            f.write(",cls,batch," + ",".join(df.columns) + "\n" + "".join(
                f"{s},{c},{b}," + ",".join(str(float(v)) for v in row) + "\n" for s, c, b, row in zip(samples, y, batch, X)))
        for i, (table, orientation, extra) in enumerate((
                ("gxs.tsv", "genes-by-samples", ["--labels", str(tmp_path / f"{name}_labels.csv")]),
                (f"{name}.csv", "samples-by-genes", []))):
            out = tmp_path / f"{name}{i}.h5ad"
            yield run("select", str(tmp_path / table), "--orientation", orientation, *extra, "--groupby", "cls",
                      "--batch-key", "batch", "--method", "qpfs", "--n-genes", "2", "-o", str(out), "--quiet"), out

    y = np.array(["01", "02"])[np.arange(n) % 2]
    X[:, 3] += 3 * (y == "02")
    df.loc[:, :] = X
    df.T.to_csv(tmp_path / "gxs.tsv", sep="\t")
    for r, out in faces(y, "padded"):
        assert r.returncode == 0, r.stderr
        b = ad.read_h5ad(out)
        assert list(b.obs["cls"].cat.categories) == ["01", "02"] and list(b.obs["cls"].astype(str)) == list(y)
        assert list(b.obs["batch"].cat.categories) == ["00", "01"]
        assert b.X.dtype.kind == "f" and b.uns["qpfs"]["selected"][0] == "g3"
    for r, out in faces(np.array(["1", "01", "1.0"])[np.arange(n) % 3], "spelled"):
        assert r.returncode == 1 and "the same class is written in different ways ('01' and '1' and '1.0')" in r.stderr, r.stderr
        assert not out.exists()
    for r, out in faces((y == "02").astype(int).astype(str), "numeric"):  # 0 and 1: names "0" and "1"
        assert r.returncode == 0, r.stderr
        b = ad.read_h5ad(out)
        assert list(b.obs["cls"].cat.categories) == ["0", "1"] and b.uns["qpfs"]["selected"][0] == "g3"


def test_n_jobs_reaches_the_faces_and_is_checked(h5ad, tmp_path, monkeypatch, capsys):
    """Before: the CLI had no --n-jobs (every Python face takes n_jobs): a shared machine could not be asked for
    fewer worker threads.  It is passed to tl.select_genes and evaluate.error_curve; a bad count is a usage error."""
    from bioqpfs import _threads, cli

    seen = []
    real = _threads.limited

    def spy(n_jobs=None):
        seen.append(n_jobs)
        return real(n_jobs)

    monkeypatch.setattr(_threads, "limited", spy)
    rc = cli.main(["select", str(h5ad), "--groupby", "cls", "--method", "qpfs", "--n-genes", "3", "--quiet",
                   "--n-jobs", "1", "-o", str(tmp_path / "a.h5ad")])
    assert rc == 0 and seen and seen[0] == 1   # the face's count (inner calls pass None: keep the outer)
    seen.clear()
    rc = cli.main(["evaluate", str(h5ad), "--groupby", "cls", "--methods", "qpfs", "--n-genes", "2", "--cv", "2",
                   "--quiet", "--n-jobs", "-1", "-o", str(tmp_path / "e.tsv")])
    assert rc == 0 and seen and seen[0] == -1
    assert cli._parser().parse_args(["select", "x.h5ad", "--groupby", "c", "-o", "o.h5ad"]).n_jobs is None
    for bad in ("0", "-2", "1.5", "two"):
        assert cli.main(["select", str(h5ad), "--groupby", "cls", "--n-jobs", bad, "-o", str(tmp_path / "b.h5ad")]) == 2
        assert f"--n-jobs must be a positive integer or -1 (all cores), got '{bad}'" in capsys.readouterr().err
    assert "--n-jobs N" in run("select", "--help").stdout
