"""Shared docstring fragments: one wording of each parameter described by several functions.

A docstring names a fragment by a slot ``{name}`` standing alone on its line, indented as the text around
it (so ruff's pydocstyle checks see an ordinary docstring); :func:`doc_params` puts the fragment there,
every line at that indentation (model: scanpy's ``_utils._doc_params``).  Fragments are written flush
left here.
"""
from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

#: the batch-aware statistics of every selector that takes ``batch=`` (:class:`bioqpfs.selectors._common.Batches`)
BATCH_DOC = """
batch : array-like of shape (n_samples,), optional
    Batch (donor, study, plate) of every sample: batch-aware statistics
    (:class:`~bioqpfs.selectors._common.Batches`).  Every information measure is estimated within each batch b
    and averaged, ``Q_ij = sum_b w_b I_b(X_i; X_j)``,
    ``F_i = sum_b w_b I_b(X_i; C)`` (conditional MI likewise): stratified estimation as in mRMRe's
    ``strata`` (De Jay et al., Bioinformatics 2013).  With ``w_b = n_b / N`` this is the information given
    the batch, I(X_i; X_j | B), so a gene that differs between batches only (and so between classes spread
    unevenly over batches) gets no credit.  |correlation| and Hall's relevance use the genes centred and
    scaled within each batch.  With ``class_weight="balanced"`` every class counts equally within each batch
    (the sample weights ``n_b / (C_b n_cb)``, ``C_b`` the classes present in batch b), so every I_b has a
    uniform class prior.  ``None`` (default): no batches.
batch_weights : {"size", "equal"}, default "size"
    ``w_b = n_b / N`` or ``1 / B``.
batch_discretization : {"per_batch", "global"}, default "per_batch"
    Discretisation thresholds computed on each batch's samples separately (removes a batch shift) or once
    on all samples.
"""

#: ``y`` of the methods that take hierarchical labels (:func:`bioqpfs.selectors._common.check_levels`)
Y_HIERARCHY_DOC = """
y : array-like, shape (n_samples,) or (n_samples, n_levels)
    Class labels (any hashable values; at least 2 classes); or hierarchical labels, one column per level,
    coarse to fine (a 2-D array or a DataFrame, e.g. ``adata.obs[["lineage", "cell_type"]]``), nested: each
    class of a level inside one class of the level before it.  The class relevance is then summed over the
    levels (``groupby_weights``); everything else (redundancy, class weights, the classes counted in the
    diagnostics) uses the finest level, the last column.
"""

#: ``groupby_weights`` of the methods that take hierarchical labels (README "Hierarchical labels")
HIERARCHY_DOC = """
groupby_weights : sequence of float, optional
    With hierarchical labels: v_l, one weight per level (coarse to fine, non-negative, normalised to sum 1),
    and the relevance is ``F_i = sum_l v_l I(X_i; C_l)`` (for Hall's or the MST relevance the same sum of
    that relevance).  Default ``1 / L`` for every level: for nested levels ``I(X; C_l)`` grows from coarse
    to fine by the information within the coarser classes, so equal weights count what a gene tells about
    the coarsest classes fully and what it adds at level k with weight (L - k + 1) / L -- the between-lineage
    genes move up, the within-lineage genes stay in.  A coarse level of a single class (the data subset to
    one lineage) is left out with a warning, the other weights renormalised.  Recorded in ``params``
    (``groupby_levels``, ``groupby_weights``, normalised, of the levels used).
"""

#: ``backend=`` of every face that counts (:mod:`bioqpfs._device`)
BACKEND_DOC = """
backend : {"auto", "cpu", "gpu"}, optional
    Where the co-occurrence counts of the information measures are computed.  ``"gpu"``: on a CUDA GPU
    through cupy (the ``gpu`` extra; an error without one), exact -- the same counts as on the CPU, MI equal
    to 1e-10; ``"cpu"``: numpy/numba; ``"auto"``: the GPU when cupy sees one and the code matrix is large
    (``bioqpfs._device.AUTO_GPU_CELLS`` samples x genes) or X is already on the GPU (a cupy array,
    ``cupyx.scipy.sparse`` matrix or Dask array of cupy chunks), else the CPU.  ``None`` (default): the
    enclosing face's choice, else ``"auto"``.  Discretisation, the QP and the ranking run on the CPU; X on
    the GPU is copied to the host once (README "GPU").
"""

#: ``n_bins`` of the discretisations that take a bin count
N_BINS_DOC = """
n_bins : int
    Bins for ``"quantile"`` and ``"zero_quantile"`` (and ``"auto"`` when it resolves to ``"zero_quantile"``); given
    with ``"mean_sd"``, ``"mdl"`` or ``None``, which set their own levels, it is unused and a warning says so.
"""

#: the type line of ``random_state`` where it defaults to the seed 0 (the description follows it)
RANDOM_STATE_DOC = """
random_state : int, Generator or None, default 0 (seeded, as every face; None: unseeded)
"""


def fill_doc(doc: str, **fragments: str) -> str:
    """Put each fragment where ``doc`` has its slot ``{name}``, alone on a line, at the slot's indentation.

    Parameters
    ----------
    doc : str
        The docstring with its slots.
    **fragments : str
        ``name=text``: the text (flush left; leading and trailing blank lines are dropped) of slot ``{name}``.

    Returns
    -------
    str
        ``doc`` with every named slot filled.

    Raises
    ------
    ValueError
        A fragment whose slot ``doc`` does not have (a misspelt name would otherwise leave ``{name}`` behind).
    """
    for name, text in fragments.items():
        body = textwrap.dedent(text).strip("\n")
        doc, n = re.subn(r"^( *)\{" + re.escape(name) + r"\}$", lambda m, b=body: textwrap.indent(b, m.group(1)),
                         doc, flags=re.MULTILINE)
        if not n:
            raise ValueError(f"docstring fragment {name!r}: no line '{{{name}}}' in the docstring to fill")
    return doc


def doc_params(**fragments: str) -> Callable:
    """Decorator: fill the fragments into the decorated function's docstring (see :func:`fill_doc`).

    Parameters
    ----------
    **fragments : str
        ``name=text`` for each slot ``{name}`` of the docstring.

    Returns
    -------
    callable
        A decorator returning the same function with its ``__doc__`` filled.
    """
    def decorate(func):
        func.__doc__ = fill_doc(func.__doc__, **fragments)
        return func

    return decorate


def append_doc(func: Callable, text: str, **fragments: str) -> None:
    """Append ``text`` (slots filled, see :func:`fill_doc`) to ``func.__doc__`` at the docstring's own indentation.

    Python 3.13 dedents docstrings when compiling them, earlier versions keep the source indentation; the
    appended sections must match either, or a numpydoc parser sees two indentations.

    Parameters
    ----------
    func : callable
        The function whose docstring grows.
    text : str
        The sections to append (any indentation; it is replaced by the docstring's).
    **fragments : str
        Slots of ``text`` to fill first.
    """
    doc = func.__doc__ or ""
    indents = [len(line) - len(line.lstrip(" ")) for line in doc.splitlines()[1:] if line.strip()]
    body = textwrap.dedent(fill_doc(text, **fragments) if fragments else text)
    func.__doc__ = doc + textwrap.indent(body, " " * min(indents, default=0))
