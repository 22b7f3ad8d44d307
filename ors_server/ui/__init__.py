"""`/ui`: a web page to watch episodes and play environments by hand, served by the server itself.

The pages are static HTML with one script and one style sheet (package data in `pages/` and `static/`, no build
step, nothing fetched from anywhere but this server). The script reads the REST API every client reads
(`/episodes`, `/episodes/{id}`, `/episodes/{id}/events`, and the ORS endpoints for play mode) and builds the DOM
with `textContent` only: episode data is the agent's and the environment's output, never trusted as markup.
Every response of this face carries a strict Content-Security-Policy (scripts, styles and connections to this
origin only; images from this origin or `data:`, for image blocks).

The face holds no state: it is a table of routes, a login form that turns the API key into the page's cookie
(`auth`), and an error renderer that answers a browser in HTML (a 401 is the login form itself).

Paths are fixed (`/ui`, `/ui/runs`, `/ui/episode`, `/ui/play`, `/ui/login`, `/ui/logout`, `/ui/static/...`) and
none is one of the ORS face's `/{env}/...` endpoints, so an environment named `ui` is still served there.
"""

from __future__ import annotations

import hmac
import html
import re
from functools import cache
from importlib.resources import files
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ors_server.errors import OrsError
from ors_server.faces import Core, Face
from ors_server.ui import auth

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # not no-referrer: chromium then sends `Origin: null` on POSTs
    "Cache-Control": "no-store",
}
STATIC_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
LOGIN_FORM_LIMIT = 8192
"""Bytes of a login form read at most (a key and a return path)."""
_NEXT = re.compile(r"/ui(/[A-Za-z0-9_\-]*)?(\?[A-Za-z0-9_\-.~%=&:+]*)?")
"""A page to return to after login: a path of this face, so the form is no open redirect."""


@cache
def _asset(folder: str, name: str) -> bytes:
    return files(__package__).joinpath(folder, name).read_bytes()


def page_response(name: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_asset("pages", name), status, {**HEADERS, **(headers or {})}, media_type="text/html")


def _page(request: Request, name: str) -> Response:
    """A page; on a server without a key, without its "Log out" (there is nothing to log out of)."""
    if request.app.state.settings.api_key is not None:
        return page_response(name)
    return Response(_keyless_page(name), 200, HEADERS, media_type="text/html")


@cache
def _keyless_page(name: str) -> bytes:
    return LOGOUT_FORM.sub(b"", _asset("pages", name))


LOGOUT_FORM = re.compile(rb'<form class="logout"[^>]*>.*?</form>\n?', re.S)


async def episodes_page(request: Request) -> Response:
    return _page(request, "episodes.html")


async def runs_page(request: Request) -> Response:
    return _page(request, "runs.html")


async def episode_page(request: Request) -> Response:
    return _page(request, "episode.html")


async def play_page(request: Request) -> Response:
    return _page(request, "play.html")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    kind = STATIC_TYPES.get(name[name.rfind(".") :]) if "." in name else None
    if kind is None or name not in _static_names():
        return error_page(404, "Not Found")
    return Response(_asset("static", name), headers={**HEADERS, "Cache-Control": "no-cache"}, media_type=kind)


@cache
def _static_names() -> frozenset[str]:
    return frozenset(entry.name for entry in files(__package__).joinpath("static").iterdir())


async def login_form(request: Request) -> Response:
    return login_page(200, "")


def login_page(status: int, message: str, headers: dict[str, str] | None = None, back: str = "/ui") -> Response:
    """The login form, with one of this module's fixed messages, returning to `back` (a checked path of this
    face: the only thing from a request the form shows)."""
    body = _asset("pages", "login.html").replace(b"<!--message-->", html.escape(message).encode())
    body = body.replace(b'value="/ui"', f'value="{html.escape(back)}"'.encode())
    return Response(body, status, {**HEADERS, **(headers or {})}, media_type="text/html")


async def login(request: Request) -> Response:
    """Check the key from the form and answer with the cookie; a wrong key is the form again (401)."""
    body = await request.body()
    form = parse_qs(body[:LOGIN_FORM_LIMIT].decode("utf-8", "replace")) if len(body) <= LOGIN_FORM_LIMIT else {}
    offered = (form.get("key") or [""])[0].encode()
    back = (form.get("next") or ["/ui"])[0]
    target = back if _NEXT.fullmatch(back) else "/ui"
    api_key = request.app.state.settings.api_key
    if api_key is None:
        return RedirectResponse(target, 303, headers=HEADERS)
    checks = request.app.state.key_checks
    if not hmac.compare_digest(offered, api_key.encode()):
        checks.failed(request.scope)  # counted like a wrong key in a header (the entry answers 429 past the budget)
        return login_page(401, "Wrong key.", back=target)
    response = RedirectResponse(target, 303, headers=HEADERS)
    response.set_cookie(
        auth.COOKIE,
        checks.issue_cookie(),
        max_age=int(request.app.state.settings.ui_login_seconds),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


async def logout(request: Request) -> Response:
    """Forget the cookie in the browser and revoke it on the server (a copy of it is refused from now on)."""
    request.app.state.key_checks.revoke_cookie(auth.cookie_from(request.headers.get("cookie", "").encode("latin-1")))
    response = RedirectResponse(auth.LOGIN_PATH, 303, headers=HEADERS)
    response.delete_cookie(auth.COOKIE, path="/", httponly=True, samesite="strict")
    return response


def error_page(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    text = html.escape(f"{status}: {message}")
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>ors-server</title>'
        '<link rel="stylesheet" href="/ui/static/style.css">'
        '<link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml"></head>'
        f'<body><main><h1>ors-server</h1><p class="error">{text}</p><p><a href="/ui">Episodes</a></p></main>'
        "</body></html>"
    )
    return Response(body, status, {**HEADERS, **(headers or {})}, media_type="text/html")


def render_error(exc: OrsError) -> Response:
    """A browser's answer: a missing or wrong key is the login form (401), anything else a short page."""
    if exc.status == 401:
        return login_page(401, "This server wants its API key.", exc.headers)
    return error_page(exc.status, exc.message, exc.headers)


def routes() -> list[BaseRoute]:
    return [
        Route("/ui", episodes_page, methods=["GET"]),
        Route("/ui/runs", runs_page, methods=["GET"]),
        Route("/ui/episode", episode_page, methods=["GET"]),
        Route("/ui/play", play_page, methods=["GET"]),
        Route(auth.LOGIN_PATH, login_form, methods=["GET"]),
        Route(auth.LOGIN_PATH, login, methods=["POST"]),
        Route(auth.LOGOUT_PATH, logout, methods=["POST"]),
        Route(auth.STATIC_PREFIX + "{name}", static, methods=["GET"]),
    ]


def shape() -> Face:
    """The face's routes and error renderer; it needs no core (handlers read `request.app.state.settings`)."""
    return Face("ui", routes(), render_error)


def face(core: Core) -> Face:
    return shape()
