"""The page through a front (`--workers 2`): the front renders the login form as the page's own 401, passes the
login to a worker, and accepts the page's cookie as the key on every path it routes."""

from __future__ import annotations

from pathlib import Path

import httpx

from environments.math import TASKS
from ors_server.ui import CSP, auth
from tests.scale.deployment import deployment

KEY = "front-ui-key-90be"


def test_a_front_serves_the_page_and_the_cookie_plays_an_episode(tmp_path: Path) -> None:
    args = ("--env", "math", "--api-key", KEY, "--log-level", "warning")
    with deployment(tmp_path, *args, workers=2) as running, httpx.Client(base_url=running.url, timeout=30) as client:
        refused = client.get("/ui")
        assert refused.status_code == 401 and 'action="/ui/login"' in refused.text
        assert refused.headers["content-security-policy"] == CSP
        assert client.post("/ui/login", data={"key": "nope"}).status_code == 401

        logged_in = client.post("/ui/login", data={"key": KEY, "next": "/ui/play"})
        assert logged_in.status_code == 303 and client.cookies.get(auth.COOKIE)
        assert client.get("/ui/play").status_code == 200

        sid = client.post("/create_session").json()["sid"]
        headers = {"X-Session-ID": sid}
        created = client.post("/create", headers=headers, json={"env_name": "math", "split": "train", "index": 0})
        assert created.status_code == 200
        answer = {"name": "submit", "input": {"answer": str(TASKS["train"][0]["answer"])}}
        result = client.post("/math/call", headers=headers, json=answer)
        assert result.status_code == 200 and '"reward":1.0' in result.text
        assert client.post("/delete", headers=headers).status_code == 200
