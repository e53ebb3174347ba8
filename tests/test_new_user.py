"""The rough edges a new user hits first (issue 16): version, method-name typos, a wrong
--orientation, repeated warnings, gene names on a Selection."""
import tomllib
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import bioqpfs
from bioqpfs import cli

ROOT = Path(__file__).parents[1]


@pytest.fixture
def small():
    """40 samples x 12 genes, gene g0 tracks the class."""
    rng = np.random.default_rng(0)
    y = np.array(["a", "b"])[rng.integers(0, 2, size=40)]
    X = rng.normal(size=(40, 12))
    X[:, 0] += 3 * (y == "b")
    return pd.DataFrame(X, index=[f"s{i}" for i in range(40)], columns=[f"g{j}" for j in range(12)]), y


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as e:  # argparse's version action exits 0 from parse_args
        cli._parser().parse_args(["--version"])
    assert e.value.code == 0
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out.strip() == f"bioqpfs {version}"
    assert cli.main(["--version"]) == 0


@pytest.mark.parametrize("typo, meant", [("QPFS", "qpfs"), ("Spec_CMI", "spec_cmi"), ("spec-cmi", "spec_cmi"),
                                         ("mrmr_mdi", "mrmr_mid"), ("ikmqpfs", "ikm_qpfs")])
def test_unknown_method_suggests_closest(typo, meant, small):
    X, y = small
    with pytest.raises(ValueError, match=rf"unknown method '{typo}' \(did you mean '{meant}'\?\); available: "):
        bioqpfs.select(X.to_numpy(), y, method=typo)


def test_unknown_method_without_close_name_lists_all(small):
    X, y = small
    with pytest.raises(ValueError, match=r"unknown method 'xyzzy'; available: cife, ") as e:
        bioqpfs.select(X.to_numpy(), y, method="xyzzy")
    assert "did you mean" not in str(e.value)


def test_cli_method_typo_suggests(tmp_path, capsys):
    assert cli.main(["select", "--dataset", "srbct", "--groupby", "class", "--method", "QPFS",
                     "-o", str(tmp_path / "o.h5ad")]) == 2
    assert "did you mean 'qpfs'?" in capsys.readouterr().err
    assert cli.main(["evaluate", "--dataset", "srbct", "--groupby", "class", "--methods", "qpfs,MaxRel",
                     "-o", str(tmp_path / "o.tsv")]) == 1
    assert "did you mean 'MaxRel' -> 'maxrel'?" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_cli_wrong_orientation_is_named(small, tmp_path, capsys):
    X, y = small
    X.to_csv(tmp_path / "expr.csv")                                  # samples x genes
    pd.DataFrame({"tissue": y}, index=X.index).to_csv(tmp_path / "labels.csv")
    args = ["select", str(tmp_path / "expr.csv"), "--labels", str(tmp_path / "labels.csv"), "--groupby", "tissue",
            "--n-genes", "2", "--quiet", "-o", str(tmp_path / "o.h5ad")]
    assert cli.main(args + ["--orientation", "genes-by-samples"]) == 1
    err = capsys.readouterr().err
    assert "40 of its 40 sample ids are what --orientation genes-by-samples reads as genes" in err
    assert "try --orientation samples-by-genes" in err
    assert cli.main(args + ["--orientation", "samples-by-genes"]) == 0
    # labels that match neither axis get no orientation hint
    pd.DataFrame({"tissue": y}, index=[f"x{i}" for i in range(40)]).to_csv(tmp_path / "labels.csv")
    assert cli.main(args + ["--orientation", "samples-by-genes"]) == 1
    assert "--orientation" not in capsys.readouterr().err


def _singleton_warnings(record):
    return [w for w in record if "alone in their class" in str(w.message)]


@pytest.mark.parametrize("face", ["tl", "select", "qpfs", "spec_cmi", "mrmr_mid"])
def test_continuous_labels_warned_once(face, small):
    X, _ = small
    ages = np.arange(40) % 36                      # 32 of 40 samples alone in their class
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if face == "tl":
            a = ad.AnnData(X.to_numpy(), obs=pd.DataFrame({"age": ages}, index=X.index),
                           var=pd.DataFrame(index=X.columns))
            bioqpfs.tl.select_genes(a, "age", n_genes=3)
        elif face == "qpfs":
            bioqpfs.qpfs(X.to_numpy(), ages, n_genes=3)
        else:
            bioqpfs.select(X.to_numpy(), ages, n_genes=3, method="qpfs" if face == "select" else face)
    found = _singleton_warnings(record)
    assert len(found) == 1, [str(w.message) for w in found]
    assert "32 of 40 samples are alone in their class (36 classes)" in str(found[0].message)
    if face == "tl":
        assert str(found[0].message).startswith("adata.obs['age']")
    # a second, separate call warns again (the scope is one call, not the process)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        bioqpfs.select(X.to_numpy(), ages, n_genes=3)
    assert len(_singleton_warnings(record)) == 1


