"""The console session: a random session id in a Secure, HttpOnly, SameSite=Strict cookie —
never the API key itself — mapped on the server to the key it signed in with, until it
expires or its owner logs out (revoked at once). The CSRF token every form carries is
derived from the key: a page of another site can neither read the cookie nor compute it."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from typing import Any, Protocol

import redis
from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie

from memwarden.domain.model.keys import parse_key

COOKIE = "memwarden_console"
PATH = "/console"
CONSOLE_ROLES = frozenset({"auditor", "admin", "owner"})
SESSION_SECONDS = 8 * 3600
MAX_SESSIONS = 10_000


class NoSession(Exception):
    """No valid session cookie: the caller is sent to the login page."""


class CsrfRefused(Exception):
    """A console POST without the session's CSRF token."""


class SessionStore(Protocol):
    def open(self, key: str) -> str: ...
    def key_of(self, session_id: str) -> str | None: ...
    def close(self, session_id: str) -> None: ...


class ProcessSessions:
    """Sessions of one API process: id -> (key, expiry)."""

    def __init__(self, seconds: float = SESSION_SECONDS) -> None:
        self._seconds = seconds
        self._sessions: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def open(self, key: str) -> str:
        session_id = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:
                self._sessions = {s: v for s, v in self._sessions.items() if v[1] > now}
            self._sessions[session_id] = (key, now + self._seconds)
        return session_id

    def key_of(self, session_id: str) -> str | None:
        found = self._sessions.get(session_id)
        if found is None or found[1] <= time.monotonic():
            return None
        return found[0]

    def close(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)


class RedisSessions:
    """Sessions shared by every API process of a deployment (``serve --workers N``), under
    the deployment's key prefix, expiring in Redis. Redis down: no console session (the
    caller is sent to log in), never a session without a check."""

    def __init__(self, url: str, prefix: str, seconds: int = SESSION_SECONDS) -> None:
        self._redis = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self._prefix = prefix
        self._seconds = seconds

    def _name(self, session_id: str) -> str:
        return f"{self._prefix}:console_session:{hashlib.sha256(session_id.encode()).hexdigest()}"

    def open(self, key: str) -> str:
        session_id = secrets.token_urlsafe(32)
        self._redis.set(self._name(session_id), key, ex=self._seconds)
        return session_id

    def key_of(self, session_id: str) -> str | None:
        try:
            found: Any = self._redis.get(self._name(session_id))
        except (redis.RedisError, OSError):
            return None
        return found.decode() if isinstance(found, bytes) else None

    def close(self, session_id: str) -> None:
        self._redis.delete(self._name(session_id))


def csrf_token(key: str) -> str:
    return hmac.new(key.encode(), b"memwarden-console-csrf", hashlib.sha256).hexdigest()


def session_id(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    return connection.cookies.get(COOKIE, "")


def session_key(connection: ASGIConnection[Any, Any, Any, Any], sessions: SessionStore) -> str:
    """The key the caller's session signed in with (well-formed; the API decides whether it
    is still valid, so a revoked key ends its sessions at their next call)."""
    found = sessions.key_of(session_id(connection)) if session_id(connection) else None
    if found is None or parse_key(found) is None:
        raise NoSession
    return found


def check_csrf(key: str, presented: str | None) -> None:
    if not presented or not hmac.compare_digest(csrf_token(key), presented):
        raise CsrfRefused


def session_cookie(session: str) -> Cookie:
    return Cookie(
        key=COOKIE,
        value=session,
        path=PATH,
        max_age=SESSION_SECONDS,
        secure=True,
        httponly=True,
        samesite="strict",
    )


def cleared_cookie() -> Cookie:
    return Cookie(key=COOKIE, value="", path=PATH, max_age=0, secure=True, httponly=True, samesite="strict")
