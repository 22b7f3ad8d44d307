"""Guessing the key, and keeping a stolen cookie: failed key checks are throttled per client address (429 with
`Retry-After`, in each face's shape, on every path but /health), and the page's cookie carries its login time, so
it expires, and the server itself revokes it at logout and at a restart."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from ors_server.environments.math import Math
from ors_server.http.app import create_app
from ors_server.settings import Settings
from ors_server.ui import auth
from tests.faces.mcp_helpers import ACCEPT
from tests.serving import serve

KEY = "guess-me-if-you-can-5d1"
BUDGET = 5
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"clientInfo": {"name": "x", "version": "1"}},
}


@pytest.fixture
def base() -> Iterator[str]:
    with serve(create_app([Math], Settings(api_key=KEY, key_failures_per_minute=BUDGET))) as url:
        yield url


@pytest.fixture
def client(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=30) as client:
        yield client


def login(client: httpx.Client, key: str = KEY) -> httpx.Response:
    return client.post("/ui/login", data={"key": key, "next": "/ui"})


def test_wrong_keys_past_the_budget_get_429_with_retry_after_in_each_face_shape(base: str, client: httpx.Client):
    for _ in range(BUDGET):
        assert client.get("/list_environments", headers={"X-API-Key": "a-guess"}).status_code == 401

    # Refused whatever the request carries, the right key too: a guesser reads nothing from the answers.
    ors = client.get("/list_environments", headers={"X-API-Key": KEY})
    assert ors.status_code == 429 and "too many wrong API keys" in ors.json()["detail"]
    assert 1 <= int(ors.headers["retry-after"]) <= 60 / BUDGET
    mcp = client.post("/mcp/", json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {KEY}"})
    assert mcp.status_code == 429 and "too many" in mcp.json()["error"]["message"]
    control = client.get("/control/reward", headers={"X-API-Key": KEY, "mcp-session-id": "x"})
    assert control.status_code == 429 and "too many" in control.json()["error"]
    page = login(client)
    assert page.status_code == 429 and page.headers["content-type"].startswith("text/html")
    assert "set-cookie" not in page.headers and page.headers["retry-after"]
    with pytest.raises(InvalidStatus) as refused:
        connect(base.replace("http", "ws") + "/openenv/ws", additional_headers={"X-API-Key": KEY})
    assert refused.value.response.status_code == 429
    assert client.get("/health").status_code == 200


def test_wrong_keys_typed_into_the_login_form_count_as_failed_checks(client: httpx.Client) -> None:
    for _ in range(BUDGET):
        assert login(client, key="a-guess").status_code == 401
    assert login(client).status_code == 429


def test_requests_that_offer_no_key_cost_nothing(client: httpx.Client) -> None:
    for _ in range(3 * BUDGET):
        assert client.get("/ui").status_code == 401  # a browser's first visits: the login form
    assert client.get("/list_environments", headers={"X-API-Key": KEY}).json() == ["math"]


def test_the_cookie_carries_its_login_time_expires_and_cannot_be_redated() -> None:
    settings = Settings(api_key=KEY, ui_secret="a-fixed-secret", ui_login_seconds=600)
    with serve(create_app([Math], settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        answer = login(client)
        assert answer.status_code == 303
        assert re.match(rf"{auth.COOKIE}=\d+\.[0-9a-f]{{64}};", answer.headers["set-cookie"])
        assert "Max-Age=600" in answer.headers["set-cookie"]
        assert client.get("/list_environments").status_code == 200

        def made_at(moment: float) -> str:
            return auth.Cookies(KEY.encode(), b"a-fixed-secret", 600, clock=lambda: moment).issue()

        old = made_at(time.time() - 601)
        redated = f"{int(time.time())}.{old.split('.')[1]}"
        for cookie in (old, redated):
            assert httpx.get(url + "/list_environments", cookies={auth.COOKIE: cookie}).status_code == 401
        assert httpx.get(url + "/list_environments", cookies={auth.COOKIE: made_at(time.time())}).status_code == 200


def test_a_logged_out_cookie_is_refused_by_the_server_even_where_it_was_kept(base: str, client: httpx.Client):
    assert login(client).status_code == 303
    stolen = client.cookies[auth.COOKIE]
    assert httpx.get(base + "/list_environments", cookies={auth.COOKIE: stolen}).status_code == 200
    assert client.post("/ui/logout").status_code == 303
    assert httpx.get(base + "/list_environments", cookies={auth.COOKIE: stolen}).status_code == 401


def test_a_restarted_server_refuses_the_cookies_of_the_last_one() -> None:
    with serve(create_app([Math], Settings(api_key=KEY))) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert login(client).status_code == 303
        cookie = client.cookies[auth.COOKIE]
    with serve(create_app([Math], Settings(api_key=KEY))) as url:
        assert httpx.get(url + "/list_environments", cookies={auth.COOKIE: cookie}).status_code == 401
        assert httpx.get(url + "/list_environments", headers={"X-API-Key": KEY}).status_code == 200
