"""Query vectors as bound parameters in pgvector's binary ``halfvec`` form.

Formatting 384 floats as text costs about 0.25 ms of Python per query; the binary form
(dimensions, a reserved word, then big-endian float16 values, as pgvector's
``halfvec_recv`` reads it) costs a few microseconds. The parameter's type is left to the
server, which takes it from the ``::halfvec(d)`` cast around the placeholder.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format


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
