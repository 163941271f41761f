"""Vectors as bound parameters in pgvector's binary ``halfvec`` form.

Formatting 384 floats as text costs far more Python per vector than the binary form
(docs/design-figures.md, Search): dimensions, a reserved word, then big-endian float16 values, as pgvector's
``halfvec_recv`` reads it. A lone parameter leaves its type to
the server, which takes it from the ``::halfvec(d)`` cast around the placeholder; inside a
``halfvec[]`` the type's OID must be sent, so a connection learns it once
(``bind_halfvec_arrays``).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import psycopg
from psycopg import Cursor
from psycopg.adapt import Dumper, PyFormat
from psycopg.pq import Format
from psycopg.types import TypeInfo


class HalfvecParam:
    """A vector to bind where the query casts the placeholder to ``halfvec``."""

    __slots__ = ("data",)

    def __init__(self, vector: np.ndarray[Any, Any]) -> None:
        values = np.asarray(vector, dtype=">f2")
        if values.ndim != 1:
            raise ValueError("a halfvec parameter is one vector")
        self.data = struct.pack(">HH", values.shape[0], 0) + values.tobytes()


class _HalfvecBinaryDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: HalfvecParam) -> bytes:
        return obj.data


psycopg.adapters.register_dumper(HalfvecParam, _HalfvecBinaryDumper)


def bind_halfvec_arrays(curs: Cursor[Any]) -> None:
    """Let this cursor send ``halfvec[]`` parameters in binary. The type's OID differs from
    one database to another: it is looked up once per connection, whose later cursors
    inherit it."""
    if curs.adapters.get_dumper(HalfvecParam, PyFormat.BINARY).oid:
        return
    row = curs.execute(
        "SELECT oid, typarray FROM pg_type WHERE oid = to_regtype('halfvec')", prepare=False
    ).fetchone()
    if row is None:
        raise LookupError("the halfvec type (pgvector) is not installed")
    info = TypeInfo("halfvec", row["oid"], row["typarray"])
    dumper = type("HalfvecDumper", (_HalfvecBinaryDumper,), {"oid": info.oid})
    for context in (curs, curs.connection):  # this cursor's adapters are already copied
        info.register(context)
        context.adapters.register_dumper(HalfvecParam, dumper)
