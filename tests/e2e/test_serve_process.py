"""`memwarden serve` as a real process: the API with its supervised projector child."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import redis

from tests.processes import alive, cli_key, serving, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _projector_of(pid: int) -> int:
    for child in _children(pid):
        try:
            command = (Path("/proc") / str(child) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"project" in command and alive(child):
            return child
    raise AssertionError("no projector child")


def _write_then_read(base: str, key: str, text: str) -> None:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        written = client.post("/v1/mem/write", json={"content": text})
        assert written.status_code == 200, written.text
        read = client.post("/v1/mem/read", json={"id": written.json()["id"]})
        assert read.status_code == 200, read.text
        assert read.json()["content"] == text


@pytest.mark.slow
def test_serve_projects_in_a_supervised_child_that_dies_with_it(
    served: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    server, base, key = served
    projector = _projector_of(server.pid)
    _write_then_read(base, key, "Read your writes through the projector process")

    os.kill(projector, signal.SIGKILL)  # the supervisor starts another one
    wait_until(lambda: not alive(projector))
    _write_then_read(base, key, "Readers catch up themselves until it is back")
    wait_until(lambda: any(p != projector for p in _children(server.pid) if alive(p)))
    replacement = _projector_of(server.pid)
    assert replacement != projector
    _write_then_read(base, key, "And the new projector takes over")

    server.kill()  # however the API ends, its projector does not outlive it
    server.wait(timeout=30)
    wait_until(lambda: not alive(replacement), 15)


@pytest.mark.slow
def test_sigterm_stops_the_projector_before_serve_exits(
    served: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    """A graceful stop (SIGTERM, as a service manager sends) ends the projector child
    before ``serve`` itself exits, instead of leaving it to notice its parent is gone."""
    server, _base, _key = served
    projector = _projector_of(server.pid)
    server.terminate()
    assert server.wait(timeout=30) == 0
    assert not alive(projector)


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found += [child, *_descendants(child)]
    return found


def _environment(pid: int) -> dict[str, str]:
    pairs = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


def _api_processes(server: subprocess.Popen[bytes]) -> list[int]:
    """uvicorn's workers under ``server`` (spawned by multiprocessing)."""
    return [
        p
        for p in _descendants(server.pid)
        if b"spawn_main" in (Path("/proc") / str(p) / "cmdline").read_bytes()
    ]


@pytest.mark.slow
def test_several_workers_get_the_settings_serve_chose_and_serve_keeps_its_environment(
    env: dict[str, str], redis_url: str
) -> None:
    """``serve --workers 2``: every API process shares state through Redis (the flag chose
    it; the environment did not say), and ``serve`` passed that on to them without writing
    its own environment; SIGTERM stops them all."""
    env = {**env, "REDIS_URL": redis_url}
    key = cli_key(env, "acme/eng", "bot", "agent")
    with serving(env, flags=("--workers", "2")) as (server, base):
        for n in range(4):  # each request may land on either worker
            _write_then_read(base, key, f"Written through either worker, read at once ({n})")
        shared = redis.Redis.from_url(redis_url)
        assert list(shared.scan_iter(match="memwarden:*:last_write:*"))  # the callers' state is Redis's
        shared.close()
        api_processes = _api_processes(server)
        assert len(api_processes) == 2
        assert {_environment(p).get("MEMWARDEN_SHARED_STATE") for p in api_processes} == {"redis"}
        assert "MEMWARDEN_SHARED_STATE" not in _environment(server.pid)
        everyone = _descendants(server.pid)
        server.terminate()
        assert server.wait(timeout=60) == 0
        wait_until(lambda: not any(alive(p) for p in everyone), 30)


@pytest.mark.slow
def test_a_killed_serve_leaves_no_api_process_behind(env: dict[str, str], redis_url: str) -> None:
    with serving({**env, "REDIS_URL": redis_url}, flags=("--workers", "2")) as (server, _base):
        everyone = _descendants(server.pid)
        assert len(_api_processes(server)) == 2
        server.kill()
        server.wait(timeout=30)
        wait_until(lambda: not any(alive(p) for p in everyone), 30)
