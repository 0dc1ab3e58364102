"""Spot credentials in text before it is stored as a memory.

:func:`find_secret` names the first kind of secret it finds ("private key", "api key",
"token", "password" or "card number") or returns ``None``. It is a guard, not a scanner: it
looks for the shapes that leak in conversation and keeps false positives on ordinary prose
low. The rules, in the order they are tried:

1. **Private key**: a PEM header ``-----BEGIN ... PRIVATE KEY-----`` (RSA, EC, OPENSSH,
   ENCRYPTED, PGP ``... PRIVATE KEY BLOCK``).
2. **Provider key shapes**: ``sk-...`` and ``sk-ant-...`` (Anthropic, OpenAI: 20 or more
   characters holding a letter and a digit), ``sk_live_``/``rk_live_`` (Stripe), ``AKIA``/
   ``ASIA`` plus 16 characters (AWS), ``AIza`` plus 35 (Google) are api keys; ``ghp_``,
   ``gho_``, ``ghu_``, ``ghs_``, ``ghr_`` plus 36 or more and ``github_pat_`` (GitHub),
   ``xoxb-``/``xoxp-``/``xoxa-``/``xoxr-``/``xoxs-`` (Slack) are tokens.
3. **JWT**: three dot-separated base64url parts, the first two starting ``ey`` (``eyJ`` for
   the header), each at least 10 characters. The word "JWT" alone is not a token.
4. **Credential assignments**: a name ending in ``api_key``, ``apikey``, ``secret``,
   ``secret_key``, ``access_key``, ``token`` (``_``, ``-`` and ``.`` ignored, any case; also
   密钥, 秘钥 and 令牌) followed by ``:`` or ``=`` and a value, or ``Bearer <value>``. The
   value must look random: at least 16 characters with upper case, lower case and digits, or
   at least 32 lower-case letters and digits without separators (hex secrets), and in both
   cases a Shannon entropy of at least 3 bits per character. "max_tokens: 1024" and
   "token: expires hourly" pass.
5. **Passwords**: ``password``, ``passwd``, ``passphrase``, ``pwd``, 密码 or 口令, directly
   followed by ``:``, ``=`` or a full-width colon (U+FF1A) and a value on the same line.
   Placeholders are not values: masks (``***``, ``xxx``), ``<...>``, ``{{...}}``, ``$VAR``,
   ``${VAR}`` and words such as "none", "redacted" or "required"; nor is a value without a
   single ASCII character, which is Chinese prose after 密码 ("contact the admin"), not a
   password. A ``pwd`` value that is a path is a working directory.
   "The password policy needs 12 characters" passes: no ``:`` or ``=`` follows the word.
6. **Card numbers**: 13 to 19 digits, written together or in groups separated by single spaces
   or dashes where every group but the last has 4 to 6 digits, starting with 2 to 6 (the major
   networks), passing the Luhn check, and not glued to letters, dots, slashes or plus signs.
   Phone numbers, dates, versions, order numbers, UUIDs and git SHAs do not fit.

A bare 40-character hex string (a git SHA) or a UUID is never flagged on its own; a value is a
secret through its shape (rules 1 to 3) or through the name it is assigned to (rules 4 and 5).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Literal

__all__ = ["SecretKind", "find_secret"]

SecretKind = Literal["api key", "private key", "password", "card number", "token"]

_PRIVATE_KEY_RE = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")

_SHAPES: tuple[tuple[re.Pattern[str], SecretKind], ...] = (
    (
        re.compile(r"(?<![\w-])sk-(?:ant-)?(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{20,}", re.A),
        "api key",
    ),
    (re.compile(r"(?<![A-Za-z0-9])[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"), "api key"),
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), "api key"),
    (re.compile(r"(?<![\w-])AIza[\w-]{35}", re.A), "api key"),
    (re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{36,}"), "token"),
    (re.compile(r"(?<![A-Za-z0-9])github_pat_\w{22,}", re.A), "token"),
    (re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"), "token"),
    (re.compile(r"(?<![\w-])eyJ[\w-]{7,}\.ey[\w-]{8,}\.[\w-]{10,}", re.A), "token"),
)

# A name (a word run, dots and dashes included) assigned a value with ':', '=' or U+FF1A.
_ASSIGNMENT_RE = re.compile(
    r"(?<![\w.-])(?P<name>[\w.-]{1,60}?)[\"']?[^\S\n]*[:=\uff1a][^\S\n]*[\"']?"
    r"(?P<value>[A-Za-z0-9][A-Za-z0-9_\-./+=~]{15,})"
)
_BEARER_RE = re.compile(r"(?i)(?<![\w-])bearer[^\S\n]+(?P<value>[A-Za-z0-9][\w\-.~+/=]{15,})")
_TOKEN_NAMES = ("token", "令牌")
_KEY_NAMES = ("apikey", "secret", "secretkey", "accesskey", "密钥", "秘钥")
_NAME_NOISE = str.maketrans("", "", "_-.")

_PASSWORD_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?P<name>password|passwd|passphrase|pwd|密码|口令)"
    r"[\"']?[^\S\n]*[:=\uff1a][^\S\n]*[\"']?"
    r"(?P<value>[^\s\"'=,;\uff0c\uff1b][^\s\"',;\uff0c\uff1b]*)"
)
_PLACEHOLDERS = frozenset(
    {"none", "null", "nil", "empty", "redacted", "hidden", "required", "optional"}
    | {"n/a", "na", "tbd", "todo", "unknown", "unset", "omitted"}
)
_PLACEHOLDER_RE = re.compile(
    r"[*•.]+|[xX]{3,}|<[^>]*>?|\{\{.*|\$\{?\w+\}?|%\(?\w*\)?s|\[[^\]]*\]?", re.DOTALL
)

# A run of digit groups; atomic so that a run glued to a letter is skipped, not shortened. (Not
# possessive quantifiers: before Python 3.11.5 a possessive group's repeat kept the separator of
# a group it failed to match, and the run was not found: CPython gh-100061.)
_DIGIT_RUN_RE = re.compile(r"(?<![\w.+/-])(?>[0-9]+(?:[ -][0-9]+)*)(?!\w|\.[0-9])")
_CARD_DIGITS = range(13, 20)


def find_secret(text: str) -> SecretKind | None:
    """Name the kind of credential ``text`` appears to contain, if any.

    Args:
        text: the content of a memory about to be stored.

    Returns:
        "private key", "api key", "token", "password" or "card number" for the first rule
        that matches (see the module docstring), or ``None``.
    """
    for finder in _FINDERS:
        kind = finder(text)
        if kind is not None:
            return kind
    return None


def _private_key(text: str) -> SecretKind | None:
    return "private key" if _PRIVATE_KEY_RE.search(text) else None


def _known_shape(text: str) -> SecretKind | None:
    for pattern, kind in _SHAPES:
        if pattern.search(text):
            return kind
    return None


def _assignment(text: str) -> SecretKind | None:
    for match in _ASSIGNMENT_RE.finditer(text):
        name = match["name"].casefold().translate(_NAME_NOISE)
        if not _looks_random(match["value"]):
            continue
        if name.endswith(_TOKEN_NAMES):
            return "token"
        if name.endswith(_KEY_NAMES):
            return "api key"
    if any(_looks_random(match["value"]) for match in _BEARER_RE.finditer(text)):
        return "token"
    return None


def _password(text: str) -> SecretKind | None:
    for match in _PASSWORD_RE.finditer(text):
        value = match["value"].rstrip(".。!?)")
        if not _is_password_value(value):
            continue
        if match["name"].casefold() == "pwd" and value.startswith(("/", "~")):
            continue  # $PWD, the working directory
        return "password"
    return None


def _is_password_value(value: str) -> bool:
    """Not a placeholder, and not prose in a script no one types passwords in."""
    if not value or value.casefold() in _PLACEHOLDERS or _PLACEHOLDER_RE.fullmatch(value):
        return False
    return any(char.isascii() for char in value)


def _card_number(text: str) -> SecretKind | None:
    for match in _DIGIT_RUN_RE.finditer(text):
        groups = re.split(r"[ -]", match.group())
        if any(_is_card(groups[start:]) for start in range(len(groups))):
            return "card number"
    return None


def _is_card(groups: list[str]) -> bool:
    """Whether the groups, or a leading run of them, spell a card number."""
    digits = ""
    for index, group in enumerate(groups):
        if index and not 4 <= len(groups[index - 1]) <= 6:
            return False
        digits += group
        if len(digits) > _CARD_DIGITS[-1]:
            return False
        if len(digits) in _CARD_DIGITS and digits[0] in "23456" and _luhn_ok(digits):
            return True
    return False


def _luhn_ok(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _looks_random(value: str) -> bool:
    """Whether a value is shaped like a generated credential rather than a word or number."""
    mixed = (
        len(value) >= 16
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )
    hexlike = (
        len(value) >= 32 and value.isalnum() and value.islower() and any(c.isdigit() for c in value)
    )
    return (mixed or hexlike) and _entropy(value) >= 3.0


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    size = len(value)
    return -sum(n / size * math.log2(n / size) for n in Counter(value).values())


_FINDERS: tuple[Callable[[str], SecretKind | None], ...] = (
    _private_key,
    _known_shape,
    _assignment,
    _password,
    _card_number,
)
