"""Shared docstring fragments (bioqpfs._docs, issue 12 item 7) and the rendered docstrings of the public API."""
from __future__ import annotations

import inspect
import re

import pytest

import bioqpfs
from bioqpfs import _registry, measures
from bioqpfs._docs import BATCH_DOC, append_doc, doc_params, fill_doc

#: a slot of _docs left unfilled: ``{name}`` alone on its line
SLOT = re.compile(r"^\s*\{\w+\}\s*$", re.MULTILINE)
SECTION = re.compile(r"^ *(Parameters|Returns|Yields|Raises|Warns|Notes|Examples|See Also|References|Attributes)\n *-+\n",
                     re.MULTILINE)


def documented_functions():
    from test_package_structure import public_api

    selectors = [_registry.method_function(m) for m in _registry.methods()]
    return list(dict.fromkeys(public_api() + selectors + [bioqpfs.qpfs, bioqpfs.spec_cmi, bioqpfs.qip_objective]
                              + [getattr(measures, n) for n in measures.__all__
                                 if inspect.isfunction(getattr(measures, n))]))


def parameters_section(doc):
    """The names the numpydoc ``Parameters`` section documents (``a, b : type`` counts a and b), or None."""
    doc = inspect.cleandoc(doc)
    sections = list(SECTION.finditer(doc))
    for i, m in enumerate(sections):
        if m.group(1) == "Parameters":
            end = sections[i + 1].start() if i + 1 < len(sections) else len(doc)
            entries = re.findall(r"^(\*{0,2}\w+(?:, \*{0,2}\w+)*)(?: :.*)?$", doc[m.end():end], re.MULTILINE)
            return {name.strip().lstrip("*") for entry in entries for name in entry.split(",")}
    return None


