"""Where the counting runs: the ``backend=`` of every face (``"auto"``, ``"cpu"``, ``"gpu"``).

The choice is held in a context variable for the duration of a face's call (as the worker count is,
:mod:`bioqpfs._threads`) and read by :func:`bioqpfs._kernels.counting.backend_for` when a code table is built:

* ``"cpu"``: numpy codes are counted by the numpy backend, Dask codes chunk by chunk on the CPU;
* ``"gpu"``: codes are moved to the GPU once and counted there by the cupy backend
  (:mod:`bioqpfs._kernels.counting_cupy`); an error when cupy or a CUDA device is missing;
* ``"auto"`` (the default): the GPU when cupy sees a CUDA device and the code matrix has at least
  :data:`AUTO_GPU_CELLS` entries (samples x genes), or when the input itself is on the GPU; else the CPU.

Only the counting and the products of lambda_min's Lanczos runs move (:func:`products_on_gpu`):
discretisation, the QP and the ranking run on the CPU, and the gene x gene matrix is copied back once (and
to the GPU again for the Lanczos products).  A face called inside another keeps the outer face's choice unless it is
given one.
"""
from __future__ import annotations

import contextvars
import functools
import importlib.util
import inspect
from contextlib import contextmanager

__all__ = ["BACKENDS", "AUTO_GPU_CELLS", "check_backend", "requested", "current", "gpu_status", "require_gpu",
           "is_cupy_array", "is_cupy_sparse", "to_host", "counts_on_gpu", "mark_gpu_input", "dask_chunks_on_gpu",
           "is_gpu_input", "honours_backend", "products_on_gpu", "matrix_on_gpu", "array_module",
           "free_device_bytes"]

#: the values of ``backend=``
BACKENDS = ("auto", "cpu", "gpu")
#: samples x genes of a code matrix from which ``backend="auto"`` counts on a GPU (when one is there).  Below it the
#: transfer and launch overheads are a large share of a run that takes a fraction of a second on the CPU; the
#: crossover measured on an H100 machine (16 cores) is in the README ("GPU").
AUTO_GPU_CELLS = 10**7

_REQUESTED = contextvars.ContextVar("bioqpfs_backend", default=None)
_GPU_INPUT = contextvars.ContextVar("bioqpfs_gpu_input", default=False)

_INSTALL = ("install the gpu extra (pip install 'bioqpfs[gpu]', which brings cupy-cuda12x; pick the cupy wheel "
            "that matches your CUDA: https://docs.cupy.dev/en/stable/install.html)")


def check_backend(backend, name="backend"):
    """``backend`` validated: None or one of :data:`BACKENDS` (case-insensitive)."""
    if backend is None:
        return None
    if not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise ValueError(f"{name} must be one of {', '.join(repr(b) for b in BACKENDS)}, got {backend!r}")
    return backend.lower()


@functools.lru_cache(maxsize=1)
def gpu_status():
    """``(available, reason)``: whether cupy imports and sees a CUDA device; ``reason`` says why not."""
    if importlib.util.find_spec("cupy") is None:
        return False, "cupy is not installed"
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device, a cupy built for another CUDA
        return False, f"cupy sees no CUDA device ({type(e).__name__}: {e})"
    if n < 1:
        return False, "cupy sees no CUDA device"
    return True, f"{n} CUDA device(s)"


def require_gpu(what="backend='gpu'"):
    """Raise a clear error unless cupy sees a CUDA device."""
    ok, reason = gpu_status()
    if not ok:
        raise RuntimeError(f"{what} needs cupy and a CUDA device, but {reason}: {_INSTALL}; or pass backend='cpu' "
                           "(or 'auto', which falls back to the CPU)")


def current():
    """The backend in force here: the enclosing face's choice, else ``"auto"``."""
    return _REQUESTED.get() or "auto"


@contextmanager
def requested(backend=None):
    """Run the block with ``backend`` (None: keep the enclosing face's choice); ``"gpu"`` is checked first."""
    backend = check_backend(backend)
    if backend is None:
        yield current()
        return
    if backend == "gpu":
        require_gpu()
    token = _REQUESTED.set(backend)
    try:
        yield backend
    finally:
        _REQUESTED.reset(token)


