"""memwarden's Python client: ``Client`` (sync) and ``AsyncClient`` over the HTTP API.

Every operation is a request struct (``memwarden_client.requests``) that knows its route and
the type of its answer (``memwarden_client.results``)::

    from memwarden_client import Client
    from memwarden_client.requests import Search, Write

    with Client("http://127.0.0.1:8000", key) as mw:
        stored = mw.call(Write(content="The deploy window is Tuesday 14:00 UTC"))
        for hit in mw.call(Search(query="deploy window")).results:
            print(hit.score, hit.content)

Errors are one exception class per error code of the API (``memwarden_client.errors``);
429 and 503 are retried with backoff, honouring ``Retry-After``; ``iterate`` follows the
cursors of the paged routes (audit, as-of, checkpoints). It needs only httpx and msgspec: nothing of
the server is imported.
"""

from memwarden_client.client import AsyncClient, Client, Retry
from memwarden_client.errors import MemwardenError

__all__ = ["AsyncClient", "Client", "MemwardenError", "Retry"]
