"""Judges behind one Protocol (domain/model/judging.py): the built-in rules, or a model
behind an OpenAI-compatible endpoint; ``judge_from_settings`` picks the configured one."""

from memwarden.domain.judging.openai import OpenAIJudge, judge_from_settings

__all__ = ["OpenAIJudge", "judge_from_settings"]
