"""The page through a front (`--workers 2`): the front renders the login form as the page's own 401, passes the
login to a worker, and accepts the page's cookie as the key on every path it routes, its lookups included."""

from __future__ import annotations

from pathlib import Path

import httpx

from environments.math import TASKS
from ors_server.ui import CSP, auth
from tests.scale.deployment import deployment

KEY = "front-ui-key-90be"


def test_a_front_serves_the_page_and_the_cookie_plays_an_episode(tmp_path: Path) -> None:
    args = ("--env", "math", "--api-key", KEY, "--front-directory-size", "1", "--log-level", "warning")
    with deployment(tmp_path, *args, workers=2) as running, httpx.Client(base_url=running.url, timeout=30) as client:
        refused = client.get("/ui")
        assert refused.status_code == 401 and 'action="/ui/login"' in refused.text
        assert refused.headers["content-security-policy"] == CSP
        assert client.post("/ui/login", data={"key": "nope"}).status_code == 401

        logged_in = client.post("/ui/login", data={"key": KEY, "next": "/ui/play"})
        assert logged_in.status_code == 303 and client.cookies.get(auth.COOKIE)
        assert client.get("/ui/play").status_code == 200

        # A front that remembers one session finds the other by asking the workers, with the page's cookie as
        # the key: two sessions, each called after the other pushed it out of the front's memory.
        sessions = []
        for index in (0, 1):
            sid = client.post("/create_session").json()["sid"]
            task = {"env_name": "math", "split": "train", "index": index}
            assert client.post("/create", headers={"X-Session-ID": sid}, json=task).status_code == 200
            sessions.append((sid, index))
        for sid, index in sessions:
            answer = {"name": "submit", "input": {"answer": str(TASKS["train"][index]["answer"])}}
            result = client.post("/math/call", headers={"X-Session-ID": sid}, json=answer)
            assert result.status_code == 200 and '"reward":1.0' in result.text, result.text
            assert client.post("/delete", headers={"X-Session-ID": sid}).status_code == 200
