"""The search index: its projection, the retrieval drivers and their conformance kit."""
