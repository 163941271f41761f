"""Classification of every persisted fact (docs/architecture.md section 4, step 4)."""

from __future__ import annotations

import pytest

from memwarden.domain.model.classification import Classification, classify, luhn_valid

# Well-known documentation / test values, never real credentials.
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def pii(text: str) -> tuple[str, ...]:
    return classify(text).pii


def secrets(text: str) -> tuple[str, ...]:
    return classify(text).secrets


def test_plain_text_is_internal_and_clean() -> None:
    assert classify("The deploy window is Tuesday at noon") == Classification(
        sensitivity="internal", pii=(), secrets=()
    )


# -- email ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["mail dana@example.com", "dana.o'neil+ops@mail.example.co.uk", "<x_y%z@sub-1.example.io>"]
)
def test_emails(text: str) -> None:
    assert "email" in pii(text)


@pytest.mark.parametrize("text", ["dana at example dot com", "user@localhost", "@dana on slack", "a@b.c"])
def test_not_emails(text: str) -> None:
    assert "email" not in pii(text)


# -- phones ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "call +1 415 555 0100",
        "call 415-555-0100",
        "call 415.555.0100",
        "call (415) 555-0100",
        "call +1 (415) 555-0100",
        "call +14155550100",
        "ring +44 20 7946 0958",
        "ring 020 7946 0958",
        "tel +49 30 1234 5678",
    ],
)
def test_phones(text: str) -> None:
    assert pii(text) == ("phone",)


@pytest.mark.parametrize(
    "text",
    [
        "released on 2026-11-30",
        "meeting 2026-11-30 14:30",
        "meeting 2026-11-30 14:30:05",
        "deadline 2026-11-30T14:30:00Z",
        "build 2026.11.30 14.30",
        "dated 2026/11/30",
        "room 1234",
        "PIN 12 34",
        "ticket 12-345",
        "the 3 4 5 triangle",
        "version 1.22.333",
        "host 192.168.100.200",
        "between 10:30 and 11:45",
        "about 1,000,000 users",
    ],
)
def test_dates_times_and_short_numbers_are_not_phones(text: str) -> None:
    assert "phone" not in pii(text)


def test_a_phone_next_to_a_date_is_still_a_phone() -> None:
    assert pii("2026-11-30: call Dana at +1 415 555 0100") == ("phone",)


# -- cards ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1111",
        "card 4111-1111-1111-1111",
        "card 4111111111111111",
        "amex 3782 822463 10005",
        "visa 4222222222222",
        "visa13 4222222222222",  # digits glued to a word before it
        "ref 12345 4111 1111 1111 1111",  # glued to a number before it
    ],
)
def test_cards_when_luhn_valid(text: str) -> None:
    assert "card" in pii(text)


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # one digit off: Luhn fails
        "order 1234567890123",  # Luhn-invalid 13 digits
        "short 4242 4242 42",  # too few digits
        "long 41111111111111111111111",  # too many digits in one number
    ],
)
def test_not_cards(text: str) -> None:
    assert "card" not in pii(text)


def test_a_card_is_not_also_a_phone_but_a_separate_phone_is() -> None:
    assert pii("card 4111 1111 1111 1111") == ("card",)
    assert pii("card 4111 1111 1111 1111, call +1 415 555 0100") == ("card", "phone")


@pytest.mark.parametrize(
    ("digits", "valid"),
    [
        ("4111111111111111", True),
        ("4111111111111112", False),
        ("79927398713", True),
        ("0", True),
        ("378282246310005", True),
        ("378282246310006", False),
    ],
)
def test_luhn(digits: str, valid: bool) -> None:
    assert luhn_valid(digits) is valid


# -- national ids and IBAN ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["SSN 123-45-6789", "ssn:078-05-1120"])
def test_us_ssn(text: str) -> None:
    assert pii(text) == ("us_ssn",)  # and not a phone as well


@pytest.mark.parametrize(
    "text",
    [
        "SSN 000-45-6789",
        "SSN 666-45-6789",
        "SSN 923-45-6789",
        "SSN 123-00-6789",
        "SSN 123-45-0000",
        "id 123456789",
    ],
)
def test_not_us_ssn(text: str) -> None:
    assert "us_ssn" not in pii(text)


