"""The tree's nodes stored as tiles (after C2SP ``tlog-tiles`` and tessera), so that keeping
the tree writes a few rows a batch instead of two a leaf, and a proof reads a few rows.

Tile ``(level, index)`` holds, in order, the hashes of the tree's nodes at height
``level · TILE_HEIGHT``, indexes ``[index · TILE_WIDTH, (index + 1) · TILE_WIDTH)``, as far as
they exist: a full tile holds ``TILE_WIDTH`` of them, the last tile of a level fewer (it grows
until full, then never changes). Level 0 holds the leaves. Every node of the tree
(domain/model/merkle.py's ``(level, index)``) lies in exactly one tile, and is its entries'
subtree: ``TileNodes`` answers it from the tiles, so the pure proofs there run unchanged.

A tile is ``TILE_WIDTH`` = 16 hashes wide (512 bytes): small enough that PostgreSQL keeps it in
the row (no TOAST), wide enough that a batch of a thousand leaves writes about seventy rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from memwarden.domain.model.merkle import NodeKey, node_hash

TILE_HEIGHT = 4
TILE_WIDTH = 1 << TILE_HEIGHT
HASH_SIZE = 32

TileKey = tuple[int, int]
"""(tile level, tile index): node heights ``level · TILE_HEIGHT`` up to ``TILE_HEIGHT - 1``
above, the entries ``[index · TILE_WIDTH, (index + 1) · TILE_WIDTH)`` of the lowest."""


def tile_of(key: NodeKey) -> TileKey:
    """The tile that holds node ``key``'s subtree at its own tile level."""
    level, index = key
    tile_level, height = divmod(level, TILE_HEIGHT)
    return tile_level, (index << height) >> TILE_HEIGHT


def tiles_for(keys: Iterable[NodeKey]) -> set[TileKey]:
    return {tile_of(key) for key in keys}


def entries(tile: bytes) -> int:
    """How many hashes a tile holds."""
    return len(tile) // HASH_SIZE


def subtree(hashes: Sequence[bytes]) -> bytes:
    """The hash of a perfect subtree (a power of two of hashes, one or more)."""
    level = list(hashes)
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def _split(tile: bytes) -> list[bytes]:
    return [tile[i : i + HASH_SIZE] for i in range(0, len(tile), HASH_SIZE)]


def edge_tiles(size: int) -> list[TileKey]:
    """The tiles a tree of ``size`` leaves holds partly filled (one per level at most): what
    appending to it changes besides new tiles."""
    found: list[TileKey] = []
    level, count = 0, size
    while count:
        if count % TILE_WIDTH:
            found.append((level, count // TILE_WIDTH))
        level, count = level + 1, count // TILE_WIDTH
    return found


def grown(size: int, edge: Mapping[TileKey, bytes], leaves: Sequence[bytes]) -> dict[TileKey, bytes]:
    """Every tile (its whole content) that appending leaf hashes ``leaves`` to the tree of
    ``size`` leaves writes, given its ``edge`` tiles (``edge_tiles(size)``; extra entries in
    them are ignored). Raises LookupError when an edge tile is missing or short."""
    written: dict[TileKey, bytes] = {}
    level, start, new = 0, size, list(leaves)
    while new:
        first, held = divmod(start, TILE_WIDTH)
        kept = edge.get((level, first), b"")[: held * HASH_SIZE] if held else b""
        if len(kept) != held * HASH_SIZE:
            raise LookupError(f"tile ({level}, {first}) of the tree of {size} leaves is not all there")
        row = kept + b"".join(new)
        parents: list[bytes] = []
        tile_bytes = TILE_WIDTH * HASH_SIZE
        for offset in range(0, len(row), tile_bytes):
            tile = row[offset : offset + tile_bytes]
            written[(level, first + offset // tile_bytes)] = tile
            if len(tile) == tile_bytes:
                parents.append(subtree(_split(tile)))
        level, start, new = level + 1, start // TILE_WIDTH, parents
    return written


def size_of(last_leaf_tile: TileKey, tile: bytes) -> int:
    """The tree's size from its last level-0 tile."""
    return last_leaf_tile[1] * TILE_WIDTH + entries(tile)


class TileNodes(Mapping[NodeKey, bytes]):
    """The tree's complete nodes, as far as ``tiles`` hold them: node ``(level, index)`` is
    the subtree of its ``2^(level mod TILE_HEIGHT)`` entries in its tile, hashed from its two
    children when first asked (each node at most once)."""

    def __init__(self, tiles: Mapping[TileKey, bytes]) -> None:
        self.tiles = tiles
        self._known: dict[NodeKey, bytes] = {}

    def __getitem__(self, key: NodeKey) -> bytes:
        known = self._known.get(key)
        if known is not None:
            return known
        level, index = key
        height = level % TILE_HEIGHT
        if height:
            found = node_hash(self[(level - 1, 2 * index)], self[(level - 1, 2 * index + 1)])
        else:
            tile = self.tiles.get((level // TILE_HEIGHT, index >> TILE_HEIGHT))
            start = (index % TILE_WIDTH) * HASH_SIZE
            if tile is None or index < 0 or start + HASH_SIZE > len(tile):
                raise KeyError(key)
            found = tile[start : start + HASH_SIZE]
        self._known[key] = found
        return found

    def __iter__(self) -> Iterator[NodeKey]:
        for (tile_level, index), tile in self.tiles.items():
            held = entries(tile)
            for height in range(TILE_HEIGHT):
                first = index << (TILE_HEIGHT - height)
                for j in range(held >> height):
                    yield tile_level * TILE_HEIGHT + height, first + j

    def __len__(self) -> int:
        return sum(entries(t) >> h for t in self.tiles.values() for h in range(TILE_HEIGHT))
