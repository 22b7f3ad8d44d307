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


TITLES = {"episodes": "Episodes", "runs": "Runs", "episode": "Episode", "play": "Play", "login": "Log in"}
"""Each page (its `<main>` in `pages/NAME.html`) and its title."""
NAV = b'<nav><a href="/ui">Episodes</a> <a href="/ui/runs">Runs</a> <a href="/ui/play">Play</a></nav>\n'
LOGOUT = b'<form class="logout" method="post" action="/ui/logout"><button type="submit">Log out</button></form>\n'


@cache
def _document(name: str, keyed: bool) -> bytes:
    """Page `name` in the frame every page shares (`pages/frame.html`). The header links the pages, except on the
    login form; "Log out" only on a server with a key (without one there is nothing to log out of)."""
    header = b"" if name == "login" else NAV + (LOGOUT if keyed else b"")
    return (
        _asset("pages", "frame.html")
        .replace(b"<!--title-->", TITLES[name].encode())
        .replace(b"<!--page-->", name.encode())
        .replace(b"<!--nav-->", header)
        .replace(b"<!--main-->", _asset("pages", f"{name}.html"))
    )


def _page(request: Request, name: str) -> Response:
    return Response(
        _document(name, request.app.state.settings.api_key is not None), 200, HEADERS, media_type="text/html"
    )


async def episodes_page(request: Request) -> Response:
    return _page(request, "episodes")


async def runs_page(request: Request) -> Response:
    return _page(request, "runs")


async def episode_page(request: Request) -> Response:
    return _page(request, "episode")


async def play_page(request: Request) -> Response:
    return _page(request, "play")


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
    body = _document("login", keyed=True).replace(b"<!--message-->", html.escape(message).encode())
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
    """The face's routes, error renderer and the cookie a logout revokes; it needs no core (handlers read
    `request.app.state.settings`)."""
    return Face("ui", routes(), render_error, revokes=auth.revoked_by)


def face(core: Core) -> Face:
    return shape()
