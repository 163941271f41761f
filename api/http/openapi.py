"""The OpenAPI document at ``/schema/openapi.json`` and its docs page at ``/schema``.

The page is Swagger UI 5 (it reads OpenAPI 3.1) from the installed ``openapi-ui-bundles``
package, served by the app itself under ``/schema/assets``: nothing is loaded from another
host, so it works offline. The document declares the API key as an HTTP bearer scheme and
applies it to every route behind the gate, so the page's "Authorize" takes a key.

Litestar documents errors as its own ``{status_code, detail, extra}``; the API answers
``{error, detail}`` (``ErrorBody``, api/http/errors.py). ``document_errors`` replaces every
route's error responses with ``ErrorBody`` under the statuses of API.md that the route can
return, with ``Retry-After`` on 429 and 503.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from litestar import Litestar
from litestar._openapi.plugin import OpenAPIPlugin
from litestar.enums import HttpMethod
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin, YamlRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPI,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Reference,
    Schema,
    SecurityScheme,
)
from litestar.router import Router
from litestar.routes import HTTPRoute
from litestar.static_files import create_static_files_router
from openapi_ui_bundles import swagger_ui

from memwarden.api.http.errors import STATUS, ErrorBody
from memwarden.api.http.routing import body_type, syscall_of
from memwarden.api.http.schemas import WRITE_ITEM_FIELDS

ASSETS = "/schema/assets"
ERROR_SCHEMA = "ErrorBody"
SECURITY_SCHEME = "apiKey"
BEARER = SecurityScheme(
    type="http",
    scheme="bearer",
    bearer_format="mw_…",
    description="An API key (`Authorization: Bearer mw_…`): it alone decides namespace, actor and role.",
)
NEVER_CONFLICT = frozenset(
    {
        "assemble",
        "fault",
        "read",
        "search",
        "history",
        "stats",
        "policy",
        "write_status",
        "compliance.asof",
        "compliance.ledger.verify",
        "compliance.certificates.verify",
    }
)
"""POST routes that never answer 409: queries (as every GET route is), and appends no other
request can race (a capsule, a fault)."""
LOOKUP_FIELDS = frozenset({"id", "ids", "ticket", "directive_id", "key_id", "position"})
"""Body fields that name something which may not exist (or not for the caller): a 404."""
PUBLIC_ERRORS: dict[str, tuple[int, ...]] = {"/readyz": (503,), "/metrics": (401, 429)}
"""The routes the gate does not guard that can fail, and how (``/metrics`` checks its own
token or key, throttled like every authentication)."""
_RETRY_AFTER = OpenAPIHeader(
    schema=Schema(type=OpenAPIType.INTEGER, minimum=1),
    required=True,
    description="Seconds to wait before trying again",
)
_DESCRIPTIONS = {
    400: "The request is malformed, names an identity field, or claims a provenance the role may not",
    401: "No API key, or an unknown, malformed or revoked one",
    403: "The role may not do this, the tenant is suspended, or the target is outside the subtree",
    404: "No such thing, or none the caller may see",
    409: "The state changed under the request (a version or decision conflict)",
    413: "The body is too large",
    429: "Over the rate limit; retry after Retry-After seconds",
    503: "The read models lag behind the caller's last write, or a dependency is down",
}


def openapi_config() -> OpenAPIConfig:
    local = SwaggerRenderPlugin(
        path=["/", "/swagger"],
        js_url=f"{ASSETS}/swagger-ui-bundle.js",
        css_url=f"{ASSETS}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS}/favicon-32x32.png'>",
    )
    return OpenAPIConfig(
        title="memwarden",
        version="0.1.0",
        path="/schema",
        render_plugins=[local, JsonRenderPlugin(), YamlRenderPlugin()],
        components=Components(security_schemes={SECURITY_SCHEME: BEARER}),
    )


def docs_assets() -> Router:
    """Swagger UI's script, style and icons, from the installed package."""
    return create_static_files_router(
        path=ASSETS, directories=[swagger_ui.static_path], include_in_schema=False, name="docs-assets"
    )


def _batch_items(schemas: Mapping[str, Schema | Reference]) -> None:
    """A batch item names only the fields of a write (another field is a 400 for the whole
    batch), each as ``write`` takes it; a value ``write`` would refuse is that item's
    ``rejected`` result, not a 400, so the item's schema names the fields and leaves their
    values to the item's result (a stricter schema would promise a 400 the API never sends)."""
    batch, write = schemas.get("WriteBatchBody"), schemas.get("WriteBody")
    if not isinstance(batch, Schema) or not isinstance(write, Schema) or not batch.properties:
        return
    items = batch.properties.get("items")
    write_fields = write.properties or {}
    if not isinstance(items, Schema):
        return
    items.items = Schema(
        type=OpenAPIType.OBJECT,
        additional_properties=False,
        properties={
            name: Schema(description=f"as `{name}` of `write` ({_shape(write_fields[name])})")
            for name in sorted(WRITE_ITEM_FIELDS, key=list(write_fields).index)
        },
        description="one write (the fields of `write` but `async`); a bad value rejects this item alone",
    )


