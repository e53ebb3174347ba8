"""Command line: ``bioqpfs select`` / ``bioqpfs evaluate`` / ``bioqpfs datasets``.

Exit codes
----------
0  success
1  the input or the selection failed (one-line message on stderr; ``--debug`` shows the traceback)
2  command-line usage error (unknown option, missing argument, bad --cv or --random-state value)
130  interrupted (Ctrl-C / SIGINT)
143  terminated (SIGTERM)

A signal that arrives while an output is being written is held until that write ends; the
temporary file is then removed and the output is not created (see ``bioqpfs._io.atomic_path``).  The outputs of
one run (-o, --tsv, --plot) are committed together at the end: a failed run leaves none of them, and earlier
files at those paths as they were (``bioqpfs._io.atomic_outputs``).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143

#: set when an HDF5 write of this process failed (see :func:`_hdf5_write`)
_hdf5_write_failed = False


class _hdf5_write:
    """Context of one h5ad write.  A write that fails part-way (a full disk, ``ulimit -f``) leaves HDF5 with
    objects it cannot flush: h5py prints an "Exception ignored" traceback for each as it frees them, and with
    h5py >= 3.16 (anndata 0.13) the process then segfaults at exit while HDF5 closes the file.  What is printed
    to ``sys.stderr`` while the block runs is held (dropped if it fails, where the CLI's one-line error says what
    happened; passed on otherwise), and a failure is recorded so that :func:`main` of the command line leaves
    without HDF5's exit handlers."""

    def __enter__(self):
        import io

        # Cython prints the freeing tracebacks to sys.stderr, then passes them to sys.unraisablehook
        self.held, self.previous = [], sys.unraisablehook
        self.stderr, sys.stderr = sys.stderr, io.StringIO()
        sys.unraisablehook = self.held.append
        return self

    def __exit__(self, kind, value, tb):
        global _hdf5_write_failed
        printed, sys.stderr = sys.stderr.getvalue(), self.stderr
        sys.unraisablehook = self.previous
        if kind is not None:
            _hdf5_write_failed = True
        else:
            sys.stderr.write(printed)
            for unraisable in self.held:
                self.previous(unraisable)
        self.held = []
        return False


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every cleanup (temporary output files) runs."""


def _on_signal(signum, frame):
    """SIGINT/SIGTERM: recorded in :data:`bioqpfs._io.signals_received` (read before outputs are committed and
    when the run ends: the exception raised here is lost if the signal lands in a finaliser), then raised."""
    from ._io import signals_received

    signals_received.append(signum)
    raise KeyboardInterrupt() if signum == signal.SIGINT else _Terminated()


def _unraisable_signal_hook(previous):
    """``sys.unraisablehook`` for a run: the exception of a recorded signal lost in a finaliser is dropped silently
    (the run acts on the record: one "bioqpfs: interrupted" line, not a traceback); others go to ``previous``."""
    from ._io import signals_received

    def hook(unraisable):
        if not (signals_received and isinstance(unraisable.exc_value, (KeyboardInterrupt, _Terminated))):
            previous(unraisable)

    return hook


def _parser():
    from . import __version__, datasets
    from ._registry import methods

    p = argparse.ArgumentParser(prog="bioqpfs", description="Global gene-panel selection (QPFS and relatives).")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("select", help="select a gene panel and store it in an .h5ad (+ ranked TSV)")
    _add_input_args(s, datasets)
    s.add_argument("--method", default=None, type=_method_arg, choices=sorted(methods()),
                   help="selection method with its published settings (default: the benchmarked default panel "
                        "recipe, see README 'Panel quality')")
    s.add_argument("--n-genes", type=_n_genes_arg, default=50, metavar="N|auto",
                   help="panel size (default: 50), or 'auto': chosen by 5-fold cross-validated error over sizes "
                        "5..100 with the one-standard-error rule (several times the time; README 'Choosing the "
                        "panel size')")
    s.add_argument("--similarity", default="mi", choices=["mi", "correlation"], help="redundancy measure (default: mi)")
    s.add_argument("--discretization", default=None, choices=["mean_sd", "quantile", "zero_quantile", "mdl", "auto", "none"],
                   help="discretisation for MI (default: the method's, mean_sd for QPFS; 'none' = data are codes)")
    s.add_argument("--key-added", default=None,
                   help="prefix of the written keys (default: the method, 'bioqpfs' for the default recipe)")
    s.add_argument("-o", "--output", required=True, help="output .h5ad (written atomically)")
    s.add_argument("--tsv", default=None,
                   help="also write the ranked gene table here: tab-separated (.tsv, .txt) or comma-separated "
                        "(.csv); .gz compresses")
    s.add_argument("--plot", default=None, help="also save the ranked-weight plot with the panel cut (.png/.pdf/.svg)")
    s.add_argument("--plot-ranks", type=_ranks_arg, default="auto", metavar="auto|all|N",
                   help="ranks drawn by --plot: 'auto' (default) zooms on the panel and the non-zero weights, "
                        "'all' draws every ranked gene, N the first N")
    s.add_argument("--nystrom-rate", type=float, default=None,
                   help="QPFS+Nystrom: compute only this fraction of the rows of Q (e.g. 0.05 for 20,000 genes)")
    s.add_argument("--solver", default=None, choices=["auto", "quadprog", "active_set", "spg"],
                   help="QP solver (default: auto = quadprog for small problems, the active-set solver beyond)")
    s.add_argument("--batch-key", default=None, metavar="COLUMN",
                   help="batch (donor, study) of every sample: an .obs column of the .h5ad, or a column of the "
                        "--labels file (or of a samples-by-genes table); statistics are then estimated within each "
                        "batch and averaged (batch-aware methods only: qpfs, qpfs_cover, eqpfs, maxrel, mrmr_*, jmi, "
                        "cife, spec_cmi)")
    s.add_argument("--groupby-weights", type=_float_list, default=None, metavar="W1,W2,...",
                   help="with hierarchical --groupby: one weight per level, coarse to fine (normalised to sum 1; "
                        "default equal); the relevance is sum_l w_l I(X; C_l)")
    s.add_argument("--preselected", default=None, metavar="GENES_OR_FILE",
                   help="genes always kept in the panel and ranked first, in this order (every method): "
                        "comma-separated names, or the path of a text file with one name per line (blank lines "
                        "and lines starting with # ignored); the value is read as a file when such a file exists")

    e = sub.add_parser("evaluate", help="cross-validated error of panels chosen by several methods (TSV)")
    _add_input_args(e, datasets)
    e.add_argument("--methods", default="qpfs", help="comma-separated method names (default: qpfs)")
    e.add_argument("--n-genes", type=_int_list, default=[5, 10, 20, 50], help="comma-separated panel sizes")
    e.add_argument("--cv", type=_cv_arg, default=None,
                   help="folds of stratified k-fold CV (an integer >= 2), 'loo', 'leave_one_batch_out' (needs "
                        "--batch-key) or 'auto' (default: 10-fold, fewer folds when the smallest class has fewer "
                        "than 10 samples, leave-one-out for a single-sample class)")
    e.add_argument("--scoring", default=None,
                   help="score to lead the table and the plot with: 'error' (default), 'balanced_accuracy', "
                        "'f1_macro' or any scikit-learn scorer name; error, balanced accuracy and macro-F1 are "
                        "always written")
    e.add_argument("--batch-key", default=None, metavar="COLUMN",
                   help="batch (donor, study) of every sample (an .obs column, or a column of the --labels file): "
                        "the methods with batch-aware statistics are refit with the training samples' batches, and "
                        "--cv leave_one_batch_out tests on each batch in turn")
    e.add_argument("--groupby-weights", type=_float_list, default=None, metavar="W1,W2,...",
                   help="with hierarchical --groupby: one weight per level, coarse to fine (normalised to sum 1; "
                        "default equal), given to every method that takes hierarchical labels")
    e.add_argument("--repeats", type=_repeats_arg, default=1, help="repetitions of k-fold CV (default: 1)")
    e.add_argument("--classifier", default="linear_svm", choices=["linear_svm", "liblinear", "knn3", "logreg"],
                   help="classifier fit on each panel: the papers' linear SVM (default), LIBLINEAR's, 3-nearest "
                        "neighbours, or standardised logistic regression (needed by probability scores such as "
                        "roc_auc_ovr and neg_log_loss)")
    e.add_argument("-o", "--output", required=True,
                   help="output table of mean/sd scores per method and panel size: tab-separated (.tsv, .txt), or "
                        "comma-separated (.csv); .gz compresses")
    e.add_argument("--plot", default=None, help="also save the error-curve plot (.png/.pdf/.svg)")

    d = sub.add_parser("datasets", help="list the bundled datasets, or write one as .h5ad")
    d.add_argument("name", nargs="?", choices=sorted(datasets.available()))
    d.add_argument("-o", "--output", help="write the dataset to this .h5ad")
    return p


_TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz", ".txt.gz")


def _is_table(path):
    return str(path).lower().endswith(_TABLE_SUFFIXES)


def _duplicates(values):
    values = [str(v) for v in values]
    seen, dup = set(), []
    for v in values:
        if v in seen and v not in dup:
            dup.append(v)
        seen.add(v)
    return dup


def _separator(path):
    """The delimiter a table file's name promises: comma for ``.csv``/``.csv.gz``, else tab (the basename's suffix,
    never a folder name such as ``run.csv.d/``)."""
    return "," if str(path).lower().endswith((".csv", ".csv.gz")) else "\t"


#: what an empty or missing first (id) column holds, as written; such a row has no name
_MISSING_IDS = ("", "na", "n/a", "#n/a", "nan", "null", "none", "<na>")


def _read_delimited(path, what, text=()):
    """Read a CSV/TSV with the first column as index; duplicated column or row names are an error.

    pandas would silently rename a repeated header ``g0`` to ``g0.1``, so the header is read raw.  The first
    column (the row names) is read as text, as written (``00002`` stays ``00002``, ``7159`` is not ``7159.0``); a
    row without a name, or a first column of non-integer numbers (a table saved without row names, its first gene
    or sample taken as the names), is refused.  A header one field shorter than the lines (R's ``write.table``)
    names the columns after the row names; a delimiter at the end of every line is named.
    ``what`` names the rows and columns for the message, e.g. ``("samples", "genes")``.  The columns named in
    ``text`` (or every column, for ``text=True``) are read as text, not numbers: class labels and batches are
    names, so ``1``, ``01`` and ``1.0`` stay three labels (an empty field or ``NA`` is still missing).
    """
    import numpy as np
    import pandas as pd

    sep = _separator(path)
    try:
        raw = pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0]
        header = list(raw)
        if len(header) == 1:  # one column: maybe another delimiter
            own = "comma" if sep == "," else "tab"
            for other, name in (("\t", "tab"), (",", "comma"), (";", "semicolon")):
                if other == sep:
                    continue
                first = pd.read_csv(path, sep=other, header=None, nrows=1, dtype=str, keep_default_na=False)
                if first.shape[1] > 1 and name == "semicolon":
                    raise ValueError(f"{path} is semicolon-separated (one column when read with "
                                     f"{own}s); re-save it {own}-separated (e.g. Excel's 'CSV UTF-8', or pandas "
                                     f"to_csv(sep={sep!r})), or replace the ';' delimiters")
                if first.shape[1] > 1:
                    raise ValueError(f"{path} is {name}-separated, but its name says {own}-separated; rename it "
                                     f"to {'.tsv' if sep == ',' else '.csv'} (or re-save it with "
                                     f"{'commas' if sep == ',' else 'tabs'})")
        as_text = {0: str}
        if text is True or text:
            try:  # line 2's field count: one more than the header's for R's write.table (no field for row names)
                width = pd.read_csv(path, sep=sep, header=None, skiprows=1, nrows=1, dtype=str).shape[1]
            except pd.errors.EmptyDataError:
                width = len(header)
            names = ["", *header] if width == len(header) + 1 else header
            as_text.update({i: str for i, c in enumerate(names)
                            if i and (text is True or c in text)})
        try:
            body = pd.read_csv(path, sep=sep, header=None, skiprows=1, dtype=as_text)
        except pd.errors.EmptyDataError:  # a header without lines
            body = pd.DataFrame(columns=range(len(header)))
        if len(body):  # the row names as written: no NA conversion, no number parsing
            ids = pd.read_csv(path, sep=sep, header=None, skiprows=1, usecols=[0], dtype=str,
                              keep_default_na=False).iloc[:, 0]
            body[0] = ids.to_numpy()
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path} is empty") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at position {e.start:,}); "
                         "re-save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    except pd.errors.ParserError as e:
        import re

        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
        where = (f"line {m.group(2)} has {m.group(3)} fields but the lines before have {m.group(1)}" if m
                 else str(e).splitlines()[0])
        raise ValueError(f"{path} is not a rectangular table: {where}; every line needs one value per column "
                         "(check for stray delimiters or quotes)") from None
    delimiter = "a comma" if sep == "," else "a tab"
    trailing = body.shape[1] > 1 and body.iloc[:, -1].isna().all() and len(body)
    if trailing and (body.shape[1] == len(header) + 1 or header[-1] == ""):
        raise ValueError(f"{path} has {delimiter} at the end of every line (an empty last column), so the values "
                         "do not line up with the header; remove the trailing delimiters")
    if body.shape[1] == len(header) + 1:  # R's write.table: the header has no field for the row names
        header = ["", *header]
    elif body.shape[1] > len(header):
        raise ValueError(f"{path} is not a rectangular table: line 2 has {body.shape[1]} fields but the header line "
                         f"has {len(header)}; every line needs one value per column (check for stray delimiters "
                         "or quotes)")
    elif body.shape[1] < len(header):
        raise ValueError(f"{path} is not a rectangular table: the header line has {len(header)} fields but line 2 "
                         f"has {body.shape[1]}; every line needs one value per column (check for stray delimiters "
                         "or quotes)")
    columns = [c if c != "" else f"Unnamed: {i}" for i, c in enumerate(header)][1:]
    dup = _duplicates(columns)
    if dup:
        raise ValueError(f"{path} has duplicated {what[1]} (column names): {', '.join(dup[:5])}"
                         f"{' ...' if len(dup) > 5 else ''}; make the names unique or remove the duplicates")
    first = repr(header[0]) if header[0] else "(no header)"
    ids = body.iloc[:, 0].astype(str)
    df = body.iloc[:, 1:]
    df.columns = pd.Index(columns, dtype=object)
    df.index = pd.Index(ids.to_numpy(), dtype=object, name=header[0] or None)
    blank = np.flatnonzero(ids.str.strip().str.lower().isin(_MISSING_IDS).to_numpy())
    if blank.size:
        shown = ", ".join(f"line {i + 2} ({ids.iloc[i]!r})" for i in blank[:3])
        raise ValueError(f"{path}: the first column {first} names the {what[0]}, but {blank.size} row(s) have an "
                         f"empty or missing name: {shown}{' ...' if blank.size > 3 else ''}; give every row a name")
    numbers = pd.to_numeric(ids, errors="coerce")
    if len(ids) and numbers.notna().all() and np.isfinite(numbers).all() and (numbers % 1 != 0).any():
        example = ids.iloc[int(np.flatnonzero((numbers % 1 != 0).to_numpy())[0])]
        raise ValueError(f"{path}: the first column {first} must name the {what[0]}, but it holds numbers such as "
                         f"{example} -- values, not names; the file looks saved without row names (pandas "
                         "to_csv(index=False), R row.names=FALSE): save it with the names as the first column")
    dup = _duplicates(df.index)
    if dup:
        raise ValueError(f"{path} has duplicated {what[0]} (row names): {', '.join(dup[:5])}"
                         f"{' ...' if len(dup) > 5 else ''}; make the names unique or remove the duplicates")
    return df


def _read_table(args):
    """A CSV/TSV expression table (+ labels) as AnnData with the labels in ``.obs[args.groupby]``."""
    import anndata as ad
    import numpy as np
    import pandas as pd

    if args.orientation is None:
        raise ValueError("a CSV/TSV input needs --orientation samples-by-genes or genes-by-samples")
    rows_cols = ("samples", "genes") if args.orientation == "samples-by-genes" else ("genes", "samples")
    levels = _levels(args)
    # a samples-by-genes table may hold the label and batch columns: names, read as text
    df = _read_delimited(args.input, rows_cols, text=[*levels, getattr(args, "batch_key", None)]
                         if args.orientation == "samples-by-genes" else ())
    repeated = sorted({c for c in levels if levels.count(c) > 1})
    if repeated:  # as for an .h5ad (a second pop of the table's column failed with a bare KeyError)
        raise ValueError(f"--groupby lists column(s) {', '.join(map(repr, repeated))} more than once; give each "
                         "level once, coarse to fine")
    labels = None
    batch_key = getattr(args, "batch_key", None)
    lab = None
    if args.labels is not None:
        lab = _read_delimited(args.labels, ("sample ids", "columns"), text=True)
        if args.orientation == "samples-by-genes":  # the table's own label columns would be read as genes
            both = [c for c in [*levels, *([batch_key] if batch_key in lab.columns else [])] if c in df.columns]
            if both:
                raise ValueError(f"column {both[0]!r} is both in the table {args.input} and in --labels "
                                 f"{args.labels}; drop it from one (in the table it would be read as a gene)")
    if args.labels is None:
        absent = [c for c in levels if c not in df.columns]
        if args.orientation != "samples-by-genes" or absent:
            raise ValueError(f"no labels: give --labels FILE, or {'a column' if len(levels) == 1 else 'columns'} "
                             f"{', '.join(map(repr, absent or levels))} in a samples-by-genes table")
        labels = pd.DataFrame({c: df.pop(c) for c in levels})
    batch = df.pop(batch_key) if (batch_key and args.orientation == "samples-by-genes"
                                  and batch_key in df.columns) else None
    # the file's own columns, before a transpose: a genes-by-samples table's annotation column is named as such
    non_numeric = [str(c) for c in df.columns if len(df) and not pd.api.types.is_numeric_dtype(df[c])]
    if non_numeric:
        raise ValueError(f"non-numeric {rows_cols[1][:-1]} column(s) in {args.input}: {', '.join(non_numeric[:5])}"
                         f"{' ...' if len(non_numeric) > 5 else ''}; a {args.orientation} table holds the "
                         f"{rows_cols[0][:-1]} names, then numbers only: drop annotation columns, and check "
                         "--orientation and the labels column")
    logical = [str(c) for c in df.columns if pd.api.types.is_bool_dtype(df[c])]
    if logical:
        raise ValueError(f"column(s) of TRUE/FALSE values in {args.input}: {', '.join(logical[:5])}"
                         f"{' ...' if len(logical) > 5 else ''}; they look like annotation, not expression: drop "
                         "them from the table (labels and batches go in --groupby/--labels/--batch-key columns)")
    if args.orientation == "genes-by-samples":
        df = df.T
    if 0 in df.shape:  # a header without lines, or lines without values: nothing to select from
        lines, columns = rows_cols
        raise ValueError(f"{args.input} has no {'samples' if df.shape[0] == 0 else 'genes'}: read as "
                         f"{args.orientation}, it has {df.shape[0]} sample(s) and {df.shape[1]} gene(s); the table "
                         f"needs a header line naming the {columns} and one line per {lines[:-1]}")
    if args.labels is not None:
        absent = [c for c in levels if c not in lab.columns]
        if not absent:
            cols = levels
        elif len(levels) == 1 and lab.shape[1] == 1:   # a single label column may have any name
            cols = [lab.columns[0]]
        elif lab.shape[1] == 0:
            raise ValueError(f"{args.labels} needs a sample-id column and a label column")
        else:
            raise ValueError(f"{args.labels} has no column(s) {', '.join(map(repr, absent))} (columns: "
                             f"{', '.join(map(str, lab.columns))}); pass the label column's name as --groupby")
        lab.index = lab.index.astype(str)
        missing = [s for s in df.index.astype(str) if s not in lab.index]
        if missing:
            other = "genes-by-samples" if args.orientation == "samples-by-genes" else "samples-by-genes"
            as_genes = lab.index.isin(df.columns.astype(str)).sum()
            hint = (f"; {as_genes} of its {len(lab)} sample ids are what --orientation {args.orientation} reads as "
                    f"genes, so the orientation looks wrong: try --orientation {other}") if as_genes > len(lab) / 2 else ""
            raise ValueError(f"{len(missing)} sample(s) have no label in {args.labels} "
                             f"(e.g. {', '.join(missing[:3])}){hint}")
        labels = lab.loc[df.index.astype(str), cols]
        if batch_key in lab.columns and batch_key not in cols:
            batch = lab.loc[df.index.astype(str), batch_key]
    obs = pd.DataFrame({c: pd.Categorical(np.asarray(labels.iloc[:, i], dtype=object)) for i, c in enumerate(levels)},
                       index=df.index.astype(str))
    if batch is not None:
        obs[args.batch_key] = pd.Categorical(np.asarray(batch, dtype=object))
    return ad.AnnData(X=df.to_numpy(dtype=np.float64), obs=obs, var=pd.DataFrame(index=df.columns.astype(str)))


_PLOT_SUFFIXES = (".png", ".pdf", ".svg")
#: what -o of select and datasets writes
_H5AD = (".h5ad",)


def _save_plot(draw, path, tmp):
    """Draw with the Agg backend and save to ``tmp`` (the staged file of the output ``path``, see
    :func:`bioqpfs._io.atomic_outputs`); the format follows ``path``'s suffix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not str(path).lower().endswith(_PLOT_SUFFIXES):
        raise ValueError(f"plot file {path!r} must end in one of {', '.join(_PLOT_SUFFIXES)}")
    ax = draw()
    try:
        ax.figure.savefig(tmp, bbox_inches="tight", format=str(path).rsplit(".", 1)[1].lower())
    finally:
        plt.close(ax.figure)


def _table_suffixes(path):
    """The suffixes a written table may have: any name for an existing device or FIFO (/dev/stdout)."""
    return None if path is None or (os.path.exists(path) and not os.path.isfile(path)) else _TABLE_SUFFIXES


def _write_table(df, path, tmp):
    """``df`` as delimited text in ``tmp`` (the staged file of the output ``path``): comma-separated for a
    .csv/.csv.gz name, else tab-separated; gzip-compressed for a .gz name, with ``path``'s name in the gzip
    header (``gunzip -N`` restores that name, not the temporary file's)."""
    sep = _separator(path)
    # a carriage return inside a name ends a line for pandas' and R's readers, but pandas' writer quotes only the
    # separator, quotes and "\n": such tables quote every text field
    kw = dict(sep=sep, index=False)
    text = [c for c in df.columns if df[c].dtype.kind not in "biufcmM"]   # object, string or categorical columns
    if any(df[c].astype(str).str.contains("\r", regex=False).any() for c in text) \
            or any("\r" in str(c) for c in df.columns):
        import csv

        kw["quoting"] = csv.QUOTE_NONNUMERIC
    if not str(path).lower().endswith(".gz"):
        df.to_csv(tmp, **kw)
        return
    import gzip
    import io

    with open(tmp, "wb") as raw, gzip.GzipFile(filename=os.path.basename(path), mode="wb", fileobj=raw) as gz, \
            io.TextIOWrapper(gz, encoding="utf-8", newline="") as text:
        df.to_csv(text, **kw)


#: an .h5ad file or zarr store larger than this on disk (1 GiB) is read lazily (X read in sample chunks) unless
#: --no-lazy
LAZY_BYTES = 2**30


def _load_input(args):
    from . import datasets
    from ._io import is_zarr_store, tree_bytes

    if args.input is not None and _is_table(args.input):
        return _read_table(args)
    if args.input is None:
        adata = datasets.load(args.dataset)
    else:
        zarr_store = is_zarr_store(args.input) or args.input.rstrip("/\\").lower().endswith(".zarr")
        lazy = args.lazy if args.lazy is not None else os.path.exists(args.input) and tree_bytes(args.input) > LAZY_BYTES
        adata = (_read_zarr(args.input, lazy=lazy, chunk_size=args.chunk_size, progress=not args.quiet) if zarr_store
                 else _read_h5ad(args.input, backed=lazy))
    if getattr(args, "orientation", None) is not None:  # after the read: a missing or damaged file is named first
        source = "--dataset" if args.input is None else repr(args.input)
        raise ValueError(f"--orientation describes a CSV/TSV table; {source} is an AnnData (samples x genes, genes "
                         "in .var): drop --orientation")
    return adata


def _read_zarr(path, *, lazy=False, chunk_size=None, progress=False):
    """An AnnData zarr store: whole (``anndata.read_zarr``), or lazily (:func:`bioqpfs.read_lazy`: the matrices
    as Dask arrays of sample chunks) when ``lazy`` and dask is installed; errors name the store."""
    import anndata as ad

    from ._io import is_zarr_store, read_lazy

    if not os.path.exists(path):
        raise ValueError(f"{path} does not exist")
    if not is_zarr_store(path):
        raise ValueError(f"{path} is not a zarr store (a directory with .zgroup or zarr.json, as AnnData.write_zarr "
                         "writes); give a .zarr store, an .h5ad file, or a .csv/.tsv table")
    try:
        import dask.array  # noqa: F401
    except ImportError:
        lazy = False
    try:
        return read_lazy(path, chunk_size=chunk_size, progress=progress) if lazy else ad.read_zarr(path)
    except (OSError, KeyError, RuntimeError, ValueError, TypeError) as e:
        text = str(e).strip("'\" ")
        raise ValueError(f"cannot read {path} as an AnnData zarr store: "
                         f"{text.splitlines()[0] if text else type(e).__name__}") from None


def _read_h5ad(path, backed=False):
    """``anndata.read_h5ad`` with one message per cause that names the file (not h5py's text).

    ``backed``: open it with ``backed="r"`` (X stays in the file; :func:`bioqpfs._anndata.obs_rep_for` reads it
    in sample chunks or whole).

    A file cut short while it is read (another program rewriting it) is refused: HDF5 reads the
    bytes past the new end as zeros, without an error.  The size is taken through a handle opened
    before the read; a file removed meanwhile is still read whole through it.
    """
    import anndata as ad

    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"{path} is not a regular file; give an .h5ad file, a .zarr store, or a .csv/.tsv table")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty (0 bytes); it was not written completely -- write or copy it again")
    try:
        handle = open(path, "rb")
    except OSError:  # read_h5ad names the cause below
        handle = None
    size = (lambda: os.fstat(handle.fileno()).st_size) if handle is not None else (lambda: 0)
    before = size()
    try:
        adata = ad.read_h5ad(path, backed="r" if backed else None)
        error = None
    except (OSError, KeyError, RuntimeError) as e:  # KeyError/RuntimeError: h5py on a damaged object
        adata, error = None, e
    finally:
        after = size()
        if handle is not None:
            handle.close()
    if after < before:
        raise ValueError(f"{path} was truncated while it was read ({before:,} bytes before, {after:,} after): "
                         "another program changed it; read it again once it is complete")
    if error is None:
        return adata
    text = str(error).strip("'\" ")
    if "truncated file" in text:
        raise ValueError(f"{path} is truncated ({os.path.getsize(path):,} bytes, shorter than the file says): "
                         "it was not written or copied completely -- write or copy it again")
    if "signature not found" in text:
        raise ValueError(f"{path} is not an HDF5/.h5ad file; if it is a table, name it .csv/.tsv and give "
                         "--orientation")
    if isinstance(error, FileNotFoundError) or not os.path.exists(path):
        raise ValueError(f"{path} does not exist")
    raise ValueError(f"cannot read {path} as .h5ad: {text.splitlines()[0] if text else type(error).__name__}"
                     f"{'' if isinstance(error, OSError) else '; the file is damaged -- write or copy it again'}")


