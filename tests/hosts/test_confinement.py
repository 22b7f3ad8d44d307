"""Code in a hosted environment is confined like a CodeAct step (issue 31 item 1). Before, a host process ran as
uid 65534 with no pid namespace and the whole filesystem visible: its code read the API key from the server's
`/proc/<pid>/cmdline`, copied the records database from the working directory, read another host process's memory
through `/proc/<pid>/mem` and could kill it. Each of those is tried here, from a real host process of a running
server, and must fail while the environment itself still works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ors_server.hosting import HostedEnvironment
from ors_server.http.app import create_app
from ors_server.loading import resolve_environments
from ors_server.settings import Settings

HERE = Path(__file__).resolve().parent
SECRET_ARGUMENT = "--not-a-key-but-as-secret"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the host sandbox needs bubblewrap")


def _end(text: str) -> dict:
    last = [block for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()][-1]
    fields = dict(line.split(": ", 1) for line in last.splitlines())
    assert fields["event"] == "end", fields
    return json.loads(fields["data"])


class Probe:
    def __init__(self, client: TestClient, workdir: Path, records: Path, env_cls: type[HostedEnvironment]) -> None:
        self.client, self.workdir, self.records, self.env_cls = client, workdir, records, env_cls

    def create(self, sid: str) -> None:
        body = {"env_name": "prober", "split": "train", "index": 0}
        assert self.client.post("/create", json=body, headers={"X-Session-ID": sid}).status_code == 200

    def call(self, sid: str, name: str, **arguments: object) -> str:
        response = self.client.post(
            "/prober/call", json={"name": name, "input": arguments}, headers={"X-Session-ID": sid}
        )
        assert response.status_code == 200, response.text
        end = _end(response.text)
        assert end["ok"] is True, end
        return "".join(block["text"] for block in end["output"]["blocks"])

    def host_pids(self) -> list[int]:
        """The pids, as the server sees them, of the processes running the environment's code."""
        pool = self.env_cls.pool
        assert pool is not None
        return [pid for host in pool.hosts for pid in _tree(host.pid) if _is_python_host(pid)]


def _tree(root: int) -> list[int]:
    found, frontier = [root], [root]
    while frontier:
        parent = frontier.pop()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(entry))
                    frontier.append(int(entry))
    return found


def _is_python_host(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return os.path.basename(argv[0]) not in (b"bwrap", b"setpriv") and b"-c" in argv


@pytest.fixture(scope="module")
def probe() -> Iterator[Probe]:
    # An application's directory as it usually is, one others may enter, holding the records as by default.
    workdir = Path(tempfile.mkdtemp(prefix="ors-confinement-"))
    try:
        os.chmod(workdir, 0o755)
        shutil.copy(HERE / "prober.py", workdir / "prober.py")
        records = workdir / "ors-episodes.db"
        (env_cls,) = resolve_environments(["isolated:prober:Prober"], str(workdir))
        assert issubclass(env_cls, HostedEnvironment)
        app = create_app([env_cls], Settings(host_sessions=1, records=str(records)))
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield Probe(client, workdir, records, env_cls)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_servers_command_line_and_environment_are_out_of_reach(probe: Probe) -> None:
    probe.create("cmdline")
    server = os.getpid()  # the server runs in this process (the test's client drives its app)
    assert probe.call("cmdline", "read", path=f"/proc/{server}/cmdline").startswith("refused")
    assert probe.call("cmdline", "read", path=f"/proc/{server}/environ").startswith("refused")
    assert str(server) not in probe.call("cmdline", "processes").split()
    # Its sandbox's init (pid 1 there) shows bubblewrap's command line without its options: no bind's host path.
    init = probe.call("cmdline", "read", path="/proc/1/cmdline")
    assert init.startswith("read: ") and "--args" in init and "--ro-bind" not in init, init


def test_the_records_database_is_out_of_reach_while_the_working_directory_is_readable(probe: Probe) -> None:
    probe.create("records")
    assert probe.records.exists()
    assert probe.call("records", "read", path=str(probe.workdir / "prober.py")).startswith("read: ")
    for suffix in ("", "-wal", "-shm"):
        assert probe.call("records", "read", path=f"{probe.records}{suffix}").startswith("refused"), suffix


def test_another_host_process_can_be_neither_read_nor_killed(probe: Probe) -> None:
    probe.create("victim")
    before = set(probe.host_pids())
    probe.create("attacker")  # host_sessions=1: a host process of its own
    victims = [pid for pid in probe.host_pids() if pid in before]
    assert victims and set(probe.host_pids()) - before
    for victim in victims:
        assert probe.call("attacker", "peek", pid=victim).startswith("refused")
        assert probe.call("attacker", "kill", pid=victim).startswith("refused")
    assert probe.call("victim", "whoami")  # still alive, still serving its session
    assert set(victims) <= set(probe.host_pids())


def test_an_unrelated_process_of_the_same_uid_cannot_be_signalled(probe: Probe) -> None:
    probe.create("neighbour")
    uid = int(probe.call("neighbour", "whoami").split()[0])
    # A process of the hosts' uid outside the server (another ors-server's host, say), as the server sees it.
    ids = {"user": uid, "group": uid, "extra_groups": []} if os.geteuid() == 0 else {}
    # /bin/sh, not this venv's python: that uid may not enter the venv's directory (CI's is a private mktemp -d).
    other = subprocess.Popen(["/bin/sh", "-c", "sleep 60; :", "sh", SECRET_ARGUMENT], **ids)
    try:
        assert probe.call("neighbour", "kill", pid=other.pid).startswith("refused")
        assert probe.call("neighbour", "read", path=f"/proc/{other.pid}/cmdline").startswith("refused")
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_the_host_writes_only_to_its_own_tmp(probe: Probe) -> None:
    probe.create("writer")
    assert probe.call("writer", "read", path="/etc/shadow").startswith("refused")
    assert probe.call("writer", "whoami").split()[0] == "65534"
