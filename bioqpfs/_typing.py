"""Type aliases of the public API's annotations.

The public modules import them only under ``if TYPE_CHECKING:`` and write their annotations with
``from __future__ import annotations``, so annotations are never evaluated at run time: they cost no
import and change no behaviour.  They say what the docstrings say; the docstrings stay the reference.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse

#: an expression matrix, samples x genes: anything :func:`numpy.asarray` takes, or a SciPy sparse matrix/array
MatrixLike = ArrayLike | sparse.spmatrix | sparse.sparray
#: ``random_state``: a non-negative int seed, a NumPy Generator/RandomState, or None (unseeded)
SeedLike = int | np.random.Generator | np.random.RandomState | None
#: ``mask_var``: a boolean ``.var`` column name, or one bool per gene
MaskLike = str | Sequence[bool] | np.ndarray | None
#: ``save`` of the plots: the exact file to write (its suffix names the format)
PathLike = str | os.PathLike
