"""Settings: one definition per field, from which the `serve` flags, their help and the docs' flags table follow."""

import json
import re
from pathlib import Path

import pytest

from ors_server.cli import _parser, _settings_of
from ors_server.settings import Settings, serve_flags

PRODUCTION = Path(__file__).resolve().parent.parent / "docs" / "production.md"


def _readme_flags() -> dict[str, str]:
    """The serve-flags table of docs/production.md: each flag's name and the default it states."""
    text = PRODUCTION.read_text()
    table = text[text.index("| flag | default | what it does |") :].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        match = re.match(r"\| `(--[a-z-]+)[^`]*` \| ([^|]+) \|", line)
        assert match, f"a row of the flags table cannot be read from: {line!r}"
        rows[match[1]] = match[2].strip()
    return rows


def test_documented_flags_table_names_every_serve_flag_with_its_default() -> None:
    defined = {flag.flag: flag.shown_default for flag in serve_flags()}
    assert _readme_flags() == defined


def test_every_flag_is_parsed_with_its_settings_default() -> None:
    settings = Settings.from_env(**_settings_of(_parser().parse_args(["serve"])))
    assert settings == Settings.from_env()


def test_flags_reach_their_fields() -> None:
    args = _parser().parse_args(
        [
            "serve",
            "--allowed-host",
            "a.example",
            "--allowed-host",
            "b.example:8000",
            "--ray-runtime-env",
            '{"working_dir": "."}',
            "--tool-timeout",
            "2.5",
            "--codeact",
        ]
    )
    settings = Settings.from_env(**_settings_of(args))
    assert settings.allowed_hosts == ("a.example", "b.example:8000")
    assert settings.ray_runtime_env == {"working_dir": "."}
    assert settings.tool_timeout == 2.5 and settings.codeact


def test_a_bad_json_flag_names_the_problem(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--ray-runtime-env", "[1]"])
    assert "argument --ray-runtime-env: expected a JSON object, got '[1]'" in capsys.readouterr().err


def test_settings_cross_to_another_process_as_json_without_the_api_key() -> None:
    settings = Settings(api_key="secret", allowed_hosts=("a.example",), ray_runtime_env={"pip": ["x"]}, workers=2)
    sent = json.loads(json.dumps(settings.to_json()))
    assert "api_key" not in sent and "secret" not in json.dumps(sent)
    assert Settings.from_json(sent) == Settings(allowed_hosts=("a.example",), ray_runtime_env={"pip": ["x"]}, workers=2)


def test_settings_have_no_envs_field() -> None:
    assert not hasattr(Settings(), "envs")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ready_wait": 0}, "ready_wait must be positive, got 0"),
        ({"tool_timeout": 0}, "tool_timeout must be positive or None, got 0"),
        ({"shutdown_grace": -1}, "shutdown_grace must not be negative, got -1"),
        ({"codeact_sandbox": "docker"}, "codeact_sandbox must be 'bwrap' or 'none', got 'docker'"),
        ({"port": 70000}, "port must be in 0..65535, got 70000"),
        ({"codeact_output_chars": 0}, "codeact_output_chars must be at least 1, got 0"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_field_and_the_rule(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Settings(**fields)  # type: ignore[arg-type]
