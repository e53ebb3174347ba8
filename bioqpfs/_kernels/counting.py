"""The counting backend interface: where the co-occurrence counts of coded genes come from.

Every information measure in :mod:`bioqpfs._kernels.information` is computed from two kinds of count
(both sums over samples, so both add over sample chunks):

* the **margins**: per class ``c`` (one pooled "class" without labels), gene ``g`` and bin ``a``, the
  (weighted) number of samples with ``code[s, g] == a``;
* the **joint block** of two gene blocks I and J: per class (or pooled over all samples), the (weighted)
  number of samples with ``code[s, i] == a`` and ``code[s, j] == b`` -- the one-hot GEMM ``O_I^T W O_J``.

Only the first ``k - 1`` bins of every gene are counted (``nb = k - 1`` for the global bin count
``k``); the counts of the last bin follow from the margins.  Everything above the counts -- the
coefficient algebra (counts -> entropies, MI, CMI), the block plan and the thread pool -- is
backend-free and lives in :mod:`bioqpfs._kernels.information`.

Contract of a backend (adding one = one new module with one subclass of :class:`CountingBackend`,
plus its line in :data:`BACKENDS`)
----------------------------------------------------------------------------------------------------
``Backend(codes, *, n_bins, groups=None, weights=None, count_dtype=numpy.float32)``

* ``codes``: samples x genes, integer codes ``0..n_bins-1`` in any container the backend accepts
  (:meth:`CountingBackend.accepts`): numpy for :mod:`bioqpfs._kernels.counting_numpy`; a Dask array
  chunked by samples (gene axis in one chunk); a cupy array (or numpy codes moved to the GPU) for
  :mod:`bioqpfs._kernels.counting_cupy`.  The samples
  are **never reordered**: class ``c`` is the set ``groups == c``, in the input order.
* ``groups``: class code ``0..C-1`` of every sample (numpy, one per sample), or None (one class).
* ``weights``: the non-negative weight of every sample (numpy float64), or None (every sample counts 1).
  A weighted count is ``sum_s w_s [...]`` in float64 (the numpy backend: ``sum_v v x`` the exact count of the
  samples of weight v, when the weights take few values, :func:`weight_level_runs`); unweighted counts are exact
  integers in ``count_dtype`` (float32 below 2**24 samples).

Methods (every result a local numpy array; the M x M result and the QP stay on this node):

* ``margins()`` -> float64 ``(C, n_genes, n_bins - 1)``;
* ``joint(genes_I, genes_J, *, per_class, other=None, out=None)`` -> ``count_dtype``
  ``(C if per_class else 1, nb * |I|, nb_other * |J|)``, **bin-major**: row ``a * |I| + i`` is bin ``a``
  of gene ``I[i]``, column ``b * |J| + j`` bin ``b`` of gene ``J[j]``.  ``genes_I``/``genes_J`` are
  slices or integer arrays of gene positions; ``other`` is a backend of the same class over the same
  samples whose genes J index (gene x column matrices), ``None`` meaning this one.  With weights, the
  counts are weighted.  ``out``, when given, is a writable buffer of the result's size and dtype to
  reuse (the caller passes the previous block's).
* ``codes_of(genes)`` -> uint8 numpy ``(n_samples, len(genes))``: the codes of a few genes, in sample order.
* optional ``expect(*, rows, per_class)``: called once by ``pairwise_information`` before its block pairs, with
  the requested rows (None: the whole gene x gene matrix), so that a backend for which a pass over the samples
  is expensive (Dask) can count ahead in one pass; results must not depend on it.
* optional ``gene_order()`` -> int array or None: the order in which a whole gene x gene matrix should take its gene
  blocks (after ``expect``), for a backend whose cost depends on which genes share a block (the numpy backend's
  sparse form: sparse genes together); results must not depend on it.
* ``native_codes`` (property): the codes in the backend's own container (a Dask array stays one), for a
  second backend of the same class over the same samples (e.g. regrouped by other labels); the default is
  ``codes_of(slice(None))``.

Results must not depend on how a backend chunks the samples: unweighted counts are exact; weighted ones
agree to float64 rounding.  ``tests/test_counting_backend.py`` holds a naive reference backend
(``np.add.at``) that any new backend is checked against.
"""
from __future__ import annotations

import abc
import importlib

import numpy as np

__all__ = ["CountingBackend", "BACKENDS", "backend_for", "class_runs", "weight_level_runs", "MAX_WEIGHT_LEVELS"]

#: backends by name: ``name -> "module:Class"`` (imported when first used); the first whose ``accepts(codes)``
#: is true counts a code matrix unless one is named
BACKENDS = {"numpy": "bioqpfs._kernels.counting_numpy:NumpyCounting",
            "dask": "bioqpfs._kernels.counting_dask:DaskCounting",
            "cupy": "bioqpfs._kernels.counting_cupy:CupyCounting"}