@pytest.mark.parametrize("text", ["NINO AB123456C", "NI number: AB 12 34 56 C", "JG103759A"])
def test_uk_nino(text: str) -> None:
    assert pii(text) == ("uk_nino",)


@pytest.mark.parametrize("text", ["DA123456C", "AO123456C", "QQ123456C", "AB123456E", "ab123456c"])
def test_not_uk_nino(text: str) -> None:
    assert "uk_nino" not in pii(text)


@pytest.mark.parametrize(
    "text",
    ["IBAN GB82 WEST 1234 5698 7654 32", "pay DE89370400440532013000", "FR14 2004 1010 0505 0001 3M02 606"],
)
def test_iban(text: str) -> None:
    assert pii(text) == ("iban",)  # its digits are not read as a phone


# -- secrets --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"key {AWS_KEY}", "aws_access_key"),
        ("temp ASIAY34FZKBOKMUTVV7A", "aws_access_key"),
        ("-----BEGIN PRIVATE KEY-----\nMIIEvQ...", "private_key"),
        ("-----BEGIN RSA PRIVATE KEY-----", "private_key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "private_key"),
        ("-----BEGIN EC PRIVATE KEY-----", "private_key"),
        ("-----BEGIN ENCRYPTED PRIVATE KEY-----", "private_key"),
        ("-----BEGIN PGP PRIVATE KEY BLOCK-----", "private_key"),
        ("token ghp_" + "a1B2" * 9, "github_token"),
        ("token gho_" + "Z" * 36, "github_token"),
        ("token github_pat_11ABCDEFG0" + "x1Y2_" * 14, "github_token"),
        ("bot xoxb-1234567890-abcdefghij", "slack_token"),
        ("user xoxp-12345-67890-abcdef", "slack_token"),
        (f"bearer {JWT}", "jwt"),
        ("stripe sk_live_" + "a" * 24, "api_key"),
        ("openai sk-proj-" + "b" * 32, "api_key"),
        ("password: hunter22", "password"),
        ("PASSWORD=correct-horse", "password"),
        ("db pwd = s3cr3t!", "password"),
        ("my password is hunter2", "password"),
        ("the passphrase is tangerine-dream", "password"),
        ("secret: abcd1234", "password"),
    ],
)
def test_secrets(text: str, kind: str) -> None:
    result = classify(text)
    assert kind in result.secrets
    assert result.sensitivity == "secret"


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----",
        "AKIA is the prefix of AWS access keys",
        "ghp_short",
        "xoxb-short",
        "eyJhbGciOiJIUzI1NiJ9 alone is only a header",
        "the password is required for login",
        "the password is stored in the vault",
        "Dana's password was reset yesterday",
        "password: abc",  # too short to be one
        "The secret is that we ship on Friday",
        "sk-short",
    ],
)
def test_not_secrets(text: str) -> None:
    assert secrets(text) == ()


def test_several_secret_kinds_are_all_reported() -> None:
    result = classify(f"{AWS_KEY} and password: hunter22 and {JWT}")
    assert set(result.secrets) == {"aws_access_key", "password", "jwt"}


# -- sensitivity ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "sensitivity"),
    [
        ("Dana likes tea", "internal"),
        ("Dana's email is dana@example.com", "confidential"),
        ("call +1 415 555 0100", "confidential"),
        (f"key {AWS_KEY}", "secret"),
        (f"dana@example.com key {AWS_KEY}", "secret"),  # secret outranks pii
    ],
)
def test_sensitivity_levels(text: str, sensitivity: str) -> None:
    assert classify(text).sensitivity == sensitivity


def test_pii_kinds_are_sorted_and_unique() -> None:
    result = classify(
        "mail dana@example.com, call +1 415 555 0100, card 4111 1111 1111 1111, "
        "SSN 123-45-6789, NINO AB123456C, IBAN GB82 WEST 1234 5698 7654 32, dana2@example.com"
    )
    assert result.pii == ("card", "email", "iban", "phone", "uk_nino", "us_ssn")


def test_empty_text() -> None:
    assert classify("") == Classification()
