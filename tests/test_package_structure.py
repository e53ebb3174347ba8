"""Signature and documentation conventions every face must keep (cf. scanpy's test_package_structure)."""
import inspect
import re

import pytest

import bioqpfs
from bioqpfs import tl
from bioqpfs._registry import method_function, methods

TL_FUNCS = [getattr(tl, name) for name in tl.__all__]
METHODS = sorted(methods())


def documented_params(func):
    doc = inspect.getdoc(func) or ""
    section = doc.split("Parameters\n----------", 1)
    if len(section) < 2:
        return set()
    body = re.split(r"\n(Returns|Yields|Notes|Examples|See Also|Raises)\n-+", section[1])[0]
    names = set()
    for line in body.splitlines():
        m = re.match(r"^(\*{0,2}[A-Za-z_][A-Za-z0-9_]*)(, [A-Za-z_][A-Za-z0-9_]*)* ?(:|$)", line)
        if m:
            for part in line.split(":")[0].split(","):
                names.add(part.strip().lstrip("*"))
    return names


@pytest.mark.parametrize("func", TL_FUNCS, ids=lambda f: f.__name__)
def test_tl_signature(func):
    params = list(inspect.signature(func).parameters.values())
    assert [p.name for p in params[:2]] == ["adata", "groupby"]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert positional == ["adata", "groupby"], "only adata and groupby may be positional"
    names = {p.name for p in params}
    assert {"copy", "key_added", "random_state", "n_genes", "method"} <= names
    assert inspect.signature(func).parameters["copy"].default is False


@pytest.mark.parametrize("func", TL_FUNCS, ids=lambda f: f.__name__)
def test_tl_documents_every_parameter(func):
    undocumented = {p for p in inspect.signature(func).parameters} - documented_params(func) - {"method_params"}
    assert not undocumented, f"{func.__name__} does not document {sorted(undocumented)}"


@pytest.mark.parametrize("name", METHODS)
def test_selector_signature(name):
    func = method_function(name)
    params = inspect.signature(func).parameters
    positional = [p.name for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert positional == ["X", "y"], f"{name}: only X and y may be positional"
    for required in ("n_genes", "random_state", "feature_names"):
        assert required in params and params[required].kind == inspect.Parameter.KEYWORD_ONLY, (name, required)
    assert inspect.getdoc(func), f"{name} has no docstring"


def test_public_api_exports():
    for name in bioqpfs.__all__:
        assert hasattr(bioqpfs, name), name
    assert "qpfs" in bioqpfs.methods()


def test_pyproject_licence_is_spdx():
    """PEP 639: ``license`` is an SPDX expression string, not the deprecated TOML table
    (setuptools >= 77 prints a deprecation banner per build for the table form)."""
    import tomllib
    from pathlib import Path

    from packaging.licenses import canonicalize_license_expression
    from packaging.requirements import Requirement
    from packaging.version import Version

    meta = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    licence = meta["project"]["license"]
    assert isinstance(licence, str), f"project.license must be an SPDX string, got {licence!r}"
    assert canonicalize_license_expression(licence) == "MIT"
    for pattern in meta["project"]["license-files"]:
        assert list(Path(__file__).parents[1].glob(pattern)), pattern
    setuptools_req = next(Requirement(r) for r in meta["build-system"]["requires"]
                          if Requirement(r).name == "setuptools")
    assert not setuptools_req.specifier.contains(Version("76.9")), "SPDX licence needs setuptools >= 77"
