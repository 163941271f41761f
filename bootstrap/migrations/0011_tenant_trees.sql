-- 0011: with a chain per tenant (MEMWARDEN_LEDGER_CHAINS=tenant), a Merkle tree per tenant as
-- well (docs/architecture.md §12): leaf i of tenant T is the leaf of T's event at tenant
-- position i + 1 (the same leaf as in the ledger's tree), stored like merkle_nodes. A tenant's
-- auditor proves its own records against its own tree; checkpoints of a tenant's tree name it.
CREATE TABLE IF NOT EXISTS memwarden.merkle_tenant_nodes (
    tenant text NOT NULL,
    level smallint NOT NULL,
    idx bigint NOT NULL,
    hash bytea NOT NULL,
    PRIMARY KEY (tenant, level, idx)
);

ALTER TABLE memwarden.checkpoints ADD COLUMN IF NOT EXISTS tree text;
