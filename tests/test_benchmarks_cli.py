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