@pytest.mark.parametrize("func", documented_functions(), ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_rendered_docstring_is_filled_and_documents_the_signature(func):
    doc = func.__doc__
    assert doc and not SLOT.search(doc) and "%(" not in doc, f"{func.__name__}: unfilled docstring slot"
    names = parameters_section(doc)
    if names is None:           # prose docstrings (e.g. entropy, random_genes) name their parameters inline
        return
    signature = set(inspect.signature(func).parameters)
    assert names <= signature, f"{func.__name__}: documents parameters it does not have: {sorted(names - signature)}"
    refers = re.search(r"[Pp]arameters[^.]*? as in :func:", doc)   # "Other parameters ... as in :func:`spec_cmi`"
    missing = [p for p in inspect.signature(func).parameters if p not in names]
    assert refers or not missing, f"{func.__name__}: parameters missing from the docstring: {missing}"


def test_fill_doc_indents_the_fragment_as_its_slot():
    doc = "Summary.\n\n    Parameters\n    ----------\n    x : int\n    {batch_doc}\n        Extra words.\n"
    filled = fill_doc(doc, batch_doc=BATCH_DOC)
    assert "    batch : array-like of shape (n_samples,), optional\n        Batch (donor" in filled
    assert "        on all samples.\n        Extra words.\n" in filled           # the text after the slot follows
    assert parameters_section(filled) == {"x", "batch", "batch_weights", "batch_discretization"}
    assert not SLOT.search(filled)


def test_a_misspelt_fragment_is_an_error_not_a_leftover_slot():
    def f():
        """Summary.

        {batch_doc}
        """
    with pytest.raises(ValueError, match="'bach_doc'"):
        doc_params(bach_doc=BATCH_DOC)(f)
    assert "{batch_doc}" in f.__doc__           # untouched when the fill fails


def test_the_docstring_check_finds_an_undocumented_parameter():
    """The check itself: a parameter of the signature missing from the Parameters section fails."""
    def f(x, y):
        """Summary.

        Parameters
        ----------
        x : int
        """
    with pytest.raises(AssertionError, match=r"missing from the docstring: \['y'\]"):
        test_rendered_docstring_is_filled_and_documents_the_signature(f)


@pytest.mark.parametrize("indent", ["    ", ""], ids=["python<=3.12", "python>=3.13 (compiler dedents)"])
def test_appended_sections_take_the_docstrings_own_indentation(indent):
    def f(x):
        pass
    f.__doc__ = f"Summary line.\n\n{indent}More prose on a second line.\n{indent}"
    append_doc(f, """
        Parameters
        ----------
        x : int
            {slot}
        """, slot="The value.")
    lines = [line for line in f.__doc__.splitlines()[1:] if line.strip()]
    assert {len(line) - len(line.lstrip()) for line in lines if not line.strip().startswith("The value")} == {len(indent)}
    assert parameters_section(f.__doc__) == {"x"}


def public_callables():
    """Every documented function, plus the faces :func:`documented_functions` leaves out: the estimators
    (their ``__init__`` parameters), the datasets, the R bridge and :func:`bioqpfs.read_lazy`."""
    from bioqpfs import datasets, estimators, r

    extra = ([bioqpfs.read_lazy] + [getattr(estimators, n) for n in estimators.__all__]
             + [getattr(datasets, n) for n in datasets.__all__] + [getattr(r, n) for n in r.__all__])
    return list(dict.fromkeys(documented_functions() + extra))


def parameter_entries(doc):
    """The entries of the numpydoc ``Parameters`` section in order: ``(names, type line)`` per entry."""
    doc = inspect.cleandoc(doc or "")
    sections = list(SECTION.finditer(doc))
    for i, m in enumerate(sections):
        if m.group(1) == "Parameters":
            end = sections[i + 1].start() if i + 1 < len(sections) else len(doc)
            found = re.findall(r"^(\*{0,2}\w+(?:, \*{0,2}\w+)*)(?: : ?(.*))?$", doc[m.end():end], re.MULTILINE)
            return [([n.strip().lstrip("*") for n in names.split(",")], kind) for names, kind in found]
    return []


def _choices(kind):
    """The values of a ``{"a", "b", None}`` option set on a type line (None when the line has none)."""
    m = re.match(r"\{([^}]*)\}", kind)
    if not m or "numpy" in m.group(1):
        return None
    return {None if v.strip() == "None" else v.strip().strip("\"'") for v in m.group(1).split(",")}


def _documented_default(kind):
    """The default a type line states (``default 0``, ``default="qpfs"``), as text; None when it states none."""
    m = re.search(r"\bdefault[ =](\"[^\"]*\"|[-\w.]+)", kind)
    return None if m is None else m.group(1).strip('"')


@pytest.mark.parametrize("func", public_callables(), ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_documented_parameters_follow_the_signature(func):
    """The Parameters section lists the parameters in the signature's order (numpydoc); its option sets
    ``{"a", "b"}`` hold the real default, and a ``default 0`` / ``default="qpfs"`` on a type line is the real
    default.  Grouped entries (``key_added, random_state, **params``, read "as in" another function) may stand
    where they read best."""
    signature = inspect.signature(func).parameters
    entries = parameter_entries(func.__doc__)
    if inspect.isclass(func) and not entries:
        entries = parameter_entries(func.__init__.__doc__)
    single = [names[0] for names, _ in entries if len(names) == 1 and names[0] in signature]
    order = list(signature)
    assert single == sorted(single, key=order.index), (
        f"{func.__name__}: documented in the order {single}, the signature has {[p for p in order if p in single]}")
    for names, kind in entries:
        for name in names:
            if name not in signature or signature[name].default is inspect.Parameter.empty:
                continue
            default = signature[name].default
            choices = _choices(kind)
            if choices is not None and (isinstance(default, str) or default is None):
                optional = default is None and "optional" in kind
                assert default in choices or optional, f"{func.__name__}: {name}={default!r} is not in {kind!r}"
            stated = _documented_default(kind)
            if stated is not None:
                assert stated == str(default), f"{func.__name__}: {name} documents default {stated}, has {default!r}"


def test_the_order_check_finds_a_swapped_entry_and_a_wrong_default():
    """The check itself: two entries in the wrong order fail, and so does an option set without the default."""
    def swapped(x, y=1):
        """Summary.

        Parameters
        ----------
        y : int
        x : int
        """

    def wrong_default(x, mode="b"):
        """Summary.

        Parameters
        ----------
        x : int
        mode : {"a", "c"}, default "a"
        """
    with pytest.raises(AssertionError, match=r"order \['y', 'x'\]"):
        test_documented_parameters_follow_the_signature(swapped)
    with pytest.raises(AssertionError, match=r"mode='b' is not in"):
        test_documented_parameters_follow_the_signature(wrong_default)
