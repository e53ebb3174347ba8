"""Small I/O helpers: atomic writes and conversion of results to h5ad/R-safe types."""
from __future__ import annotations

import errno
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager

import numpy as np

__all__ = ["atomic_path", "atomic_outputs", "read_backed", "to_storable", "lazy_rows", "chunk_rows", "stored_bytes", "CHUNK_BYTES", "LazyReadError",
           "is_zarr_store", "tree_bytes", "read_lazy"]


def _umask():
    """The process umask, read without changing it (Linux), else by the set-and-restore idiom."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: SIGINT/SIGTERM received by a handler that records them (the command line's: ``bioqpfs.cli.main``).  The
#: exception such a handler raises is lost when the signal lands in a finaliser or a weakref callback (Python
#: prints "Exception ignored" and goes on), so the run would finish and write its outputs; :func:`atomic_outputs`
#: reads this record before it commits and then acts as for a signal held during the write.
signals_received = []


@contextmanager
def _held_signals():
    """Hold SIGINT/SIGTERM while the block runs; yield the list of those received.

    A Ctrl-C that arrives inside h5py/HDF5 can surface in a finaliser, where Python prints and drops
    it, so the write would finish as if nothing happened; and SIGTERM has no Python handler by
    default, so no cleanup would run.  Holding both and acting after the block avoids both.  Only
    in the main thread (elsewhere signal handlers cannot be set; nothing is held).
    """
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    received = []
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in _HELD_SIGNALS}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _deliver(signum):
    """Act on a held signal as its handler would have (KeyboardInterrupt for SIGINT by default)."""
    handler = signal.getsignal(signum)
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)


#: temporary files of :func:`atomic_path` are named ``.<output name>.bioqpfs-tmp-<random><suffix>``
TMP_MARK = ".bioqpfs-tmp-"


def _fsync(path, directory=False):
    """Flush ``path`` (a file, or a directory's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    except OSError as e:  # some file systems cannot flush a directory; the file itself is flushed
        if not (directory and e.errno in (errno.EINVAL, errno.ENOTSUP, errno.EBADF)):
            raise
    finally:
        os.close(fd)


def _write_error(e, path):
    """An OSError about writing ``path`` reworded to name it and what to do (not only errno's words).

    Errors about another file are returned as they are; so are those without a known cause.  HDF5
    (h5py) reports the cause only in its text (``errno = 28``), at times in a ``RuntimeError`` raised
    when the file is closed; that text is read too.
    """
    own = os.path.basename(path)
    name = getattr(e, "filename", None)
    if name is not None and os.fspath(name) != path and not os.path.basename(name).startswith("." + own + TMP_MARK) \
            and os.fspath(name) != os.path.dirname(path):
        return e
    code = getattr(e, "errno", None)
    if code is None:
        found = re.search(r"errno = (\d+)", str(e))
        code = int(found.group(1)) if found else None
    advice = {errno.ENOSPC: "no space left on the device; free space or write elsewhere",
              errno.EDQUOT: "disk quota exceeded; free space or write elsewhere",
              errno.EFBIG: "the file is larger than this file system or the file-size limit (ulimit -f) allows",
              errno.EACCES: "permission denied; choose a writable directory",
              errno.EPERM: "operation not permitted; choose a writable directory",
              errno.EROFS: "the file system is read-only; write elsewhere"}.get(code)
    if advice is None:
        return e
    err = (type(e) if isinstance(e, OSError) else OSError)(f"cannot write {path}: {advice}")
    err.errno = code
    return err


@contextmanager
def atomic_path(path):
    """Yield a temporary path next to ``path``; move it into place only if the block succeeds.

    The temporary file ``.<name>.bioqpfs-tmp-<random><suffix>`` (:data:`TMP_MARK`) is in the output's
    directory (so the final ``os.replace`` is atomic), flushed to the disk (``fsync``) before the
    replace and the directory after it, so a crash of the machine right after leaves the old file
    or the whole new one, never an empty one.  The result gets the mode a plain ``open()`` would
    give it (``0666 & ~umask`` for a new file; an existing file keeps its mode).  The temporary file is
    removed on every exit path (error, signal;
    not ``kill -9``, which leaves only a hidden temporary file, never a partial ``path``).  A
    symbolic link is followed (the file it names is replaced, as ``open()`` would write it; links that form a
    loop are an error, as for ``open()``); an
    existing non-regular file (``/dev/null``, ``/dev/full``, a FIFO) is written directly, since it
    cannot be replaced.  Out of space, quota, permission and read-only errors name ``path``.

    SIGINT (Ctrl-C) and SIGTERM received while the block runs are held until it ends: the temporary
    file is then removed, ``path`` is left as it was, and the signal takes effect (KeyboardInterrupt,
    or the process's SIGTERM handler; the CLI exits 130 / 143).

    One output of :func:`atomic_outputs`, which commits several together.
    """
    with atomic_outputs() as stage:
        yield stage(path)


class _Staged:
    """The outputs of one :func:`atomic_outputs` block: ``stage(path)`` returns the temporary path to write
    ``path``'s content to (``path`` itself for a device or FIFO, which cannot be replaced)."""

    def __init__(self, hold):
        self.entries = []     # (final path, temporary path or None)
        self.current = None   # the output staged last: the one an error without a file name is about
        self.received = []    # signals held since the first file output was staged
        self.created = []     # directories made for the outputs, deepest first (removed again if nothing is written)
        self.committed = False
        self._hold = hold     # enters _held_signals() for the rest of the block; None once entered

    def __call__(self, path):
        given = os.fspath(path)
        # a device or FIFO as named (``/dev/stdout`` of a pipe: its real path, /proc/<pid>/fd/pipe:[N], does not
        # exist, so it must be checked before realpath): nothing to replace, nothing to flush
        path = os.path.realpath(given)
        if os.path.exists(given) and not os.path.isfile(given) and not os.path.isdir(given):
            path = path if os.path.exists(path) else given   # a link to /dev/full is named /dev/full
            self.current = path
            self.entries.append((path, None))
            return path
        if os.path.islink(path):  # realpath stops at a loop of links; replacing the link would hide the loop
            raise OSError(errno.ELOOP, f"cannot write {given}: its symbolic links form a loop")
        self.current = path
        if self._hold is not None:  # not for a device alone: a Ctrl-C must still end a write blocked on a FIFO
            self.received, self._hold = self._hold(), None
        d = os.path.dirname(path)
        missing, parent = [], d
        while parent and not os.path.exists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):  # os.makedirs would say "File exists" about it
            raise NotADirectoryError(errno.ENOTDIR, f"cannot write {given}: {parent} is a file, not a directory")
        os.makedirs(d, exist_ok=True)
        self.created = missing + self.created
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + TMP_MARK,
                                   suffix=os.path.splitext(path)[1], dir=d)
        os.close(fd)
        self.entries.append((path, tmp))
        return tmp

    def reworded(self, e):
        """``e`` reworded to name the output it is about (:func:`_write_error`), else ``e``."""
        paths = [self.current] + [p for p, _ in reversed(self.entries) if p != self.current]
        for path in paths:
            if path is None:
                continue
            err = _write_error(e, path)
            if err is not e:
                return err
        return e

    def commit(self):
        """Move every staged file into place; if one move fails, the outputs moved before it are restored
        (an earlier file at the path) or removed, so the set is never mixed."""
        files = [(p, t) for p, t in self.entries if t is not None]
        mode = 0o666 & ~_umask()  # mkstemp creates the file 0600; give the result the mode a plain open() would
        for path, tmp in files:
            self.current = path
            # an existing file keeps its mode, as open() rewriting it would (a 0600 result stayed private)
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode) if os.path.isfile(path) else mode)
            _fsync(tmp)
        backups, done = {}, []
        try:
            for path, tmp in files:
                self.current = path
                if len(files) > 1 and os.path.isfile(path):  # the earlier file, kept until every output is in place
                    try:
                        os.link(path, tmp + ".old")
                        backups[path] = tmp + ".old"
                    except OSError:  # no hard links here: only this output's own move can then not be undone
                        pass
                os.replace(tmp, path)
                done.append(path)
        except BaseException:
            for path in reversed(done):
                try:
                    if path in backups:
                        os.replace(backups.pop(path), path)
                    else:
                        os.remove(path)
                except OSError:
                    pass
            raise
        finally:
            for backup in backups.values():
                try:
                    os.remove(backup)
                except OSError:
                    pass
        if os.name == "posix":  # Windows cannot open a directory to flush it
            for d in dict.fromkeys(os.path.dirname(p) for p, _ in files):
                _fsync(d, directory=True)


