"""`ors-server envs` and the argument handling of `ors-server serve`."""

import pytest

from ors_server.cli import main, resolve_environments


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
    from environments.math import Math

    assert resolve_environments(["MATH", "environments.math:Math"]) == [Math, Math]
    assert [env.name for env in resolve_environments([])][0] == "math"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["envs", "--env", "nosuch"], "unknown environment 'nosuch'"),
        (["envs", "--env", "ors_server.types:TextBlock"], "is not an Environment subclass"),
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
