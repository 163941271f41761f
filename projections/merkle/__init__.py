"""The RFC 6962 tree over the ledger: its stored subtrees, and the proofs made from them."""
