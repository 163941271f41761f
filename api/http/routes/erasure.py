"""Erasure over HTTP: the ``forget`` syscall and the deletion certificate routes.

Thin: the gate has checked role, policy, tenant, rate limit and body; the erasure
service decides (downward only) and appends everything in one transaction.
"""

from __future__ import annotations

import contextlib
from typing import Any
from uuid import UUID

import msgspec
from litestar import Controller, Request
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from memwarden.api.http.gate import Call, command, query
from memwarden.api.http.routing import Syscall, syscall_get, syscall_post
from memwarden.api.http.schemas import Body, struct_of
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.certificates import CertificateCheck
from memwarden.domain.model.certificates import DeletionCertificate
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.identity import COMPLIANCE_ROLES
from memwarden.domain.model.namespaces import is_within
from memwarden.domain.services.erasure import ErasureService
from memwarden.projections.reads import ReadModels
from memwarden.projections.runner import ProjectionLag

Req = Request[Any, Any, Any]
FORGET_ROLES = frozenset({"member", "admin", "owner"})


class ForgetBody(Forget, Body, frozen=True, kw_only=True):
    """``Forget``, as the route takes it."""

    def command(self) -> Forget:
        return struct_of(self, Forget)


class ForgetResponse(msgspec.Struct, frozen=True, kw_only=True):
    erased: int
    certificate: DeletionCertificate
    position: int


class ErasureController(Controller):
    path = "/v1"

    @syscall_post("/mem/forget", Syscall(name="forget", roles=FORGET_ROLES))
    def forget(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        erasure: NamedDependency[ErasureService],
        data: JSONBody[ForgetBody],
    ) -> ForgetResponse:
        cmd = data.command()
        result = command(request, lambda c: erasure.forget(c.identity, cmd))
        # the keys are gone already; also let the read models drop the plaintext before
        # answering, so no reader of this deployment sees it afterwards (best effort)
        with contextlib.suppress(ProjectionLag):
            reads.wait_for(result.position)
        return ForgetResponse(erased=result.erased, certificate=result.certificate, position=result.position)

    @syscall_get(
        "/compliance/certificates/{certificate_id:uuid}",
        Syscall(name="compliance.certificates.get", roles=COMPLIANCE_ROLES, tenant_gate=False),
    )
    def certificate(
        self, request: Req, erasure: NamedDependency[ErasureService], certificate_id: FromPath[UUID]
    ) -> DeletionCertificate:
        def run(c: Call) -> DeletionCertificate | None:
            found = erasure.certificate(certificate_id)
            if found is None or not (
                is_within(found.scope, c.identity.namespace)
                or is_within(found.requester_namespace, c.identity.namespace)
            ):
                return None  # another subtree's certificate looks missing
            return found

        return query(request, run, lambda f: f"certificate {f.id}", subject=certificate_id)

    @syscall_post(
        "/compliance/certificates/verify",
        Syscall(name="compliance.certificates.verify", roles=COMPLIANCE_ROLES, tenant_gate=False),
    )
    def verify(
        self, request: Req, ledger: NamedDependency[Ledger], data: JSONBody[DeletionCertificate]
    ) -> CertificateCheck:
        return query(
            request,
            lambda _c: ledger.verify_certificate(data),
            lambda r: "valid" if r.valid else f"invalid: {r.problem}",
            subject=data.id,
        )
