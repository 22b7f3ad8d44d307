"""The API key can stay off the command line (issue 31 item 1): a key given with `--api-key` is in the server's
`/proc/<pid>/cmdline`, which every local process may read; `--api-key-file` and `$ORS_API_KEY` keep it out."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from ors_server.settings import Settings
from tests.clients.harness import _healthy, _stop, server_command
from tests.serving import free_port

KEY = "k3y-from-a-file-or-the-environment"


@contextlib.contextmanager
def _serving(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if k != "ORS_API_KEY"}
    argv = [*server_command(), "serve", "--port", str(port), "--env", "math", "--records", "off", *args]
    with open(tmp_path / "server.log", "wb") as log:
        process = subprocess.Popen(argv, env={**environment, **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
        while not _healthy(url):  # an external process: poll its health, bounded
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        yield url, process.pid
    finally:
        _stop(process)


def _guarded_by_the_key(url: str, pid: int) -> None:
    assert KEY not in Path(f"/proc/{pid}/cmdline").read_text()
    assert httpx.get(f"{url}/math/splits", timeout=10).status_code == 401
    assert httpx.get(f"{url}/math/splits", headers={"X-API-Key": KEY}, timeout=10).status_code == 200


def test_the_key_read_from_a_file_guards_the_server_and_is_not_on_its_command_line(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    with _serving(tmp_path, "--api-key-file", str(key_file)) as (url, pid):
        _guarded_by_the_key(url, pid)


def test_the_key_from_the_environment_guards_the_server_and_is_not_on_its_command_line(tmp_path: Path) -> None:
    with _serving(tmp_path, env={"ORS_API_KEY": KEY}) as (url, pid):
        _guarded_by_the_key(url, pid)


def test_a_key_file_that_cannot_be_read_or_a_key_given_twice_stops_the_server_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    for args, said in (
        (["--api-key-file", str(tmp_path / "missing")], "cannot be read"),
        (["--api-key-file", str(tmp_path / "empty")], "holds no key"),
        (["--api-key-file", str(tmp_path / "empty"), "--api-key", "x"], "give the key one way"),
    ):
        done = subprocess.run([*server_command(), "serve", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and said in done.stderr, done.stderr


def test_the_key_file_is_read_when_the_settings_are_built_and_not_sent_to_other_processes(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(f"  {KEY}  \nignored\n")
    settings = Settings.from_env(api_key_file=str(key_file))
    assert settings.api_key == KEY
    assert "api_key_file" not in settings.to_json() and KEY not in repr(settings)


def test_a_key_on_the_command_line_is_warned_about(tmp_path: Path) -> None:
    with _serving(tmp_path, "--api-key", KEY) as (url, _pid):
        assert httpx.get(f"{url}/math/splits", headers={"X-API-Key": KEY}, timeout=10).status_code == 200
    assert "visible to every local process" in (tmp_path / "server.log").read_text()