@contextmanager
def atomic_outputs():
    """Write several outputs all or none: yield ``stage``; ``stage(path)`` gives the temporary path to write
    ``path`` to (as :func:`atomic_path` does for one).  Only when the whole block succeeds are they all moved
    into place, together; on an error or a held signal every temporary file is removed and no output of the
    block is created or changed (earlier files at those paths stay as they were).  Signals, flushing, modes
    and error messages as in :func:`atomic_path`; a device or FIFO output is written directly.
    """
    staged = None
    try:
        with ExitStack() as stack:
            staged = _Staged(lambda: stack.enter_context(_held_signals()))
            try:
                yield staged
                if signals_received and not staged.received:  # one whose exception was lost before the block ended
                    staged.received.append(signals_received[-1])
                if not staged.received:
                    staged.commit()
                    staged.committed = True
            except (OSError, RuntimeError) as e:
                err = staged.reworded(e)
                if err is e:
                    raise
                raise err from e
            finally:
                for _, tmp in staged.entries:
                    if tmp is not None and os.path.exists(tmp):
                        os.remove(tmp)
                for d in [] if staged.committed else staged.created:  # a failed run leaves no empty directory
                    try:
                        os.rmdir(d)
                    except OSError:   # not empty (something else wrote there) or already gone
                        pass
    finally:
        if staged is not None and staged.received:  # also when the block failed: the signal is what was asked for
            _deliver(staged.received[0])


