"""The HTTP app (Litestar): ``create_app()`` wires the runtime, the gate and the routes.

Run with ``memwarden serve`` (uvicorn). Identity comes from the authentication
middleware only; the gate is the app-wide ``before_request`` hook; every failure is
mapped by api/http/errors.py.
"""

from __future__ import annotations

import anyio.to_thread
from litestar import Litestar
from litestar.datastructures import State
from litestar.middleware import DefineMiddleware
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

from memwarden.api.console.pages import TEMPLATES, ConsoleController
from memwarden.api.http.body import check_body_types
from memwarden.api.http.deadline import Deadline
from memwarden.api.http.errors import handle
from memwarden.api.http.gate import KeyAuthentication, audit_unaudited, gate
from memwarden.api.http.logs import logging_config
from memwarden.api.http.metrics import metrics_middleware
from memwarden.api.http.openapi import docs_assets, document_errors, openapi_config, share_document
from memwarden.api.http.route_docs import describe_routes
from memwarden.api.http.routes.admin import AdminController
from memwarden.api.http.routes.compliance import ComplianceController
from memwarden.api.http.routes.erasure import ErasureController
from memwarden.api.http.routes.health import HEALTH_ROUTES
from memwarden.api.http.routes.mem import MemController
from memwarden.api.http.routes.proofs import CosignaturesController, ProofsController, ProveController
from memwarden.api.http.routes.timetravel import AsOfController, OpsController
from memwarden.api.http.services import SERVICES
from memwarden.api.http.state import MAX_BODY_BYTES, STATE_KEY, ApiState
from memwarden.api.mcp.http import McpEndpoint
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings

PUBLIC_PATHS = ["^/healthz$", "^/readyz$", "^/metrics$", "^/schema"]
CONSOLE_PATHS = ["^/console"]
"""The console authenticates by its session cookie, then calls the API with that key."""


def create_app(
    settings: Settings | None = None, runtime: Runtime | None = None, *, document: bool = True
) -> Litestar:
    """The app. Without a runtime it opens one from ``settings`` (or the environment) at start-up.
    ``document=False``: the OpenAPI document is not prepared now (``memwarden mcp`` serves no
    HTTP, and preparing it is a fifth of a second of its start)."""
    api = ApiState(settings, runtime)
    mcp = McpEndpoint()

    async def startup() -> None:
        await anyio.to_thread.run_sync(api.open)

    async def shutdown() -> None:
        await api.callers.close()
        await anyio.to_thread.run_sync(api.close)

    app = Litestar(
        route_handlers=[
            MemController,
            AdminController,
            ComplianceController,
            ProofsController,
            CosignaturesController,
            ProveController,
            ErasureController,
            AsOfController,
            OpsController,
            ConsoleController,
            *HEALTH_ROUTES,
            docs_assets(),
            mcp.handler(),
        ],
        dependencies=SERVICES,
        on_startup=[startup],
        on_shutdown=[shutdown],
        lifespan=[mcp.lifespan],
        state=State({STATE_KEY: api}),
        middleware=[
            DefineMiddleware(Deadline, seconds=api.deadline_seconds),
            metrics_middleware,
            DefineMiddleware(KeyAuthentication, exclude=PUBLIC_PATHS + CONSOLE_PATHS),
        ],
        before_request=gate,
        exception_handlers={Exception: handle},
        after_exception=[audit_unaudited],
        request_max_body_size=MAX_BODY_BYTES,
        openapi_config=openapi_config(),
        logging_config=logging_config(*_log_level(settings, runtime)),
        template_config=TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine),
        debug=False,
    )
    check_body_types(app)
    mcp.bind(app)
    if document:
        share_document(app, (document_errors, describe_routes))
    return app


def _log_level(settings: Settings | None, runtime: Runtime | None) -> tuple[str, str]:
    """The logging level and format (``text`` or ``json``) of the app."""
    chosen = settings if settings is not None else runtime.settings if runtime is not None else None
    chosen = chosen if chosen is not None else Settings.from_env()
    return chosen.log_level, chosen.log_format


def app_from_env() -> Litestar:
    """The uvicorn factory of ``memwarden serve --workers N``: each of its API processes."""
    from memwarden.bootstrap.allocator import lean_process  # noqa: PLC0415

    lean_process()  # before the app's threads start; it trims until the process ends
    return create_app(Settings.from_env())
