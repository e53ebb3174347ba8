"""The benchmark scripts' command lines: the papers' data folder, and flags that the chosen mode would not use."""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import bench_baselines  # noqa: E402
import bench_ikm_qpfs  # noqa: E402
import bench_panels  # noqa: E402
import bench_qpfs  # noqa: E402


def test_baselines_without_the_data_folder_says_how_to_point_at_it(tmp_path, monkeypatch):
    """It was ``ModuleNotFoundError: No module named 'load'``."""
    monkeypatch.setenv("BIOQPFS_BENCHMARK_DATA", str(tmp_path))
    with pytest.raises(SystemExit, match="'wdbc'.*BIOQPFS_BENCHMARK_DATA"):
        bench_baselines.main(["--quick", "--part", "cv", "--datasets", "wdbc"])


def test_ikm_benchmark_reads_the_data_folder_the_others_read(tmp_path, monkeypatch):
    """It read ``BIOQPFS_BENCH_DATA`` (default an absolute /work path), not ``BIOQPFS_BENCHMARK_DATA``."""
    monkeypatch.setenv("BIOQPFS_BENCHMARK_DATA", str(tmp_path))
    with pytest.raises(SystemExit, match=f"'colon'.*{re.escape(str(tmp_path))}.*BIOQPFS_BENCHMARK_DATA"):
        bench_ikm_qpfs.load_benchmark("colon")


def test_qpfs_psd_evidence_reads_the_data_folder_named_by_the_environment(tmp_path, monkeypatch):
    """It read ``../shared/data/benchmarks`` only (``ModuleNotFoundError: No module named 'load'`` elsewhere)."""
    monkeypatch.setenv("BIOQPFS_BENCHMARK_DATA", str(tmp_path))
    with pytest.raises(SystemExit, match="'srbct'.*BIOQPFS_BENCHMARK_DATA"):
        bench_qpfs.psd_evidence(datasets=("srbct",), fixes=("none",), sizes=(5,), n_splits=2, n_repeats=1)


def test_panels_find_the_data_folder_named_by_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BIOQPFS_BENCHMARK_DATA", str(tmp_path))
    assert "lymphoma62" not in bench_panels.available_datasets()
    (tmp_path / "load.py").write_text("")
    assert {"lymphoma62", "nci61"} <= set(bench_panels.available_datasets())


@pytest.mark.parametrize("argv", [["--calibrate"], ["--sparse", "--levels"], ["--sparse", "--float32"],
                                  ["--levels", "--sizes", "500"], ["--sparse", "--n", "50"]])
def test_mi_refuses_flags_its_run_would_not_use(argv):
    """``--calibrate`` without ``--sparse``, ``--levels`` beside ``--sparse`` and the dense run's ``--n``/``--sizes``/
    ``--float32`` with the other runs were dropped silently (and ``main`` read ``sys.argv`` only)."""
    import bench_mi

    with pytest.raises(SystemExit):
        bench_mi.main(argv)


def test_mi_calibrate_alone_is_refused_from_the_command_line(monkeypatch):
    """From ``sys.argv`` as the script reads it: the dense run at M = 300 ran and SPARSE_COST was not measured."""
    import bench_mi

    monkeypatch.setattr(sys, "argv", ["bench_mi.py", "--calibrate", "--sizes", "300", "--repeats", "1"])
    with pytest.raises(SystemExit):
        bench_mi.main()


@pytest.mark.parametrize("argv", [["--quick", "--genes", "60", "--e2e", "none"], ["--crossover", "--no-cpu"]])
def test_gpu_refuses_flags_its_run_would_not_use(argv):
    """``--quick`` replaced ``--cells``/``--genes`` and ``--crossover`` ignored every other option, silently."""
    import bench_gpu

    with pytest.raises(SystemExit):
        bench_gpu.main(argv)


@pytest.mark.parametrize("argv", [["--crossover"], ["--no-cpu", "--cells", "2000", "--genes", "50"]])
def test_gpu_only_runs_without_a_gpu_say_so(argv, monkeypatch, capsys):
    """``--crossover`` was a ``ModuleNotFoundError`` of cupy from inside the backend; ``--no-cpu`` printed a table of
    dashes."""
    import bench_gpu

    monkeypatch.setattr(bench_gpu._device, "gpu_status", lambda: (False, "cupy is not installed"))
    with pytest.raises(SystemExit):
        bench_gpu.main(argv)
    assert "times the GPU backend and there is none here (cupy is not installed" in capsys.readouterr().err


