"""The RFC 6962 tree (domain/model/merkle.py) against a naive tree and an independent
implementation (pymerkle, RFC 9162), and its proofs checked by the client's verifier
(memwarden_client/proofs.py, RFC 9162 §2.1): every size 1-300, random positions."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymerkle import InmemoryTree

from memwarden.domain.model.merkle import (
    EMPTY_ROOT,
    NodeKey,
    appended,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    nodes_for_consistency,
    nodes_for_inclusion,
    root,
)
from memwarden_client.proofs import ProofError, verify_consistency, verify_inclusion

SIZES = 300
RECORDS = [f"record {i}: ciphertext".encode() for i in range(SIZES)]


def _naive(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _naive(leaves[:k]) + _naive(leaves[k:])).digest()


def _stored(records: list[bytes]) -> dict[NodeKey, bytes]:
    nodes: dict[NodeKey, bytes] = {}
    for index, record in enumerate(records):
        nodes.update(appended(index, leaf_hash(record), nodes.__getitem__))
    return nodes


NODES = _stored(RECORDS)
LEAVES = [leaf_hash(r) for r in RECORDS]


@pytest.fixture(scope="module")
def independent() -> InmemoryTree:
    tree = InmemoryTree(algorithm="sha256")
    for record in RECORDS:
        tree.append_entry(record)
    return tree


def test_every_root_matches_a_naive_tree_and_an_independent_implementation(independent: InmemoryTree) -> None:
    assert root(0, NODES) == EMPTY_ROOT
    for size in range(1, SIZES + 1):
        ours = root(size, NODES)
        assert ours == _naive(LEAVES[:size]), size
        assert ours == independent.get_root(size), size


def test_inclusion_proofs_of_every_size_verify_against_the_independent_root(
    independent: InmemoryTree,
) -> None:
    rng = random.Random(6962)
    for size in range(1, SIZES + 1):
        for index in {0, size - 1, rng.randrange(size)}:
            proof = inclusion_proof(index, size, NODES)
            verify_inclusion(index, size, LEAVES[index], proof, independent.get_root(size))
            with pytest.raises(ProofError):
                verify_inclusion(index, size, leaf_hash(b"edited"), proof, independent.get_root(size))
            if size > 1:
                with pytest.raises(ProofError):
                    verify_inclusion(
                        (index + 1) % size, size, LEAVES[index], proof, independent.get_root(size)
                    )


def test_consistency_proofs_of_every_size_verify_against_the_independent_roots(
    independent: InmemoryTree,
) -> None:
    rng = random.Random(9162)
    for second in range(1, SIZES + 1):
        for first in {1, second, rng.randint(1, second)}:
            proof = consistency_proof(first, second, NODES)
            verify_consistency(
                first, second, independent.get_root(first), independent.get_root(second), proof
            )
            if first < second:
                forged = _stored([*RECORDS[: first - 1], b"rewritten", *RECORDS[first:second]])
                with pytest.raises(ProofError):
                    verify_consistency(
                        first, second, root(first, forged), independent.get_root(second), proof
                    )


def test_a_proof_needs_only_the_nodes_it_names_and_few_of_them() -> None:
    for index, size in ((0, 1), (5, 300), (299, 300), (128, 257)):
        needed = nodes_for_inclusion(index, size)
        assert inclusion_proof(index, size, {k: NODES[k] for k in needed}) == inclusion_proof(
            index, size, NODES
        )
        assert len(needed) <= 2 * size.bit_length()
    needed = nodes_for_consistency(100, 300)
    assert consistency_proof(100, 300, {k: NODES[k] for k in needed}) == consistency_proof(100, 300, NODES)


@given(
    st.integers(min_value=1, max_value=SIZES).flatmap(lambda n: st.tuples(st.integers(0, n - 1), st.just(n)))
)
def test_an_inclusion_proof_is_never_longer_than_the_tree_is_deep(at: tuple[int, int]) -> None:
    index, size = at
    proof = inclusion_proof(index, size, NODES)
    assert len(proof) <= (size - 1).bit_length()
    verify_inclusion(index, size, LEAVES[index], proof, root(size, NODES))


@given(st.integers(min_value=1, max_value=SIZES).flatmap(lambda n: st.tuples(st.integers(1, n), st.just(n))))
def test_any_earlier_tree_is_proven_a_prefix_of_any_later_one(sizes: tuple[int, int]) -> None:
    first, second = sizes
    proof = consistency_proof(first, second, NODES)
    verify_consistency(first, second, root(first, NODES), root(second, NODES), proof)


def test_truncated_or_reordered_histories_fail() -> None:
    proof = consistency_proof(10, 20, NODES)
    reordered = _stored([RECORDS[1], RECORDS[0], *RECORDS[2:20]])
    with pytest.raises(ProofError):
        verify_consistency(10, 20, root(10, NODES), root(20, reordered), proof)
    with pytest.raises(ProofError):
        verify_consistency(10, 20, root(10, NODES), root(20, NODES), proof[:-1])
    with pytest.raises(ProofError):
        verify_consistency(20, 10, root(20, NODES), root(10, NODES), proof)


class _Asked(dict[NodeKey, bytes]):
    """The real nodes, remembering which were read."""

    def __init__(self) -> None:
        super().__init__(NODES)
        self.asked: set[NodeKey] = set()

    def __getitem__(self, key: NodeKey) -> bytes:
        self.asked.add(key)
        return super().__getitem__(key)


def test_the_nodes_named_for_a_proof_are_exactly_the_ones_it_reads() -> None:
    rng = random.Random(9162)
    for size in range(1, SIZES + 1):
        for index in {0, size - 1, rng.randrange(size)}:
            asked = _Asked()
            inclusion_proof(index, size, asked)
            assert nodes_for_inclusion(index, size) == asked.asked
        for first in {1, size, rng.randint(1, size)}:
            asked = _Asked()
            consistency_proof(first, size, asked)
            root(first, asked)
            root(size, asked)
            assert nodes_for_consistency(first, size) == asked.asked
