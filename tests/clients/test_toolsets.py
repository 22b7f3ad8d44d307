"""Toolsets through the official `openreward` client (`env.session(toolset=...)`) on the `shell` environment: the
session lists the toolset's tools (a toolset's `bash` replaces the environment's, as on `openreward`'s server),
they act in the episode's sandbox (the environment's own `submit` grades what they did), paths outside it are not
the host's, and `/create` refuses a toolset where there is no sandbox, naming the toolsets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.harness import Server, server_command
from tests.hosts.test_openreward import _process

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def shell_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # With the hosts' start timeout (a loaded machine can take over 30 s to start a server).
    argv = [*server_command(), "serve", "--port", "{port}", "--env", "shell", "--env", "math"]
    with _process(argv, tmp_path_factory.mktemp("toolsets"), "ours") as server:
        yield server


def test_claude_code_tools_work_in_the_shell_sandbox(
    openreward_python: Path, shell_server: Server, run_client, tmp_path: Path
) -> None:
    host_file = tmp_path / "host-only.txt"
    host_file.write_text("the host's, not the sandbox's")
    seen = run_client(openreward_python, "openreward_toolset.py", shell_server.url, "claude-code", str(host_file))

    assert seen["tools"] == ["bash", "edit", "glob", "grep", "read", "submit", "todo_write", "write"]
    assert seen["read"]["text"] == "     1\thello\n     2\tthere\n\n(exit 0)"  # written, then edited
    assert seen["glob"]["text"].startswith("/work/notes/draft.txt\n")
    assert seen["grep"]["text"].startswith("/work/notes/draft.txt:2:there\n")
    assert seen["todo"]["text"] == "=== TODO LIST ===\n[pending] [medium] say hi"
    assert seen["host_file"]["text"] == f"Error reading file: {host_file} does not exist"
    assert seen["bad_input"]["error"]["reason"] == "input_validation"
    assert seen["bash"]["text"].startswith("65534\n/work\n")  # the agent's user, in the sandbox's /work
    assert "(exit 124)" in seen["slow"]["text"] and "time limit" in seen["slow"]["text"]
    assert (seen["submit"]["reward"], seen["submit"]["finished"]) == (1.0, True)  # the toolset's bash wrote hello.txt
    refused = seen["refusals"]["claude-code@math"]
    assert "400" in refused and "needs a sandbox to act on, and 'math' has none" in refused
    assert "toolsets: ['claude-code', 'codex']" in refused


def test_codex_has_one_bash_over_the_same_sandbox(
    openreward_python: Path, shell_server: Server, run_client, tmp_path: Path
) -> None:
    seen = run_client(openreward_python, "openreward_toolset.py", shell_server.url, "codex", str(tmp_path))
    assert seen["tools"] == ["bash", "submit"]
    assert (seen["submit"]["reward"], seen["submit"]["finished"]) == (1.0, True)
