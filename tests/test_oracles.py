"""The test kit's oracles live in one place, ``tests/reference.py`` (issue 12 item 8).

A test module that writes its own brute force / plain-loop entropy / MI / CMI copies an idea the kit already
holds (or should hold), and two copies drift apart; and an oracle that imports bioqpfs is no longer independent.
"""
import ast
import pathlib
import re

TESTS = pathlib.Path(__file__).parent

# A function name that marks an oracle: brute force, exhaustive search, plain/naive re-implementations,
# "reference" copies and information measures.  Test functions (``test_*``) are exempt.
ORACLE_NAME = re.compile(r"^_?(brute|bf_|naive|reference|exhaustive|oracle|plain_|scipy_)|entropy|^_?c?mi(_|$)"
                         r"|^_?mutual_info")


def _function_names(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(n.lineno, n.name) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_oracle_name_pattern():
    for name in ["brute_force", "_brute_q", "bf_distance", "naive_mi", "_reference", "reference_cmi", "_entropy",
                 "_entropy_bits", "weighted_entropy", "_mi", "mi", "cmi", "_cmi", "mi_matrix", "mutual_info",
                 "exhaustive_best", "_scipy_mst"]:
        assert ORACLE_NAME.search(name), name
    for name in ["_data", "planted", "srbct_mi", "_child_mi", "_copy", "rng", "check_same_as_quadprog", "ref",
                 "_space", "make_adata", "min_gap"]:
        assert not ORACLE_NAME.search(name), name


def test_no_oracle_is_defined_outside_reference_py():
    """Every function (nested ones included) in a test module whose name marks it as an oracle; move it to
    ``tests/reference.py`` (one implementation per idea, numpydoc docstring with the formula) and import it."""
    found = [f"{path.name}:{line} {name}"
             for path in sorted(TESTS.glob("*.py")) if path.name != "reference.py"
             for line, name in _function_names(path)
             if not name.startswith("test_") and ORACLE_NAME.search(name)]
    assert not found, "oracle copies outside tests/reference.py: " + ", ".join(found)


def test_reference_py_is_independent_of_bioqpfs():
    """The oracles never import the package they check."""
    tree = ast.parse((TESTS / "reference.py").read_text(encoding="utf-8"))
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] == "bioqpfs"], imported


def test_every_oracle_has_a_docstring():
    tree = ast.parse((TESTS / "reference.py").read_text(encoding="utf-8"))
    missing = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
               and not ast.get_docstring(n)]
    assert not missing, f"reference.py functions without a docstring (say the formula and its source): {missing}"