@contextmanager
def mark_gpu_input(on):
    """Inside the block, ``backend="auto"`` counts on the GPU whatever the size (the input was a cupy array)."""
    token = _GPU_INPUT.set(bool(on) or _GPU_INPUT.get())
    try:
        yield
    finally:
        _GPU_INPUT.reset(token)


def _on_gpu(n_entries):
    """Whether a step on an array of ``n_entries`` entries runs on the GPU under the backend in force: ``"gpu"``
    always, ``"cpu"`` never, ``"auto"`` with a device from :data:`AUTO_GPU_CELLS` entries or for an input on the
    GPU."""
    backend = current()
    if backend == "cpu":
        return False
    if backend == "gpu":
        require_gpu()
        return True
    if not gpu_status()[0]:
        return False
    return _GPU_INPUT.get() or n_entries >= AUTO_GPU_CELLS


def counts_on_gpu(n_samples, n_genes):
    """Whether a code matrix of this shape is counted on the GPU under the backend in force."""
    return _on_gpu(n_samples * n_genes)


def products_on_gpu(n_entries):
    """Whether the products with a dense matrix of ``n_entries`` entries (Q in the Lanczos runs of lambda_min,
    :meth:`bioqpfs._kernels.simplex_qp.QPMatrix.linear_operator`) run on the GPU under the backend in force: as
    :func:`counts_on_gpu`, with the matrix's entries in place of the code matrix's."""
    return _on_gpu(n_entries)


def array_module():
    """cupy (imported on first use)."""
    import cupy

    return cupy


def free_device_bytes():
    """Free memory of the current CUDA device in bytes, the blocks cached by cupy's memory pool included."""
    xp = array_module()
    return int(xp.cuda.runtime.memGetInfo()[0]) + int(xp.get_default_memory_pool().free_bytes())


def matrix_on_gpu(A):
    """A copy of the dense array ``A`` on the GPU for repeated products, or ``None`` when the products stay on the
    CPU: :func:`products_on_gpu` says no, or the copy would take more than half the device's free memory."""
    if not products_on_gpu(A.size) or A.nbytes > free_device_bytes() // 2:
        return None
    return array_module().asarray(A)


def dask_chunks_on_gpu():
    """Whether the sample chunks of a Dask code matrix are counted on the GPU: ``backend="gpu"``, or ``"auto"`` when
    the input's chunks were cupy arrays (the workers have a GPU, then) and this process sees a device."""
    backend = current()
    if backend == "gpu":
        require_gpu()
        return True
    return backend == "auto" and _GPU_INPUT.get() and gpu_status()[0]


def is_cupy_array(x):
    """A ``cupy.ndarray`` (without importing cupy)."""
    return type(x).__module__.split(".")[0] == "cupy" and hasattr(x, "__cuda_array_interface__")


def is_cupy_sparse(x):
    """A ``cupyx.scipy.sparse`` matrix (without importing cupy)."""
    return type(x).__module__.startswith("cupyx.scipy.sparse")


def to_host(X):
    """A cupy array or ``cupyx.scipy.sparse`` matrix copied to numpy / ``scipy.sparse``; anything else as it is."""
    if is_cupy_array(X) or is_cupy_sparse(X):
        return X.get()
    return X


def is_gpu_input(X):
    """A cupy array, a ``cupyx.scipy.sparse`` matrix or a Dask array of cupy chunks."""
    meta = getattr(X, "_meta", None) if type(X).__module__.split(".")[0] == "dask" else None
    return any(is_cupy_array(x) or is_cupy_sparse(x) for x in (X, meta))


def honours_backend(func):
    """Run ``func`` under its own ``backend=`` argument (:func:`requested`), an input on the GPU (its first
    argument) making ``"auto"`` count there (:func:`mark_gpu_input`)."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        bound = signature.bind_partial(*args, **kwargs).arguments
        first = next(iter(bound.values()), None)
        with requested(bound.get("backend")), mark_gpu_input(is_gpu_input(first)):
            return func(*args, **kwargs)

    return wrapper