def test_selection_gene_names(small):
    X, y = small
    by_frame = bioqpfs.select(X, y, method="maxrel", n_genes=3)          # a DataFrame names its genes
    names = X.columns.to_numpy()
    assert list(by_frame.genes) == list(names[by_frame.selected]) and by_frame.genes[0] == "g0"
    assert list(by_frame.ranked_genes) == list(names[by_frame.ranking]) and len(by_frame.ranked_genes) == 12
    given = bioqpfs.select(X.to_numpy(), y, method="maxrel", n_genes=3, feature_names=[f"G{j}" for j in range(12)])
    assert list(given.genes) == [f"G{i}" for i in by_frame.selected]
    a = ad.AnnData(X.to_numpy(), obs=pd.DataFrame({"c": pd.Categorical(y)}, index=X.index),
                   var=pd.DataFrame(index=X.columns))
    bioqpfs.tl.select_genes(a, "c", method="maxrel", n_genes=3)
    assert list(by_frame.genes) == list(a.uns["maxrel"]["selected"])
    anonymous = bioqpfs.select(X.to_numpy(), y, method="maxrel", n_genes=3)
    with pytest.raises(ValueError, match="no gene names.*feature_names="):
        anonymous.genes
    # the DataFrame is not modified, and explicit feature_names win over its columns
    assert list(X.columns) == list(names)


@pytest.mark.parametrize("flag, expected", [(None, 75), ("all", 2308), ("30", 30)])
def test_cli_plot_ranks(flag, expected, tmp_path, monkeypatch):
    """select --plot zooms on the panel and the non-zero weights by default (SRBCT QPFS: 68 non-zero weights,
    + a 7-rank zero tail); --plot-ranks all|N changes it."""
    from bioqpfs import pl

    drawn = []
    real = pl.weights
    monkeypatch.setattr(pl, "weights", lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    args = ["select", "--dataset", "srbct", "--groupby", "class", "--method", "qpfs", "--n-genes", "20", "--quiet",
            "-o", str(tmp_path / "o.h5ad"), "--plot", str(tmp_path / "w.png")]
    assert cli.main(args + ([] if flag is None else ["--plot-ranks", flag])) == 0
    assert (tmp_path / "w.png").stat().st_size > 1000
    x = drawn[0].lines[0].get_xdata()
    assert x.size == expected
    if flag is None:
        b = ad.read_h5ad(tmp_path / "o.h5ad")
        w = b.var.sort_values("qpfs_rank")["qpfs_weight"].to_numpy()
        assert np.count_nonzero(w) == 68 and (w[68:] == 0).all()   # the reference the 75 comes from


def test_cli_plot_ranks_usage_error(tmp_path, capsys):
    assert cli.main(["select", "--dataset", "srbct", "--groupby", "class", "-o", str(tmp_path / "o.h5ad"),
                     "--plot-ranks", "0"]) == 2
    assert "expected 'auto', 'all' or a positive integer" in capsys.readouterr().err


def _dev_sh_functions(body, env):
    """Run ``body`` in bash with dev.sh's newest-stack functions defined (not the whole script)."""
    import subprocess

    script = ('set -euo pipefail; ROOT=$PWD; NEWEST_VENV=$ROOT/.venv-newest-test-unused; '
              'log() { printf "[dev.sh] %s\\n" "$*" >&2; }; '
              'eval "$(sed -n "/^find_newest_python() {/,/^}/p; /^newest_stack_leg() {/,/^}/p" dev.sh)"; ' + body)
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_dev_sh_newest_stack_leg_finds_the_newest_python(tmp_path):
    """bash dev.sh test runs the suite again on the newest interpreter it finds (here a planted 3.14)."""
    import os

    for name, version in [("python3.12", "3.12.4"), ("python3.14", "3.14.1"), ("python3.13", "3.13.9")]:
        fake = tmp_path / name
        fake.write_text(f"#!/bin/sh\necho {version}\n")   # answers the version probe
        fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "none")}
    r = _dev_sh_functions("find_newest_python", env)
    assert r.returncode == 0 and r.stdout.strip() == f"3.14.1 {tmp_path / 'python3.14'}", r.stderr
    r = _dev_sh_functions("find_newest_python", {**env, "NEWEST_PYTHON": os.path.realpath(
        __import__("sys").executable)})
    assert r.stdout.split()[0] == "3.14.1"          # NEWEST_PYTHON (3.11 here: too old) is only a candidate


def test_dev_sh_newest_stack_leg_says_why_it_is_skipped(tmp_path):
    import shutil

    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "none")}
    if any(shutil.which(f"python3.{m}", path=env["PATH"]) for m in range(12, 16)) or \
            list(Path("/usr/local/bin").glob("python3.*")) or list(Path("/opt").glob("python*/bin/python3")):
        pytest.skip("this machine has a system Python >= 3.12")
    r = _dev_sh_functions("newest_stack_leg", env)
    assert r.returncode == 0
    assert "newest-stack leg SKIPPED: no Python >= 3.12 found" in r.stderr
    assert "NEWEST_PYTHON=" in r.stderr
    r = _dev_sh_functions("newest_stack_leg", {**env, "NEWEST_STACK": "0"})
    assert r.returncode == 0 and "skipped: NEWEST_STACK=0" in r.stderr


def test_datasets_load_names_the_datasets_for_a_wrong_name():
    import bioqpfs

    with pytest.raises(ValueError, match="unknown dataset 'SRBCT'; available: .*srbct"):
        bioqpfs.datasets.load("SRBCT")
    with pytest.raises(TypeError, match="name must be one dataset name \\(a str\\), got \\['srbct'\\]"):
        bioqpfs.datasets.load(["srbct"])                                 # "unhashable type: 'list'" before
    first = bioqpfs.datasets.load("srbct")
    first.X[0, 0] = -1.0
    assert bioqpfs.datasets.load("srbct").X[0, 0] != -1.0               # a fresh copy each time
