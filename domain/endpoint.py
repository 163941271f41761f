"""POST JSON to an OpenAI-compatible endpoint: the HTTP plumbing the embedder and the
extractor share.

Standard library HTTP (``urllib.request``) only. Redirects are refused (following one
would resend the API key elsewhere), the response is read up to a bound, and every
failure -- refused connection, timeout, HTTP error status, a response too large -- is one
:class:`EndpointError` whose ``kind`` says which, so each caller can degrade its own way.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Literal

EndpointFailure = Literal["unreachable", "timeout", "http_error", "too_large"]


class EndpointError(Exception):
    """The endpoint did not answer with a body; ``kind`` says why, the message says more."""

    def __init__(self, kind: EndpointFailure, message: str) -> None:
        super().__init__(message)
        self.kind: EndpointFailure = kind


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error here: following it would resend the API key elsewhere."""

    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def endpoint_url(base_url: str, path: str, what: str) -> str:
    """``{base_url}/{path}``; ``ValueError`` unless ``base_url`` is an http(s) URL."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError(f"the {what} URL must be an http(s) URL, got {base_url!r}")
    return base_url.rstrip("/") + "/" + path


def post_json(url: str, body: bytes, *, api_key: str | None, timeout: float, max_bytes: int) -> bytes:
    """The response body of ``POST url`` with a JSON ``body``, at most ``max_bytes`` long.

    ``timeout`` bounds the connect and each read, in seconds. ``url`` must come from
    :func:`endpoint_url` (its scheme is checked there).
    """
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 -- scheme checked by endpoint_url
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            payload: bytes = response.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        detail = _error_detail(exc)
        exc.close()
        raise EndpointError("http_error", f"{url}: HTTP {exc.code} {exc.reason}{detail}") from exc
    except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets
        kind: EndpointFailure = "timeout" if _timed_out(exc) else "unreachable"
        raise EndpointError(kind, f"{url}: {type(exc).__name__}: {exc}") from exc
    if len(payload) > max_bytes:
        raise EndpointError("too_large", f"{url}: response larger than {max_bytes} bytes")
    return payload


def _timed_out(exc: BaseException) -> bool:
    """A read times out as ``TimeoutError``; a connect, as a ``URLError`` wrapping one."""
    return isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(500).decode("utf-8", "replace").strip()
    except (OSError, http.client.HTTPException):
        return ""
    return f": {text}" if text else ""