def _add_input_args(p, datasets):
    from ._registry import DASK_METHODS

    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("input", nargs="?", help="input .h5ad, .zarr store (a directory), or a .csv/.tsv expression table (needs --orientation)")
    src.add_argument("--dataset", choices=sorted(datasets.available()), help="use a bundled dataset instead of a file")
    p.add_argument("--groupby", required=True, type=_groupby_arg, metavar="COLUMN[,COLUMN...]",
                   help="column holding the classes: of .obs (h5ad), of the table (samples-by-genes CSV) or of "
                        "--labels; comma-separated columns, coarse to fine (e.g. lineage,cell_type), give "
                        "hierarchical labels (methods qpfs, eqpfs, maxrel, mrmr_mid, mrmr_miq; README "
                        "'Hierarchical labels')")
    p.add_argument("--orientation", choices=["samples-by-genes", "genes-by-samples"],
                   help="layout of a CSV/TSV input: rows are samples (samples-by-genes) or genes")
    p.add_argument("--labels", default=None,
                   help="CSV/TSV of sample labels: first column sample ids, then the --groupby column "
                        "(a file with a single label column may name it differently)")
    p.add_argument("--layer", default=None, help="use this layer instead of X")
    p.add_argument("--use-raw", default="auto", choices=["auto", "yes", "no"],
                   help="select on .raw: 'auto' (default) uses .raw when the h5ad has one and no --layer is "
                        "given, as scanpy's rank_genes_groups does; 'no' uses X")
    p.add_argument("--mask-var", default=None, help="boolean .var column restricting the candidate genes")
    p.add_argument("--random-state", type=_random_state_arg, default=0, help="seed, a non-negative integer (default: 0)")
    p.add_argument("--force", action="store_true",
                   help="allow an output to overwrite an input file (the input, --labels or a --preselected file)")
    p.add_argument("--quiet", action="store_true", help="no progress messages")
    p.add_argument("--chunk-size", type=_chunk_size_arg, default=None, metavar="N",
                   help="samples per chunk when an .h5ad or .zarr is read lazily (default: as many as fit 128 MiB as "
                        "float64)")
    p.add_argument("--n-jobs", type=_n_jobs_arg, default=None, metavar="N",
                   help="worker threads, as n_jobs= in Python: a positive count, or -1 for every core (default: "
                        "NUMBA_NUM_THREADS, i.e. every core); a count above the cores is capped at them, with a "
                        "warning")
    p.add_argument("--backend", choices=["auto", "cpu", "gpu"], default="auto",
                   help="where the information measures count: 'gpu' on a CUDA GPU through cupy (pip install "
                        "'bioqpfs[gpu]'), 'cpu', or 'auto' (default: the GPU when cupy sees one and the data are "
                        "large, else the CPU); exact either way (README 'GPU')")
    lazy = p.add_mutually_exclusive_group()
    lazy.add_argument("--lazy", dest="lazy", action="store_true", default=None,
                      help="read the .h5ad or .zarr lazily: X stays in the file and the methods with a Dask path "
                           f"({', '.join(DASK_METHODS)}; not --discretization mdl) read it in sample chunks, the "
                           f"others read it whole (default: inputs over {LAZY_BYTES // 2**30} GiB on disk)")
    lazy.add_argument("--no-lazy", dest="lazy", action="store_false", help="read the whole input into memory")


