"""A real HTTP server on the loopback interface, in a thread, for the clients of
OpenAI-compatible endpoints (embedder, extractor): each test says how it answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]


class LocalServer:
    def __init__(self, respond: Handler):
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        outer = self

        class RequestHandler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                outer.requests.append((self.path, dict(self.headers.items()), body))
                respond(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop answering: a connection is refused from now on (stopping twice is harmless)."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
