"""Time travel and operators' projections over HTTP. Thin: the services are
projections/timeline/service.py (as-of) and projections/rebuild.py (rebuilds).

- ``POST /v1/compliance/asof`` (auditor, admin, owner): the memories as known at
  ``as_of`` (and true at ``valid_at``) in the subtree of the caller's namespace, or of
  ``target`` (a namespace inside it), and the ledger position that time maps to.
- ``GET /v1/ops/projections`` and ``POST /v1/ops/projections/{name}/rebuild`` (owner).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from memwarden.api.http.errors import Unavailable
from memwarden.api.http.gate import query
from memwarden.api.http.routing import Syscall, syscall_get, syscall_post
from memwarden.api.http.schemas import Body, ComplianceTime, compliance_time
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.model.asof import AsOfMemory
from memwarden.domain.model.commands import AwareDatetime
from memwarden.domain.model.errors import NotFound
from memwarden.domain.model.identity import COMPLIANCE_ROLES, OWNER_ROLES
from memwarden.projections.reads import ReadModels
from memwarden.projections.rebuild import Rebuilder, RebuildFailed, RebuildReport
from memwarden.projections.runner import ProjectionStatus
from memwarden.projections.timeline.service import AsOfQuestion, check_limit, parse_cursor, scope_for

Req = Request[Any, Any, Any]
OWNER = OWNER_ROLES


class AsOfBody(Body, frozen=True, kw_only=True):
    as_of: ComplianceTime
    valid_at: ComplianceTime | None = None
    query: str | None = None
    target: str | None = None
    limit: int = 100
    cursor: str | None = None


class AsOfResponse(msgspec.Struct, frozen=True, kw_only=True):
    memories: list[AsOfMemory]
    position: int
    next_cursor: str | None
    as_of: AwareDatetime
    valid_at: AwareDatetime


class RebuildBody(Body, frozen=True, kw_only=True):
    verify: bool = False


class ProjectionsResponse(msgspec.Struct, frozen=True, kw_only=True):
    head: int
    projections: list[ProjectionStatus]


class AsOfController(Controller):
    path = "/v1/compliance"

    @syscall_post("/asof", Syscall(name="compliance.asof", roles=COMPLIANCE_ROLES, tenant_gate=False))
    def asof(
        self, request: Req, reads: NamedDependency[ReadModels], data: JSONBody[AsOfBody]
    ) -> AsOfResponse:
        def run(c: Any) -> AsOfResponse:
            question = AsOfQuestion(
                scope=scope_for(c.identity, data.target),
                as_of=compliance_time("as_of", data.as_of),
                valid_at=compliance_time("valid_at", data.valid_at),
                query=data.query,
                limit=check_limit(data.limit),
                after=parse_cursor(data.cursor),
            )
            answer = reads.time_travel.sql(question)
            return AsOfResponse(
                memories=answer.memories,
                position=answer.position,
                next_cursor=answer.next_cursor,
                as_of=answer.as_of,
                valid_at=answer.valid_at,
            )

        return query(
            request,
            run,
            lambda r: f"as_of {r.as_of.isoformat()} position {r.position}: {len(r.memories)} memories",
        )


class OpsController(Controller):
    path = "/v1/ops"

    @syscall_get("/projections", Syscall(name="ops.projections", roles=OWNER))
    def projections(
        self, request: Req, reads: NamedDependency[ReadModels], ledger: NamedDependency[Ledger]
    ) -> ProjectionsResponse:
        def run(_c: Any) -> ProjectionsResponse:
            return ProjectionsResponse(head=ledger.head_position(), projections=reads.runner.status())

        return query(request, run, lambda r: f"{len(r.projections)} projections")

    @syscall_post("/projections/{name:str}/rebuild", Syscall(name="ops.projections.rebuild", roles=OWNER))
    def rebuild(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        name: FromPath[str],
        data: JSONBody[RebuildBody | None] = None,
    ) -> RebuildReport:
        verify = data.verify if data is not None else False

        def run(_c: Any) -> RebuildReport:
            rebuilder = Rebuilder(reads.runner)
            try:
                rebuilder.projection(name)
            except KeyError as error:
                raise NotFound(f"no projection named {name[:60]!r}") from error
            try:
                return rebuilder.rebuild(name, verify=verify)
            except RebuildFailed as failed:
                raise Unavailable(str(failed)) from failed

        return query(
            request,
            run,
            lambda r: f"{r.name}: {r.events} events to {r.position}; {len(r.differences)} differences",
        )