_USE_RAW = {"auto": None, "yes": True, "no": False}


def _method_arg(text):
    """``--method``: a registered name; an unknown one is a usage error suggesting the closest name."""
    from ._registry import methods, unknown_method_message

    if text not in methods():
        raise argparse.ArgumentTypeError(f"invalid choice: {unknown_method_message(text)}")
    return text


def _positive_int(text, message):
    """``text`` as a positive integer, else a usage error ``"{message}, got {text!r}"`` (argparse exits 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{message}, got {text!r}")
    return value


def _chunk_size_arg(text):
    return _positive_int(text, "--chunk-size must be a positive number of samples")


def _positive_int_or(text, words, expected):
    """A positive integer, or one of ``words`` (any case): the shared type of the options below."""
    if text.strip().lower() in words:
        return text.strip().lower()
    return _positive_int(text, f"expected {expected}")


def _n_jobs_arg(text):
    """``--n-jobs``: a positive integer or -1 (every core), as ``n_jobs=`` of the Python faces."""
    if text.strip() == "-1":
        return -1
    return _positive_int(text, "--n-jobs must be a positive integer or -1 (all cores)")


def _repeats_arg(text):
    """``evaluate --repeats``: a positive integer (a usage error at parse time, as --cv)."""
    return _positive_int(text, "expected a positive number of repetitions")


def _ranks_arg(text):
    """``--plot-ranks``: 'auto', 'all' or a positive integer (pl.weights' ``n_ranks``)."""
    return _positive_int_or(text, ("auto", "all"), "'auto', 'all' or a positive integer")


def _n_genes_arg(text):
    """``select --n-genes``: a positive integer or ``auto`` (tl.select_genes' ``n_genes="auto"``)."""
    return _positive_int_or(text, ("auto",), "a positive integer or 'auto'")


def _int_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _groupby_arg(text):
    """``--groupby``: one column, or comma-separated columns coarse to fine (hierarchical labels) -> a list."""
    columns = [c.strip() for c in text.split(",")]
    if not all(columns):
        raise argparse.ArgumentTypeError(f"expected a column name or comma-separated column names (coarse to fine), "
                                         f"got {text!r}")
    return columns[0] if len(columns) == 1 else columns


def _float_list(text):
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    return values


def _levels(args):
    """The label columns ``--groupby`` names, as a list (one column, or the levels coarse to fine)."""
    return [args.groupby] if isinstance(args.groupby, str) else list(args.groupby)


def _cv_arg(text):
    """``--cv``: an integer >= 2 (stratified k-fold), ``loo`` (leave-one-out), ``leave_one_batch_out`` or ``auto``
    (None), in any case."""
    if text.strip().lower() in ("loo", "leave_one_batch_out"):
        return text.strip().lower()
    if text.strip().lower() == "auto":
        return None
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2, 'loo', 'leave_one_batch_out' or 'auto', "
                                         f"got {text!r}") from None
    if k < 2:
        raise argparse.ArgumentTypeError(f"k-fold cross-validation needs at least 2 folds, got {text!r}")
    return k


