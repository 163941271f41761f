"""The bitemporal timeline: each memory's system-time intervals, and the ledger clock."""
