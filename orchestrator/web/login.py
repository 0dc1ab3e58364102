"""``/login`` and ``/logout``: the form that trades the token for the session cookie.

The cookie holds :attr:`~orchestrator.web.security.Guard.session_value` (an HMAC derived from
the token, never the token), HttpOnly and SameSite=Strict (Secure over HTTPS).
"""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from orchestrator.web.pages import templates
from orchestrator.web.security import COOKIE, Guard

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

_MAX_FORM_BYTES = 4096


def _guard(request: Request) -> Guard:
    guard: Guard = request.app.state.guard
    return guard


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    """The login page (the console without a token needs none: straight to the groups)."""
    if _guard(request).token is None:
        return RedirectResponse("/", status_code=303)
    return templates.TemplateResponse(request, "login.html", {"error": None})


@router.post("/login", response_class=RedirectResponse)
async def login(request: Request) -> Response:
    """Check the form's token; right, set the session cookie and go to the groups."""
    guard = _guard(request)
    body = await request.body()
    fields = parse_qs(body[:_MAX_FORM_BYTES].decode("utf-8", errors="replace"))
    token = (fields.get("token") or [""])[0]
    if guard.token is None or not guard.token_matches(token):
        context = {"error": "That is not the token."}
        return templates.TemplateResponse(request, "login.html", context, status_code=401)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE,
        guard.session_value,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout", response_class=RedirectResponse)
def logout() -> Response:
    """Forget the session cookie."""
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response
