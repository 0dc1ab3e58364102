"""The console's door: the token, the login cookie, cross-site requests and security headers.

- With ``ARENA_WEB_TOKEN`` set, every path but ``/login`` and ``/static/`` needs it: as
  ``Authorization: Bearer <token>``, or the cookie the login form sets. The cookie holds an
  HMAC derived from the token, never the token; it is HttpOnly and SameSite=Strict. The token
  is never read from the query string (which access logs print).
- Without a token the console listens on loopback only (``arena up`` refuses otherwise), and a
  request must name a loopback host (no DNS rebinding of a site's name onto 127.0.0.1).
- A state-changing request (POST, ...) that says it comes from another site (``Origin``,
  ``Sec-Fetch-Site``) is refused; one authenticated by the cookie must say it comes from the
  console's own origin.
- Every response carries a strict Content-Security-Policy, ``X-Content-Type-Options`` and
  ``Referrer-Policy``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import SecretStr
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["COOKIE", "CSP", "Access", "Guard", "SecurityMiddleware"]

COOKIE = "arena_session"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # no-referrer makes a form post's Origin "null"
    (b"x-frame-options", b"DENY"),
)
_OPEN_PREFIXES = ("/login", "/static/")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


class Access(StrEnum):
    """How a request proved it may come in."""

    OPEN = "open"  # no token is set
    BEARER = "bearer"
    COOKIE = "cookie"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Guard:
    """Checks a request's credentials against the token (constant-time)."""

    token: SecretStr | None

    @property
    def session_value(self) -> str:
        """What the login cookie holds: an HMAC of a fixed label under the token."""
        key = self.token.get_secret_value().encode() if self.token else b""
        return hmac.new(key, b"arena-console-session-v1", hashlib.sha256).hexdigest()

    def token_matches(self, candidate: str) -> bool:
        """Whether ``candidate`` is the token."""
        if self.token is None:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.get_secret_value().encode())

    def access(self, headers: dict[str, str]) -> Access:
        """How a request with these (lower-cased) headers is let in, if it is."""
        if self.token is None:
            return Access.OPEN
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.token_matches(credential.strip()):
            return Access.BEARER
        cookie = _cookie(headers.get("cookie", ""), COOKIE)
        if cookie and hmac.compare_digest(cookie.encode(), self.session_value.encode()):
            return Access.COOKIE
        return Access.NONE


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _cross_site(headers: dict[str, str], scheme: str, access: Access) -> bool:
    """Whether a state-changing request comes (or may come) from another site."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = headers.get("origin")
    own = f"{scheme}://{headers.get('host', '')}"
    if origin is not None and origin != own:
        return True
    # A browser sends the cookie by itself: it must also say where the request comes from.
    return access is Access.COOKIE and origin is None and site is None


class SecurityMiddleware:
    """Pure ASGI middleware: refuses what :class:`Guard` and the origin checks refuse, and adds
    the security headers to every response (streamed ones too)."""

    def __init__(self, app: ASGIApp, *, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, body, extra = refusal
            await _respond(send, status, body, extra)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(
        self, scope: Scope, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], list[tuple[bytes, bytes]]] | None:
        path: str = scope["path"]
        if self.guard.token is None and _host_name(headers.get("host", "")) not in _LOOPBACK_HOSTS:
            return 403, {"error": "the console answers on its loopback address only"}, []
        access = self.guard.access(headers)
        if access is Access.NONE and not path.startswith(_OPEN_PREFIXES):
            if scope["method"] == "GET" and _wants_html(headers, path):
                return 303, {"error": "log in first"}, [(b"location", b"/login")]
            return 401, {"error": "a token is needed (ARENA_WEB_TOKEN)"}, _CHALLENGE
        if scope["method"] not in _SAFE_METHODS and _cross_site(headers, scope["scheme"], access):
            return 403, {"error": "cross-site request refused"}, []
        return None


_CHALLENGE = [(b"www-authenticate", b"Bearer")]


def _wants_html(headers: dict[str, str], path: str) -> bool:
    api = path.startswith(("/api/", "/metrics", "/openapi.json"))
    return not api and "text/html" in headers.get("accept", "")


async def _respond(
    send: Send, status: int, body: dict[str, str], extra: Iterable[tuple[bytes, bytes]]
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),  # its body, if any, is not read
                *extra,
                *_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
