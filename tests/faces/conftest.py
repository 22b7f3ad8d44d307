"""Fixtures of the ORS face tests: one live server per test module (a module may override `live`)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.ors_envs import Live, live_server


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_server() as server:
        yield server


@pytest.fixture
def client(live: Live) -> httpx.Client:
    return live.client
