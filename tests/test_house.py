"""The house is one-way: a package imports only packages below it (docs/architecture.md), function-level
imports included; ``search`` and ``runtime`` stand side by side and import neither each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hetsplit

ROOT = Path(hetsplit.__file__).parent
RANK = {"graph": 0, "cluster": 0, "costs": 1, "plan": 2, "estimate": 3, "search": 4, "runtime": 4,
        "workflow": 5, "doctor": 5, "experiments": 6, "report": 7, "cli": 8}
BASE = {"units", "errors", "jsonfile", "outpath", "lifetime", "limits", "registry", "storeprobe",
        "torch_threads"}     # anyone may use these


def hetsplit_imports(path: Path) -> list[tuple[int, str]]:
    """(line, package) of every ``hetsplit.X`` a module imports, wherever the import stands."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "hetsplit" and len(parts) > 1:
                out.append((node.lineno, parts[1]))
    return out


def package_of(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0] if len(rel) > 1 else path.stem


def test_every_package_is_ranked():
    found = {package_of(p) for p in ROOT.rglob("*.py")} - BASE - {"__init__"}
    assert found <= set(RANK), f"packages with no place in the house: {sorted(found - set(RANK))}"


@pytest.mark.parametrize("package", sorted(RANK))
def test_no_import_goes_up_or_sideways(package):
    files = [p for p in ROOT.rglob("*.py") if package_of(p) == package]
    wrong = []
    for path in files:
        for line, target in hetsplit_imports(path):
            if target in BASE or target == package:
                continue
            if target not in RANK or RANK[target] >= RANK[package]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports hetsplit.{target}")
    assert not wrong, "\n".join(wrong)


def private_imports(path: Path) -> list[tuple[int, str]]:
    """(line, what) of every private name (``_x``, not ``__x__``) a module imports from another package:
    ``from hetsplit.a.b import _x`` or a private module ``hetsplit.a._b``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules, names = [node.module], [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [a.name for a in node.names], []
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] != "hetsplit" or len(parts) < 2:
                continue
            private = [p for p in parts[1:] if p.startswith("_") and not p.startswith("__")]
            private += [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                out.append((node.lineno, f"{module}: {', '.join(private)}"))
    return out


def test_no_private_name_crosses_a_package():
    """A name with a leading underscore is its package's own: no other package imports it."""
    wrong = []
    for path in ROOT.rglob("*.py"):
        package = package_of(path)
        for line, what in private_imports(path):
            target = what.split(".")[1].split(":")[0]
            if target != package:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {what}")
    assert not wrong, "\n".join(wrong)


def test_the_private_import_check_can_fail(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("from hetsplit.graph.zoo.transformer import _heads\nimport hetsplit.graph._hidden\n"
                   "from hetsplit.graph.types import Graph, __version__\n")
    assert private_imports(bad) == [(1, "hetsplit.graph.zoo.transformer: _heads"), (2, "hetsplit.graph._hidden: _hidden")]
