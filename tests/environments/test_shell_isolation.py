"""Sessions of the shell environment are isolated from each other and from the server, by default.

One test per finding of the adversarial review that ran without a sandbox: `setsid` children outlived their
session; the server's `--api-key` was readable from `/proc/$PPID/cmdline`; a server running as root let a
session read another session's `X-Secrets` from `/proc/$PPID/mem`; and writing `hello.txt` into another
session's working directory made that session's `submit` return "Correct". They need bubblewrap, which the
default sandbox is, and skip (saying why) only where it cannot run.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ors_server.environments.shell import Shell
from ors_server.environments.shell.confinement import bwrap_problem
from ors_server.settings import Settings
from ors_server.types import ToolOutput
from tests.environments.shell_helpers import (
    alive,
    bash,
    footprint,
    processes_with_argument,
    shell_session,
    unique_sleep,
    until_running,
)
from tests.ors_envs import call, call_result, create, sid_header, x_secrets
from tests.pipeline import StoreWithCalls
from tests.serving import free_port

BWRAP_PROBLEM = bwrap_problem()
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}"),
]


@pytest.fixture(autouse=True)
def default_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORS_SHELL_SANDBOX", raising=False)


@pytest.mark.parametrize("ending", ["deleted", "reaped", "reset", "shutdown"])
async def test_processes_that_leave_the_shells_session_still_end_with_it(ending: str) -> None:
    arguments = [unique_sleep() for _ in range(3)]
    async with shell_session() as (store, session):
        first, second, third = arguments
        command = f"setsid -f sleep {first}; setsid sleep {second} & nohup setsid sleep {third} >/dev/null 2>&1 &"
        await bash(store, session, f"{command} {'; '.join(until_running(a) for a in arguments)}")
        escaped = [pid for argument in arguments for pid in processes_with_argument(argument)]
        assert len(escaped) == 3 and all(map(alive, escaped))
        shell_pid, root = footprint(session)
        if ending == "deleted":
            assert await store.discard("s")
        elif ending == "reaped":
            session.last_active -= store.settings.session_timeout + 1
            assert await store.reap() == 1
        elif ending == "reset":  # a new episode in the same session (Eval Protocol's reset_session)
            await store.reset(session, None)
            assert footprint(session)[1] != root
    # (shutdown: leaving the block shuts the store down)
    assert not any(map(alive, [shell_pid, *escaped])) and not root.exists()


async def test_commands_never_run_as_root_and_not_as_the_servers_user_inside() -> None:
    async with shell_session() as (store, session):
        argument = unique_sleep()
        text = await bash(store, session, f"id -u; id -g; sleep {argument} >/dev/null 2>&1 & {until_running(argument)}")
        assert text == "exit code: 0\nstdout:\n65534\n65534\n"
        [pid] = processes_with_argument(argument)
        # As the host sees it: the owner of /proc/PID is the process's effective uid.
        assert os.stat(f"/proc/{pid}").st_uid != 0
        if os.geteuid() == 0:
            assert os.stat(f"/proc/{pid}").st_uid == 65534


async def test_another_sessions_directory_is_out_of_sight_and_its_grade_out_of_reach() -> None:
    async with StoreWithCalls(Settings()).run() as store:
        store.create("a", Shell, {"id": "hello_file"})
        store.create("b", Shell, {"id": "hello_file"})
        a, b = await store.get_ready("a"), await store.get_ready("b")
        _, a_root = footprint(a)
        a_work = a_root / "work"
        assert (await bash(store, b, f"ls -d {a_root}")).startswith("exit code: 2\nstderr:\nls: cannot access")
        assert "No such file or directory" in await bash(store, b, f"echo hi > {a_work}/hello.txt")
        assert await bash(store, b, "ls -A /tmp") == "exit code: 0"
        top = set((await bash(store, b, "ls /")).split("stdout:\n")[1].split())
        assert top <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr", "work"}
        await bash(store, b, "echo hi > /work/hello.txt")
        assert not (a_work / "hello.txt").exists()
        result = await store.call(a, "submit", {})
        assert isinstance(result, ToolOutput) and result.reward == 0.0, result
        result = await store.call(b, "submit", {})
        assert isinstance(result, ToolOutput) and result.reward == 1.0, result


async def test_the_sandbox_has_no_network_a_read_only_system_and_a_writable_workdir() -> None:
    async with shell_session() as (store, session):
        text = await bash(store, session, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        assert text == "exit code: 0\nstdout:\nlo\n"
        assert "Read-only file system" in await bash(store, session, "touch /usr/ors-probe /etc/ors-probe")
        assert await bash(store, session, "pwd; echo hi > hello.txt && cat hello.txt") == (
            "exit code: 0\nstdout:\n/work\nhi\n"
        )


# The server, as an operator runs it: its own process, with the API key on its command line.

SCAN = """
import os, sys
needles = [bytes.fromhex(n) for n in sys.argv[1:]]
pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
found = []
for pid in pids:
    for part in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as file:
                data = file.read()
        except OSError:
            continue
        found += [f"{pid}/{part}" for n in needles if n in data]
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
            for line in maps:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(start)
                    data = mem.read(end - start)
                except (OSError, ValueError, OverflowError):
                    continue
                found += [f"{pid}/mem" for n in needles if n in data]
    except OSError:
        pass
