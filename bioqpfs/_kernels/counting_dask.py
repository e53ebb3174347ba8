"""The Dask counting backend: codes in a ``dask.array.Array`` chunked by samples, counted chunk by chunk.

Implements :class:`bioqpfs._kernels.counting.CountingBackend` (see that module for the contract).  Every
count is a sum over samples, so each sample chunk is counted on its own -- by the numpy backend
(:class:`bioqpfs._kernels.counting_numpy.NumpyCounting`) on the worker that holds the chunk, with the
chunk's slice of the class codes and sample weights -- and the small per-chunk count blocks are summed by
a tree reduction (:func:`reduce_chunks`, the way ``scanpy.get.aggregate`` sums per-chunk aggregates).  Only
count blocks (``C x nb|I| x nb|J|``) travel; the codes stay where their chunks are.
Unweighted counts are integers, exact in float32 below 2**24 samples whatever the chunking; weighted counts
are float64 sums, equal to the numpy backend's to float64 rounding.

A pass over the codes is one Dask graph; run under ``dask.distributed`` the chunks are counted on the
cluster's workers.  When a whole gene x gene matrix is asked for (:meth:`DaskCounting.expect`) and its
counts fit :data:`FULL_COUNTS_BUDGET` (2,000 genes in 3 bins: 64 MB per class), they are counted in one
pass and the block pairs of :func:`bioqpfs._kernels.information.pairwise_information` are sliced from them
(the block pairs of 2,000 genes were 10 passes over X); otherwise (more genes, or a few rows for Nystrom)
each block pair is one pass.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
import threading

import numpy as np
import scipy.sparse as sp
from numba import njit

from .._jit import skip_failed_cache_writes
from .counting import CountingBackend
from .counting_numpy import NumpyCounting

__all__ = ["DaskCounting", "is_dask_array", "refuse_dask", "class_sums", "FULL_COUNTS_BUDGET", "STRIP_BYTES", "sample_chunked",
           "reduce_chunks", "SPLIT_EVERY", "CHAIN_BYTES", "parallel_slots", "chains_that_fit", "pass_memo",
           "with_pass_memo", "memoized", "take_genes", "WorkerDiedError", "compute", "CODES_CACHE_BYTES", "kept_codes",
           "csr_chunks"]

#: chunk results combined per task of the reduction tree (at most)
SPLIT_EVERY = 8
#: chunk results of at least this many bytes (a whole count matrix: 64 MB at 2,000 genes) are summed in chains,
#: one per worker thread, each link counting one chunk into the sum so far (:func:`reduce_chunks`)
CHAIN_BYTES = 8 * 2**20
#: bytes of the whole gene x gene count matrix (all classes) up to which it is counted in one pass and kept
FULL_COUNTS_BUDGET = 256 * 2**20
#: bytes of a strip of the count matrix (a run of rows against all columns) counted in one pass when the whole
#: does not fit :data:`FULL_COUNTS_BUDGET` (at most two strips are kept)
STRIP_BYTES = 128 * 2**20
#: bytes of uint8 codes per worker process up to which a code matrix is computed once and kept by the workers
#: for the passes that follow (:func:`kept_codes`), instead of being recomputed from X in every pass
CODES_CACHE_BYTES = 128 * 2**20

_MEMO = contextvars.ContextVar("bioqpfs_dask_pass_memo", default=None)


class WorkerDiedError(RuntimeError):
    """A ``dask.distributed`` worker process died while it computed a sample chunk (distributed's ``KilledWorker``,
    kept as ``__cause__``): the run stops, and the message names the chunk and what to do."""


def compute(obj, bounds=None):
    """``obj.compute()`` (a Dask array or delayed), with distributed's ``KilledWorker`` -- a worker process that
    died, e.g. killed for memory -- turned into a :class:`WorkerDiedError` naming the sample chunk: from the
    task's key, whose chunk index (an array's block) or ``chunk<k>`` (a pass's task, :func:`reduce_chunks`) gives
    the samples with ``bounds`` (the chunk offsets; default: ``obj``'s own sample chunks).  Nothing is written
    by the callers before their computation returns."""
    try:
        return obj.compute()
    except Exception as e:
        if type(e).__name__ != "KilledWorker" or not hasattr(e, "task"):
            raise
        raise WorkerDiedError(_death_message(e, obj, bounds)) from e


def _death_message(error, obj, bounds):
    import re

    key = error.task
    name = key[0] if isinstance(key, tuple) else str(key)
    k = int(key[1]) if isinstance(key, tuple) and len(key) > 1 and isinstance(key[1], int) else None
    found = re.search(r"-chunk(\d+)-", str(name))
    if found:
        k = int(found.group(1))
    if bounds is None and getattr(obj, "chunks", None):
        bounds = np.concatenate([[0], np.cumsum(obj.chunks[0])])
    rows = re.search(r"read-(\S+?)-rows-(\d+)-(\d+)-", str(name))
    if rows:
        where = f"rows {rows.group(2)}..{rows.group(3)} of {rows.group(1).replace('.', '/')}"
    elif k is not None and bounds is not None and k + 1 < len(bounds):
        where = f"sample chunk {k + 1} of {len(bounds) - 1} (samples {int(bounds[k])}..{int(bounds[k + 1]) - 1})"
    else:
        where = "a sample chunk"
    address = getattr(getattr(error, "last_worker", None), "address", "?")
    return (f"a Dask worker process ({address}) died while it computed {where} (task {key!r}; the scheduler gave "
            f"up after {error.allowed_failures + 1} such deaths), so the run was stopped and nothing was written; "
            "the worker's log says why -- a worker killed for memory needs smaller chunks (chunk_size= / "
            "--chunk-size) or more memory per worker")


@contextlib.contextmanager
def pass_memo():
    """Within this context, the results of passes over X are kept and reused (:func:`memoized`).

    Opened by every public function (``bioqpfs._validation.validate_params``) around one call, the outermost
    call owning the memo: validation, constant-gene detection and the mean +- sd thresholds all need the
    per-gene moments of the same X, which is then read once for them instead of three times (a Dask X), or
    computed once instead of twice (an in-memory X: :func:`bioqpfs._kernels.correlation.shared_column_moments`).
    The memo lives for one call only, so a file rewritten or an array changed between two calls is never
    answered from an old pass.
    """
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def with_pass_memo(func):
    """Decorator: ``func`` runs inside :func:`pass_memo` (the public measures; selectors get it from
    ``bioqpfs._validation.validate_params``)."""
    import functools

    @functools.wraps(func)
    def within(*args, **kwargs):
        with pass_memo():
            return func(*args, **kwargs)

    return within


def _memo_key(kind, x):
    """A Dask array by its graph name; a numpy or scipy.sparse array by identity (:func:`memoized`)."""
    return (kind, x.name) if is_dask_array(x) else (kind, "object", id(x))


def _memo_get(memo, key, x):
    entry = memo.get(key)
    if entry is None or is_dask_array(x):
        return entry
    ref, value = entry  # an in-memory array's entry holds a weak reference: the very object, or no entry
    return value if ref() is x else None


def _memo_set(memo, key, x, value):
    if is_dask_array(x):
        memo[key] = value
        return
    import weakref

    try:  # weak: the memo keeps no array alive, and the entry goes with the array (an id is reused only after that)
        ref = weakref.ref(x, lambda _, memo=memo, key=key: memo.pop(key, None))
    except TypeError:  # an object without weak references is not memoized
        return
    memo[key] = (ref, value)


def memoized(kind, x, compute):
    """``compute()``, or its earlier result for the same ``kind`` and the same X within :func:`pass_memo`;
    outside it, always ``compute()``.  The same X: a Dask array by its graph name (the same graph reads the
    same chunks), a numpy or scipy.sparse array by identity (the very object the call validated; the callers
    never write into X)."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    key = _memo_key(kind, x)
    value = _memo_get(memo, key, x)
    if value is None:
        value = compute()
        _memo_set(memo, key, x, value)
    return value


def memo_active():
    """Whether a :func:`pass_memo` is open (results of :func:`memoized` are kept)."""
    return _MEMO.get() is not None


def memo_holds(kind, x):
    """Whether the open :func:`pass_memo` keeps a result of ``kind`` for this X (False when none is open)."""
    memo = _MEMO.get()
    return memo is not None and _memo_get(memo, _memo_key(kind, x), x) is not None


#: memoized kinds whose results are per gene (tuples of scalars and per-gene vectors): a gene subset's are a slice
GENEWISE_KINDS = ("first pass", "moments")


def _carries_genewise(X):
    """Whether the per-gene results of X, sliced, are bit for bit those computed on ``X[:, genes]``: a Dask or
    sparse X (each gene's values in sample order, whatever the other genes), or an F-ordered dense X (the copy
    is F-ordered too, each column summed alone).  Not a C-ordered dense X: numpy sums its columns sample after
    sample but those of the F-ordered copy pairwise, and the last bits differ."""
    return is_dask_array(X) or sp.issparse(X) or (isinstance(X, np.ndarray) and X.flags.f_contiguous)


def take_genes(X, genes):
    """``X[:, genes]`` (numpy, scipy.sparse or Dask); inside :func:`pass_memo`, the per-gene results already
    memoized for X (:data:`GENEWISE_KINDS`: the Dask passes, the column moments) are carried over to the
    subset, sliced, so that dropping constant genes costs no second pass over the samples -- where the slice
    is the same bits as the subset's own (:func:`_carries_genewise`).

    A sparse or Dask ``X`` itself when ``genes`` is every gene in order (no constant gene to drop, the usual
    case on filtered single-cell data): indexing would copy the whole matrix (a CSR X of 100,000 cells x 2,000
    genes at 21% non-zero: 328 MB and 0.36 s) and keep the copy alive through the counting.  When the genes
    left out of a CSR/CSC X are empty (no stored entry: all-zero genes, the constant genes of counts), the
    subset shares X's values: a CSR gets new column indices only (half the copy), a CSC a new ``indptr`` only.
    Callers never write into the result.  A dense X is still indexed: the copy is F-ordered, and the dense
    kernels' float sums follow the layout, so returning X would change last bits."""
    genes = np.asarray(genes)
    sub = None
    if sp.issparse(X) or is_dask_array(X):
        m = X.shape[1]
        if genes.shape == (m,) and (genes == np.arange(m)).all():
            return X
        if sp.issparse(X):
            sub = _without_empty_genes(X, genes)
    if sub is None:
        sub = X[:, genes]
    memo = _MEMO.get()
    if memo is not None and _carries_genewise(X):
        m = X.shape[1]
        for kind in GENEWISE_KINDS:
            value = _memo_get(memo, _memo_key(kind, X), X)
            if value is not None:
                _memo_set(memo, _memo_key(kind, sub), sub,
                          tuple(v[genes] if isinstance(v, np.ndarray) and v.shape == (m,) else v for v in value))
    return sub


def _without_empty_genes(X, genes):
    """``X[:, genes]`` of a CSR/CSC X sharing X's values when ``genes`` is increasing and every other gene has no
    stored entry; ``None`` otherwise.  The entries, their order and the canonical format are those of the copy."""
    n, m = X.shape
    if X.format not in ("csr", "csc") or genes.size == 0 or (np.diff(genes) <= 0).any() or genes[0] < 0 \
            or genes[-1] >= m:
        return None
    if X.format == "csc":  # the left-out columns are empty: each kept column starts where it did
        left_out = np.ones(m, dtype=bool)
        left_out[genes] = False
        if np.diff(X.indptr)[left_out].any():
            return None
        indptr = np.append(X.indptr[genes], X.indptr[-1]).astype(X.indptr.dtype, copy=False)
        sub = type(X)((X.data, X.indices, indptr), shape=(n, genes.size), copy=False)
    else:  # each stored entry's gene renumbered (increasing, so every row keeps its order)
        column = np.full(m, -1, dtype=X.indices.dtype)
        column[genes] = np.arange(genes.size, dtype=X.indices.dtype)
        indices = np.empty_like(X.indices)
        if not _renumbered(X.indices, column, indices):  # an entry of a left-out gene
            return None
        sub = type(X)((X.data, indices, X.indptr), shape=(n, genes.size), copy=False)
    sub.has_canonical_format = X.has_canonical_format
    return sub


@njit(cache=True, nogil=True)
def _renumbered(indices, column, out):
    """``out = column[indices]``; False (early) at the first entry whose ``column`` is -1."""
    for k in range(indices.size):
        c = column[indices[k]]
        if c < 0:
            return False
        out[k] = c
    return True


def is_dask_array(x) -> bool:
    """Whether ``x`` is a ``dask.array.Array`` (never imports dask: without ``dask.array`` loaded, nothing is one)."""
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(x, da.Array)


def refuse_dask(x, what, instead):
    """A clear ``ValueError`` when ``x`` is a Dask array and ``what`` has no Dask path yet (``instead``: what to do)."""
    if is_dask_array(x):
        raise ValueError(f"{what} is not available for a Dask array yet; {instead}, or load X into memory "
                         "(X.compute())")


def sample_chunked(x, name="X"):
    """``x`` (a 2-D dask array) with the gene axis in one chunk and no empty sample chunk.

    Counting reads whole rows (all genes of a sample chunk), as ``scanpy.get.aggregate`` does; a matrix split
    along genes is rechunked to one gene chunk (sample chunks kept, so a chunk holds ``rows x genes``).  Empty
    sample chunks are dropped (Dask's own reductions fail on them; they hold no counts).  An
    array with unknown chunk sizes (NaN, e.g. after boolean indexing) is refused: call
    ``x.compute_chunk_sizes()`` first.
    """
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (samples x genes), got a dask array of shape {x.shape}")
    if any(np.isnan(c) for axis in x.chunks for c in axis):
        raise ValueError(f"{name} is a dask array with unknown chunk sizes; call {name}.compute_chunk_sizes() first")
    rows = tuple(c for c in x.chunks[0] if c) or (0,)
    if len(x.chunks[1]) > 1 or rows != x.chunks[0]:
        x = x.rechunk((rows, -1))
    return x


def _csr_block(block):
    return block.tocsr() if sp.issparse(block) and block.format != "csr" else block


def csr_chunks(x):
    """``x`` (a Dask array) with its sparse chunks of any format read as CSR, lazily; dense chunks as they are.

    Dask indexes and concatenates CSR blocks, but not COO blocks (not subscriptable) nor DOK ones (their
    concatenation fails inside scipy): what reads a Dask X whole, or takes its columns, goes through this."""
    meta = getattr(x, "_meta", None)
    if sp.issparse(meta):
        meta = sp.csr_matrix((0, 0), dtype=meta.dtype)
    return x.map_blocks(_csr_block, dtype=x.dtype, meta=meta)


def _worker_processes():
    """Processes holding the chunks: the workers of the active ``distributed`` client, else 1 (this one)."""
    try:
        from distributed import get_client

        return max(1, len(get_client().nthreads()))
    except (ImportError, ValueError):
        return 1


def kept_codes(codes):
    """``codes`` computed once and kept (``persist``) when they take at most :data:`CODES_CACHE_BYTES` per worker
    process (1 byte per sample and gene), else unchanged (lazy).

    Every count pass (margins, then the joint counts: one pass, or one per strip) needs the codes of every
    chunk; lazy codes are recomputed from X each time, the file read included.  Kept, they are read and coded
    once: SPEC_CMI on 50,000 x 2,000 sparse cells on 2 workers went from 20.9 s to 16.3 s (four strip passes;
    the in-memory run takes 12-13 s), for 50 MB per worker.  Above the budget (200,000 x 2,000 on 2 workers:
    200 MB each) the codes stay lazy, so a worker's memory does not grow with the number of cells.
    """
    if codes.nbytes / _worker_processes() > CODES_CACHE_BYTES:
        return codes
    return codes.persist()


def _add(*parts):
    total = parts[0].copy()
    for part in parts[1:]:  # in place: ``sum`` made a new array per term (four count matrices at once for two)
        total += part
    return total


class _ChunkTasks:
    """A sample chunk's own tasks (its read and what follows, culled from its array's graph), computed inside
    the chain link that counts it (:func:`_fold`) instead of as tasks of their own: the scheduler cannot read a
    chunk before the link that needs it can run.  Opaque to Dask (not a collection), so it travels as data."""

    __slots__ = ("graph", "key")

    def __init__(self, graph, key):
        self.graph, self.key = graph, key

    def compute(self):
        import dask

        return dask.get(self.graph, self.key)  # in the worker's thread, synchronously


def _chunk_tasks(block, k, graph):
    """The tasks of sample chunk ``k`` of the 2-D array ``block`` (its graph ``graph``, materialised once) as
    :class:`_ChunkTasks`; the chunk's Delayed when the chunk is already computed on a cluster (a persisted
    array: its graph holds futures), which stays an ordinary dependency."""
    from dask.optimization import cull

    key = (block.name, k, 0)
    tasks = cull(graph, [key])[0]
    if any(type(v).__name__ == "Future" for v in tasks.values()):
        return block.to_delayed()[k, 0]
    return _ChunkTasks(tasks, key)


def _fold(acc, func, combine, *blocks, **kwargs):
    """One link of a chain: ``combine(acc, func(*blocks, **kwargs))`` (``func``'s result alone for the first);
    a :class:`_ChunkTasks` block is computed here, in the link.  A ``func`` that can combine its result into the
    result so far itself (``func.adds_into``: ``func(..., into=acc)`` is ``combine(acc, func(...))``, computed in
    place) does so, without a result of its own."""
    blocks = [b.compute() if isinstance(b, _ChunkTasks) else b for b in blocks]
    if acc is not None and getattr(func, "adds_into", False):
        return func(*blocks, into=acc, **kwargs)
    part = func(*blocks, **kwargs)
    if acc is None:
        return part
    if combine is _add:  # the chunk's fresh result takes the running sum: no third copy
        part += acc
        return part
    return combine(acc, part)


def _client_threads():
    """The threads of the workers of the active ``distributed`` client; ``None`` without one (local schedulers)."""
    try:
        from distributed import get_client

        return max(1, sum(get_client().nthreads().values()))
    except (ImportError, ValueError):
        return None


def parallel_slots():
    """Tasks the Dask scheduler runs at once: the threads of the workers of the active ``distributed`` client,
    else dask's ``num_workers`` setting or the number of CPUs (the local schedulers)."""
    import os

    threads = _client_threads()
    if threads is not None:
        return threads
    import dask

    return max(1, int(dask.config.get("num_workers", None) or os.cpu_count() or 1))


def chains_that_fit(result_bytes):
    """How many chains of :func:`reduce_chunks` this process can hold: each holds its running sum and a chunk's
    working counts of about the same size (2 x ``result_bytes``), in half the available memory
    (:func:`bioqpfs._validation.available_memory`) -- with many threads and many genes (16 threads, 2,000 genes
    weighted: 128 MB sums) the chains alone would otherwise take several GB.  At least one; no cap on a
    ``distributed`` cluster (the chains run in the workers, whose memory is theirs, not this process's)."""
    if result_bytes <= 0 or _client_threads() is not None:
        return sys.maxsize
    from .._validation import available_memory

    avail = available_memory()[0]
    return sys.maxsize if avail is None else max(1, int(avail // 2 // (2 * result_bytes)))


def reduce_chunks(func, blocks, *, vectors=None, combine=_add, result_bytes=0, **kwargs):
    """``combine`` over the sample chunks k of ``func(block_k..., **vectors_k, **kwargs)``, computed by Dask.

    ``blocks``: 2-D dask arrays with the same sample chunks, each with one gene chunk; ``vectors``: per-sample
    numpy vectors (class codes, weights; ``None`` entries stay ``None``), each chunk gets its slice (by the
    chunk offsets), so nothing big enters the graph.  ``combine`` must be associative (default: a sum); the
    result comes back here.

    Small chunk results (moments, margins) are combined in a tree, ``SPLIT_EVERY`` at a time, on the workers
    that hold them.  Results of ``result_bytes`` >= :data:`CHAIN_BYTES` (a count matrix: 64 MB per chunk for
    2,000 genes in 3 bins) are summed in S chains instead (:func:`parallel_slots`, fewer when their sums would not
    fit the memory: :func:`chains_that_fit`), chunk ``k`` in chain ``k mod S``: each link reads its chunk and counts
    it into the chain's sum so far (``func.adds_into``; else counts it apart and adds), so a link starts only when
    the previous one is done, and a worker holds one chunk and a chain's sum whatever the number of chunks (a tree
    lets the scheduler count chunks ahead of the sums and hold their matrices: on 200,000 x 2,000 sparse cells in
    20 chunks, 2 workers, the count pass peaked at 730 / 969 MB per worker with a tree of 8, 699 / 584 MB with
    chains).  The chunk's own tasks (its file read included) run inside
    its link (:class:`_ChunkTasks`): as separate tasks the scheduler read chunks ahead of the chain and held them,
    so memory still grew with the number of chunks.  The chains' sums are then combined.
    """
    import dask

    vectors = vectors or {}
    bounds = np.concatenate([[0], np.cumsum(blocks[0].chunks[0])]).astype(np.int64)
    delayed_blocks = [b.to_delayed()[:, 0] for b in blocks]
    n_chunks = len(bounds) - 1

    def chunk_args(k):
        rows = slice(int(bounds[k]), int(bounds[k + 1]))
        return [d[k] for d in delayed_blocks], {name: None if v is None else v[rows] for name, v in vectors.items()}

    # task names carry the chunk ("<func>-chunk<k>-<token>"), so a worker's death in one names it (:func:`compute`)
    token = dask.base.tokenize(func, combine, [b.name for b in blocks], vectors, kwargs)
    label = getattr(func, "__name__", "pass")
    if result_bytes >= CHAIN_BYTES and n_chunks > 1:
        fold = dask.delayed(_fold, pure=True)
        slots = min(parallel_slots(), n_chunks, chains_that_fit(result_bytes))
        graphs = [dict(b.__dask_graph__()) for b in blocks]
        parts = []
        for first in range(slots):
            acc = None
            for k in range(first, n_chunks, slots):
                _, vec = chunk_args(k)
                chunk = [_chunk_tasks(b, k, g) for b, g in zip(blocks, graphs)]
                acc = fold(acc, func, combine, *chunk, **vec, **kwargs, dask_key_name=f"{label}-chunk{k}-{token}")
            parts.append(acc)
    else:
        parts = []
        for k in range(n_chunks):
            chunk, vec = chunk_args(k)
            parts.append(dask.delayed(func, pure=True)(*chunk, **vec, **kwargs,
                                                       dask_key_name=f"{label}-chunk{k}-{token}"))
    while len(parts) > 1:
        parts = [dask.delayed(combine, pure=True)(*parts[i:i + SPLIT_EVERY]) for i in range(0, len(parts), SPLIT_EVERY)]
    return compute(parts[0], bounds)


def _chunk_class_sums(x, *, groups, n_classes, s=None):
    if s is not None:
        from .correlation import MOMENT_BLOCK_BYTES, column_blocks, divide_columns

        if isinstance(x, np.ndarray):  # dense: column blocks divided by s, never a float64 copy of the whole x
            out = np.empty((x.shape[1], n_classes))  # returned transposed, the layout of the whole product's
            for start, stop in column_blocks(x, MOMENT_BLOCK_BYTES):
                out[start:stop] = _chunk_class_sums(divide_columns(x[:, start:stop], s[start:stop]),
                                                    groups=groups, n_classes=n_classes).T
            return out.T
        x = divide_columns(x, s)
    if hasattr(x, "format") and x.format in ("csr", "csc") and x.dtype in (np.float32, np.float64, np.bool_):
        return _sparse_class_sums(x, np.asarray(groups, dtype=np.int64), n_classes)
    ind = np.zeros((groups.size, n_classes))
    ind[np.arange(groups.size), groups] = 1.0
    return np.asarray(x.T @ ind, dtype=np.float64).T


def _sparse_class_sums(x, groups, n_classes):
    """``x.T @ 1[groups = c]`` of a CSR or CSC matrix as ``(C, M)`` float64, on the worker pool: a CSR x a class
    (its samples in order) per task, a CSC x a gene per task.  Every sum adds its values in scipy's order (sample
    after sample, each value made float64), so the result is scipy's bit for bit, without scipy's float64 copy of x
    and its one thread (0.26 s of the default recipe at 100,000 x 2,000, 11% non-zero, on 2 cores).  The result is
    laid out as scipy's (the transpose of a C-ordered ``(M, C)``), so that what is computed from it rounds alike."""
    from .information import run_ranges, split_ranges

    out = np.zeros((n_classes, x.shape[1]))
    ptr = x.indptr.astype(np.int64)
    if x.format == "csr":
        order = np.argsort(groups, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(groups, minlength=n_classes))])
        run_ranges(lambda _, lo, hi: _csr_class_sums(x.data, x.indices, ptr, order, starts, out, lo, hi),
                   split_ranges(n_classes))
    else:
        run_ranges(lambda _, lo, hi: _csc_class_sums(x.data, x.indices, ptr, groups, out, lo, hi),
                   split_ranges(x.shape[1]))
    return np.ascontiguousarray(out.T).T


@njit(nogil=True, cache=True)
def _csr_class_sums(data, indices, indptr, order, starts, out, lo, hi):
    for c in range(lo, hi):
        for r in range(starts[c], starts[c + 1]):
            s = order[r]
            for k in range(indptr[s], indptr[s + 1]):
                out[c, indices[k]] += np.float64(data[k])


@njit(nogil=True, cache=True)
def _csc_class_sums(data, indices, indptr, groups, out, lo, hi):
    for g in range(lo, hi):
        for k in range(indptr[g], indptr[g + 1]):
            out[groups[indices[k]], g] += np.float64(data[k])


def class_sums(X, y_codes, n_classes, s=None):
    """``sums[c, g] = sum over the samples s of class c of X[s, g]`` (float64 ``(C, M)``): ``(X^T 1[C = c])^T``;
    of ``X[:, g] / s[g]`` when the divisors ``s`` are given (:func:`bioqpfs._kernels.correlation.column_scales`:
    no overflow at any scale).

    numpy, scipy.sparse (never densified) or a Dask X (per sample chunk, summed: :func:`reduce_chunks`).
    """
    y_codes = np.asarray(y_codes, dtype=np.int64)
    if is_dask_array(X):
        return reduce_chunks(_chunk_class_sums, [sample_chunked(X)], vectors=dict(groups=y_codes),
                             n_classes=n_classes, s=s)
    return _chunk_class_sums(X, groups=y_codes, n_classes=n_classes, s=s)


def _bin_major_slice(counts, nb, rows, n_rows, cols, n_cols):
    """The block of row positions ``rows`` and column positions ``cols`` of a bin-major count matrix
    ``(C, nb * n_rows, nb * n_cols)`` (row ``a * n_rows + i`` is bin ``a`` of row gene ``i``; columns alike)."""
    r = (np.arange(nb)[:, None] * n_rows + np.asarray(rows)[None, :]).ravel()
    c = (np.arange(nb)[:, None] * n_cols + np.asarray(cols)[None, :]).ravel()
    return counts[:, r[:, None], c[None, :]]


def _chunk_backend(codes, groups, weights, n_bins, count_dtype, device=False):
    """The backend counting one chunk: numpy, or with ``device`` the cupy backend (the chunk moved to the GPU)."""
    if device:
        from .counting_cupy import CupyCounting

        return CupyCounting(codes, n_bins=n_bins, groups=groups, weights=weights, count_dtype=count_dtype)
    return NumpyCounting(np.asarray(codes), n_bins=n_bins, groups=groups, weights=weights, count_dtype=count_dtype)


def _padded(counts, n_classes):
    """Per-class counts of a chunk (classes ``0..max present``) padded with zero blocks to ``n_classes``."""
    if counts.shape[0] == n_classes:
        return counts
    out = np.zeros((n_classes,) + counts.shape[1:], dtype=counts.dtype)
    out[:counts.shape[0]] = counts
    return out


def _chunk_margins(codes, *, groups, weights, n_bins, count_dtype, n_classes, device=False):
    return _padded(_chunk_backend(codes, groups, weights, n_bins, count_dtype, device).margins(), n_classes)


def _chunk_joint(codes, *codes_cols, groups, weights, genes_I, genes_J, n_bins, n_bins_cols, count_dtype,
                 n_classes, device=False, into=None):
    """One chunk's joint counts (per class when ``groups`` is given), padded to ``n_classes``; with ``into`` (a
    chain's sum so far, :func:`_fold`) added to it, on the CPU without a count matrix of the chunk's own."""
    rows = _chunk_backend(codes, groups, weights, n_bins, count_dtype, device)
    other = _chunk_backend(codes_cols[0], groups, weights, n_bins_cols, count_dtype, device) if codes_cols else None
    per_class = groups is not None
    if into is not None and isinstance(rows, NumpyCounting):
        rows.joint(genes_I, genes_J, per_class=per_class, other=other, out=into[:rows.n_classes], add=True)
        return into
    counts = _padded(rows.joint(genes_I, genes_J, per_class=per_class, other=other), n_classes)
    if into is not None:
        counts += into
    return counts


_chunk_joint.adds_into = True


class DaskCounting(CountingBackend):
    """Counts of integer codes in a Dask array chunked by samples (see :mod:`bioqpfs._kernels.counting`).

    A code matrix split along genes is rechunked to one gene chunk (:func:`sample_chunked`).
    """

    @classmethod
    def accepts(cls, codes):
        return is_dask_array(codes)

    def __init__(self, codes, *, n_bins, groups=None, weights=None, count_dtype=np.float32):
        if not is_dask_array(codes):
            raise TypeError(f"the dask counting backend counts a dask array, got {type(codes).__name__}")
        self.codes = kept_codes(sample_chunked(codes, "codes"))
        self.n_samples, self.n_genes = self.codes.shape
        self.n_bins = int(n_bins)
        self.nb = self.n_bins - 1
        self.groups = None if groups is None else np.asarray(groups)
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.count_dtype = count_dtype
        self.n_classes = 1 if self.groups is None or not self.groups.size else int(self.groups.max()) + 1
        from .._device import dask_chunks_on_gpu

        self.device = dask_chunks_on_gpu()  # each chunk counted on the GPU of the process that holds it
        self._full = {}  # per_class -> the whole count matrix, when it fits FULL_COUNTS_BUDGET (see expect)
        self._strip_plan = None  # (rows in order, per_class, symmetric) told by expect when the whole does not fit
        self._strips = []  # up to two (genes, first column, per_class, counts) strips, the newest last
        self._lock = threading.Lock()  # pairwise_information asks for block pairs from several threads

    @property
    def native_codes(self):
        return self.codes

    def codes_of(self, genes):
        return np.asarray(compute(self.codes[:, genes]), dtype=np.uint8)

    def margins(self):
        # grouped by (class, batch) pairs (CodeTable.stratum_margins) the per-chunk result can be large: summed in
        # chains then, as count matrices are (reduce_chunks)
        return reduce_chunks(_chunk_margins, [self.codes], vectors=dict(groups=self.groups, weights=self.weights),
                             n_bins=self.n_bins, count_dtype=self.count_dtype, n_classes=self.n_classes,
                             result_bytes=8 * self.n_classes * self.n_genes * self.nb, device=self.device)

    def expect(self, *, rows, per_class):
        """Told by :func:`bioqpfs._kernels.information.pairwise_information` which matrix comes (``rows`` None:
        the whole gene x gene matrix, else those rows against every gene).

        The whole matrix when it fits :data:`FULL_COUNTS_BUDGET` is counted now in one pass; its block pairs are
        sliced from it.  Otherwise the block pairs are served from strips (:meth:`_strip_for`): a run of the
        requested rows against all columns (from the strip's first row on, for the symmetric matrix, whose lower
        blocks are mirrored), as many rows as fit :data:`STRIP_BYTES`, one pass each -- SPEC_CMI on 2,000 genes
        and 8 classes is 4 passes over X instead of 66 block pairs.
        """
        C = self.n_classes if per_class else 1
        fits = C * (self.nb * self.n_genes) ** 2 * np.dtype(self.count_dtype).itemsize <= FULL_COUNTS_BUDGET
        if rows is None and fits:
            if per_class not in self._full:
                every = slice(0, self.n_genes)
                self._full[per_class] = self._count(every, every, per_class, None)
            return
        order = np.arange(self.n_genes) if rows is None else np.asarray(rows, dtype=np.int64)
        self._strip_plan = (order, per_class, rows is None)
        self._strips = []

    def joint(self, genes_I, genes_J, *, per_class, other=None, out=None):
        whole = self._full.get(per_class) if other is None else None
        genes = np.arange(self.n_genes)
        if whole is not None:
            return _bin_major_slice(whole, self.nb, genes[genes_I], self.n_genes, genes[genes_J], self.n_genes)
        plan = self._strip_plan
        if other is None and plan is not None and plan[1] == per_class:
            I, J = genes[genes_I], genes[genes_J]
            strip = self._strip_for(I, J, per_class)
            if strip is not None:
                strip_genes, first_col, _, counts = strip
                pos = np.full(self.n_genes, -1, dtype=np.int64)
                pos[strip_genes] = np.arange(strip_genes.size)
                return _bin_major_slice(counts, self.nb, pos[I], strip_genes.size, J - first_col,
                                        self.n_genes - first_col)
        return self._count(genes_I, genes_J, per_class, other)

    def _strip_for(self, I, J, per_class):
        """The kept strip holding rows ``I`` and columns ``J``, counting the next one (starting at ``I``'s first
        row in the plan's order) when none does; ``None`` when ``I`` is not a run of the plan's rows."""
        order, _, symmetric = self._strip_plan
        with self._lock:
            for strip in self._strips:
                genes, first_col, pc, _ = strip
                if pc == per_class and J.size and J.min() >= first_col and np.isin(I, genes).all():
                    return strip
            start = np.flatnonzero(order == I[0]) if I.size else []
            if not len(start) or not np.array_equal(order[start[0]:start[0] + I.size], I):
                return None
            start = int(start[0])
            first_col = int(I[0]) if symmetric else 0
            C = self.n_classes if per_class else 1
            per_row = C * self.nb * self.nb * (self.n_genes - first_col) * np.dtype(self.count_dtype).itemsize
            n_rows = max(1, STRIP_BYTES // max(per_row, 1) // I.size) * I.size  # whole blocks of I's size
            genes = order[start:start + n_rows]
            counts = self._count(genes, slice(first_col, self.n_genes), per_class, None)
            self._strips = (self._strips + [(genes, first_col, per_class, counts)])[-2:]
            return self._strips[-1]

    def _count(self, genes_I, genes_J, per_class, other):
        cols = self if other is None else other
        C = self.n_classes if per_class else 1
        blocks = [self.codes]
        if other is not None:
            if other.n_samples != self.n_samples:
                raise ValueError(f"the two code tables have {self.n_samples} and {other.n_samples} samples")
            if is_dask_array(other.codes):
                blocks.append(other.codes.rechunk({0: self.codes.chunks[0]}))
            else:  # an in-memory table beside Dask codes (e.g. measures' ``Yd`` columns): cut to the same row chunks
                import dask.array as da
                blocks.append(da.from_array(np.asarray(other.codes), chunks=(self.codes.chunks[0], -1)))
        groups = self.groups if per_class else None
        size_I, size_J = (np.arange(self.n_genes)[genes_I].size, np.arange(cols.n_genes)[genes_J].size)
        result_bytes = C * self.nb * size_I * cols.nb * size_J * np.dtype(self.count_dtype).itemsize
        G = reduce_chunks(_chunk_joint, blocks, vectors=dict(groups=groups, weights=self.weights), genes_I=genes_I,
                          genes_J=genes_J, n_bins=self.n_bins, n_bins_cols=cols.n_bins, count_dtype=self.count_dtype,
                          n_classes=C, result_bytes=result_bytes, device=self.device)
        return G  # a fresh array from the reduction: ``out`` is not needed


skip_failed_cache_writes(globals())  # numba's cache is an optimisation: a full disk must not fail a selection
