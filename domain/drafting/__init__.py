"""Consolidation's optional model drafter, behind an OpenAI-compatible endpoint;
``drafter_from_settings`` picks the configured one (none: the built-in extractive drafter)."""

from memwarden.domain.drafting.openai import OpenAIDrafter, drafter_from_settings

__all__ = ["OpenAIDrafter", "drafter_from_settings"]