class CountingBackend(abc.ABC):
    """Margins and joint count blocks of integer codes (samples x genes); see the module for the contract.

    Attributes every backend sets in ``__init__``: ``n_samples``, ``n_genes``, ``n_bins`` (global ``k``),
    ``nb`` (``k - 1``), ``n_classes`` (C, 1 without groups), ``groups`` (numpy int or None),
    ``weights`` (numpy float64 or None), ``count_dtype``.
    """

    @classmethod
    @abc.abstractmethod
    def accepts(cls, codes) -> bool:
        """Whether this backend counts a code matrix of this type."""

    @abc.abstractmethod
    def margins(self) -> np.ndarray:
        """Per-class (weighted) count of every gene's materialised bins, float64 ``(C, n_genes, nb)``."""

    @abc.abstractmethod
    def joint(self, genes_I, genes_J, *, per_class, other=None, out=None) -> np.ndarray:
        """Joint (weighted) counts of the bins of genes I (this backend) and J (``other``), bin-major."""

    @abc.abstractmethod
    def codes_of(self, genes) -> np.ndarray:
        """uint8 codes of the given genes, samples in input order (numpy)."""

    @property
    def native_codes(self):
        """The codes in this backend's own container (not copied to numpy), to build another backend from."""
        return self.codes_of(slice(None))

    @classmethod
    def take_rows(cls, codes, rows):
        """The rows ``rows`` (numpy integer positions) of codes in this backend's container (e.g. one stratum's)."""
        return codes[rows]


def class_runs(groups, n_samples):
    """``(order, runs)`` for per-class counting: the stable sort of the samples by class (``None`` when they are
    sorted already, or without groups) and each class's run of rows in that order (one run of all without groups).
    A backend counts class c from rows ``runs[c]`` of its class-sorted codes, so each class is one contiguous run."""
    if groups is None:
        return None, [slice(0, n_samples)]
    groups = np.asarray(groups)
    order = np.argsort(groups, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(groups))])
    runs = [slice(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
    return (None if np.all(order == np.arange(n_samples)) else order), runs


#: weighted counts are summed per weight value (exact integer GEMMs, one float64 scaling each) when the weights take
#: at most this many distinct values -- class weights take one per class
MAX_WEIGHT_LEVELS = 64


def weight_level_runs(groups, weights, n_samples):
    """``(order, class_runs, level_runs)`` for weighted counts whose weights take few values (class weights: one
    per class): the stable sort of the samples by (class, weight value) (``None`` when sorted already), each
    class's run of rows in that order, and within each class the runs of equal weight as ``(rows, value)``.  A
    backend then counts each run unweighted (exact integers) and adds ``value x counts``: one float64 rounding
    per run instead of float64 GEMMs over the weights.  ``None`` instead of the whole tuple without weights or
    with more than :data:`MAX_WEIGHT_LEVELS` distinct values."""
    if weights is None:
        return None
    values, level = np.unique(np.asarray(weights, dtype=np.float64), return_inverse=True)
    if values.size > MAX_WEIGHT_LEVELS:
        return None
    level = level.ravel()
    cls = np.zeros(n_samples, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    n_classes = int(cls.max()) + 1 if n_samples else 1
    key = cls * values.size + level
    order = np.argsort(key, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=n_classes * values.size))])
    class_runs, level_runs = [], []
    for c in range(n_classes):
        lo, hi = bounds[c * values.size], bounds[(c + 1) * values.size]
        class_runs.append(slice(int(lo), int(hi)))
        level_runs.append([(slice(int(bounds[k]), int(bounds[k + 1])), float(values[k - c * values.size]))
                           for k in range(c * values.size, (c + 1) * values.size) if bounds[k + 1] > bounds[k]])
    return (None if np.all(order == np.arange(n_samples)) else order), class_runs, level_runs


def _load(key):
    module, cls = BACKENDS[key].split(":")
    return getattr(importlib.import_module(module), cls)


def backend_for(codes, name=None):
    """The backend class for ``codes``: the one called ``name``, else the first in :data:`BACKENDS` accepting them.

    Numpy codes are counted on the GPU (the cupy backend) when the face's ``backend=`` says so
    (:func:`bioqpfs._device.counts_on_gpu`: ``"gpu"``, or ``"auto"`` with a CUDA device and a large matrix).
    """
    if name is None and isinstance(codes, np.ndarray) and codes.ndim == 2:
        from .. import _device

        if _device.counts_on_gpu(*codes.shape):
            return _load("cupy")
    names = [name] if name is not None else list(BACKENDS)
    for key in names:
        if key not in BACKENDS:
            raise ValueError(f"unknown counting backend {key!r}; choose one of {sorted(BACKENDS)}")
        backend = _load(key)
        if name is not None or backend.accepts(codes):
            return backend
    raise TypeError(f"no counting backend accepts codes of type {type(codes).__name__}; "
                    f"the backends are {sorted(BACKENDS)}")
