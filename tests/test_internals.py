"""What the server relies on of the mcp SDK's and uvicorn's internals is checked before it serves, with one line
naming what is missing (`ors_server.internals`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ors_server import internals
from ors_server.environments.math import Math
from ors_server.http.app import create_app
from tests.clients.harness import server_command


@pytest.fixture
def fresh_check() -> Iterator[None]:
    internals.check.cache_clear()
    yield
    internals.check.cache_clear()


def test_the_installed_releases_have_everything_the_server_relies_on(fresh_check: None) -> None:
    assert [reach.owner for reach in internals.REACHES if internals.missing(reach)] == []
    internals.check()


def test_instance_state_counts_only_if_the_class_still_mentions_it() -> None:
    manager = "mcp.server.streamable_http_manager:StreamableHTTPSessionManager"
    reach = internals.Reach("mcp", manager, "a feature", state=("_server_instances", "_no_such_state"))
    assert internals.missing(reach) == [f"{manager}._no_such_state"]


def test_a_missing_method_refuses_the_app_naming_the_feature_the_name_and_the_release(
    fresh_check: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(HttpToolsProtocol, "_should_upgrade")
    with pytest.raises(internals.UnsupportedDependency) as raised:
        create_app([Math])
    message = str(raised.value)
    assert message.startswith("the HTTP limits (--max-header-bytes, --header-timeout, --body-timeout) relies on ")
    assert "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol._should_upgrade" in message
    assert "which uvicorn 0." in message and "\n" not in message


def test_a_missing_sdk_member_refuses_the_app(fresh_check: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(StreamableHTTPSessionManager, "handle_request")
    with pytest.raises(internals.UnsupportedDependency, match=r"the MCP face's plain tools/call relies on .*mcp 2\."):
        create_app([Math])


def test_serve_on_a_release_without_a_relied_on_internal_stops_with_one_line(tmp_path: Path) -> None:
    # A uvicorn whose protocol class lost a method we override: made so in the server's process at startup.
    (tmp_path / "sitecustomize.py").write_text(
        "from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol\n"
        "del HttpToolsProtocol.on_message_complete\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[1])])
    done = subprocess.run(
        [*server_command(), "serve", "--env", "math", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("ors-server: the HTTP limits")
    assert "HttpToolsProtocol.on_message_complete" in line
    assert "ors-server is tested with uvicorn" in line  # the range it was installed with
