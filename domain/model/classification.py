"""Classification of every persisted fact: PII kinds, secret kinds, sensitivity.

Deterministic pattern rules, so the result is explainable and testable without a model.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

Sensitivity = Literal["public", "internal", "confidential", "secret"]


class Classification(msgspec.Struct, frozen=True):
    sensitivity: Sensitivity = "internal"
    pii: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()


_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]\d{2,4}){2,4}(?!\w)"
)
_ISO_DATE = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}(?:[ T]\d{1,2}[:.]\d{2}(?:[:.]\d{2})?)?")
_CARD_CANDIDATE = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")
_NATIONAL_IDS: dict[str, re.Pattern[str]] = {
    "us_ssn": re.compile(r"(?<!\d)(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?!\d)"),
    "uk_nino": re.compile(
        r"\b(?![DFIQUV])[A-CEGHJ-PR-TW-Z](?![DFIQUVO])[A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"
    ),
    "iban": re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){3,7}(?: ?[A-Z0-9]{1,3})?\b"),
}
_SECRETS: dict[str, re.Pattern[str]] = {
    "aws_access_key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "private_key": re.compile(r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----"),
    "github_token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    "slack_token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"),
    "api_key": re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b|\bsk-[A-Za-z0-9_-]{20,}\b"),
    "password": re.compile(r"(?i)\b(?:password|passwd|pwd|passphrase|secret)\b\s*(?:is|[:=])\s*\S{4,}"),
}


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _has_card(text: str) -> bool:
    for match in _CARD_CANDIDATE.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            return True
    return False


def _has_phone(text: str) -> bool:
    """A phone number has 9 to 15 digits; dates and times (2026-11-30) are not phones."""
    for match in _PHONE.finditer(text):
        candidate = match.group()
        if _ISO_DATE.fullmatch(candidate.strip()):
            continue
        if 9 <= sum(c.isdigit() for c in candidate) <= 15:
            return True
    return False


def classify(text: str) -> Classification:
    pii: list[str] = []
    if _EMAIL.search(text):
        pii.append("email")
    if _has_card(text):
        pii.append("card")
    pii.extend(kind for kind, pattern in _NATIONAL_IDS.items() if pattern.search(text))
    if "card" not in pii and _has_phone(text):
        pii.append("phone")
    secrets = tuple(kind for kind, pattern in _SECRETS.items() if pattern.search(text))
    sensitivity: Sensitivity = "secret" if secrets else "confidential" if pii else "internal"
    return Classification(sensitivity=sensitivity, pii=tuple(sorted(pii)), secrets=secrets)