def test_readme_dask_codes_table_cites_the_flag_that_prints_its_codes_columns():
    """The table of codes on Dask / in memory cited a command without ``--codes``: it printed only the select times."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    after_table = text[text.index("| discretization | codes on Dask |"):]
    command = after_table[after_table.index("To reproduce: `") + 15:]
    command = command[:command.index("`")]
    assert command.startswith("python benchmarks/bench_dask.py") and "--codes" in command.split()


def test_spec_cmi_end_to_end_rows(capsys):
    """``bench_spec_cmi.py --quick`` crashed at its end-to-end rows (``measures._codes``, renamed since); no test ran
    it."""
    import bench_spec_cmi

    bench_spec_cmi.bench_end_to_end([400])
    row = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert row[0] == "400" and all(float(v) >= 0 for v in row[1:9]) and 0 <= int(row[-1]) <= 50


def test_baselines_say_how_to_add_the_mrmr_packages_when_they_are_not_run(capsys):
    """Without ``--competitor-python`` (the default when /tmp/mrmrvenv is absent) pymrmr and mrmr-selection were left
    out of the speed table without a word."""
    rows = bench_baselines.bench_mrmr([300], 5, "", 2000, 60.0)
    out = capsys.readouterr().out
    assert "not run: no --competitor-python" in out and "pip install mrmr-selection pymrmr" in out
    assert rows[0]["same_order_as_plain_loop"]


@pytest.mark.parametrize("argv", [["--face-factor", "--psd-evidence"], ["--single-cell", "--face-factor"],
                                  ["--face-factor", "--sc100k"], ["--psd-evidence", "--quick"],
                                  ["--single-cell", "--itmo", "python"]])
def test_qpfs_refuses_modes_and_flags_that_would_be_ignored(argv, monkeypatch):
    """The first of --face-factor / --psd-evidence / --single-cell given won, in that order, and the run ignored the
    flags the others (or the default run) take, silently."""
    for run in ("face_factor", "psd_evidence", "bench_single_cell", "bench"):
        monkeypatch.setattr(bench_qpfs, run, lambda *a, run=run, **k: pytest.fail(f"{run} ran"))
    with pytest.raises(SystemExit):
        bench_qpfs.main(argv)


def test_small_runs_of_the_benchmarks_no_other_test_runs(capsys):
    """bench_dask.py (no --quick), bench_ikm_qpfs.py and bench_baselines.py's CV part on small shapes: their code
    paths run, and their tables have the columns the README and docstrings name."""
    import bench_dask

    bench_dask.main(["--cells", "1500", "--genes", "40", "--chunk", "500", "--threads", "--codes"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1,500 x 40 |")]
    assert len(rows) == 1 and rows[0].split("|")[8].strip() == "True"   # identical to in memory
    X, y, _ = bench_ikm_qpfs.synthetic(n=40, m=300)
    table, _ = bench_ikm_qpfs.run_dataset("small", X, y, reference=("QPFS", bench_ikm_qpfs.qpfs, {}), refit=False,
                                          errors=False)
    assert list(table.index) == ["QPFS", "TLKM", "IKM", "IKMA"] and table.loc["QPFS", "time_vs_ref"] == 1.0
    sets = bench_baselines.load_sets(["wine"], 1000, 10000)
    res = bench_baselines.bench_cv(sets, ["mrmr_mid", "maxrel"], {"wine": 2}, 3)
    assert set(res) == {("wine", "mrmr_mid"), ("wine", "maxrel")} and all(0 <= e <= 100 for e, _ in res.values())


def test_ikm_benchmark_compiles_every_method_before_timing(monkeypatch):
    """The first timed run (QPFS on Colon) included numba's compilation: every method now runs once on a small
    set before the first dataset is timed."""
    events = []

    def spy(name, func):
        def wrapped(*args, **kwargs):
            events.append(name)
            return func(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(bench_ikm_qpfs, "qpfs", spy("QPFS", bench_ikm_qpfs.qpfs))
    monkeypatch.setattr(bench_ikm_qpfs, "METHODS", {k: spy(k, f) for k, f in bench_ikm_qpfs.METHODS.items()})
    small = bench_ikm_qpfs.synthetic
    monkeypatch.setattr(bench_ikm_qpfs, "synthetic", lambda n=100, m=20000, seed=0: small(n=20, m=min(m, 300), seed=seed))
    monkeypatch.setattr(bench_ikm_qpfs, "load_benchmark", lambda name: small(n=20, m=100))
    monkeypatch.setattr(bench_ikm_qpfs, "run_dataset", lambda label, *a, **k: events.append(f"timed {label}"))
    bench_ikm_qpfs.main(["--quick"])
    first = events.index("timed Colon")
    assert {"QPFS", "TLKM", "IKM", "IKMA"} <= set(events[:first])


def test_dask_benchmark_has_a_quick_smoke_run(capsys):
    """The other benchmarks have --quick; bench_dask's smallest run was 20,000 and 40,000 cells x 500 genes."""
    import bench_dask

    with pytest.raises(SystemExit):
        bench_dask.main(["--quick", "--cells", "1000"])
    assert "--quick sets 4,000 cells x 100 genes" in capsys.readouterr().err
    bench_dask.main(["--quick", "--threads"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 4,000 x 100 |")]
    assert len(rows) == 1 and "| mean_sd | qpfs |" in rows[0] and "| True |" in rows[0], rows
