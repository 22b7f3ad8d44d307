"""The /ui routes over HTTP: the key (header, cookie, login form), the CSP on every answer, the static files."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from ors_server.environments.math import Math
from ors_server.http.app import create_app
from ors_server.settings import Settings
from ors_server.ui import CSP, auth
from tests.serving import serve

KEY = "route-test-key-71c2"
PAGES = ["/ui", "/ui/runs", "/ui/episode?id=x", "/ui/play"]


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serve(create_app([Math], Settings(api_key=KEY))) as url:
        yield url


@pytest.fixture
def client(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=30) as client:
        yield client


def login(client: httpx.Client, key: str = KEY, back: str = "/ui") -> httpx.Response:
    return client.post("/ui/login", data={"key": key, "next": back})


@pytest.mark.parametrize("path", PAGES)
def test_a_page_without_the_key_is_the_login_form_with_401_and_the_csp(client: httpx.Client, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("text/html")
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert 'action="/ui/login"' in answer.text


@pytest.mark.parametrize("path", PAGES)
def test_a_page_with_the_key_in_a_header_is_served_with_the_csp(client: httpx.Client, path: str) -> None:
    answer = client.get(path, headers={"X-API-Key": KEY})
    assert answer.status_code == 200
    assert answer.headers["content-security-policy"] == CSP
    assert '<script src="/ui/static/app.js" defer></script>' in answer.text
    assert "<script>" not in answer.text and " style=" not in answer.text  # nothing inline for the CSP to refuse


def test_the_login_form_turns_the_key_into_an_httponly_strict_cookie_the_guard_accepts(client: httpx.Client) -> None:
    answer = login(client, back="/ui/episode?id=s-1:2")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/episode?id=s-1:2"
    cookie = answer.headers["set-cookie"]
    assert re.match(rf"{auth.COOKIE}=\d+\.[0-9a-f]{{64}};", cookie)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert KEY not in answer.text and KEY not in cookie
    # The cookie opens the pages and every other path, as the key does.
    assert client.get("/ui").status_code == 200
    assert client.get("/list_environments").json() == ["math"]

    out = client.post("/ui/logout")
    assert out.status_code == 303 and out.headers["location"] == "/ui/login"
    assert client.get("/list_environments").status_code == 401


def test_a_wrong_key_is_the_form_again_with_401_and_no_cookie(client: httpx.Client) -> None:
    answer = login(client, key="nope", back="/ui/play")
    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers
    assert "Wrong key." in answer.text
    assert 'name="next" type="hidden" value="/ui/play"' in answer.text
    assert "nope" not in answer.text
    assert client.get("/ui", headers={"Cookie": f"{auth.COOKIE}=deadbeef"}).status_code == 401


@pytest.mark.parametrize("back", ["https://evil.example/", "//evil.example", "/list_environments", '/ui?"><b>'])
def test_login_returns_only_to_a_page_of_the_ui(client: httpx.Client, back: str) -> None:
    assert login(client, back=back).headers["location"] == "/ui"
    wrong = login(client, key="nope", back=back)
    assert 'name="next" type="hidden" value="/ui"' in wrong.text


def test_a_login_posted_from_another_origin_is_refused(client: httpx.Client, base: str) -> None:
    foreign = client.post("/ui/login", data={"key": KEY}, headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert "set-cookie" not in foreign.headers
    own = client.post("/ui/login", data={"key": KEY}, headers={"Origin": base})
    assert own.status_code == 303


def test_static_files_need_no_key_and_only_the_packaged_ones_are_served(client: httpx.Client) -> None:
    script = client.get("/ui/static/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.headers["content-security-policy"] == CSP
    assert client.get("/ui/static/style.css").headers["content-type"].startswith("text/css")
    assert client.get("/ui/static/nothing.js").status_code == 404
    assert client.get("/ui/static/%2e%2e%2f__init__.py").status_code == 404
    assert client.get("/ui/static/../__init__.py").status_code == 401  # normalised to /ui/__init__.py: guarded


def test_every_page_links_the_favicon_which_is_served_as_svg_without_the_key(client: httpx.Client) -> None:
    for path in PAGES:
        page = client.get(path, headers={"X-API-Key": KEY})
        assert '<link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">' in page.text, path
        assert "Log out" in page.text  # a server with a key: the cookie can be dropped
    icon = client.get("/ui/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.text.startswith("<svg") and icon.headers["content-security-policy"] == CSP


def test_the_page_needs_no_login_on_a_server_without_a_key() -> None:
    with serve(create_app([Math], Settings())) as url, httpx.Client(base_url=url, timeout=30) as client:
        for path in PAGES:
            page = client.get(path)
            assert page.status_code == 200 and "Log out" not in page.text and "/ui/logout" not in page.text, path
        assert client.get("/ui").status_code == 200
        assert client.get("/ui/login").status_code == 200
        assert client.post("/ui/login", data={"next": "/ui/play"}).headers["location"] == "/ui/play"