def _h5_datasets(matrix):
    """The HDF5 datasets holding a backed matrix: an h5py ``Dataset``, or the ``data``/``indices``/``indptr``
    of anndata's backed sparse matrix (its ``.group``); none for anything else."""
    import h5py  # a dependency of anndata

    if isinstance(matrix, h5py.Dataset):
        return [matrix]
    group = getattr(matrix, "group", None)
    return [v for v in group.values() if isinstance(v, h5py.Dataset)] if isinstance(group, h5py.Group) else []


def stored_bytes(matrix):
    """Bytes of the values of a backed matrix once in memory (its HDF5 datasets, uncompressed); 0 for others."""
    return sum(ds.size * ds.dtype.itemsize for ds in _h5_datasets(matrix))


def _stored_end(ds):
    """The offset just past the last byte of the file that dataset ``ds`` keeps its values in (0: none)."""
    if ds.chunks is None:  # contiguous (None when nothing was written) or compact (in the header)
        offset = ds.id.get_offset()
        return 0 if offset is None else offset + ds.id.get_storage_size()
    return max((info.byte_offset + info.size for info in map(ds.id.get_chunk_info, range(ds.id.get_num_chunks()))),
               default=0)


def read_if_on_disk(X):
    """``X`` read into memory (:func:`read_backed`) when it is an on-disk matrix -- an h5py dataset, or anndata's
    backed sparse ``CSRDataset``/``CSCDataset`` (``adata.X`` of ``read_h5ad(path, backed="r")``), which
    ``np.asarray`` would wrap in a 0-d object array -- else ``X`` as it is."""
    if hasattr(X, "to_memory") and hasattr(X, "shape") and hasattr(X, "format") or \
            type(X).__module__.startswith("h5py"):
        return read_backed(lambda: X)
    return X