def _shape(schema: Schema | Reference) -> str:
    if isinstance(schema, Reference):
        return schema.ref.rsplit("/", 1)[-1]
    if schema.enum:
        return " | ".join(str(value) for value in schema.enum)
    if schema.one_of:
        return " | ".join(_shape(member) for member in schema.one_of)
    kind = schema.type.value if isinstance(schema.type, OpenAPIType) else str(schema.type)
    return f"{kind} ({schema.format.value})" if schema.format is not None else kind


def _error_schema() -> Schema:
    codes = sorted(STATUS)
    return Schema(
        type=OpenAPIType.OBJECT,
        required=list(ErrorBody.__struct_fields__),
        properties={
            "error": Schema(type=OpenAPIType.STRING, enum=codes, description="A code of API.md"),
            "detail": Schema(type=OpenAPIType.STRING, description="A human sentence"),
        },
        description='Every error: {"error": "<code>", "detail": "<human sentence>"}',
    )


def error_statuses(path: str, method: str, handler: HTTPRouteHandler) -> tuple[int, ...]:
    """The statuses of API.md a route can answer besides success."""
    call = syscall_of(handler)
    if call is None:
        return PUBLIC_ERRORS.get(path, ())
    if path == "/v1/compliance/proofs/inclusion":  # another tenant's record, with a tree per tenant
        return (400, 401, 403, 404, 429, 503)
    statuses = {400, 401, 403, 429, 503}  # the gate: body/query, key, role/tenant, limit, lag
    reads_body = method in {"POST", "PUT"}
    if reads_body:
        statuses.add(413)
    body = body_type(handler)
    fields = set(body.__struct_fields__ if body is not None else ())
    if "{" in path or fields & LOOKUP_FIELDS:
        statuses.add(404)
    if reads_body and call.name not in NEVER_CONFLICT:
        statuses.add(409)
    return tuple(sorted(statuses))


def error_response(status: int) -> OpenAPIResponse:
    codes = sorted(code for code, code_status in STATUS.items() if code_status == status)
    return OpenAPIResponse(
        description=f"{_DESCRIPTIONS[status]} ({', '.join(codes)})",
        content={
            "application/json": OpenAPIMediaType(schema=Reference(f"#/components/schemas/{ERROR_SCHEMA}"))
        },
        headers={"Retry-After": _RETRY_AFTER} if status in {429, 503} else None,
    )


def document_errors(app: Litestar) -> None:
    """Rewrite the (lazily built, then cached) OpenAPI document's error responses in place,
    before anything serves it; every gated operation requires the bearer key."""
    document = app.openapi_schema
    document.components = document.components or Components()
    document.components.schemas = {**(document.components.schemas or {}), ERROR_SCHEMA: _error_schema()}
    document.components.security_schemes = {SECURITY_SCHEME: BEARER}
    _batch_items(document.components.schemas)
    paths = document.paths or {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or route.path_format not in paths:
            continue
        item = paths[route.path_format]
        for handler in route.route_handlers:
            for method in handler.http_methods:
                operation: Operation | None = getattr(item, method.lower(), None)
                if operation is None or method == HttpMethod.OPTIONS:
                    continue
                kept = {k: v for k, v in (operation.responses or {}).items() if not k.startswith(("4", "5"))}
                _success_unions_as_any_of(kept)
                for status in error_statuses(route.path_format, method, handler):
                    kept[str(status)] = error_response(status)
                operation.responses = kept
                operation.security = [{SECURITY_SCHEME: []}] if syscall_of(handler) is not None else None


def _success_unions_as_any_of(responses: dict[str, Any]) -> None:
    """A route answering one of several structs is documented ``anyOf`` them, not ``oneOf``:
    the structs admit other properties, so a body may match more than one (a memory also
    reads as an as-of memory). A struct a route declares under a status of its own (the
    async write's 202 ticket) leaves the 200 union."""
    declared = {_schema_ref(response) for status, response in responses.items() if status != "200"} - {None}
    for response in responses.values():
        for media in (getattr(response, "content", None) or {}).values():
            schema = media.schema
            if isinstance(schema, Schema) and schema.one_of:
                left = [s for s in schema.one_of if getattr(s, "ref", None) not in declared]
                media.schema = left[0] if len(left) == 1 else Schema(any_of=left)


def _schema_ref(response: Any) -> str | None:
    for media in (getattr(response, "content", None) or {}).values():
        ref = getattr(media.schema, "ref", None)
        if isinstance(ref, str):
            return ref
    return None


_DOCUMENTS: dict[str, OpenAPI] = {}
"""The OpenAPI document of this process's apps: every app has the same routes, so the first
app's document, built and rewritten, serves every later one (building it takes a tenth of a
second or more, and the tests make an app per test)."""


def share_document(app: Litestar, rewrites: tuple[Callable[[Litestar], None], ...]) -> None:
    """Give ``app`` the process's document, or make it from this app's: Litestar's own
    document (built at the first ``app.openapi_schema``) with ``rewrites`` applied in place."""
    document = _DOCUMENTS.get("app")
    if document is None:
        for rewrite in rewrites:
            rewrite(app)
        _DOCUMENTS["app"] = app.openapi_schema
        return
    # Litestar keeps the document it built in the plugin and hands it out from there; it
    # has no public setter. A renamed slot raises here rather than serving another document.
    app.plugins.get(OpenAPIPlugin)._openapi = document
