"""What the read models receive: every ledger event made storable by PostgreSQL.

The ledger is the authority and keeps every event exactly as it was accepted, but older
versions accepted values no read model can hold: text with NUL or a lone surrogate (which
PostgreSQL's ``text`` and ``jsonb`` refuse) and times that leave years 1-9999 once
converted to UTC (``0001-01-01T00:00:00+01:00`` is year 0 in UTC: PostgreSQL stores it,
Python cannot read it back). Whatever the ledger holds, every projection applies
(docs/architecture.md section 4), so each projection takes its events through ``sanitized``:

- text: NUL and lone surrogates (also what invalid UTF-8 decodes to with
  ``surrogateescape``) become U+FFFD, the replacement character;
- times: a time without a zone is read as UTC; one before the first instant of year 1 in
  UTC becomes that instant (``EARLIEST``), one after the last of year 9999 becomes that one
  (``LATEST``), both in UTC.

Every other value, and every value already storable, is passed on as it is (the same
object). Pure and deterministic: a rebuild gives the live tables again, and the ledger
replay (projections/replay.py) sanitizes the same way, so it still agrees with the SQL.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import msgspec

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import Event

REPLACEMENT = "\ufffd"
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

S = TypeVar("S", bound=msgspec.Struct)


def storable_text(text: str) -> str:
    """``text`` with each NUL and lone surrogate replaced by U+FFFD (``text`` itself if none)."""
    return text if _text_ok(text) else _UNSTORABLE.sub(REPLACEMENT, text)


def storable_time(moment: datetime) -> datetime:
    """``moment`` within years 1-9999 in UTC (``moment`` itself when it is)."""
    if moment.utcoffset() is None:
        moment = moment.replace(tzinfo=UTC)
    if moment < EARLIEST:
        return EARLIEST
    if moment > LATEST:
        return LATEST
    return moment


def sanitized(events: list[Recorded], kinds: tuple[type[Event], ...] = (Event,)) -> list[Recorded]:
    """The events a projection applies, each event of ``kinds`` (those the projection reads;
    every event by default) made storable; ``events`` itself when all of them are, the
    common case, found without copying anything. Events of other kinds pass unread: checking
    an event costs microseconds, and each projection reads a few kinds of many."""
    if all(not isinstance(r.event, kinds) or _struct_ok(r.event) for r in events):
        return events
    return [_sanitized_recorded(r) if isinstance(r.event, kinds) else r for r in events]


def _sanitized_recorded(recorded: Recorded) -> Recorded:
    if _struct_ok(recorded.event):
        return recorded
    event = _repaired_struct(recorded.event)
    return Recorded(recorded.originator_id, recorded.originator_version, event, recorded.position)


# -- checking: every event passes here, so the storable case is answered without a copy ------


def _text_ok(text: str) -> bool:
    return (text.isascii() and "\x00" not in text) or _UNSTORABLE.search(text) is None


def _time_ok(moment: datetime) -> bool:
    # a year away from either end is inside the range in UTC, whatever the offset
    return moment.utcoffset() is not None and (1 < moment.year < 9999 or EARLIEST <= moment <= LATEST)


def _struct_ok(struct: msgspec.Struct) -> bool:
    values = msgspec.structs.astuple(struct)
    for i in _indexes_to_check(type(struct)):  # noqa: SIM110 - a loop costs less than all() here
        if not _ok(values[i]):
            return False
    return True


def _ok(value: object) -> bool:
    """Exact types first and loops, not generators: this runs for every value of every event."""
    if value is None:
        return True
    kind = type(value)
    if kind is str:
        return _text_ok(cast(str, value))
    if kind is datetime:
        return _time_ok(cast(datetime, value))
    if kind is tuple:
        for item in cast(tuple[object, ...], value):  # noqa: SIM110 - as above
            if not _ok(item):
                return False
        return True
    if isinstance(value, msgspec.Struct):
        return _struct_ok(value)
    if isinstance(value, str | datetime | dict | list | set | frozenset | tuple):  # the rarer kinds
        return _repaired(value) is value
    return True


# -- repairing: only an event that holds something unstorable comes here --------------------


def _repaired_struct(struct: S) -> S:
    changed: dict[str, Any] = {}
    for name in _fields_to_check(type(struct)):
        value = getattr(struct, name)
        repaired = _repaired(value)
        if repaired is not value:
            changed[name] = repaired
    return msgspec.structs.replace(struct, **changed) if changed else struct


def _repaired(value: Any) -> Any:
    """``value`` made storable; the same object when nothing in it had to be."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, datetime):
        return storable_time(value)
    if isinstance(value, msgspec.Struct):
        return _repaired_struct(value)
    if isinstance(value, dict):
        pairs = {_repaired(k): _repaired(v) for k, v in value.items()}
        unchanged = len(pairs) == len(value) and all(k in value and value[k] is v for k, v in pairs.items())
        return value if unchanged else pairs
    if isinstance(value, tuple | list | set | frozenset):
        items = [_repaired(item) for item in value]
        unchanged = all(new is old for new, old in zip(items, value, strict=True))
        return value if unchanged else type(value)(items)
    return value


# -- which fields to look at -----------------------------------------------------------------


@functools.cache
def _fields_to_check(struct_type: type[msgspec.Struct]) -> tuple[str, ...]:
    """The fields of a struct type whose values may hold text or a time (a uuid, a number,
    bytes or a literal cannot be unstorable): found once per type, from its declaration."""
    info = msgspec.inspect.type_info(struct_type)
    assert isinstance(info, msgspec.inspect.StructType)
    return tuple(f.name for f in info.fields if _may_hold_text_or_time(f.type, frozenset()))


@functools.cache
def _indexes_to_check(struct_type: type[msgspec.Struct]) -> tuple[int, ...]:
    """``_fields_to_check`` as positions in ``msgspec.structs.astuple``."""
    names = _fields_to_check(struct_type)
    return tuple(i for i, name in enumerate(struct_type.__struct_fields__) if name in names)


def _may_hold_text_or_time(info: msgspec.inspect.Type, seen: frozenset[type]) -> bool:
    inspect = msgspec.inspect
    if isinstance(info, inspect.StrType | inspect.DateTimeType | inspect.AnyType):
        return True
    if isinstance(info, inspect.UnionType):
        return any(_may_hold_text_or_time(t, seen) for t in info.types)
    if isinstance(info, inspect.TupleType):
        return any(_may_hold_text_or_time(t, seen) for t in info.item_types)
    if isinstance(info, inspect.VarTupleType | inspect.ListType | inspect.SetType | inspect.FrozenSetType):
        return _may_hold_text_or_time(info.item_type, seen)
    if isinstance(info, inspect.DictType):
        return _may_hold_text_or_time(info.key_type, seen) or _may_hold_text_or_time(info.value_type, seen)
    if isinstance(info, inspect.StructType):
        if info.cls in seen:
            return False
        return any(_may_hold_text_or_time(f.type, seen | {info.cls}) for f in info.fields)
    return False