def read_backed(get, filename=None):
    """Read a matrix of a backed (on-disk) AnnData into memory; refuse it when its file was cut short meanwhile.

    ``get`` returns the matrix (``lambda: adata.X``: opening it reads the file too); ``filename`` names
    the file in messages (default: the file of its HDF5 datasets).  HDF5 reads the bytes past the end of a file that was truncated while it was
    open (a copy overwritten in place, another program) as zeros, without an error: the selection
    would be computed from values that are not the stored ones.  After the read, the size of the
    open file is compared with the end of the matrix's stored bytes.  A file that was removed (not
    truncated) is still read whole through the open handle, so it gives the correct values.  A
    matrix that is already in memory is returned as it is.
    """
    try:
        matrix = get()
        datasets = _h5_datasets(matrix)
        filename = filename or (datasets[0].file.filename if datasets else "its file")
        if hasattr(matrix, "to_memory"):
            values = matrix.to_memory()
        else:
            values = matrix[()] if datasets else matrix
    except (OSError, RuntimeError, KeyError, ValueError) as e:  # h5py on objects whose bytes are gone
        text = str(e).strip("'\" ").splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot read the expression matrix from {filename or 'its file'}: {text}; the file is "
                         "damaged or was changed while it was open -- restore or copy it again") from None
    truncated = _truncation(datasets)
    if truncated:
        raise ValueError(truncated)
    return values


def _truncation(datasets):
    """Why the open file of ``datasets`` is shorter than their stored bytes reach (HDF5 would read the missing
    bytes as zeros, without an error), or ``None`` when it is not."""
    for ds in datasets:
        try:
            size = os.fstat(ds.file.id.get_vfd_handle()).st_size
        except (AttributeError, TypeError, ValueError, OSError):  # a driver without a POSIX file descriptor
            continue
        end = _stored_end(ds)
        if end > size:
            return (f"{ds.file.filename} was truncated while it was read: {size:,} bytes are left but the values of "
                    f"{ds.name} reach byte {end:,}, so the values read past the end are not the stored ones; restore "
                    "or copy the file again and rerun")
    return None


#: default size of a sample chunk of a lazily read matrix: rows x genes x 8 bytes (float64) up to this (128 MiB)
CHUNK_BYTES = 128 * 2**20


#: at most one progress line of the lazy reads (:func:`lazy_rows`) per this many seconds
PROGRESS_SECONDS = 1.0
_last_line = [0.0]


class LazyReadError(ValueError):
    """A sample chunk of a lazily read file could not be read (file gone, changed or damaged meanwhile)."""


def chunk_rows(n_obs, n_vars, chunk_size=None):
    """Samples per chunk: ``chunk_size`` (a positive int), or as many rows as fit :data:`CHUNK_BYTES` as float64
    (8,388 rows of 2,000 genes); at least 1, at most ``n_obs``."""
    if chunk_size is None:
        chunk_size = CHUNK_BYTES // (8 * max(int(n_vars), 1))
    return int(max(1, min(int(chunk_size), max(int(n_obs), 1))))


def _stamp(filename):
    st = os.stat(filename)
    return st.st_size, st.st_mtime_ns, st.st_ino


def _read_rows(filename, elem, start, stop, *, stamp, chunk, n_chunks, shape, progress, expect=None):
    """Rows ``start:stop`` of the matrix ``elem`` (dense, or a CSR group) of the .h5ad file or zarr store
    ``filename``, read by path (so that a process of a Dask cluster can read it too).  The file must be the one
    the graph was built on: a file deleted, truncated, rewritten or replaced meanwhile is a
    :class:`LazyReadError` naming the chunk, never values that are not the stored ones.

    HDF5 (``expect=None``): ``stamp`` is the file's size, modification time and inode.  Zarr (``expect``: the
    storage objects this read touches, each with whether it existed when the graph was built; ``stamp``: the
    element's metadata files, :func:`_zarr_stamp`): zarr reads a chunk whose object is missing as its fill
    value (zeros), without an error, and a store legitimately omits chunks that hold only the fill value, so
    before and after the read the metadata and the presence of every object touched must be as they were.
    """
    where = f"rows {start}..{stop - 1} (chunk {chunk + 1} of {n_chunks}) of {elem} in {filename}"
    try:
        if expect is None:
            if _stamp(filename) != stamp:
                raise LazyReadError(f"cannot read {where}: {_CHANGED}")
            block = _read_h5_rows(filename, elem, start, stop, shape)
        else:
            _check_zarr(filename, stamp, expect, where)
            block = _read_zarr_rows(filename, elem, start, stop, shape, expect, where)
            _check_zarr(filename, stamp, expect, where)
    except LazyReadError:
        raise
    except FileNotFoundError:
        raise LazyReadError(f"cannot read {where}: the file no longer exists (deleted or moved while the lazy run "
                            "was in progress); restore it and rerun") from None
    except (OSError, KeyError, RuntimeError, ValueError) as e:  # h5py / zarr on a damaged file
        text = str(e).strip("'\" ").splitlines()[0] if str(e).strip() else type(e).__name__
        raise LazyReadError(f"cannot read {where}: {text}; the file is damaged or was changed during the run -- "
                            "restore or copy it again and rerun") from None
    if progress and time.monotonic() - _last_line[0] >= PROGRESS_SECONDS:
        _last_line[0] = time.monotonic()
        print(f"    read {where}", file=sys.stderr, flush=True)
    return block


