"""`ors-server envs` and the argument handling of `ors-server serve`."""

import subprocess
from pathlib import Path

import pytest

from ors_server import hosting
from ors_server.cli import main
from ors_server.loading import resolve_environments
from ors_server.records.db import Database
from tests.clients.harness import server_command
from tests.records.helpers import fill


def test_envs_lists_every_builtin_environment_with_its_tools_and_splits(capsys: pytest.CaptureFixture[str]) -> None:
    main(["envs"])
    out = capsys.readouterr().out
    for name, tool in [
        ("math", "submit"),
        ("frozen_lake", "lake_move"),
        ("cliff_walking", "cliff_move"),
        ("blackjack", "blackjack_move"),
        ("shell", "bash"),
        ("calculator", "submit"),
    ]:
        assert f"{name}  (splits: train, test" in out
        assert f"    {tool}: " in out
    assert "    calc__*: the tools of MCP server 'calc'" in out


def test_environments_resolve_by_name_case_insensitively_and_by_import_path() -> None:
    from ors_server.environments.math import Math

    assert resolve_environments(["MATH", "ors_server.environments.math:Math"]) == [Math, Math]
    assert [env.name for env in resolve_environments([])][0] == "math"


def test_a_bad_environment_spec_is_one_line_on_stderr_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for spec, words in [
        ("nosuch", "unknown environment 'nosuch'"),
        ("ors_server.types:TextBlock", "is the class TextBlock, not an Environment subclass"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["envs", "--env", spec])
        assert exit_info.value.code == 2
        assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--session-timeout", "0"], "session_timeout must be positive"),
        (["serve", "--max-sessions", "0"], "max_sessions must be at least 1"),
        (["serve", "--max-header-bytes", "0"], "max_header_bytes must be at least 1"),
        (["serve", "--max-task-spec-bytes", "0"], "max_task_spec_bytes must be at least 1"),
        (["serve", "--max-replay-chars", "0"], "max_replay_chars must be at least 1"),
        (["serve", "--max-mcp-transports-per-session", "0"], "max_mcp_transports_per_session must be at least 1"),
        (["serve", "--header-timeout", "0"], "header_timeout must be positive"),
        (["serve", "--body-timeout", "-1"], "body_timeout must be positive"),
        (["serve", "--tool-threads", "0"], "tool_threads must be at least 1"),
        (["serve", "--discovery-threads", "0"], "discovery_threads must be at least 1"),
        (["serve", "--lifecycle-threads", "0"], "lifecycle_threads must be at least 1"),
        (["serve", "--tool-server-timeout", "0"], "tool_server_timeout must be positive"),
        (["serve", "--tool-server-start-timeout", "-1"], "tool_server_start_timeout must be positive"),
    ],
)
def test_bad_arguments_exit_with_a_message_naming_the_problem(args: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert message in str(exit_info.value)


def test_an_unknown_serve_flag_is_reported_with_the_serve_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--timeout", "5"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ors-server serve ")
    assert "ors-server serve: error: unrecognized arguments: --timeout 5" in err


@pytest.mark.parametrize("args", [["serve", "--sess", "5"], ["serve", "--max-sess", "5"], ["envs", "--en", "math"]])
def test_abbreviated_flags_are_refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert f"unrecognized arguments: {' '.join(args[1:])}" in capsys.readouterr().err


def test_serve_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for shown in [
        "--port PORT port to listen on (default: 8000)",
        "--host HOST address to listen on (default: 127.0.0.1)",
        "(default: 900)",  # --session-timeout
        "(default: 10000)",  # --max-sessions
        "(default: info)",  # --log-level
    ]:
        assert shown in help_text
    assert "(default: None)" not in help_text and "(default: False)" not in help_text


def _help(*args: str) -> str:
    done = subprocess.run(
        [*server_command(), *args, "--help"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())  # as one line: what the terminal's width wrapped, joined


def test_serve_help_lists_every_form_of_env_the_defaults_that_are_none_and_every_face() -> None:
    text = _help("serve")
    for prefix in ["reasoning-gym:", *(f"{framework}:module:Class[@PYTHON]" for framework in hosting.FRAMEWORKS)]:
        assert prefix in text
    assert "module:Class (imported from the working directory)" in text
    assert "--tool-timeout S seconds a tool call may run (default: none)" in text
    assert "(default: $ORS_RECORDS, else ./ors-episodes.db)" in text
    assert "ORS, MCP, Eval Protocol's control plane and OpenEnv" in text
    assert "ORS, MCP, Eval Protocol's control plane and OpenEnv" in _help()


def test_serve_help_files_the_host_process_flags_under_their_own_heading() -> None:
    done = subprocess.run([*server_command(), "serve", "--help"], capture_output=True, text=True, timeout=60)
    sections = {title: body for title, _, body in (part.partition(":\n") for part in done.stdout.split("\n\n")) if body}
    assert "--host-sessions" not in sections["thread pools"]
    hosts = sections["host processes (environments of other frameworks)"]
    assert all(flag in hosts for flag in ("--host-sessions", "--host-processes", "--host-memory-bytes"))


@pytest.mark.parametrize("command", [["envs"], ["episodes", "export"], ["episodes", "list"]])
def test_a_reader_that_stops_reading_ends_the_command_quietly(tmp_path: Path, command: list[str]) -> None:
    """`ors-server episodes list | head`: once `head` has gone, the command ends without a traceback, as Unix
    tools do. The pipe's reading end is closed before the command writes, so its first write finds it gone."""
    database = Database(str(tmp_path / "r.db"))
    fill(database, "episode-1", calls=3, size=100)
    database.close()
    process = subprocess.Popen(
        [*server_command(), *command, *(["--records", str(tmp_path / "r.db")] if command[0] == "episodes" else [])],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    with process.stderr:
        error = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1
    assert error == ""
