"""The HTTP/1.1 protocol ``memwarden serve`` runs: uvicorn's httptools protocol, except that a
request the parser refuses (a control character in a header, a negative Content-Length,
Content-Length beside chunked encoding, …) is answered with the API's JSON error shape,
``{"error": "invalid_request", "detail": …}``, like every other refusal, instead of plain text."""

from __future__ import annotations

import msgspec
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


class JsonErrorsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        body = msgspec.json.encode({"error": "invalid_request", "detail": f"malformed HTTP request: {msg}"})
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