def _random_state_arg(text):
    """``--random-state``: an integer, checked by the one random_state rule (:func:`check_random_state`)."""
    from ._validation import seed_of

    try:
        return seed_of(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None


def _preselected_arg(text):
    """``--preselected``: the names in the file ``text`` when it exists (one per line; blank lines and ``#``
    comments ignored), else ``text`` split at commas.  A directory, or a value that looks like a path (a path
    separator, or a .txt/.tsv/.csv/.list suffix) but names no file, is an error, not a gene name."""
    if os.path.isfile(text):
        try:
            with open(text, encoding="utf-8-sig") as fh:  # a byte-order mark (Excel, Notepad) is not a name
                names = [line.strip() for line in fh if line.strip() and not line.lstrip().startswith("#")]
        except UnicodeDecodeError:
            raise ValueError(f"--preselected file {text} is not UTF-8 text; re-save it as UTF-8") from None
        if not names:
            raise ValueError(f"--preselected file {text} lists no gene names (one name per line)")
        return names
    if os.path.isdir(text):  # read as a gene name before, or as "no such file" with a trailing separator
        raise ValueError(f"--preselected {text} is a directory; give a file of gene names (one per line) or "
                         "comma-separated gene names")
    if os.sep in text or (os.altsep and os.altsep in text) or text.lower().endswith((".txt", ".tsv", ".csv", ".list")):
        raise ValueError(f"--preselected {text}: no such file; give an existing file of gene names (one per line) "
                         "or comma-separated gene names")
    names = [g.strip() for g in text.split(",") if g.strip()]
    if not names:
        raise ValueError(f"--preselected {text!r} lists no gene names; give comma-separated gene names or a file "
                         "with one name per line")
    return names


def _same_file(a, b):
    """Whether two paths name the same file (hard/symbolic links included); a missing path is compared by name."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _check_paths(args, outputs):
    """Validate every input and output path before any computation.

    ``outputs`` is ``[(option, path, suffixes or None)]``.  An input (the input file -- or zarr store --,
    ``--labels``; a ``--preselected`` value that names a file) must exist; an output must not be a directory, its
    nearest existing ancestor must be a writable directory (missing directories are created), its suffix must be
    one of ``suffixes``, it must not name an input unless ``--force``, and no two outputs may name the same file
    (never allowed).
    """
    from ._io import is_zarr_store

    inputs = [(opt, path) for opt, path in (("input", getattr(args, "input", None)),
                                            ("--labels", getattr(args, "labels", None))) if path is not None]
    if getattr(args, "preselected", None) is not None and os.path.isfile(args.preselected):
        inputs.append(("--preselected", args.preselected))   # a file of gene names, read as one (_preselected_arg)
    if getattr(args, "labels", None) is not None and not (getattr(args, "input", None) is not None
                                                          and _is_table(args.input)):
        source = "--dataset" if getattr(args, "input", None) is None else repr(args.input)
        raise ValueError(f"--labels is read for a CSV/TSV input only; {source} takes its labels from .obs "
                         "(--groupby names the column): add the labels to .obs first, or drop --labels")
    table = getattr(args, "input", None) is not None and _is_table(args.input)
    if getattr(args, "lazy", None) and table:
        raise ValueError("--lazy reads an .h5ad or a zarr store in sample chunks; a CSV/TSV table is read whole: "
                         "drop --lazy (or convert the table to .h5ad or .zarr first)")
    for opt, path in inputs:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{opt} file {path!r} does not exist")
        if os.path.isdir(path) and not (opt == "input" and is_zarr_store(path)):
            raise ValueError(f"{opt} {path!r} is a directory, not a file" + (
                "" if opt != "input" else " or a zarr store (one has .zgroup or zarr.json, as AnnData.write_zarr "
                "writes)"))
    outputs = [(opt, os.fspath(path), suffixes) for opt, path, suffixes in outputs if path is not None]
    for i, (opt, path, suffixes) in enumerate(outputs):
        if os.path.isdir(path):
            raise ValueError(f"{opt} {path!r} is a directory; give a file name")
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise ValueError(f"{opt} {path!r}: {parent!r} is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise PermissionError(f"{opt} {path!r}: directory {parent!r} is not writable")
        for in_opt, in_path in inputs:
            if _same_file(in_path, path) and not getattr(args, "force", False):
                raise ValueError(f"{opt} {path!r} is the {in_opt} file; choose another path or pass --force")
        for opt2, path2, _ in outputs[:i]:
            if _same_file(path, path2):
                raise ValueError(f"{opt} and {opt2} name the same file {path!r}; give them different paths")
        if suffixes is not None and not path.lower().endswith(suffixes):
            raise ValueError(f"{opt} file {path!r} must end in "
                             f"{suffixes[0] if len(suffixes) == 1 else 'one of ' + ', '.join(suffixes)}"
                             + (" (it writes an AnnData file)" if suffixes == _H5AD else ""))


def _cmd_evaluate(args):
    import scanpy as sc

    from . import _progress, _registry, evaluate
    from ._io import atomic_outputs

    sc.settings.verbosity = 0 if args.quiet else 2
    _check_paths(args, [("-o", args.output, _table_suffixes(args.output)),
                        ("--plot", args.plot, _PLOT_SUFFIXES)])
    evaluate.resolve_scoring(args.scoring)    # an unknown scorer name fails before any computation
    adata = _load_input(args)
    try:
        method_names = [m.strip() for m in args.methods.split(",") if m.strip()]
        repeated = sorted({m for m in method_names if method_names.count(m) > 1})
        if repeated:
            raise ValueError(f"--methods names {', '.join(repeated)} more than once; name each method once")
        known = _registry.methods()
        unknown = [m for m in method_names if m not in known]
        if unknown:
            hints = [f"{m!r} -> {_registry.closest_method(m)!r}" for m in unknown if _registry.closest_method(m)]
            raise ValueError(f"unknown method(s) {', '.join(unknown)}{' (did you mean ' + ', '.join(hints) + '?)' if hints else ''}"
                             f"; available: {', '.join(known)}")
        if args.cv == "leave_one_batch_out" and args.batch_key is None:
            raise ValueError("--cv leave_one_batch_out tests on each batch in turn: give the batch column with "
                             "--batch-key COLUMN")
        method_params = None
        if args.groupby_weights is not None:
            takers = [m for m in method_names if m in _registry.hierarchy_methods()]
            if not takers:
                raise ValueError(f"--groupby-weights is for methods that take hierarchical labels "
                                 f"({', '.join(_registry.hierarchy_methods())}); none of {', '.join(method_names)} does")
            method_params = {m: {"groupby_weights": args.groupby_weights} for m in takers}
        with _progress.enabled(not args.quiet):
            df = evaluate.error_curve(adata, args.groupby, method_names, n_genes=args.n_genes, cv=args.cv,
                                      repeats=args.repeats, scoring=args.scoring, classifier=args.classifier,
                                      layer=args.layer,
                                      use_raw=_USE_RAW[args.use_raw], mask_var=args.mask_var,
                                      random_state=args.random_state, progress=not args.quiet,
                                      chunk_size=args.chunk_size, batch=args.batch_key, method_params=method_params,
                                      backend=args.backend, n_jobs=args.n_jobs)
        with atomic_outputs() as stage:  # the table and the plot together, or neither
            _write_table(df, args.output, stage(args.output))
            if args.plot:
                from . import pl

                _save_plot(lambda: pl.error_curve(df, show=False), args.plot, stage(args.plot))
        if not args.quiet:
            score = df["scoring"].iloc[0]
            shown = [f"mean_{score}", f"sd_{score}"] + [f"mean_{m}" for m in evaluate.DEFAULT_METRICS if m != score]
            print(df[["method", "n_genes", *shown]].to_string(index=False), file=sys.stderr)
        return EXIT_OK
    finally:
        _close_backed(adata)


def _cmd_select(args):
    import scanpy as sc

    from . import _progress, _registry, get, tl
    from ._io import atomic_outputs

    sc.settings.verbosity = 0 if args.quiet else 3
    _check_paths(args, [("-o", args.output, _H5AD), ("--tsv", args.tsv, _table_suffixes(args.tsv)),
                        ("--plot", args.plot, _PLOT_SUFFIXES)])
    adata = _load_input(args)
    loaded = _stamp(adata.filename) if adata.isbacked else None
    try:
        params = {}
        if args.discretization is not None:
            params["discretization"] = None if args.discretization == "none" else args.discretization
        if args.nystrom_rate is not None:
            params["nystrom_rate"] = args.nystrom_rate
        if args.solver is not None:
            params["solver"] = args.solver
        if args.preselected is not None:
            params["preselected"] = _preselected_arg(args.preselected)
        if args.groupby_weights is not None:
            params["groupby_weights"] = args.groupby_weights
        with _progress.enabled(not args.quiet):
            tl.select_genes(adata, args.groupby, method=args.method, n_genes=args.n_genes, similarity=args.similarity,
                            layer=args.layer, use_raw=_USE_RAW[args.use_raw], mask_var=args.mask_var,
                            batch_key=args.batch_key, key_added=args.key_added,
                            random_state=args.random_state, chunk_size=args.chunk_size, backend=args.backend,
                            n_jobs=args.n_jobs, **params)
        key = _registry.result_key(args.method, args.key_added)
        with atomic_outputs() as stage:  # -o, --tsv and --plot together, or none of them
            with _hdf5_write():
                _write_result(adata, stage(args.output), loaded)
            if args.tsv:
                _write_table(get.selection_df(adata, key), args.tsv, stage(args.tsv))
            if args.plot:
                from . import pl

                _save_plot(lambda: pl.weights(adata, key, n_ranks=args.plot_ranks, show=False), args.plot,
                           stage(args.plot))
        if not args.quiet:
            top = ", ".join(adata.uns[key]["selected"][:10])
            used = adata.uns[key]["params"]["method"] + (" (default recipe)" if args.method is None else "")
            print(f"selected {len(adata.uns[key]['selected'])} genes with {used}: {top}"
                  f"{', ...' if len(adata.uns[key]['selected']) > 10 else ''}", file=sys.stderr)
        return EXIT_OK
    finally:
        _close_backed(adata)


def _cmd_datasets(args):
    from . import datasets
    from ._io import atomic_path

    if args.name is None:
        if args.output:
            raise ValueError(f"-o {args.output!r} writes a dataset: name it, e.g. bioqpfs datasets "
                             f"{next(iter(datasets.available()))} -o {args.output}")
        for name, desc in datasets.available().items():
            print(f"{name}\t{desc}")
        return EXIT_OK
    _check_paths(args, [("-o", args.output, _H5AD)])
    adata = datasets.load(args.name)
    if args.output:
        with atomic_path(args.output) as tmp, _hdf5_write():
            adata.write_h5ad(tmp)
    else:
        print(adata)
    return EXIT_OK


def _stamp(path):
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def _write_result(adata, path, loaded=None):
    """Write ``adata`` to ``path`` (a temporary file of :func:`bioqpfs._io.atomic_path`).

    A backed input (read lazily) is copied byte for byte and its ``.var`` and ``.uns`` (where tl wrote the
    results) are rewritten in the copy: anndata's own ``write_h5ad`` of a backed AnnData reads the arrays of a
    sparse X whole (+53 MB peak for a 71 MB CSR file).  The copy is refused if the input is no longer the file
    it was when it was opened (``loaded``: its size, modification time and inode then).
    """
    import shutil

    if not getattr(adata, "isbacked", False):
        adata.write_h5ad(path)
        return
    import h5py

    try:
        from anndata.io import write_elem
    except ImportError:  # anndata < 0.11
        from anndata.experimental import write_elem

    source = os.fspath(adata.filename)
    shutil.copyfile(source, path)
    if _stamp(source) != (loaded or _stamp(source)):
        raise ValueError(f"{source} changed during the run (rewritten, truncated or replaced); nothing was written "
                         "-- rerun once the file stays unchanged")
    with h5py.File(path, "r+") as f:
        write_elem(f, "var", adata.var)
        write_elem(f, "uns", dict(adata.uns))


def _close_backed(adata):
    """Close the file of an input read lazily (backed), if any."""
    if getattr(adata, "isbacked", False):
        adata.file.close()


def _in_cli_words(text, parser, command, keep=()):
    """An error text of the Python API in the words of the command ``command``: each keyword of an option the
    command has becomes its flag -- ``use_raw=False`` ``--use-raw no``, ``layer=`` ``--layer``,
    ``discretization='mdl'`` ``--discretization 'mdl'``, ``lazy=False`` ``--no-lazy``; a parameter named alone
    (``mask_var must be``, ``groupby_weights has``) too when its name has an underscore -- and a text that already
    named both (``chunk_size= / --chunk-size``) names the flag once.  Keywords the command has no option for
    (method parameters of the API only) are left as they are; so is the Python code of a hint
    (``(adata = adata[...].copy())``, dropped) and every string in ``keep`` (the user's paths: a folder
    ``n_genes=20/`` is not a flag, nor is a file ``batch_key.csv`` a parameter)."""
    import re

    kept = {}
    for i, value in enumerate(sorted({k for k in keep if k and ("=" in k or "_" in k)}, key=len, reverse=True)):
        if value in text:
            kept[f"\0{i}\0"] = value
            text = text.replace(value, f"\0{i}\0")

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices.get(command)
    if sub is None:
        return text
    options = {}  # dest -> its options (--lazy and --no-lazy share one)
    for a in sub._actions:
        if a.option_strings and a.option_strings[-1].startswith("--") and a.dest != "help":
            options.setdefault(a.dest, []).append(a)
    use_raw = {v: k for k, v in _USE_RAW.items()}

    def flag(match):
        dest, value = match.group(1), match.group(2)
        if dest not in options:
            return match.group(0)
        name = options[dest][0].option_strings[-1]
        if dest == "use_raw" and value in ("True", "False", "None"):
            return f"{name} {use_raw[None if value == 'None' else value == 'True']}"
        if value == "None":  # the option's own word for it (--cv auto, --discretization none), else leaving it out
            for a in options[dest]:
                if a.choices is not None and "none" in a.choices:   # None is a choice, not the option's default
                    return f"{name} none"
                try:
                    if callable(a.type) and a.type("auto") is None:
                        return f"{name} auto"
                except (argparse.ArgumentTypeError, TypeError, ValueError):
                    pass
            if all(a.default is None for a in options[dest]):
                return f"no {name}"
            return match.group(0)
        if value in ("True", "False"):  # a switch: the option that sets that value, if there is one
            switch = [a for a in options[dest] if a.nargs == 0 and a.const is (value == "True")]
            return switch[0].option_strings[-1] if switch else match.group(0)
        return name if not value else f"{name} {value}"  # a quoted value keeps its quotes: valid in a shell too

    def bare(match):
        dest = match.group(1)
        return options[dest][0].option_strings[-1] if dest in options else match.group(0)

    text = re.sub(r"(?<![\w.-])([a-z][a-z0-9_]*)=('[^'\s]*'|\"[^\"\s]*\"|[\w.+-]*)", flag, text)
    text = re.sub(r"(?<![\w.'\"\[/-])([a-z][a-z0-9]*_[a-z0-9_]*)(?![\w'\"\]=(/-])", bare, text)
    text = re.sub(r"\s*\(adata = [^\s]*\.copy\(\)\)| \(or be None\)", "", text)
    text = re.sub(r"(--[a-z][\w-]*) / \1\b", r"\1", text)
    for placeholder, value in kept.items():
        text = text.replace(placeholder, value)
    return text


def main(argv=None):
    """Run the ``bioqpfs`` command line (``argv`` default: ``sys.argv[1:]``); return the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: usage errors exit 2, --help exits 0
        return int(e.code or 0)
    from ._io import signals_received

    in_main = threading.current_thread() is threading.main_thread()  # handlers can only be set there
    signals_received.clear()
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    previous_hook = sys.unraisablehook
    if in_main:
        sys.unraisablehook = _unraisable_signal_hook(previous_hook)
    try:
        command = {"select": _cmd_select, "evaluate": _cmd_evaluate}.get(args.command, _cmd_datasets)
        code = command(args)
        if signals_received:  # a signal whose exception was lost (see _on_signal): the run did not finish as asked
            raise KeyboardInterrupt() if signals_received[-1] == signal.SIGINT else _Terminated()
        return code
    except KeyboardInterrupt:
        print("bioqpfs: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _Terminated:
        print("bioqpfs: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except Exception as e:  # noqa: BLE001 - one readable line, the traceback only with --debug
        if args.debug:
            raise
        from ._validation import MemoryGuardError

        text = e.message("cli") if isinstance(e, MemoryGuardError) else str(e)  # CLI flags, not Python keywords
        paths = [getattr(args, a, None) for a in ("input", "labels", "output", "tsv", "plot", "preselected")]
        paths = [p for p in paths if isinstance(p, str)]
        keep = [f(p) for p in paths for f in (str, os.path.abspath, os.path.realpath)]
        text = _in_cli_words(text, parser, args.command, keep)
        msg = text.strip().splitlines()[0] if text.strip() else type(e).__name__
        if isinstance(e, KeyError) and msg.startswith(("'", '"')):
            msg = msg.strip("'\"")
        print(f"bioqpfs: error: {msg}", file=sys.stderr)
        if argv is None and _hdf5_write_failed:  # the command line's own process: skip HDF5's exit handlers
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_FAILURE)
        return EXIT_FAILURE
    finally:
        signals_received.clear()  # the record is this run's: library writes after it commit as usual
        sys.unraisablehook = previous_hook
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


if __name__ == "__main__":
    sys.exit(main())
