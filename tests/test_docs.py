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
