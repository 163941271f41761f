-- 0014: the Merkle tree's nodes stored as tiles (domain/model/merkle_tiles.py, after C2SP
-- tlog-tiles): tile (level, idx) holds the hashes of the tree's nodes at height 4 * level,
-- indexes [16 * idx, 16 * idx + 16), as far as they exist; the last tile of a level grows until
-- full. Keeping the tree writes a few rows a batch instead of two a leaf, and a proof reads a
-- few rows. The tiles are made from the nodes 0010 and 0011 stored (those at heights 4 * level,
-- which exist exactly up to the stored size), so the tree is not rebuilt.
CREATE TABLE IF NOT EXISTS memwarden.merkle_tiles (
    level smallint NOT NULL,
    idx bigint NOT NULL,
    hashes bytea NOT NULL,
    PRIMARY KEY (level, idx)
);

CREATE TABLE IF NOT EXISTS memwarden.merkle_tenant_tiles (
    tenant text NOT NULL,
    level smallint NOT NULL,
    idx bigint NOT NULL,
    hashes bytea NOT NULL,
    PRIMARY KEY (tenant, level, idx)
);

INSERT INTO memwarden.merkle_tiles (level, idx, hashes)
SELECT level / 4, idx / 16, string_agg(hash, ''::bytea ORDER BY idx)
FROM memwarden.merkle_nodes WHERE level % 4 = 0 GROUP BY level / 4, idx / 16
ON CONFLICT DO NOTHING;

INSERT INTO memwarden.merkle_tenant_tiles (tenant, level, idx, hashes)
SELECT tenant, level / 4, idx / 16, string_agg(hash, ''::bytea ORDER BY idx)
FROM memwarden.merkle_tenant_nodes WHERE level % 4 = 0 GROUP BY tenant, level / 4, idx / 16
ON CONFLICT DO NOTHING;

DROP TABLE IF EXISTS memwarden.merkle_nodes;
DROP TABLE IF EXISTS memwarden.merkle_tenant_nodes;
