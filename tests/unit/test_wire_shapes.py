"""Every HTTP request body that carries a domain command holds the command's fields exactly:
the same names on the wire, types (with their constraints: a zone on a time, a length
bound), defaults and optionality. Most bodies extend their command, so this holds by
construction; the test keeps it so, and catches a body that names a field otherwise
(``VerifyBody.id``) drifting from its command. Only what the edge adds (how to run the
write, a version guard) or takes from elsewhere (the path) may differ, and it is named here."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
import pytest

from memwarden.api.http.routes.erasure import ForgetBody
from memwarden.api.http.schemas import (
    Body,
    FindingResolveBody,
    NewKeyBody,
    OverturnBody,
    PolicyPutBody,
    ResolveBody,
    VerifyBody,
    WriteBatchBody,
    WriteBody,
    WriteItemBody,
    WriteResponse,
    batch_entry,
    struct_of,
)
from memwarden.domain.model.autopilot import OverturnDecision, ResolveFinding
from memwarden.domain.model.commands import (
    ProvenanceClaim,
    ResolveDispute,
    VerifyMemory,
    WriteMemory,
    validated,
)
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.events import MemoryScope
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.services.write_results import BatchItem, WriteResult


class Pair(msgspec.Struct, frozen=True, kw_only=True):
    """A body and the domain struct it carries. ``edge``: the body's own fields (not the
    command's); ``elsewhere``: the command's fields the edge takes from the request's path;
    ``renamed``: body field -> command field, where the two are named apart."""

    body: type[msgspec.Struct]
    command: type[msgspec.Struct]
    edge: frozenset[str] = frozenset()
    elsewhere: frozenset[str] = frozenset()
    renamed: dict[str, str] = {}


PAIRS = (
    Pair(body=WriteItemBody, command=WriteMemory, edge=frozenset({"verbatim"})),
    Pair(body=WriteBody, command=WriteMemory, edge=frozenset({"verbatim", "run_async"})),
    Pair(body=ResolveBody, command=ResolveDispute, elsewhere=frozenset({"dispute_id"})),
    Pair(body=VerifyBody, command=VerifyMemory, renamed={"id": "memory_id"}),
    Pair(body=PolicyPutBody, command=PolicyBody, edge=frozenset({"expected_version"})),
    Pair(body=NewKeyBody, command=IssueKey),
    Pair(body=ForgetBody, command=Forget),
    Pair(body=FindingResolveBody, command=ResolveFinding, elsewhere=frozenset({"finding_id"})),
    Pair(body=OverturnBody, command=OverturnDecision, elsewhere=frozenset({"decision_id"})),
)


def shape(field: msgspec.structs.FieldInfo) -> tuple[Any, ...]:
    """What a client sees of a field: its type with constraints, whether it is required,
    its default (a default factory by what it makes)."""
    default = field.default_factory() if field.default_factory is not msgspec.NODEFAULT else field.default
    return (msgspec.inspect.type_info(field.type), field.required, default)


def drift(pair: Pair) -> list[str]:
    """How ``pair.body`` differs from its command, field by field (empty: they agree)."""
    body = {f.name: f for f in msgspec.structs.fields(pair.body) if f.name not in pair.edge}
    command = {f.name: f for f in msgspec.structs.fields(pair.command) if f.name not in pair.elsewhere}
    problems = []
    for name, field in body.items():
        twin = command.get(pair.renamed.get(name, name))
        if twin is None:
            problems.append(f"{name}: no such field in {pair.command.__name__}")
            continue
        wire = field.encode_name if name in pair.renamed else twin.encode_name
        if field.encode_name != wire:
            problems.append(f"{name}: on the wire as {field.encode_name!r}, the command says {wire!r}")
        if shape(field) != shape(twin):
            problems.append(f"{name}: {shape(field)} != {twin.name}: {shape(twin)}")
    carried = {pair.renamed.get(name, name) for name in body}
    problems += [
        f"{pair.command.__name__}.{name}: missing from the body" for name in command.keys() - carried
    ]
    return problems


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.body.__name__)
def test_every_body_holds_its_command_field_for_field(pair: Pair) -> None:
    assert drift(pair) == []
    assert issubclass(pair.body, Body)  # the edge's own checks (storable text and times) apply
    assert pair.body.__struct_config__.forbid_unknown_fields


class _Loosened(Body, frozen=True, kw_only=True):
    id: UUID
    supports: bool | None = None  # optional here, required in the command
    note: str | None = None
    weight: int = 1  # no such field in the command


class _Retyped(Body, frozen=True, kw_only=True):
    id: UUID
    supports: bool
    note: int | None = None


class _NaiveWrite(WriteMemory, Body, frozen=True, kw_only=True):
    valid_from: datetime | None = None  # the command demands a zone


class _Renamed(WriteMemory, Body, frozen=True, kw_only=True):
    scope: MemoryScope = msgspec.field(default="team", name="visibility")


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        (Pair(body=_Loosened, command=VerifyMemory, renamed={"id": "memory_id"}), ["supports:", "weight:"]),
        (Pair(body=_Retyped, command=VerifyMemory, renamed={"id": "memory_id"}), ["note:"]),
        (Pair(body=_NaiveWrite, command=WriteMemory), ["valid_from:"]),
        (Pair(body=_Renamed, command=WriteMemory), ["scope: on the wire as 'visibility'"]),
    ],
    ids=["loosened", "retyped", "zone-dropped", "renamed-on-the-wire"],
)
def test_the_comparison_catches_a_body_that_drifted(pair: Pair, expected: list[str]) -> None:
    problems = drift(pair)
    assert len(problems) == len(expected), problems
    for start, problem in zip(expected, sorted(problems), strict=True):
        assert start in problem, problems


def test_a_command_field_the_body_lacks_is_drift() -> None:
    class Short(Body, frozen=True, kw_only=True):
        content: str

    problems = drift(Pair(body=Short, command=WriteMemory))
    assert "WriteMemory.tags: missing from the body" in problems


# -- the conversions ---------------------------------------------------------------------------

WIRE_WRITE = {
    "content": "Deploys freeze on Fridays",
    "type": "instruction",
    "subject": "deploys",
    "attribute": "freeze",
    "value": "friday",
    "tags": ["release"],
    "provenance": {"source": "document", "ref": "handbook#7"},
    "valid_from": "2026-03-01T00:00:00Z",
    "verbatim": True,
    "async": True,
}


def test_a_write_body_is_read_as_exactly_its_command_in_one_conversion() -> None:
    body = msgspec.json.decode(msgspec.json.encode(WIRE_WRITE), type=WriteBody)
    command = validated(body.command())
    assert type(command) is WriteMemory
    assert command == WriteMemory(
        content="Deploys freeze on Fridays",
        type="instruction",
        subject="deploys",
        attribute="freeze",
        value="friday",
        tags=("release",),
        provenance=ProvenanceClaim(source="document", ref="handbook#7"),
        valid_from=datetime(2026, 3, 1, tzinfo=UTC),
    )
    # what a ticket stores: the command alone, which decodes again as the command
    item = BatchItem(command=command, verbatim=body.verbatim)
    assert msgspec.json.decode(msgspec.json.encode(item), type=BatchItem) == item


def test_an_unchecked_write_body_would_not_decode_from_a_ticket() -> None:
    """Why the service reads a body as exactly its command: the body's own fields would be
    stored with it, and the ticket's typed decode refuses them."""
    body = msgspec.json.decode(msgspec.json.encode(WIRE_WRITE), type=WriteBody)
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.json.decode(msgspec.json.encode(BatchItem(command=body)), type=BatchItem)


