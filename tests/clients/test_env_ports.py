"""An environment's own port (`--env-port frozen_lake=PORT`): one server, many environments, for clients that send
no variant. The `openreward` client configured as TRL and SkyRL configure it (`OPENREWARD_API_URL` and
`OPENREWARD_SESSION_URL`, no variant) and TRL's own `environment_factory` reach frozen_lake, the server's second
environment, at its port, through one process and through `--workers 2` (where the front listens on the port).
Every face answers on the port as on the main one, with the port's environment as the one a request names when
it names none. One server per mode for the module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.clients.harness import Server, server_command
from tests.faces.mcp_helpers import mcp_client
from tests.hosts.test_openreward import _process
from tests.serving import free_port

pytestmark = pytest.mark.clients


@dataclass
class Deployed:
    server: Server
    lake_url: str
    """frozen_lake's own port."""


@contextlib.contextmanager
def deployed(log_dir: Path, *args: str) -> Iterator[Deployed]:
    port = free_port()
    argv = [*server_command(), "serve", "--port", "{port}", "--env", "math", "--env", "frozen_lake"]
    argv += ["--env-port", f"frozen_lake={port}", "--records", "off", *args]
    # With the hosts' start timeout: two workers take a while to start on a loaded machine.
    with _process(argv, log_dir, "ours") as server:
        yield Deployed(server, f"http://127.0.0.1:{port}")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    with deployed(tmp_path_factory.mktemp("one")) as running:
        yield running


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    with deployed(tmp_path_factory.mktemp("workers"), "--workers", "2") as running:
        yield running


MODES = pytest.mark.parametrize("mode", ["one_process", "two_workers"])


def test_openreward_client_without_a_variant_plays_the_environment_of_its_port_in_one_process_and_behind_a_front(
    one_process: Deployed, two_workers: Deployed, openreward_python: Path, run_client: Callable[..., dict]
) -> None:
    modes = {"one_process": one_process, "two_workers": two_workers}
    targets = [f"{mode}={at.lake_url},{at.server.url}" for mode, at in modes.items()]
    played = run_client(openreward_python, "openreward_env_port.py", *targets, server=two_workers.server, timeout=240)
    for mode, at in modes.items():
        seen = played[mode]
        assert seen["splits"] == ["train", "test", "examples"] and seen["tools"] == ["lake_move"], mode
        assert seen["rewards"][-1] == 1.0 and seen["finished"] is True, mode
        assert seen["main_tools"] == ["submit"], mode  # the main port's bare paths: the first environment, math
        # Why a port and not a path: aiohttp refuses a base URL with a path and no trailing slash, and with one it
        # resolves the client's absolute paths against the host, dropping the path.
        assert seen["path_without_slash"] == "base_url must have a trailing '/'"
        assert seen["path_with_slash_create"] == f"{at.lake_url}/create"


@MODES
@pytest.mark.anyio
async def test_every_face_on_an_environment_port_names_that_environment_by_default(
    mode: str, request: pytest.FixtureRequest
) -> None:
    at: Deployed = request.getfixturevalue(mode)
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.get(f"{at.lake_url}/list_environments")).json() == ["frozen_lake", "math"]
        named = await http.get(f"{at.lake_url}/math/tools")  # a path that names an environment still means it
        assert [tool["name"] for tool in named.json()["tools"]] == ["submit"]
        created = await http.post(
            f"{at.lake_url}/create", json={"task_spec": {"seed": 3}}, headers={"X-Session-ID": "p1"}
        )
        assert created.status_code == 200, created.text
        prompt = (await http.get(f"{at.lake_url}/prompt", headers={"X-Session-ID": "p1"})).json()
        assert "FrozenLake" in prompt[0]["text"]
        control = await http.get(f"{at.lake_url}/control/initial_state", headers={"mcp-session-id": "c1"})
        assert control.status_code == 200 and "grid" in control.json(), control.text
        reset = await http.post(f"{at.lake_url}/openenv/reset", json={})
        assert "grid" in str(reset.json()["observation"]), reset.text
        # A client cannot pick the default by the header a front uses to tell its workers the port.
        spoofed = await http.get(f"{at.server.url}/tools", headers={"x-ors-port-env": "frozen_lake"})
        assert [tool["name"] for tool in spoofed.json()["tools"]] == ["submit"]
    async with mcp_client(f"{at.lake_url}/mcp") as (session, _):
        assert [tool.name for tool in (await session.list_tools()).tools] == ["lake_move"]


@pytest.mark.timeout(600)  # TRL imports torch and transformers: tens of seconds on a loaded machine
def test_trl_environment_factory_plays_frozen_lake_at_its_port_without_a_variant(
    one_process: Deployed, trl_python: Path, run_client: Callable[..., dict]
) -> None:
    seen = run_client(
        trl_python,
        "trl_openreward.py",
        f"frozen_lake={one_process.lake_url}",
        env={"TRL_EXPERIMENTAL_SILENCE": "1"},
        server=one_process.server,
        timeout=500,
    )
    lake = seen["frozen_lake"]
    assert lake["tools"] == ["lake_move"] and lake["finished"] is True and lake["reward"] == [1.0]