_CHANGED = ("the file was changed (rewritten, truncated or replaced) after the lazy run started, so its values are "
            "no longer the ones being analysed; rerun once the file is complete and stays unchanged")


def _read_h5_rows(filename, elem, start, stop, shape):
    import h5py  # a dependency of anndata

    with h5py.File(filename, "r") as f:
        return _rows_of(f[elem], start, stop, shape[1])


def _rows_of(node, start, stop, n_cols, span=None, where=None):
    """Rows ``start:stop`` of an open matrix element, h5py or zarr alike: a dense array, or a CSR group whose
    ``indptr``/``data``/``indices`` are sliced.  ``span``: the CSR values' ``(first, end)`` the graph was built
    with (zarr), a :class:`LazyReadError` at ``where`` when the stored ``indptr`` says otherwise."""
    import scipy.sparse as sp

    if not _is_group(node):
        return node[start:stop]
    indptr = node["indptr"][start:stop + 1]
    lo, hi = int(indptr[0]), int(indptr[-1])
    if span is not None and (lo, hi) != tuple(span):
        raise LazyReadError(f"cannot read {where}: {_CHANGED}")
    return sp.csr_matrix((node["data"][lo:hi], node["indices"][lo:hi], indptr - lo), shape=(stop - start, n_cols))


def _is_group(node):
    """Whether an open h5py/zarr node is a group (a sparse matrix's), not an array."""
    return hasattr(node, "keys") and not hasattr(node, "dtype")


# ---- zarr stores ----------------------------------------------------------------------------------------------------
_ZARR_METADATA = (".zarray", ".zgroup", ".zattrs", "zarr.json")


def is_zarr_store(path) -> bool:
    """Whether ``path`` is a zarr directory store (a directory with zarr v2 or v3 group metadata)."""
    path = os.fspath(path)
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, n)) for n in (".zgroup", "zarr.json"))