def test_validated_still_refuses_a_wrongly_typed_command_built_in_python() -> None:
    with pytest.raises(InvalidRequest, match="invalid WriteMemory"):
        validated(WriteMemory(content="x", tags="urgent"))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="timezone"):
        validated(WriteMemory(content="x", valid_from=datetime(2026, 3, 1)))


def test_a_batch_item_is_the_write_body_with_its_verbatim_flag() -> None:
    raw = {k: v for k, v in WIRE_WRITE.items() if k != "async"}
    entry = batch_entry("items[0]", raw)
    assert isinstance(entry, BatchItem)
    assert entry.verbatim is True
    assert validated(entry.command) == validated(msgspec.convert(raw, WriteItemBody).command())
    assert WriteBatchBody(items=[raw]).entries() == [entry]


def test_the_other_bodies_convert_to_their_commands() -> None:
    dispute, memory = UUID(int=1), UUID(int=2)
    ruling = ResolveBody(decision="edit", content="new text", reason="typo")
    assert ruling.command(dispute) == ResolveDispute(
        dispute_id=dispute, decision="edit", content="new text", reason="typo"
    )
    verdict = VerifyBody(id=memory, supports=False, note="outdated")
    assert verdict.command() == VerifyMemory(memory_id=memory, supports=False, note="outdated")
    put = PolicyPutBody(forbid_secrets=False, driver="hybrid", expected_version=3)
    policy = put.policy()
    assert type(policy) is PolicyBody
    assert policy == PolicyBody(forbid_secrets=False, driver="hybrid")
    assert struct_of(put, PolicyBody) == policy


def test_a_write_response_carries_the_result_field_for_field() -> None:
    """The response is the result as the wire shows it (every field required, the outcome a
    plain string): the same fields, copied by their names."""
    assert set(WriteResponse.__struct_fields__) == set(WriteResult.__struct_fields__)
    result = WriteResult(
        outcome="superseded",
        id=UUID(int=1),
        supersedes=(UUID(int=2),),
        position=7,
        extracted=False,
        verbatim_reason="no_extractor",
        findings=(UUID(int=3),),
    )
    assert msgspec.to_builtins(WriteResponse.of(result)) == msgspec.to_builtins(result)


def test_the_admin_and_erasure_bodies_convert_to_their_commands() -> None:
    finding, decision, memory = UUID(int=1), UUID(int=2), UUID(int=3)
    assert FindingResolveBody(decision="dismiss", reason="noise").command(finding) == ResolveFinding(
        finding_id=finding, decision="dismiss", reason="noise"
    )
    assert OverturnBody(reason="wrong call").command(decision) == OverturnDecision(
        decision_id=decision, reason="wrong call"
    )
    key = NewKeyBody(target="acme/eng", actor="bot", role="agent").command()
    assert (type(key), key) == (IssueKey, IssueKey(target="acme/eng", actor="bot", role="agent"))
    forget = ForgetBody(ids=(memory,), reason="request 12").command()
    assert (type(forget), forget) == (Forget, Forget(ids=(memory,), reason="request 12"))
