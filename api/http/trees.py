"""Which Merkle tree a caller proves and checkpoints against: the ledger's, or — with a chain
per tenant — its own tenant's only (docs/architecture.md §12)."""

from __future__ import annotations

from memwarden.domain.ledger.app import Ledger, TenantTree
from memwarden.domain.ledger.checkpoints import Checkpoint
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import tenant_of
from memwarden.projections.merkle.reads import TreeReads


def tree_of(ledger: Ledger, identity: Identity) -> str | None:
    """Whose tree a caller proves against: with a chain per tenant, its tenant's only."""
    return tenant_of(identity.namespace) if ledger.tenant_chains else None


def checkpoint_now(ledger: Ledger, trees: TreeReads, identity: Identity) -> Checkpoint:
    """A checkpoint of the caller's tree (the ledger's, or its tenant's), signed now."""
    tree = tree_of(ledger, identity)
    if tree is None:
        return ledger.checkpoint(trees.root)
    size = trees.size(tree)
    return ledger.checkpoint(tree=TenantTree(tree, size, lambda s: trees.root(s, tree)))
