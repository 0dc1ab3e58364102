"""Tests for orchestrator.memory.gate.secrets: credentials are caught, ordinary prose is not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.memory.gate.secrets import find_secret

# Credential-shaped samples are assembled from pieces so that the source file itself does not
# look like it leaks keys to scanners. None of them is real.
_B62 = "Zx8Qw2Er5Ty7Ui9Op1As3Df6Gh4Jk0Lm"
_JWT = ".".join(
    [
        "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
        "eyJ" + "zdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ",
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    ]
)

TRUE_POSITIVES = [
    ("anthropic key: " + "sk-" + "ant-api03-" + _B62, "api key"),
    ("OPENAI_API_KEY=" + "sk-" + "proj-" + _B62, "api key"),
    ("stripe " + "sk_" + "live_" + _B62, "api key"),
    ("aws id " + "AKIA" + "IOSFODNN7EXAMPLE", "api key"),
    ("maps key " + "AIza" + "SyA1234567890abcdefghijklmnopqrstuv", "api key"),
    ("push with " + "ghp_" + _B62 + "abcd", "token"),
    ("oauth " + "gho_" + _B62 + "wxyz", "token"),
    ("fine-grained " + "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnop", "token"),
    ("slack bot " + "xoxb-" + "1234567890-abcdefghijkl", "token"),
    ("slack user " + "xoxp-" + "1234567890-abcdefghijkl", "token"),
    ("session " + _JWT, "token"),
    ("-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEpAIBAAKCAQEA", "private key"),
    ("-----BEGIN " + "PRIVATE KEY-----", "private key"),
    ("-----BEGIN OPENSSH " + "PRIVATE KEY-----", "private key"),
    ("api_key = " + _B62[:20], "api key"),
    ('{"client_secret": "' + _B62 + '"}', "api key"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "api key"),
    ("secret=" + "3f786850e387550fdab836ed7e6dc881", "api key"),
    ("token: " + _B62, "token"),
    ("X-Auth-Token=" + _B62, "token"),
    ("Authorization: Bearer " + _B62, "token"),
    ("部署令牌：" + _B62, "token"),  # noqa: RUF001 - a Chinese full-width colon
    ("password: hunter2", "password"),
    ("password=x", "password"),
    ("Password = Tr0ub4dor&3", "password"),
    ("DB_PASSWORD=s3cr3t!", "password"),
    ('{"passwd": "letmein"}', "password"),
    ("pwd=abc123", "password"),
    ("wifi passphrase: correct-horse", "password"),
    ("数据库密码：abc123", "password"),  # noqa: RUF001 - a Chinese full-width colon
    ("密码=Passw0rd", "password"),
    ("the card is 4111 1111 1111 1111, exp 12/26", "card number"),
    ("card 4111-1111-1111-1111", "card number"),
    ("4111111111111111", "card number"),
    ("mastercard 5555 5555 5555 4444 on file", "card number"),
    ("amex 3782 822463 10005", "card number"),
    ("4111 1111 1111 1111 12 26", "card number"),
]

TRUE_NEGATIVES = [
    "we decided to use JWT for auth",
    "JWTs are signed with RS256 and rotated weekly",
    "the password policy needs 12 characters",
    "passwords are hashed with bcrypt",
    "passwordless login is planned for Q3",
    "password: required",
    "password: ***",
    "password=<your password>",
    "password=${DB_PASSWORD}",
    "密码：请联系管理员",  # noqa: RUF001 - "password: contact the admin"
    "密码策略需要12个字符",
    "PWD=/home/alex/project",
    "call 555-0100",
    "call +1 415 555 0100 or +86 138 0013 8000",
    "order 1234 5678",
    "order 1234 5678 9012",
    "version 1.2.3, then 10.15.7 and 2.0.0-rc.1",
    "released 2024-01-15, patched 2024-02-29 2024-03-01",
    "at 2024-01-15T10:30:00Z",
    "request id 123e4567-e89b-12d3-a456-426614174000",
    "fixed in commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "max_tokens: 1024",
    "token: expires hourly",
    "the token budget is 100000",
    "secret: the_launch_date_is_2025",
    "keep the secret: nobody outside the team knows",
    "use scikit-learn and the sk- prefix",
    "the risk-management-framework-v2 document",
    "timestamp 1700000000000 ms",
    "serial 4111111111111111x",
    "a 22-digit id 1234567890123456789012",
    "price is 12,345,678.90",
    "pi is 3.14159265358979323846",
    "",
]


@pytest.mark.parametrize(("text", "kind"), TRUE_POSITIVES)
def test_true_positives(text: str, kind: str):
    """Each credential shape is found and named."""
    assert find_secret(text) == kind


@pytest.mark.parametrize("text", TRUE_NEGATIVES)
def test_true_negatives(text: str):
    """Ordinary prose, numbers, dates, ids and hashes are not secrets."""
    assert find_secret(text) is None


def test_card_number_needs_luhn():
    """A card-shaped number that fails the Luhn check is not a card."""
    assert find_secret("4111 1111 1111 1111") == "card number"
    assert find_secret("4111 1111 1111 1112") is None


def test_first_rule_wins():
    """When several kinds appear, the earliest rule in the documented order names it."""
    text = "password: hunter2 and " + "-----BEGIN EC " + "PRIVATE KEY-----"
    assert find_secret(text) == "private key"


@settings(max_examples=300, database=None)
@given(st.text(max_size=300))
def test_never_raises(text: str):
    """Arbitrary text gives a kind or None, never an exception."""
    assert find_secret(text) in {None, "api key", "private key", "password", "card number", "token"}


@settings(max_examples=200, database=None)
@given(st.text(alphabet="0123456789 -", max_size=200))
def test_digit_soup_is_fast_and_safe(text: str):
    """Long runs of digits, spaces and dashes are scanned without error."""
    find_secret(text * 5)
