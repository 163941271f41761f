"""Every malformed request gets the API's JSON error shape, even those the HTTP parser refuses
before the app sees them; a 405 names the methods the path takes (``Allow``); a caller that
hangs up while its body is read is ``client_closed``, never a 500 nor a traceback."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.processes import METRICS_AUTH, cli_key, eventually

MALFORMED = {
    "control character in a header": b"POST /v1/mem/read HTTP/1.1\r\nHost: x\r\nX-Evil: a\x01b\r\nContent-Length: 2\r\n\r\n{}",
    "negative Content-Length": b"POST /v1/mem/read HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
    "Content-Length with chunked": (
        b"POST /v1/mem/read HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    ),
    "two Content-Lengths": b"POST /v1/mem/read HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "a space in the header name": b"POST /v1/mem/read HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
    "not HTTP at all": b"HELLO THERE\r\n\r\n",
    "a bad chunk size": b"POST /v1/mem/read HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
}


def _exchange(base: str, raw: bytes, timeout: float = 10.0) -> bytes:
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=timeout) as conn:
        conn.sendall(raw)
        chunks = []
        while True:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def _status_headers_body(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


@pytest.mark.parametrize("raw", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_request_the_parser_refuses_gets_the_json_error_shape(
    module_server: tuple[object, str], raw: bytes
) -> None:
    _, base = module_server
    status, headers, body = _status_headers_body(_exchange(base, raw))
    assert status == 400
    assert headers["content-type"] == "application/json"
    error = json.loads(body)
    assert error["error"] == "invalid_request"
    assert error["detail"].startswith("malformed HTTP request")


def test_a_query_string_over_64_kb_gets_a_json_error(
    module_server: tuple[object, str], module_env: dict[str, str], tenant: str
) -> None:
    _, base = module_server
    key = cli_key(module_env, f"{tenant}/eng", "bot", "auditor")
    raw = (
        b"GET /v1/compliance/audit?actor=" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer " + key.encode() + b"\r\nConnection: close\r\n\r\n"
    )
    status, headers, body = _status_headers_body(_exchange(base, raw))
    assert 400 <= status < 500
    assert headers["content-type"].startswith("application/json")
    assert "error" in json.loads(body)


def test_a_405_says_which_methods_the_path_takes(
    module_server: tuple[object, str], module_env: dict[str, str], tenant: str
) -> None:
    _, base = module_server
    key = cli_key(module_env, f"{tenant}/eng", "bot", "agent")
    answer = httpx.get(f"{base}/v1/mem/write", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert answer.status_code == 405
    assert "POST" in answer.headers["allow"]
    assert answer.json()["error"] == "invalid_request"


def _count_500s(base: str) -> float:
    text = httpx.get(f"{base}/metrics", headers=METRICS_AUTH, timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("memwarden_http_requests_total") and 'status="500"' in line
    )


def test_a_caller_that_hangs_up_mid_body_is_client_closed_never_a_500(
    module_server: tuple[object, str], module_env: dict[str, str], tenant: str
) -> None:
    _, base = module_server
    key = cli_key(module_env, f"{tenant}/eng", "bot", "agent")
    before = _count_500s(base)
    parts = urlsplit(base)
    for _ in range(3):
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=5) as conn:
            conn.sendall(
                b"POST /v1/mem/write HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                + key.encode()
                + b'\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"content": "half'
            )
            time.sleep(0.3)
    auditor = cli_key(module_env, tenant, "audrey", "auditor")

    def closed() -> list[dict[str, object]]:
        answer = httpx.get(
            f"{base}/v1/compliance/audit",
            params={"outcome": "client_closed"},
            headers={"Authorization": f"Bearer {auditor}"},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        records: list[dict[str, object]] = body.get("records", body.get("items", []))
        return records

    found = eventually(lambda: closed() or None, 15)
    assert {record["op"] for record in found} == {"write"}
    assert all(str(record["detail"]).startswith("client_closed") for record in found)
    assert _count_500s(base) == before
    assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