def tree_bytes(path) -> int:
    """Bytes of the files under a directory (a zarr store on disk), or of a file."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _zarr_stamp(root, paths):
    """Size, modification time and inode of the metadata files of the zarr nodes ``paths`` (relative to ``root``)."""
    stamp = []
    for rel in paths:
        for name in _ZARR_METADATA:
            try:
                st = os.stat(os.path.join(root, *rel.split("/"), name))
            except FileNotFoundError:
                continue
            stamp.append((f"{rel}/{name}", st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(stamp)


def _zarr_objects(arr, lo, hi):
    """The storage keys (relative to the store) of the chunks -- the shards, if sharded -- holding elements
    ``lo:hi`` along the first axis of the zarr array ``arr`` (all of the second axis)."""
    unit = arr.shards or arr.chunks
    rows = range(lo // unit[0], (hi - 1) // unit[0] + 1) if hi > lo else range(0)
    cols = [()] if arr.ndim == 1 else [(j,) for j in range(-(-arr.shape[1] // unit[1]))]
    return [f"{arr.path}/{arr.metadata.encode_chunk_key((i, *j))}" for i in rows for j in cols]


def _check_zarr(root, stamp, expect, where):
    if not os.path.isdir(root):
        raise FileNotFoundError(root)
    if _zarr_stamp(root, stamp[0]) != stamp[1]:
        raise LazyReadError(f"cannot read {where}: {_CHANGED}")
    for key, present in expect[1]:
        if os.path.exists(os.path.join(root, *key.split("/"))) != present:
            raise LazyReadError(f"cannot read {where}: its stored chunk {key} {'is gone' if present else 'appeared'} "
                                "since the lazy run started (zarr would read a missing chunk as zeros, not the stored "
                                "values); rerun once the store is complete and stays unchanged")


def _read_zarr_rows(root, elem, start, stop, shape, expect, where):
    import zarr

    return _rows_of(zarr.open_group(root, mode="r")[elem], start, stop, shape[1], span=expect[0], where=where)


def _zarr_layout(root, elem, chunk_size):
    """Shape, dtype, Dask meta, chunk bounds, metadata stamp and per-chunk expectations (see :func:`_read_rows`)
    of the matrix ``elem`` of a zarr store; ``None`` when it cannot be read by rows."""
    import scipy.sparse as sp
    import zarr

    node = zarr.open_group(root, mode="r")[elem]
    dense = isinstance(node, zarr.Array)
    if dense:
        arrays, shape, dtype, meta = {"values": node}, node.shape, node.dtype, None
    elif node.attrs.get("encoding-type") == "csr_matrix":
        arrays = {k: node[k] for k in ("data", "indices", "indptr")}
        shape, dtype = tuple(int(v) for v in node.attrs["shape"]), arrays["data"].dtype
        meta = sp.csr_matrix((0, 0), dtype=dtype)
    else:
        return None
    nodes = sorted({elem} | {a.path for a in arrays.values()})
    stamp = (tuple(nodes), _zarr_stamp(root, nodes))
    if len(shape) != 2 or not shape[0]:
        return shape, dtype, meta, [0, 0], stamp, []
    present = {os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
               for a in arrays.values() for d, _, files in os.walk(os.path.join(root, *a.path.split("/"))) for f in files}
    rows = chunk_rows(shape[0], shape[1], chunk_size)
    bounds = list(range(0, shape[0], rows)) + [shape[0]]
    if dense:
        ptr = [None] * len(bounds)
        keys = [_zarr_objects(node, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    else:
        ptr = [int(v) for v in arrays["indptr"].get_coordinate_selection(np.asarray(bounds))]
        keys = [_zarr_objects(arrays["indptr"], a, b + 1) + _zarr_objects(arrays["data"], p, q)
                + _zarr_objects(arrays["indices"], p, q)
                for a, b, p, q in zip(bounds[:-1], bounds[1:], ptr[:-1], ptr[1:])]
    expect = [((p, q), tuple((k, k in present) for k in ks)) for p, q, ks in zip(ptr[:-1], ptr[1:], keys)]
    return shape, dtype, meta, bounds, stamp, expect


def lazy_rows(filename, elem="X", *, chunk_size=None, progress=False):
    """The matrix ``elem`` of an .h5ad file or a zarr store as a Dask array of sample (row) chunks, each read from
    the file when a task needs it, so the matrix is never loaded whole.

    Parameters
    ----------
    filename : str or path
        The .h5ad file (e.g. ``adata.filename`` of ``anndata.read_h5ad(path, backed="r")``), or a zarr directory
        store (as ``anndata.AnnData.write_zarr`` writes; zarr v2 or v3, sharded or not).
    elem : str
        The matrix inside it: a dense array (numpy chunks) or a ``csr_matrix`` group (scipy CSR chunks).
    chunk_size : int, optional
        Samples per chunk (:func:`chunk_rows`: default :data:`CHUNK_BYTES` of float64 rows).
    progress : bool
        Print a line to stderr when a chunk has been read (``read rows a..b (chunk k of K) of X in <file>``),
        at most one per :data:`PROGRESS_SECONDS`; a computation that passes over X several times reads every
        chunk once per pass.

    Returns
    -------
    dask.array.Array or None
        ``None`` when the matrix is stored in a way that cannot be read by rows (a ``csc_matrix`` group).
        A read of a chunk fails with :class:`LazyReadError` naming the chunk and the file when the file was
        deleted, truncated or rewritten after this call (see :func:`_read_rows`).  The array's
        ``bioqpfs_stored_bytes`` attribute is the size of its values in memory (for a memory check before
        reading it whole).
    """
    import dask
    import dask.array as da

    filename = os.path.abspath(os.fspath(filename))  # tasks may run after a chdir, or in another process
    zarr_store = os.path.isdir(filename)
    try:
        if zarr_store:
            layout = _zarr_layout(filename, elem, chunk_size)
            if layout is None:
                return None
            shape, dtype, meta, bounds, stamp, expect = layout
            truncated = None
        else:
            layout = _h5_layout(filename, elem, chunk_size)
            if layout is None:
                return None
            shape, dtype, meta, bounds, stamp, truncated = layout
            expect = None
    except FileNotFoundError:
        raise
    except (OSError, KeyError, RuntimeError, ValueError) as e:  # h5py / zarr on a damaged file
        text = str(e).strip("'\" ").splitlines()[0] if str(e).strip() else type(e).__name__
        raise LazyReadError(f"{filename}: cannot read the layout of {elem} ({text}); the file is damaged or was changed "
                            "while it was open -- restore or copy it again and rerun") from None
    if truncated:   # a later change is caught per chunk (size, mtime, inode: the stamp)
        raise LazyReadError(truncated)
    if len(shape) != 2 or not shape[0]:
        return None
    read = dask.delayed(_read_rows, pure=True)
    token = dask.base.tokenize(filename, elem, stamp, bounds)
    # the task names carry the rows (logs, the dashboard); Dask may fuse a read into the next task, so a worker's
    # death is named by the chunk's index instead (counting_dask.compute)
    blocks = [da.from_delayed(read(filename, elem, a, b, stamp=stamp, chunk=k, n_chunks=len(bounds) - 1,
                                   shape=shape, progress=bool(progress), expect=None if expect is None else expect[k],
                                   dask_key_name=f"read-{elem.replace('/', '.')}-rows-{a}-{b - 1}-{token}"),
                              shape=(b - a, shape[1]), dtype=dtype, meta=meta)
              for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
    X = da.concatenate(blocks, axis=0) if len(blocks) > 1 else blocks[0]
    X.bioqpfs_stored_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize if meta is None else _csr_bytes(
        filename, elem, zarr_store)
    return X


def _h5_layout(filename, elem, chunk_size):
    """Shape, dtype, Dask meta, chunk bounds, stamp and truncation message of the matrix ``elem`` of an .h5ad
    file; ``None`` when it cannot be read by rows (a ``csc_matrix`` group)."""
    import h5py
    import scipy.sparse as sp

    stamp = _stamp(filename)
    with h5py.File(filename, "r") as f:
        node = f[elem]
        if isinstance(node, h5py.Dataset):
            shape, dtype, meta = node.shape, node.dtype, None
        elif node.attrs.get("encoding-type") == "csr_matrix":
            shape, dtype = tuple(int(v) for v in node.attrs["shape"]), node["data"].dtype
            meta = sp.csr_matrix((0, 0), dtype=dtype)
        else:
            return None
        truncated = _truncation([node] if isinstance(node, h5py.Dataset) else
                                [v for v in node.values() if isinstance(v, h5py.Dataset)])
    rows = chunk_rows(shape[0], shape[1], chunk_size) if len(shape) == 2 and shape[0] else 1
    bounds = list(range(0, shape[0], rows)) + [shape[0]] if len(shape) == 2 else [0, 0]
    return shape, dtype, meta, bounds, stamp, truncated


def _csr_bytes(filename, elem, zarr_store):
    """Bytes of the data, indices and indptr of a CSR matrix of an .h5ad file or zarr store, once in memory."""
    if zarr_store:
        import zarr

        node = zarr.open_group(filename, mode="r")[elem]
        return sum(node[k].nbytes for k in ("data", "indices", "indptr"))
    import h5py

    with h5py.File(filename, "r") as f:
        return sum(v.size * v.dtype.itemsize for v in f[elem].values() if isinstance(v, h5py.Dataset))


def read_lazy(path, *, chunk_size=None, progress=False):
    """Open an .h5ad file or an AnnData zarr store without reading its expression matrices.

    The matrices are then read in sample chunks by the methods with a Dask path (``tl.select_genes``,
    ``evaluate.error_curve``; each chunk read checks that the file is still the one opened, and a run on a changed
    or deleted file is an error naming the chunk), or read whole, after a memory check, by the others.

    Parameters
    ----------
    path : str or path
        An .h5ad file (opened with ``anndata.read_h5ad(path, backed="r")``; ``chunk_size`` and ``progress`` are
        then given to ``tl.select_genes``) or a zarr store as ``AnnData.write_zarr`` writes it (zarr v2 or v3,
        sharded or not): ``.obs``, ``.var``, ``.uns`` and ``.obsm``/``.varm``/``.obsp``/``.varp`` are read;
        ``.X``, every layer and ``.raw.X`` (dense or CSR; a CSC matrix is read whole) become Dask arrays of
        sample chunks (:func:`lazy_rows`).
    chunk_size : int, optional
        Samples per chunk of a zarr store's matrices (default: as many as fit 128 MiB as float64).
    progress : bool
        Print a line to stderr as chunks are read (at most one a second).

    Returns
    -------
    anndata.AnnData

    Notes
    -----
    Unlike ``anndata.experimental.read_elem_lazy`` on a zarr store, a chunk whose file went missing during the
    run is an error, not zeros (:func:`_read_rows`).  Array support: numpy and scipy.sparse CSR chunks.
    """
    import anndata as ad

    if chunk_size is not None:   # as tl.select_genes and the CLI check it (0, -5, True, 2.5 and '100' were clamped)
        from ._validation import check_positive_int

        check_positive_int(chunk_size, "chunk_size")
    path = os.fspath(path)
    if not os.path.isdir(path):
        return ad.read_h5ad(path, backed="r")
    import pandas as pd
    import zarr

    try:
        from anndata.io import read_elem
    except ImportError:  # anndata < 0.11
        from anndata.experimental import read_elem

    group = zarr.open_group(path, mode="r")

    def matrix(key):
        X = lazy_rows(path, key, chunk_size=chunk_size, progress=progress)
        return read_elem(group[key]) if X is None else X  # CSC: read whole

    parts = {k: read_elem(group[k]) for k in ("obs", "var", "uns", "obsm", "varm", "obsp", "varp") if k in group}
    if "X" in group:
        parts["X"] = matrix("X")
    if "layers" in group:
        parts["layers"] = {k: matrix(f"layers/{k}") for k in group["layers"].keys()}
    adata = ad.AnnData(**parts)
    if "raw" in group and "X" in group["raw"]:  # (anndata may leave an empty raw group)
        adata.raw = ad.AnnData(matrix("raw/X"), obs=pd.DataFrame(index=adata.obs_names),
                               var=read_elem(group["raw/var"]),
                               varm=read_elem(group["raw/varm"]) if "varm" in group["raw"] else None)
    return adata


def to_storable(value):
    """Convert a value to types that survive ``write_h5ad``/``read_h5ad`` and the R bridge.

    None stays None (a real null: anndata >= 0.12 writes it to h5ad, earlier versions leave the key
    out; R gets ``NULL``), never the string ``"None"``; numpy scalars -> Python scalars; sequences ->
    NumPy arrays (str arrays when not all numeric/bool); dicts recursively (keys as str).  Anything
    else -> its ``str``.
    """
    if value is None:
        return None
    if isinstance(value, dict):
        return {str(k): to_storable(v) for k, v in value.items()}
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value, dtype=object) if not isinstance(value, np.ndarray) else value
        if arr.dtype != object and arr.dtype.kind in "biuf":
            return np.asarray(arr)
        items = list(np.ravel(arr))
        if items and all(isinstance(v, (bool, np.bool_)) for v in items):
            return np.asarray(items, dtype=bool)
        if items and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
                         for v in items):
            return np.asarray(items, dtype=np.float64 if any(isinstance(v, (float, np.floating)) for v in items) else np.int64)
        return np.asarray(["None" if v is None else str(v) for v in items], dtype=str)
    return str(value)
