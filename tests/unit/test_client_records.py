"""memwarden_client/records.py without I/O: a leaf's record parses back to what the chain's
canonical form wrote, a proof file's record must be the proven leaf at the named position,
and a certificate must be exactly the one the record holds."""

from __future__ import annotations

import base64
import json
from uuid import UUID, uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.domain.ledger.chain import canonical
from memwarden_client.proofs import ProofError, leaf_hash
from memwarden_client.records import LedgerRecord, check_certificate, record_of

CERTIFICATE = {"id": "3f0c8f51-2f4e-4d7e-9d1c-2c5b7c0c1a10", "reason": "subject asked", "count": 1}


def _document(record: bytes, position: int) -> dict[str, object]:
    return {
        "kind": "inclusion",
        "position": position,
        "leaf_hash": base64.b64encode(leaf_hash(record)).decode(),
        "record": base64.b64encode(record).decode(),
    }


@given(
    st.integers(1, 2**62),
    st.uuids(),
    st.integers(1, 2**31),
    st.text(min_size=1, max_size=40),
    st.binary(max_size=300),
)
def test_a_record_parses_back_to_what_the_chain_wrote(
    position: int, stream: UUID, version: int, topic: str, state: bytes
) -> None:
    parsed = LedgerRecord.parse(canonical(position, stream, version, topic, state))
    assert (parsed.position, parsed.stream, parsed.version, parsed.type, parsed.state) == (
        position,
        stream,
        version,
        topic,
        state,
    )


@given(st.binary(max_size=80))
def test_garbage_is_never_taken_for_a_record(data: bytes) -> None:
    try:
        parsed = LedgerRecord.parse(data)
    except ProofError:
        return
    assert canonical(parsed.position, parsed.stream, parsed.version, parsed.type, parsed.state) == data


def test_the_record_must_be_the_proven_leaf_at_the_named_position() -> None:
    record = canonical(7, uuid4(), 1, "MemoryWritten", b'{"s":"ciphertext"}')
    assert record_of(_document(record, 7)).type == "MemoryWritten"
    with pytest.raises(ProofError, match="position 7, the proof names 8"):
        record_of(_document(record, 8))
    other = canonical(7, uuid4(), 1, "MemoryWritten", b"{}")
    with pytest.raises(ProofError, match="not the proven leaf"):
        record_of({**_document(record, 7), "record": base64.b64encode(other).decode()})
    with pytest.raises(ProofError, match="no readable record"):
        record_of({**_document(record, 7), "record": "not base64!"})


def test_a_certificate_must_be_exactly_the_recorded_one() -> None:
    state = json.dumps({"certificate": CERTIFICATE, "at": "2026-12-04T03:00:00Z"}).encode()
    record = LedgerRecord.parse(canonical(9, UUID(CERTIFICATE["id"]), 1, "ErasureCertified", state))
    check_certificate(record, dict(CERTIFICATE))
    with pytest.raises(ProofError, match="differs"):
        check_certificate(record, {**CERTIFICATE, "reason": "routine cleanup"})
    written = LedgerRecord.parse(canonical(9, UUID(CERTIFICATE["id"]), 1, "MemoryWritten", state))
    with pytest.raises(ProofError, match="not a certified erasure"):
        check_certificate(written, dict(CERTIFICATE))
    elsewhere = LedgerRecord.parse(canonical(9, uuid4(), 1, "ErasureCertified", state))
    with pytest.raises(ProofError, match="another certificate's stream"):
        check_certificate(elsewhere, dict(CERTIFICATE))
