"""An address already in use is one line naming it and exit 1, in every mode, before anything else starts."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.clients.harness import server_command


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another process (here: this one) listens on."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


MODES = {
    "single": [],
    "workers": ["--workers", "2"],
    "fronts": ["--workers", "1", "--fronts", "2"],
    "ray": ["--workers", "1", "--ray"],  # refused before Ray is started or reached
}


@pytest.mark.parametrize("mode", MODES.values(), ids=MODES.keys())
def test_a_port_in_use_is_one_line_and_exit_1(taken_port: int, mode: list[str]) -> None:
    if "--ray" in mode:
        pytest.importorskip("ray", reason="the ray extra is part of the test extra")
    done = subprocess.run(
        [*server_command(), "serve", "--port", str(taken_port), "--env", "math", *mode],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"ors-server: 127.0.0.1:{taken_port} is already in use (another process listens there): "
        "stop it or choose another --port"
    )


def test_a_second_deployment_with_several_fronts_does_not_share_the_port_of_the_first() -> None:
    """SO_REUSEPORT lets the fronts of one deployment share a port; it must not let another deployment join."""
    from ors_server.http.server import CannotListen
    from ors_server.scale.fronts import listeners

    first = listeners("127.0.0.1", 0, 2)
    try:
        port = first[0].getsockname()[1]
        with pytest.raises(CannotListen, match=f"127.0.0.1:{port} is already in use"):
            listeners("127.0.0.1", port, 2)
    finally:
        for sock in first:
            sock.close()


def test_every_address_of_the_host_is_listened_on_with_one_port() -> None:
    """As uvicorn binds a name: an empty host (or a name with an IPv4 and an IPv6 address) gets a socket each."""
    from ors_server.http.server import listen

    infos = socket.getaddrinfo(None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets = listen("", 0)
    try:
        assert {(sock.family, sock.getsockname()[0]) for sock in sockets} == {(i[0], i[4][0]) for i in infos}
        assert len({sock.getsockname()[1] for sock in sockets}) == 1
    finally:
        for sock in sockets:
            sock.close()
