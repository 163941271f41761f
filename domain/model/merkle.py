"""The RFC 6962 (RFC 9162 §2.1) Merkle tree over the ledger, as stored subtree hashes.

Leaf ``i`` is ``SHA-256(0x00 ‖ record_i)``, an interior node ``SHA-256(0x01 ‖ left ‖ right)``,
and a tree of ``n`` leaves splits at the largest power of two below ``n``. The tree is kept as
its *complete* subtrees (Trillian and tessera keep tiles of them): node ``(level, index)``
covers leaves ``[index·2^level, (index+1)·2^level)`` and exists once all of them do. Every
root, inclusion proof and consistency proof of any size up to the stored one is made from
O(log n) such nodes, which never change once written.

Pure: the functions take the stored nodes as a mapping. ``nodes_for_*`` say which nodes a
proof needs (the same recursion without hashing: which nodes are read never depends on their
hashes), so a store can fetch them in one query.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping

NodeKey = tuple[int, int]
"""(level, index): the complete subtree of leaves ``[index·2^level, (index+1)·2^level)``."""
Nodes = Mapping[NodeKey, bytes]

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the empty tree (RFC 6962: the hash of the empty string)."""


def leaf_hash(record: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + record).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def split(size: int) -> int:
    """The largest power of two strictly below ``size`` (``size`` ≥ 2)."""
    return 1 << ((size - 1).bit_length() - 1)


def appended(index: int, leaf: bytes, left_of: Callable[[NodeKey], bytes]) -> Iterator[tuple[NodeKey, bytes]]:
    """The nodes that leaf ``index`` completes: the leaf itself, then each parent whose right
    half it closes. ``left_of(key)`` is the stored left sibling of ``key``."""
    level, at, current = 0, index, leaf
    yield (0, index), leaf
    while at & 1:
        current = node_hash(left_of((level, at - 1)), current)
        level, at = level + 1, at >> 1
        yield (level, at), current


def frontier(size: int) -> list[NodeKey]:
    """The complete subtrees that make up the first ``size`` leaves, left to right."""
    return [
        (level, (size >> level) - 1) for level in range(size.bit_length() - 1, -1, -1) if size >> level & 1
    ]


def subtree_hash(start: int, end: int, nodes: Nodes) -> bytes:
    """MTH of leaves ``[start, end)`` (``start`` aligned as RFC 6962's recursion leaves it)."""
    width = end - start
    if width & (width - 1) == 0 and start % width == 0:
        level = width.bit_length() - 1
        return nodes[(level, start >> level)]
    k = split(width)
    return node_hash(subtree_hash(start, start + k, nodes), subtree_hash(start + k, end, nodes))


def root(size: int, nodes: Nodes) -> bytes:
    return EMPTY_ROOT if size == 0 else subtree_hash(0, size, nodes)


def inclusion_proof(index: int, size: int, nodes: Nodes) -> list[bytes]:
    """RFC 6962 PATH(index, D[0:size]): the audit path, nearest the leaf first."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    return _path(index, 0, size, nodes)


def _path(index: int, start: int, end: int, nodes: Nodes) -> list[bytes]:
    if end - start == 1:
        return []
    k = split(end - start)
    if index < start + k:
        return [*_path(index, start, start + k, nodes), subtree_hash(start + k, end, nodes)]
    return [*_path(index, start + k, end, nodes), subtree_hash(start, start + k, nodes)]


def consistency_proof(first: int, second: int, nodes: Nodes) -> list[bytes]:
    """RFC 6962 PROOF(first, D[0:second]): what shows the tree of ``first`` leaves is a
    prefix of the tree of ``second``. Empty when ``first`` is 0 or equals ``second``."""
    if not 0 <= first <= second:
        raise ValueError(f"no consistency proof from {first} to {second}")
    if first in (0, second):
        return []
    return _subproof(first, 0, second, nodes, whole=True)


def _subproof(m: int, start: int, end: int, nodes: Nodes, *, whole: bool) -> list[bytes]:
    if m == end - start:
        return [] if whole else [subtree_hash(start, end, nodes)]
    k = split(end - start)
    if m <= k:
        return [*_subproof(m, start, start + k, nodes, whole=whole), subtree_hash(start + k, end, nodes)]
    return [*_subproof(m - k, start + k, end, nodes, whole=False), subtree_hash(start, start + k, nodes)]


def _range_nodes(start: int, end: int, into: set[NodeKey]) -> None:
    """The stored nodes ``subtree_hash(start, end)`` reads (RFC 6962's recursion, no hashing)."""
    width = end - start
    if width & (width - 1) == 0 and start % width == 0:
        level = width.bit_length() - 1
        into.add((level, start >> level))
        return
    k = split(width)
    _range_nodes(start, start + k, into)
    _range_nodes(start + k, end, into)


def nodes_for_root(size: int) -> set[NodeKey]:
    return set(frontier(size))


def nodes_for_inclusion(index: int, size: int) -> set[NodeKey]:
    """The nodes ``inclusion_proof(index, size)`` reads: at each split, the other half's."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    wanted: set[NodeKey] = set()
    start, end = 0, size
    while end - start > 1:
        k = split(end - start)
        if index < start + k:
            _range_nodes(start + k, end, wanted)
            end = start + k
        else:
            _range_nodes(start, start + k, wanted)
            start += k
    return wanted


def nodes_for_consistency(first: int, second: int) -> set[NodeKey]:
    """The nodes ``consistency_proof(first, second)`` and both roots read."""
    if not 0 <= first <= second:
        raise ValueError(f"no consistency proof from {first} to {second}")
    wanted: set[NodeKey] = set()
    if first:
        _range_nodes(0, first, wanted)
    if second:
        _range_nodes(0, second, wanted)
    if first in (0, second):
        return wanted
    m, start, end, whole = first, 0, second, True
    while m != end - start:
        k = split(end - start)
        if m <= k:
            _range_nodes(start + k, end, wanted)
            end = start + k
        else:
            _range_nodes(start, start + k, wanted)
            m, start, whole = m - k, start + k, False
    if not whole:
        _range_nodes(start, end, wanted)
    return wanted
