"""The tree stored as tiles (domain/model/merkle_tiles.py): grown in batches of any sizes,
its tiles answer exactly the nodes the leaf-by-leaf store holds, so every root and proof made
from them is the naive tree's; an edge tile missing or short is refused."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.domain.model.merkle import (
    NodeKey,
    appended,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    nodes_for_consistency,
    nodes_for_inclusion,
    nodes_for_root,
    root,
)
from memwarden.domain.model.merkle_tiles import (
    TILE_WIDTH,
    TileKey,
    TileNodes,
    edge_tiles,
    grown,
    tiles_for,
)

LEAVES = [leaf_hash(f"record {i}".encode()) for i in range(700)]


def _node_store(leaves: list[bytes]) -> dict[NodeKey, bytes]:
    nodes: dict[NodeKey, bytes] = {}
    for index, leaf in enumerate(leaves):
        nodes.update(appended(index, leaf, nodes.__getitem__))
    return nodes


def _naive(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _naive(leaves[:k]) + _naive(leaves[k:])).digest()


def _tiled(leaves: list[bytes], batches: list[int]) -> dict[TileKey, bytes]:
    tiles: dict[TileKey, bytes] = {}
    size = 0
    for count in batches:
        batch = leaves[size : size + count]
        edge = {key: tiles[key] for key in edge_tiles(size) if key in tiles}
        for key, tile in grown(size, edge, batch).items():
            assert len(tile) >= len(tiles.get(key, b"")), "a tile never shrinks"
            assert tile.startswith(tiles.get(key, b"")), "a tile only grows at its end"
            tiles[key] = tile
        size += len(batch)
    return tiles


def _batches(total: int, rng: random.Random) -> list[int]:
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(min(rng.choice([1, 2, 3, 15, 16, 17, 100, 255, 256, 257]), total - sum(sizes)))
    return sizes


def test_tiles_grown_in_any_batches_hold_exactly_the_nodes_of_the_leaf_by_leaf_store() -> None:
    rng = random.Random(4)
    for total in [1, 2, 15, 16, 17, 255, 256, 257, 300, 700]:
        tiled = TileNodes(_tiled(LEAVES[:total], _batches(total, rng)))
        assert dict(tiled) == _node_store(LEAVES[:total])
        assert len(tiled) == len(_node_store(LEAVES[:total]))


def test_every_root_and_proof_from_tiles_matches_the_naive_tree() -> None:
    tiles = TileNodes(_tiled(LEAVES, _batches(len(LEAVES), random.Random(9))))
    nodes = _node_store(LEAVES)
    rng = random.Random(6962)
    for size in range(1, len(LEAVES) + 1):
        assert root(size, tiles) == _naive(LEAVES[:size])
        index, first = rng.randrange(size), rng.randint(1, size)
        assert inclusion_proof(index, size, tiles) == inclusion_proof(index, size, nodes)
        assert consistency_proof(first, size, tiles) == consistency_proof(first, size, nodes)


@given(
    st.integers(1, 5000).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1), st.integers(1, n)))
)
def test_a_proof_reads_few_tiles(at: tuple[int, int, int]) -> None:
    size, index, first = at
    keys = nodes_for_inclusion(index, size) | nodes_for_root(size)
    depth = size.bit_length()
    assert len(tiles_for(keys)) <= 2 * (depth // 4 + 1) + 1
    assert len(tiles_for(nodes_for_consistency(first, size))) <= 3 * (depth // 4 + 1)


def test_an_edge_tile_missing_or_short_is_refused() -> None:
    tiles = _tiled(LEAVES[:20], [20])
    with pytest.raises(LookupError):
        grown(20, {}, LEAVES[20:21])
    with pytest.raises(LookupError):
        grown(20, {(0, 1): tiles[(0, 1)][:32]}, LEAVES[20:21])
    assert grown(20, {(0, 1): tiles[(0, 1)] + bytes(32)}, LEAVES[20:21])[(0, 1)] == b"".join(LEAVES[16:21])


def test_the_edge_tiles_are_the_partly_filled_ones() -> None:
    assert edge_tiles(0) == []
    assert edge_tiles(TILE_WIDTH) == [(1, 0)]
    assert edge_tiles(TILE_WIDTH + 1) == [(0, 1), (1, 0)]
    assert edge_tiles(TILE_WIDTH**2) == [(2, 0)]
    with pytest.raises(KeyError):
        TileNodes({})[(0, 0)]
