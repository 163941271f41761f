"""Writing a memory in-process, as the integration tests do."""

from __future__ import annotations

import uuid
from typing import Any

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity


def write(rt: Runtime, who: Identity, content: str, **kw: Any) -> uuid.UUID:
    """The id of a memory ``who`` wrote (the write must store it)."""
    result = rt.memory.write(who, WriteMemory(content=content, **kw))
    assert result.id is not None, result
    return result.id
