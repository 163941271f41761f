"""Every import of the product names it as installed (``memwarden.domain``, …): a bare
``import domain`` works only from a checkout's root and breaks once installed from the wheel."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("domain", "projections", "api", "workers", "bootstrap")
TREES = (*PRODUCT, "memwarden_client", "benchmarks", "tests")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_module_imports_the_product_by_a_bare_folder_name() -> None:
    bare = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for tree in TREES
        for path in sorted((ROOT / tree).rglob("*.py"))
        for line, module in _imported_modules(path)
        if module.split(".")[0] in PRODUCT
    ]
    assert bare == []


def test_the_rule_sees_a_bare_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from domain.settings import Settings\nimport memwarden.api\n")
    assert [module for _, module in _imported_modules(sample)] == ["domain.settings", "memwarden.api"]
