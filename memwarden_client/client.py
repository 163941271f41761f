"""``Client`` (sync) and ``AsyncClient``: ``call`` sends one request struct and answers its
result type; ``iterate`` follows a paged route's cursors. Both retry 429 and 503 with
backoff, honouring ``Retry-After`` (``Retry``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import anyio
import httpx
import msgspec

from memwarden_client._core import Prepared, Retry, interpret, prepare, unreachable
from memwarden_client.errors import MemwardenError
from memwarden_client.operations import AsyncOperations, Operations
from memwarden_client.requests import PagedRequest, Request

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the item of a page
DEFAULT_TIMEOUT = 30.0

__all__ = ["AsyncClient", "Client", "Retry"]


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def _next_page(request: PagedRequest[Any, I], page: Any) -> tuple[list[I], PagedRequest[Any, I] | None]:
    """A page's items and the request of the next page (None after the last). A list answers
    ``cursor`` (API.md "Lists"); the as-of route ``next_cursor``."""
    items: list[I] = list(getattr(page, request.items))
    cursor = getattr(page, "cursor", None) or getattr(page, "next_cursor", None)
    return items, (msgspec.structs.replace(request, cursor=cursor) if cursor else None)


class Client(Operations):
    """The API over HTTP, synchronously. ``key`` is an API key (``mw_…``): it alone decides
    who you are. One method per operation (memwarden_client/operations.py), or ``call`` with
    a request struct."""

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = retry or Retry()
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=_headers(key), timeout=timeout, transport=transport
        )

    def call(self, request: Request[R]) -> R:
        prepared = prepare(request)
        attempt = 0
        while True:
            try:
                return self._send(request, prepared)
            except MemwardenError as error:
                wait = self.retry.delay(attempt, error)
                if wait is None:
                    raise
            self._sleep(wait)
            attempt += 1

    def iterate(self, request: PagedRequest[Any, I]) -> Iterator[I]:
        """Every item of a list, page after page, until the cursor runs out. An audit
        walk reads the log as it stood at its first page (the server's cursor carries that
        snapshot), so the page reads it audits never extend it."""
        following: PagedRequest[Any, I] | None = request
        while following is not None:
            items, following = _next_page(following, self.call(following))
            yield from items

    def _send(self, request: Request[R], prepared: Prepared) -> R:
        try:
            response = self._http.request(
                prepared.method, prepared.path, params=prepared.params, content=prepared.content
            )
        except httpx.ConnectError as error:
            raise unreachable(error) from error
        return interpret(request, response.status_code, response.content, response.headers.get("retry-after"))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient(AsyncOperations):
    """The API over HTTP, for asyncio or trio (anyio)."""

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or Retry()
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=_headers(key), timeout=timeout, transport=transport
        )

    async def call(self, request: Request[R]) -> R:
        prepared = prepare(request)
        attempt = 0
        while True:
            try:
                return await self._send(request, prepared)
            except MemwardenError as error:
                wait = self.retry.delay(attempt, error)
                if wait is None:
                    raise
            await anyio.sleep(wait)
            attempt += 1

    async def iterate(self, request: PagedRequest[Any, I]) -> AsyncIterator[I]:
        following: PagedRequest[Any, I] | None = request
        while following is not None:
            items, following = _next_page(following, await self.call(following))
            for item in items:
                yield item

    async def _send(self, request: Request[R], prepared: Prepared) -> R:
        try:
            response = await self._http.request(
                prepared.method, prepared.path, params=prepared.params, content=prepared.content
            )
        except httpx.ConnectError as error:
            raise unreachable(error) from error
        return interpret(request, response.status_code, response.content, response.headers.get("retry-after"))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        await self.aclose()
