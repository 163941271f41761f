"""The layers of docs/architecture.md, held by the imports and the constructor calls of the
tree: imports flow api/workers -> projections -> domain; the model imports nothing of ours
but itself; ``bootstrap/`` alone builds the services."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_installed_name import ROOT, _imported_modules

FORBIDDEN = [
    ("memwarden.api", "memwarden.workers"),
    ("memwarden.projections", "memwarden.domain.services"),
    ("memwarden.projections", "memwarden.api"),
    ("memwarden.projections", "memwarden.workers"),
    ("memwarden.projections", "memwarden.bootstrap"),
    ("memwarden.domain", "memwarden.projections"),
    ("memwarden.domain", "memwarden.api"),
    ("memwarden.domain", "memwarden.workers"),
    ("memwarden.domain", "memwarden.bootstrap"),
    ("memwarden.bootstrap", "memwarden.api"),
    ("memwarden.workers", "memwarden.api"),
]
"""(importer, imported): no module under the first imports anything under the second."""

LAUNCHER = {
    ("memwarden.api.cli.main", "memwarden.workers.cli"),
    ("memwarden.api.cli.main", "memwarden.workers.projector"),
}
"""The ``memwarden`` command line is every process's entry point: it starts the worker and
projector processes (``memwarden worker``, ``serve``'s projector). Nothing else of ``api``
reaches ``workers``."""

MODEL = "memwarden.domain.model"

SERVICES = {
    "AutopilotService",
    "CheckpointService",
    "ConsolidationService",
    "ErasureService",
    "GovernanceService",
    "KnowledgeService",
    "Leases",
    "Ledger",
    "MemoryService",
    "ReadModels",
    "ReembedService",
    "SynchronousBand",
    "TicketSender",
    "TicketStore",
    "TicketWorker",
    "WorkingSetService",
    "WriteTickets",
}
"""What a process builds once and hands to whoever needs it."""

PARTS = {"WriteService", "DisputeService", "VerificationService"}
"""The parts the memory service is made of: it builds them of itself (domain/services/), the
root builds the memory service."""

ROOT_DIR = "bootstrap"
BUILDERS = ("domain", "projections", "api", "workers", "benchmarks")
"""Where the product and its benchmarks live; the tests build what they test."""


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["memwarden", *parts])


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def product_modules() -> list[tuple[Path, str]]:
    trees = ("domain", "projections", "api", "workers", "bootstrap")
    return [(path, module_of(path)) for tree in trees for path in sorted((ROOT / tree).rglob("*.py"))]


def upward_imports(modules: list[tuple[Path, str]]) -> list[str]:
    found = []
    for path, module in modules:
        for line, imported in _imported_modules(path):
            if (module, imported) in LAUNCHER:
                continue
            for importer, forbidden in FORBIDDEN:
                if within(module, importer) and within(imported, forbidden):
                    found.append(f"{module}:{line} imports {imported}")
            if within(module, MODEL) and imported.startswith("memwarden.") and not within(imported, MODEL):
                found.append(f"{module}:{line} imports {imported} (the model is pure)")
    return found


def constructions(path: Path, built: set[str] = SERVICES) -> list[tuple[int, str]]:
    """The calls of ``path`` that build one of ``built`` (``X(...)`` or ``module.X(...)``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = node.func
            name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", None)
            if name in built:
                found.append((node.lineno, name))
    return found


def test_imports_flow_one_way() -> None:
    assert upward_imports(product_modules()) == []


def test_only_the_composition_root_builds_services() -> None:
    elsewhere = [
        f"{path.relative_to(ROOT)}:{line} builds {name}"
        for tree in BUILDERS
        for path in sorted((ROOT / tree).rglob("*.py"))
        for line, name in constructions(path)
    ]
    assert elsewhere == []


def test_each_service_is_built_at_one_site_of_the_root() -> None:
    built: dict[str, list[str]] = {}
    for path in sorted((ROOT / ROOT_DIR).rglob("*.py")):
        for line, name in constructions(path):
            built.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{line}")
    assert {name: sites for name, sites in built.items() if len(sites) > 1} == {}
    assert set(built) == SERVICES  # every service listed is built there (the list is not stale)


def test_the_services_listed_are_the_service_classes() -> None:
    declared = {
        node.name
        for path in (ROOT / "domain" / "services").glob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef) and node.name.endswith("Service")
    }
    assert declared <= SERVICES | PARTS


def test_the_parts_of_a_service_are_built_by_the_services_only() -> None:
    elsewhere = [
        f"{path.relative_to(ROOT)}:{line} builds {name}"
        for tree in BUILDERS
        for path in sorted((ROOT / tree).rglob("*.py"))
        if (ROOT / "domain" / "services") not in path.parents
        for line, name in constructions(path, PARTS)
    ]
    assert elsewhere == []


@pytest.mark.parametrize(
    ("module", "source", "caught"),
    [
        ("api/http/sample.py", "from memwarden.workers.tickets import TicketStore\n", True),
        ("projections/sample.py", "import memwarden.domain.services.memory\n", True),
        ("domain/model/sample.py", "from memwarden.domain.ledger import app\n", True),
        ("projections/sample.py", "from memwarden.domain.ports import Similar\n", False),
        ("api/cli/main.py", "from memwarden.workers.cli import register_worker_command\n", False),
    ],
)
def test_the_rule_sees_an_upward_import(tmp_path: Path, module: str, source: str, caught: bool) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(source)
    named = ".".join(["memwarden", *Path(module).with_suffix("").parts])
    assert bool(upward_imports([(sample, named)])) is caught


def test_the_rule_sees_a_service_built_outside_the_root(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from x import services\nmemory = MemoryService(ledger)\nother = services.Leases(1)\n")
    assert constructions(sample) == [(2, "MemoryService"), (3, "Leases")]
