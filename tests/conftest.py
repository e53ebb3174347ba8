import os

os.environ.setdefault("MPLBACKEND", "Agg")
#: the dynamic-linker path this test process started with: importing rpy2 (test_r.py, at collection) prepends R's
#: library directories, and a child Python started with them may load another build's libpython
#: (test_dask_cluster starts its worker processes with this value)
STARTUP_LD_LIBRARY_PATH = os.environ.get("LD_LIBRARY_PATH")

import signal  # noqa: E402

# The Ctrl-C tests (test_bad_input_edges, test_reliability) need SIGINT to reach Python as it does in a terminal.
# A shell that starts pytest as a background job (``nohup ... &``, some CI runners) ignores SIGINT, Python then
# installs no handler, and the CLI children it spawns inherit the ignored signal: restore Python's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import numpy as np
import pytest

#: the transformation selectors (LDFS, HSFS): the genes after their path's non-zero rows are ordered by a non-unique
#: quantity (their docstrings), so equality checks hold them to the rows ranked by weight
TRANSFORM_METHODS = ("ldfs", "hsfs")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


#: The array types every method must accept (model: scanpy's ``testing._pytest.params.ARRAY_TYPES``):
#: ``(id, convert)`` with ``convert(dense float64 ndarray) -> the container``.
ARRAY_TYPES = [
    ("ndarray-f64", lambda X: np.array(X, dtype=np.float64)),
    ("ndarray-f32", lambda X: np.array(X, dtype=np.float32)),
    ("csr", lambda X: __import__("scipy.sparse").sparse.csr_matrix(X)),
    ("csc", lambda X: __import__("scipy.sparse").sparse.csc_matrix(X)),
]


@pytest.fixture(params=[c for _, c in ARRAY_TYPES], ids=[i for i, _ in ARRAY_TYPES])
def array_type(request):
    """One of :data:`ARRAY_TYPES`: a function turning a dense float64 array into that container."""
    return request.param
