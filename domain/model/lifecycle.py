"""The evolution a reviewable item's stream shares (a dispute, a finding, an automatic
settlement): one event opens it, one later event closes it (resolved, overturned).

What differs between them is only which fields each event sets, so each names that as two
plain functions and ``Lifecycle`` does the rest, once: the opening event makes the state at
version 1, the closing one changes an existing state and counts a version, and any other
event (or a closing one with nothing opened) is not this stream's, a ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, cast

import msgspec

from memwarden.domain.model.events import Event


class Versioned(Protocol):
    """A stream's state (a frozen ``msgspec.Struct``) that counts its stream's events."""

    @property
    def version(self) -> int: ...


S = TypeVar("S", bound=Versioned)
Opening = TypeVar("Opening", bound=Event)
Closing = TypeVar("Closing", bound=Event)


class Lifecycle(Generic[S, Opening, Closing]):
    """``evolve(state, event) -> state`` of a stream opened by an ``opening`` event and
    closed by a ``closing`` one. ``opened`` gives the fresh state's fields (its version is
    set here), ``closed`` the closed state's (its version is counted here)."""

    def __init__(
        self,
        what: str,
        opening: type[Opening],
        opened: Callable[[Opening], S],
        closing: type[Closing],
        closed: Callable[[S, Closing], S],
    ) -> None:
        self.what = what
        self.opening = opening
        self.opened = opened
        self.closing = closing
        self.closed = closed

    def __call__(self, state: S | None, event: Event) -> S:
        if isinstance(event, self.opening):
            return _at_version(self.opened(event), 1)
        if isinstance(event, self.closing) and state is not None:
            return _at_version(self.closed(state, event), state.version + 1)
        msg = f"not a {self.what} event: {type(event).__name__}"
        raise TypeError(msg)


def _at_version(state: S, version: int) -> S:
    # a Protocol cannot also say "a Struct", which replace needs: every state is one
    return cast(S, msgspec.structs.replace(cast(msgspec.Struct, state), version=version))
