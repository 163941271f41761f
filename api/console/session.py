"""The console session: the API key in a Secure, HttpOnly, SameSite=Strict cookie, and the
CSRF token every form carries (derived from the key: a page of another site can neither
read the cookie nor compute the token)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie

from memwarden.domain.model.keys import parse_key

COOKIE = "memwarden_console"
PATH = "/console"
CONSOLE_ROLES = frozenset({"auditor", "admin", "owner"})
SESSION_SECONDS = 8 * 3600


class NoSession(Exception):
    """No valid session cookie: the caller is sent to the login page."""


class CsrfRefused(Exception):
    """A console POST without the session's CSRF token."""


def csrf_token(key: str) -> str:
    return hmac.new(key.encode(), b"memwarden-console-csrf", hashlib.sha256).hexdigest()


def session_key(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """The key the session cookie holds (well-formed; the API decides whether it is valid)."""
    key = connection.cookies.get(COOKIE, "")
    if parse_key(key) is None:
        raise NoSession
    return key


def check_csrf(key: str, presented: str | None) -> None:
    if not presented or not hmac.compare_digest(csrf_token(key), presented):
        raise CsrfRefused


def session_cookie(key: str) -> Cookie:
    return Cookie(
        key=COOKIE,
        value=key,
        path=PATH,
        max_age=SESSION_SECONDS,
        secure=True,
        httponly=True,
        samesite="strict",
    )


def cleared_cookie() -> Cookie:
    return Cookie(key=COOKIE, value="", path=PATH, max_age=0, secure=True, httponly=True, samesite="strict")
