"""`--env-port NAME=PORT` values that cannot be served are one line at startup, before anything listens or starts
(`ors-server serve` run in this process: each case stops before a server, a worker or a front exists)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from ors_server.cli import main
from tests.serving import free_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket (here: this process's) listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def refusal(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    """The exit code and the one line `serve` stops with (a SystemExit's message, or what it printed first)."""
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--env", "math", "--env", "frozen_lake", "--records", "off", *flags])
    code = stopped.value.code
    if isinstance(code, str):
        return 1, code
    return int(code or 0), capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("flags", "code", "line"),
    [
        (
            ["--env-port", "taxi=18431"],
            2,
            "env_ports: 'taxi=18431' names no environment served here (served: math, frozen_lake)",
        ),
        (
            ["--env-port", "math=18431", "--env-port", "frozen_lake=18431"],
            1,
            "env_ports: port 18431 is given twice ('math' and 'frozen_lake')",
        ),
        (
            ["--env-port", "frozen_lake=18430"],
            1,
            "env_ports: 'frozen_lake=18430' gives the main port (18430) to 'frozen_lake'",
        ),
        (["--env-port", "frozen_lake"], 1, "env_ports entries must be NAME=PORT, got 'frozen_lake'"),
    ],
    ids=["unknown-env", "same-port-twice", "main-port", "not-name-equals-port"],
)
def test_a_bad_env_port_is_one_line_at_startup(
    capsys: pytest.CaptureFixture[str], flags: list[str], code: int, line: str
) -> None:
    assert refusal(capsys, "--port", "18430", *flags) == (code, f"ors-server: {line}")


@pytest.mark.parametrize(
    "mode", [[], ["--workers", "2"], ["--workers", "1", "--fronts", "2"]], ids=["single", "workers", "fronts"]
)
def test_an_env_port_in_use_is_one_line_naming_its_flag(
    capsys: pytest.CaptureFixture[str], taken_port: int, mode: list[str]
) -> None:
    port = free_port()
    assert refusal(capsys, "--port", str(port), "--env-port", f"frozen_lake={taken_port}", *mode) == (
        1,
        f"ors-server: 127.0.0.1:{taken_port} is already in use (another process listens there): "
        "stop it or choose another --env-port frozen_lake=PORT",
    )
