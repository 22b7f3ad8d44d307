"""The key checks of a deployment (`--workers 2 --fronts 2`): a /ui login at one process holds at every front and
worker, a logout revokes the cookie at every front, and the fronts, which see the clients' addresses, throttle
wrong keys, a worker's wrong-login 401 included."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ors_server.ui import auth
from tests.records.helpers import until
from tests.scale.deployment import Deployment, deployment

KEY = "front-keys-key-9a7"
BUDGET = 3
NEW_CONNECTION = {"Connection": "close"}  # every request on a connection of its own: the kernel picks its front
SPREAD = 40
"""New connections to see both fronts: all on one front has odds of 2 ** -39."""
PINGS = 16
"""Pings per session and round after the logout, each on a new connection (all on one front: 2 ** -15)."""


@pytest.fixture(scope="module")
def fronts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    path: Path = tmp_path_factory.mktemp("front-keys")
    args = ("--log-level", "warning", "--key-failures-per-minute", str(BUDGET))
    with deployment(path, *args, fronts=2, env={"ORS_API_KEY": KEY}) as running:
        yield running


def front_of(metrics: str) -> str:
    return re.search(r'ors_front_info\{front="(\d+)"', metrics)[1]  # type: ignore[index]


def session_on_each_worker(fronts: Deployment, client: httpx.Client) -> dict[int, str]:
    """Worker slot -> a session it holds, made through the front (a new session goes where there is room)."""
    held: dict[int, str] = {}
    for _ in range(20):
        sid = client.post("/create_session").json()["sid"]
        task = {"env_name": "math", "split": "train", "index": 0}
        assert client.post("/create", headers={"X-Session-ID": sid}, json=task).status_code == 200
        worker = fronts.holder(sid, KEY)
        assert worker is not None, sid
        held.setdefault(worker, sid)
        if len(held) == 2:
            return held
    raise AssertionError(f"20 new sessions all went to worker {set(held)}")


def test_a_login_holds_at_every_front_and_a_logout_revokes_it_at_every_front(fronts: Deployment) -> None:
    with httpx.Client(base_url=fronts.url, timeout=30) as browser:
        assert browser.post("/ui/login", data={"key": KEY}).status_code == 303
        cookie = browser.cookies[auth.COOKIE]
        held = session_on_each_worker(fronts, browser)
    with httpx.Client(base_url=fronts.url, timeout=30, headers=NEW_CONNECTION, cookies={auth.COOKIE: cookie}) as kept:
        # /metrics: answered by the front with every worker's scrape, so the front and the workers all took it.
        answers = [kept.get("/metrics") for _ in range(SPREAD)]
        assert all(a.status_code == 200 for a in answers)
        assert {front_of(a.text) for a in answers} == {"0", "1"}

        with httpx.Client(base_url=fronts.url, timeout=30, cookies={auth.COOKIE: cookie}) as browser:
            assert browser.post("/ui/logout").status_code == 303

        # Each session's requests go to its worker, through whichever front: the worker that answered the logout
        # and the other one, through the front that passed it on and the other one (which hears of it through
        # the supervisor, at once but not in this request's time). Each request comes from an address of its own
        # (all of 127/8 is loopback): the throttle, which would soon answer 429 to everything, stays out of it.
        def statuses() -> set[int]:
            seen = set()
            for sid in held.values():
                for _ in range(PINGS):
                    transport = httpx.HTTPTransport(local_address=next(addresses))
                    with httpx.Client(base_url=fronts.url, timeout=30, transport=transport, cookies=jar) as stranger:
                        ping = stranger.post("/ping", headers={"X-Session-ID": sid})
                        seen.add(ping.status_code)
            return seen

        jar = {auth.COOKIE: cookie}
        addresses = (f"127.0.{1 + n // 250}.{1 + n % 250}" for n in itertools.count())
        until(statuses, lambda seen: seen == {401}, "the revoked cookie refused by both fronts")


def test_wrong_logins_through_a_front_are_throttled_by_it(fronts: Deployment) -> None:
    # From an address of its own (all of 127/8 is loopback), with a budget of its own; one connection: one front.
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=fronts.url, timeout=30, transport=transport) as one:
        for _ in range(BUDGET):
            assert one.post("/ui/login", data={"key": "a-guess"}).status_code == 401  # the worker's answer
        refused = one.get("/list_environments", headers={"X-API-Key": KEY})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert "too many wrong API keys" in refused.json()["detail"]
