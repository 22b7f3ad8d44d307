"""Toolsets through the official `openreward` client (`env.session(toolset=...)`) on the `shell` environment: each
session lists its toolset's tools with the names and input schemas the `openreward` package itself declares (a
toolset's `bash` replaces the environment's, as on `openreward`'s server), they act in the episode's sandbox (the
environment's own `submit` grades what they did), paths outside it are not the host's, and `/create` refuses an
unknown toolset, and a toolset where there is no sandbox, naming the toolsets.

One server and one client run for the module: every toolset's episode is in that one run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ors_server.toolsets import TOOLSETS
from tests.clients.harness import Server, run_script, server_command
from tests.hosts.test_openreward import _process

pytestmark = pytest.mark.clients

HOST_TEXT = "the host's, not the sandbox's"


@pytest.fixture(scope="module")
def shell_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # With the hosts' start timeout (a loaded machine can take over 30 s to start a server).
    argv = [*server_command(), "serve", "--port", "{port}", "--env", "shell", "--env", "math"]
    with _process(argv, tmp_path_factory.mktemp("toolsets"), "ours") as server:
        yield server


@pytest.fixture(scope="module")
def host_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("host") / "host-only.txt"
    path.write_text(HOST_TEXT)
    return path


@pytest.fixture(scope="module")
def seen(openreward_python: Path, shell_server: Server, host_file: Path, tmp_path_factory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("home")
    return run_script(
        openreward_python,
        "openreward_toolset.py",
        shell_server.url,
        str(host_file),
        *TOOLSETS,
        home=home,
        server=shell_server,
        timeout=240,
    )


def text(step: dict[str, Any]) -> str:
    assert "text" in step, step
    return step["text"]


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
def test_a_toolsets_tools_have_the_names_and_input_schemas_openreward_declares(seen, toolset: str) -> None:
    episode = seen[toolset]
    listed = episode["schemas"]
    reference = episode["reference"]
    assert {name: listed.get(name) for name in reference} == reference
    # Beside them, the environment's own tools that the toolset's do not replace (the shell's bash and submit).
    assert set(listed) - set(reference) == {"bash", "submit"} - set(reference)


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
def test_a_toolsets_shell_works_in_the_sandbox_and_submit_grades_it(seen, toolset: str, host_file: Path) -> None:
    episode = seen[toolset]
    shell = {"claude-code": "bash", "codex": "bash", "cli": "bash", "gemini-cli": "shell", "hermes": "terminal"}
    ran = text(episode[shell.get(toolset, "exec")])
    assert ran.startswith("65534\n/work\n") and "(exit 0)" in ran  # the agent's user, in the sandbox's /work
    assert (episode["submit"]["reward"], episode["submit"]["finished"]) == (1.0, True)  # it wrote hello.txt
    if "host_file" in episode:
        assert HOST_TEXT not in text(episode["host_file"])
        assert f"{host_file} does not exist" in text(episode["host_file"])


def test_claude_code_reads_writes_edits_and_searches_in_the_sandbox(seen) -> None:
    episode = seen["claude-code"]
    assert text(episode["read"]) == "     1\thello\n     2\tthere\n\n(exit 0)"  # written, then edited
    assert text(episode["glob"]).startswith("/work/notes/draft.txt\n")
    assert text(episode["glob_path"]).startswith("/work/notes/draft.txt\n")  # `**/` matches in a subdirectory
    assert text(episode["grep"]).startswith("/work/notes/draft.txt:2:there\n")
    assert text(episode["todo"]) == "=== TODO LIST ===\n[pending] [medium] say hi"
    assert episode["bad_input"]["error"]["reason"] == "input_validation"
    slow = text(episode["slow"])
    assert "(exit 124)" in slow and "time limit" in slow


def test_cli_edits_one_file_with_several_edits_all_or_nothing(seen) -> None:
    episode = seen["cli"]
    assert text(episode["edit"]) == "Successfully edited src/a.py\n\n(exit 0)"
    assert text(episode["multi_edit"]) == "Successfully applied 2 edits with 2 total replacements"
    assert "old_string not found in src/a.py" in text(episode["multi_edit_missing"])
    assert text(episode["read"]) == "     1\tx = 3\n     2\twhy = 2\n\n(exit 0)"  # the failed multi_edit left it
    assert text(episode["glob"]).startswith("/work/src/a.py\n")
    assert text(episode["grep"]).startswith("/work/src/a.py:2:why = 2\n")
    listing = text(episode["ls"])
    assert " a.py\n" in listing and "(exit 0)" in listing
    assert text(episode["todo"]) == "=== TODO LIST ===\n[in_progress] [high] ship"


def test_gemini_cli_tools_work_in_the_sandbox(seen) -> None:
    episode = seen["gemini-cli"]
    assert text(episode["write"]) == "Successfully wrote to docs/guide.md\n\n(exit 0)"
    assert text(episode["replace"]) == "Successfully edited docs/guide.md\n\n(exit 0)"
    assert text(episode["read"]) == "     2\tnew line\n     3\tend\n\n(exit 0)"  # start_line..end_line, both in
    assert text(episode["glob"]).startswith("/work/docs/guide.md\n")
    assert text(episode["grep"]).startswith("/work/docs/guide.md:2:new line\n")
    listing = text(episode["list"])
    assert " hello.txt" not in listing and " docs" not in listing and "(exit 0)" in listing  # docs ignored
    assert text(episode["todos"]) == "=== TODO LIST ===\n[completed] write the guide"
    assert text(episode["shell_in_dir"]).startswith("/work/docs\n")


def test_hermes_patches_in_both_modes_and_pages_its_reads_and_searches(seen) -> None:
    episode = seen["hermes"]
    assert text(episode["replace"]) == "Successfully patched plan.txt"
    assert text(episode["patch"]) == "Success. Updated the following files:\nM plan.txt\nA extra/added.txt"
    assert text(episode["read"]).startswith("2|step 2\n\n[1 more lines")  # offset 2, limit 1
    assert text(episode["search"]) == "/work/plan.txt:2:step 2\n/work/plan.txt:3:step 3"
    assert text(episode["find"]).splitlines() == ["/work/extra/added.txt", "/work/plan.txt"]
    missing = text(episode["missing"])
    assert "does not exist" in missing and "similar: /work/plan.txt" in missing


def test_openclaw_edits_and_applies_a_patch_all_or_nothing(seen) -> None:
    episode = seen["openclaw"]
    assert text(episode["edit"]) == "Successfully edited app/main.txt"
    assert text(episode["apply_patch"]) == "Success. Updated the following files:\nM app/main.txt\nD app/old.txt"
    assert "no file was changed" in text(episode["bad_patch"])
    assert text(episode["read"]) == "def main()\n    return 0"
    assert text(episode["listing"]) == "main.txt\n\n\n(exit 0)"  # old.txt deleted
    assert "no background session 's1'" in text(episode["process"])


def test_create_refuses_an_unknown_toolset_and_one_without_a_sandbox_naming_the_toolsets(seen) -> None:
    names = f"toolsets: {sorted(TOOLSETS)}"
    assert names == "toolsets: ['claude-code', 'cli', 'codex', 'gemini-cli', 'hermes', 'openclaw']"
    unknown = seen["refusals"]["no-such-toolset@shell"]
    assert "400" in unknown and "unknown toolset 'no-such-toolset'" in unknown and names in unknown
    no_sandbox = seen["refusals"][f"{sorted(TOOLSETS)[0]}@math"]
    assert "400" in no_sandbox and "needs a sandbox to act on, and 'math' has none" in no_sandbox
    assert names in no_sandbox
