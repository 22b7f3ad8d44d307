"""Black-box fixtures: the official clients, each in its own cached venv, drive a real `ors-server serve`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.clients import client_venvs
from tests.clients.harness import Server, run_script, run_server

# Fixture -> the venv it builds. pytest-timeout counts fixture setup against the test that happens to
# build a venv; such tests get room for a cold install, the rest keep the project's per-test limit.
VENV_FIXTURES = {
    "openreward_python": "openreward",
    "eval_protocol_python": "eval-protocol",
    "openenv_python": "openenv",
    "ors_client_python": "ors-client",
    "fastmcp_python": "fastmcp",
    "mcp_ts_sdk": "mcp-ts",
    "mcp_ts_client": "mcp-ts",
    "trl_python": "trl",
    "verifiers_python": "verifiers",
}
COLD_INSTALL_TIMEOUT = int(client_venvs.HEAVY_INSTALL_TIMEOUT) + 300


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, venv in VENV_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and not client_venvs.is_ready(venv):
                item.add_marker(pytest.mark.timeout(COLD_INSTALL_TIMEOUT))


@pytest.fixture(scope="session")
def openreward_python() -> Path:
    """The python of a venv with `openreward` 0.1.167 and `ors-sdk` 0.1.0."""
    return client_venvs.ensure_venv("openreward")


@pytest.fixture(scope="session")
def eval_protocol_python() -> Path:
    """The python of a venv with `eval-protocol` 0.3.33 (and so `mcp` 1.x)."""
    return client_venvs.ensure_venv("eval-protocol")


@pytest.fixture(scope="session")
def openenv_python() -> Path:
    """The python of a venv with `openenv` 0.10.0 (and so `mcp` 1.x and fastmcp 3.x)."""
    return client_venvs.ensure_venv("openenv")


@pytest.fixture(scope="session")
def fastmcp_python() -> Path:
    """The python of a venv with `fastmcp` 4.2.3 (and so `mcp` 2.x, both MCP eras)."""
    return client_venvs.ensure_venv("fastmcp")


def _mcp_ts_package(name: str) -> Path:
    """A package directory of the TypeScript MCP SDK's npm install (node runs the scripts that import it)."""
    missing = client_venvs.node_missing()
    if missing:
        pytest.skip(f"the TypeScript MCP SDK needs node and npm: {missing}")
    return client_venvs.ensure_venv("mcp-ts") / "@modelcontextprotocol" / name


@pytest.fixture(scope="session")
def mcp_ts_sdk() -> Path:
    """The TypeScript MCP SDK 1 (`@modelcontextprotocol/sdk`)."""
    return _mcp_ts_package("sdk")


@pytest.fixture(scope="session")
def mcp_ts_client() -> Path:
    """The TypeScript MCP SDK 2's client package (`@modelcontextprotocol/client`, the same npm install)."""
    return _mcp_ts_package("client")


@pytest.fixture(scope="session")
def trl_python() -> Path:
    """The python of a venv with `trl` 1.16.0 (and CPU torch) and `openreward` 0.1.167."""
    return client_venvs.ensure_venv("trl")


@pytest.fixture(scope="session")
def verifiers_python() -> Path:
    """The python of a venv with `verifiers[openenv]` 0.4.0."""
    return client_venvs.ensure_venv("verifiers")


@pytest.fixture(scope="session")
def ors_client_python() -> Path:
    """The python of a venv with only `ors-client` (from this checkout's client/) and its dependencies."""
    return client_venvs.ensure_venv("ors-client")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server with the default settings, shared by a test module."""
    with run_server(tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start a dedicated server with extra `serve` arguments: `start_server("--session-timeout", "5")`."""
    with contextlib.ExitStack() as stack:
        yield lambda *args: stack.enter_context(run_server(tmp_path / "servers", *args))


@pytest.fixture
def run_client(tmp_path: Path) -> Callable[..., dict]:
    """`run_client(python, script, *args, server=...)`: the JSON result a client script reported."""

    def run(
        python: Path,
        script: str,
        *args: str,
        server: Server | None = None,
        timeout: float = 120,
        env: dict[str, str] | None = None,
    ) -> dict:
        return run_script(python, script, *args, home=tmp_path / "home", server=server, timeout=timeout, env=env)

    return run
