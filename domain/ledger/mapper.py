"""The msgspec mapper: domain events <-> stored events, with sealed fields encrypted.

Stored state is JSON. An event type that declares ``SEALED`` fields is stored as
``{"e": <event with those fields null>, "s": <AES-GCM ciphertext of their values>}``,
so the events table never holds their plaintext.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Generic, NamedTuple, TypeVar, cast
from uuid import UUID

import msgspec
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder

from memwarden.domain.ledger.sealing import DataKeys, SealingError, seal, unseal
from memwarden.domain.model.events import EVENT_TYPES, Event

E = TypeVar("E", bound=Event)


class _SealedForm(msgspec.Struct, Generic[E]):
    e: E
    s: bytes


class StoredRow(NamedTuple):
    """An event's row as the ledger holds it (sealed fields as ciphertext), beside the event
    read from it, for what hashes the rows themselves (the Merkle tree's projection): it
    need not read them again."""

    topic: str
    state: bytes
    tenant: str | None
    tenant_position: int | None


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event as it stands in the ledger: its stream, version and (once known) position."""

    originator_id: UUID
    originator_version: int
    event: Event
    position: int | None = None
    row: StoredRow | None = field(default=None, compare=False, repr=False)
    """The row it was read from, when read by position (``Ledger.read``)."""


class UnknownEventType(Exception):
    pass


class _NoTranscoder(Transcoder):
    """The library's Mapper wants a transcoder; msgspec does the work here instead."""

    def encode(self, obj: Any) -> bytes:
        return msgspec.json.encode(obj)

    def decode(self, data: bytes) -> Any:
        return msgspec.json.decode(data)


_ENCODER = msgspec.json.Encoder()
_SEALED_VALUES = msgspec.msgpack.Decoder(list[Any])


@cache
def _decoder(cls: type[Event]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(_SealedForm[cls] if cls.SEALED else cls)  # type: ignore[valid-type]


@cache
def _plain_decoder(cls: type[Event]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(cls)


@cache
def _sealed_types(cls: type[Event]) -> dict[str, Any]:
    """The declared type of each sealed field (a struct's values come back as plain data)."""
    return {f.name: f.type for f in msgspec.structs.fields(cls) if f.name in cls.SEALED}


@cache
def _sealed_decoder(cls: type[Event]) -> msgspec.msgpack.Decoder[Any]:
    """All of a type's sealed values, each decoded as its field's type in one pass (what
    ``msgspec.convert`` field by field gives, at a fraction of the cost)."""
    types = _sealed_types(cls)
    return msgspec.msgpack.Decoder(tuple[tuple(types[name] for name in cls.SEALED)])  # type: ignore[misc]


def _array_length(packed: bytes) -> int | None:
    """The length of the msgpack array ``packed`` starts with (None if it is no array)."""
    head = packed[:1]
    if not head:
        return None
    first = head[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    if first == 0xDC and len(packed) >= 3:
        return int.from_bytes(packed[1:3], "big")
    if first == 0xDD and len(packed) >= 5:
        return int.from_bytes(packed[1:5], "big")
    return None


@cache
def _blanks(cls: type[Event]) -> dict[str, Any]:
    """What a sealed field holds in the clear form (and in a tombstone): nothing. That is
    ``None`` where the field allows it, else its type's empty value."""
    return {name: _empty(msgspec.inspect.type_info(tp)) for name, tp in _sealed_types(cls).items()}


def _empty(info: msgspec.inspect.Type) -> Any:
    if isinstance(info, msgspec.inspect.UnionType) and info.includes_none:
        return None
    if isinstance(info, msgspec.inspect.VarTupleType | msgspec.inspect.TupleType):
        return ()
    if isinstance(info, msgspec.inspect.StrType):
        return ""
    if isinstance(info, msgspec.inspect.BytesType):
        return b""
    raise TypeError(f"a sealed field of type {info} has no empty value")


def _aad(originator_id: UUID, topic: str) -> bytes:
    return originator_id.bytes + topic.encode()


class SealingMapper(Mapper[UUID]):
    def __init__(self, data_keys: DataKeys) -> None:
        super().__init__(transcoder=_NoTranscoder())
        self.data_keys = data_keys

    def encode(self, recorded: Recorded, new_keys: Mapping[UUID, bytes] | None = None) -> StoredEvent:
        """``new_keys``: data keys made for the append this event belongs to (not stored yet),
        by owner; any other owner's key is the one in ``data_keys``."""
        event = recorded.event
        topic = type(event).__name__
        if event.SEALED:
            owner = event.sealing_owner
            key = (new_keys or {}).get(owner) or self.data_keys.get(owner)
            if key is None:
                raise SealingError(f"no data key for {owner} ({topic})")
            values = [getattr(event, name) for name in event.SEALED]
            blanked = msgspec.structs.replace(event, **_blanks(type(event)))
            ciphertext = seal(key, msgspec.msgpack.encode(values), _aad(recorded.originator_id, topic))
            state = _ENCODER.encode(_SealedForm(e=blanked, s=ciphertext))
        else:
            state = _ENCODER.encode(event)
        return StoredEvent(
            originator_id=recorded.originator_id,
            originator_version=recorded.originator_version,
            topic=topic,
            state=state,
        )

    def decode(
        self, stored: StoredEvent, position: int | None = None, row: StoredRow | None = None
    ) -> Recorded:
        cls = EVENT_TYPES.get(stored.topic)
        if cls is None:
            raise UnknownEventType(f"unknown event topic {stored.topic!r}")
        originator_id = cast(UUID, stored.originator_id)
        if cls.SEALED and not stored.state.startswith(b'{"e":'):
            # recorded before this event type had sealed fields: stored in the clear
            return Recorded(
                originator_id,
                stored.originator_version,
                _plain_decoder(cls).decode(stored.state),
                position,
                row,
            )
        decoded = _decoder(cls).decode(stored.state)
        if cls.SEALED:
            form = cast(_SealedForm[Event], decoded)
            event = self._open(form, originator_id, stored.topic)
        else:
            event = cast(Event, decoded)
        return Recorded(originator_id, stored.originator_version, event, position, row)

    def _open(self, form: _SealedForm[Event], originator_id: UUID, topic: str) -> Event:
        """Unseal with the owner's data key; a destroyed key leaves the fields empty."""
        event = form.e
        key = self.data_keys.get(event.sealing_owner)
        if key is None:
            return event
        plaintext = unseal(key, form.s, _aad(originator_id, topic))
        if _array_length(plaintext) == len(event.SEALED):  # today's fields: decoded typed at once
            opened = dict(zip(event.SEALED, _sealed_decoder(type(event)).decode(plaintext), strict=True))
            return msgspec.structs.replace(event, **opened)
        values = _SEALED_VALUES.decode(plaintext)
        if len(values) > len(event.SEALED):
            raise SealingError(f"{topic}: more sealed values than sealed fields")
        # A record written when fewer fields were sealed holds a prefix of today's list;
        # the rest of its fields were stored in the clear and are already in ``event``.
        types = _sealed_types(type(event))
        opened = {
            name: msgspec.convert(value, types[name])
            for name, value in zip(event.SEALED[: len(values)], values, strict=True)
        }
        return msgspec.structs.replace(event, **opened)

    # The library's interface, for its subscriptions and runners.
    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        return self.encode(cast(Recorded, domain_event))

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        position = getattr(stored_event, "id", None)
        return self.decode(stored_event, position)
