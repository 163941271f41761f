"""Splitting a write into facts (docs/architecture.md section 4, step 2): optional, behind one interface.

Without an extractor configured, content is stored verbatim. The one implementation asks
an OpenAI-compatible chat-completions endpoint; whatever goes wrong with it is an
:class:`ExtractionFailed` whose ``reason`` the write's result and audit record carry.
"""

from memwarden.domain.extraction.base import ExtractionFailed, Extractor
from memwarden.domain.extraction.openai import OpenAIExtractor, extractor_from_settings
from memwarden.domain.extraction.parsing import facts_from_completion

__all__ = [
    "ExtractionFailed",
    "Extractor",
    "OpenAIExtractor",
    "extractor_from_settings",
    "facts_from_completion",
]
