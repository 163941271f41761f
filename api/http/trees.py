"""Which Merkle tree a caller proves and checkpoints against: the ledger's, or — with a chain
per tenant — its own tenant's only (docs/architecture.md §12)."""

from __future__ import annotations

from memwarden.api.http.state import ApiState
from memwarden.domain.ledger.app import TenantTree
from memwarden.domain.ledger.checkpoints import Checkpoint
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import tenant_of


def tree_of(state: ApiState, identity: Identity) -> str | None:
    """Whose tree a caller proves against: with a chain per tenant, its tenant's only."""
    return tenant_of(identity.namespace) if state.runtime.ledger.tenant_chains else None


def checkpoint_now(state: ApiState, identity: Identity) -> Checkpoint:
    """A checkpoint of the caller's tree (the ledger's, or its tenant's), signed now."""
    tree, reads = tree_of(state, identity), state.reads.tree
    if tree is None:
        return state.runtime.ledger.checkpoint(reads.root)
    size = reads.size(tree)
    return state.runtime.ledger.checkpoint(tree=TenantTree(tree, size, lambda s: reads.root(s, tree)))