print("visible", len(pids), "found", found)
"""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[httpx.Client, str, int]]:
    """`ors-server serve --api-key KEY` in a process of its own: a client with the key, the key, the pid."""
    key = "key-" + os.urandom(12).hex()
    port = free_port()
    argv = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--env", "shell", "--api-key", key]
    env = {k: v for k, v in os.environ.items() if k not in ("ORS_SHELL_SANDBOX", "ORS_API_KEY")}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30, headers={"X-API-Key": key}) as client:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, "the server exited at start"
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server did not answer /health"
                    time.sleep(0.1)
            yield client, key, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def shell_output(client: httpx.Client, sid: str, command: str) -> str:
    result = call_result(call(client, sid, "bash", {"command": command}, path="/shell/call"))
    assert result["ok"], result
    return result["output"]["blocks"][0]["text"]


def test_the_server_its_api_key_and_other_sessions_secrets_are_out_of_reach(
    server: tuple[httpx.Client, str, int],
) -> None:
    client, key, server_pid = server
    secret = "secret-" + os.urandom(12).hex()
    with open(f"/proc/{server_pid}/cmdline", "rb") as file:
        assert key.encode() in file.read()  # where the review found it: the test could fail
    victim = create(client, {"id": "hello_file"}, headers={"X-Secrets": x_secrets({"TOKEN": secret})})
    attacker = create(client, {"id": "hello_file"})
    for sid in (victim, attacker):
        assert client.get("/shell/prompt", headers=sid_header(sid)).status_code == 200
    text = shell_output(client, attacker, "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; ls /proc | grep -c '^[0-9]'")
    # The parent the shell sees is the sandbox's init (bwrap), not the server.
    assert text.startswith("exit code: 0\nstdout:\n") and "bwrap --args " in text
    assert key not in text and secret not in text
    if "python3" not in shell_output(client, attacker, "command -v python3"):
        pytest.skip("no python3 in the sandbox to scan the memory of the processes it can see")
    needles = " ".join(value.encode().hex() for value in (key, secret))
    encoded = base64.b64encode(SCAN.encode()).decode()
    text = shell_output(client, attacker, f"echo {encoded} | base64 -d > /tmp/scan.py; python3 /tmp/scan.py {needles}")
    assert "found []" in text, text
    assert key not in text and secret not in text


# Resource limits (`confinement.shell_resources`), and the hardening every sandbox shares
# (`ors_server.sandboxes.bubblewrap`).

PROCESSES = 12


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORS_SHELL_MAX_PROCESSES", str(PROCESSES))
    monkeypatch.setenv("ORS_SHELL_MEMORY_BYTES", str(128 * 1024 * 1024))
    monkeypatch.setenv("ORS_SHELL_DISK_BYTES", str(4 * 1024 * 1024))
    monkeypatch.setenv("ORS_SHELL_FILE_BYTES", str(3 * 1024 * 1024))


# Starts sleeping processes until a fork fails (bash itself would retry a failed fork for seconds).
FILL = (
    'python3 -c "import os, time\n'
    "started = 0\n"
    "try:\n"
    "    while started < 200:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(1000)\n"
    "            os._exit(0)\n"
    "        started += 1\n"
    "except OSError:\n"
    "    pass\n"
    'print(started)"'
)


def count(text: str) -> int:
    return int(text.split("stdout:\n")[1].split()[0])


@pytest.mark.usefixtures("small_limits")
async def test_a_session_starts_processes_up_to_its_limit_and_no_session_takes_anothers() -> None:
    # Every sandbox runs as uid 65534; the limit counts in each one's own user namespace, so a full session
    # leaves the others' budgets whole.
    async with StoreWithCalls(Settings()).run() as store:
        store.create("a", Shell, {"id": "hello_file"})
        store.create("b", Shell, {"id": "hello_file"})
        a, b = await store.get_ready("a"), await store.get_ready("b")
        if "python3" not in await bash(store, a, "command -v python3"):
            pytest.skip("no python3 in the sandbox to fork with")
        first = count(await bash(store, a, FILL))
        second = count(await bash(store, b, FILL))  # while the first still holds all of its processes
    # The sandbox's init, bash and python count too.
    assert first == second == PROCESSES - 3


@pytest.mark.usefixtures("small_limits")
async def test_a_session_has_memory_and_disk_limits() -> None:
    async with shell_session() as (store, session):
        text = await bash(store, session, "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}")
        assert "300000000" not in text
        root = footprint(session)[1]
        mounted = os.path.ismount(root / "work")  # noqa: ASYNC240 (a test's one look at the host)
        fill = "for f in a b; do head -c 64M /dev/zero > {0}/$f; done; wc -c < {0}/a; wc -c < {0}/b;"
        text = await bash(
            store,
            session,
            fill.format("/tmp") + fill.format("/work") + "for path in /x /dev/x /usr/x; do echo > $path; done",
        )
    sizes = text.split("stdout:\n")[1].split("\n\nstderr:")[0].split()
    # A file stops at the file limit (3 MiB), the next where /tmp (4 MiB) is full; /work the same where the server
    # can mount a tmpfs for it (as root), else only the file limit bounds it.
    work = ["3145728", "1048576"] if mounted else ["3145728", "3145728"]
    assert sizes == ["3145728", "1048576", *work], text
    mounts = Path("/proc/self/mountinfo").read_text()  # noqa: ASYNC240
    assert str(root) not in mounts and not root.exists()  # unmounted and removed with the session
    assert "No space left on device" in text and ("File too large" in text or "File size limit" in text), text
    assert text.count("Read-only file system") == 3, text


async def test_the_sandboxs_process_list_names_no_host_path() -> None:
    # bubblewrap's init is pid 1 of the sandbox, with bubblewrap's own command line: its options once named the
    # session's directory on the host (and every other bind) to any `ps` or `cat /proc/1/cmdline`.
    async with shell_session() as (store, session):
        host_dir = str(session.env.root)  # type: ignore[union-attr]
        seen = await bash(store, session, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")
    assert seen.startswith("exit code: 0\nstdout:\n") and "bwrap --args " in seen, seen
    assert host_dir not in seen and "ors-shell-" not in seen, seen
    assert "--bind" not in seen and "--setenv" not in seen, seen


async def test_commands_cannot_write_kernel_settings_or_trace_the_sandboxs_pid_1() -> None:
    async with shell_session() as (store, session):
        # The sysctl's own value written back: harmless, were it ever allowed.
        text = await bash(
            store, session, "v=$(cat /proc/sys/fs/lease-break-time); echo $v > /proc/sys/fs/lease-break-time"
        )
        assert text.startswith("exit code: 1\nstderr:\n") and ("Permission denied" in text or "Read-only" in text)
        status = await bash(store, session, "grep -E '^(NoNewPrivs|CapEff|Seccomp):' /proc/self/status")
        assert sorted(status.split("stdout:\n")[1].split()) == sorted(
            ["NoNewPrivs:", "1", "CapEff:", "0" * 16, "Seccomp:", "2"]
        )
        if "python3" not in await bash(store, session, "command -v python3"):
            pytest.skip("no python3 in the sandbox to call ptrace with")
        seize = (
            "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
            "print(libc.ptrace(0x4206, 1, 0, 0), ctypes.get_errno())"  # PTRACE_SEIZE does not stop pid 1
        )
        text = await bash(store, session, f'python3 -c "{seize}"')
    assert text == "exit code: 0\nstdout:\n-1 1\n", text
