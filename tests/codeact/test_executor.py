"""The CodeAct executor on its own: what code can do in a step, and what hostile code cannot.

Each step here runs in a real sandboxed process (bubblewrap when installed); the tool calls are answered by
a recording callback. Through the session core and the faces, see `test_execute_code.py`.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Any

import anyio
import pytest

from ors_server.codeact import Limits, SandboxUnavailable, StepResult, ToolCallFailed, ToolSpec, bwrap_problem, run_step

pytestmark = pytest.mark.anyio

BWRAP_PROBLEM = bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bubblewrap cannot run here: {BWRAP_PROBLEM}")
SECRET = "s3cret-server-value-7f1e"
TOOLS = [ToolSpec("move", "Move one step.", ["action"]), ToolSpec("fail", "Always fails.")]
LIMITS = Limits(timeout=10)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, name: str, arguments: dict[str, Any]) -> Any:
        self.calls.append((name, arguments))
        if name == "fail":
            raise ToolCallFailed("the tool refused")
        return f"moved {arguments.get('action')}"


async def step(code: str, limits: Limits = LIMITS, sandbox: str = "bwrap") -> tuple[StepResult, Recorder]:
    recorder = Recorder()
    result = await run_step(code, TOOLS, recorder, limits=limits, sandbox=sandbox)  # type: ignore[arg-type]
    return result, recorder


@pytest.fixture(params=[pytest.param("bwrap", marks=needs_bwrap), "none"])
def sandbox(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# What code can do.


async def test_tools_are_functions_with_keyword_or_positional_arguments(sandbox: str) -> None:
    result, recorder = await step("a = move(action='LEFT')\nb = move('DOWN')\nprint(a)\n[a, b]", sandbox=sandbox)
    assert result.error is None
    assert recorder.calls == [("move", {"action": "LEFT"}), ("move", {"action": "DOWN"})]
    assert result.output == "moved LEFT\n"
    assert result.value == "['moved LEFT', 'moved DOWN']"
    assert result.tool_calls == 2


async def test_a_top_level_return_is_the_steps_value(sandbox: str) -> None:
    result, _ = await step("for a in ['UP', 'UP']:\n    last = move(action=a)\nreturn last", sandbox=sandbox)
    assert (result.error, result.value) == (None, "moved UP")


async def test_list_tools_names_every_tool(sandbox: str) -> None:
    result, _ = await step("return [t['name'] for t in list_tools()]", sandbox=sandbox)
    assert result.value == "['move', 'fail']"


async def test_a_failed_tool_call_raises_tool_error_in_the_code(sandbox: str) -> None:
    result, _ = await step("try:\n    fail()\nexcept ToolError as e:\n    print('caught', e)", sandbox=sandbox)
    assert result.error is None
    assert result.output == "caught the tool refused\n"
    result, _ = await step("fail()", sandbox=sandbox)
    assert result.error is not None and result.error.endswith("ToolError: the tool refused")
    assert "<string>" not in result.error  # the sandbox's own frames are not shown


async def test_a_syntax_error_is_the_steps_error(sandbox: str) -> None:
    result, recorder = await step("move(action='LEFT'", sandbox=sandbox)
    assert result.error is not None and "SyntaxError" in result.error
    assert recorder.calls == []


async def test_a_huge_print_is_cut_with_a_note(sandbox: str) -> None:
    result, _ = await step(
        "for _ in range(100):\n    print('x' * 100_000)", Limits(timeout=20, output_chars=1000), sandbox
    )
    assert result.error is None
    assert result.output.startswith("x" * 1000)
    assert "[output truncated: 9999100 more characters]" in result.output
    assert len(result.output) < 1100


# What hostile code cannot do: each ends the step with a clear error or reaches nothing of the server.


async def test_an_infinite_loop_is_stopped_at_the_wall_clock_limit(sandbox: str) -> None:
    with anyio.fail_after(20):
        result, _ = await step("while True:\n    pass", Limits(timeout=1), sandbox)
    assert result.error == "TimeoutError: the code did not finish within 1 s and was stopped"


async def test_a_sleeping_process_is_stopped_at_the_wall_clock_limit(sandbox: str) -> None:
    with anyio.fail_after(20):
        result, _ = await step("import time\ntime.sleep(3600)", Limits(timeout=1), sandbox)
    assert result.error is not None and result.error.startswith("TimeoutError")


async def test_a_memory_bomb_fails_with_memory_error(sandbox: str) -> None:
    limits = Limits(timeout=20, memory_bytes=256 * 1024 * 1024)
    result, _ = await step("blocks = []\nwhile True:\n    blocks.append(bytearray(32 * 1024 * 1024))", limits, sandbox)
    assert result.error is not None and "MemoryError" in result.error
    result, _ = await step("x = 'a' * (10 ** 10)", limits, sandbox)
    assert result.error is not None and "MemoryError" in result.error


async def test_the_servers_environment_never_reaches_the_code(sandbox: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORS_TEST_SECRET", SECRET)
    code = (
        "import os, glob\n"
        "seen = repr(dict(os.environ))\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        seen += open(path, 'rb').read().decode('latin-1')\n"
        "    except OSError:\n"
        "        pass\n"
        "return seen"
    )
    result, _ = await step(code, sandbox=sandbox)
    assert result.error is None and result.value is not None
    assert "PATH" in result.value
    assert SECRET not in result.value
    assert "ORS_TEST_SECRET" not in result.value


@needs_bwrap
async def test_os_system_and_subprocess_cannot_start_processes() -> None:
    result, _ = await step("import os\nreturn os.system('echo escaped > /tmp/x; echo escaped')")
    assert result.error is None and result.value != "0"  # the shell never ran
    assert result.output == ""
    result, _ = await step("import subprocess\nsubprocess.run(['/bin/sh', '-c', 'id'])")
    assert result.error is not None and "PermissionError" in result.error


@needs_bwrap
async def test_a_fork_bomb_cannot_fork() -> None:
    with anyio.fail_after(20):
        result, _ = await step("import os\nwhile True:\n    os.fork()")
    assert result.error is not None and "PermissionError: [Errno 1] Operation not permitted" in result.error


@needs_bwrap
async def test_the_sandbox_sees_no_server_file_and_runs_as_nobody(tmp_path: Any) -> None:
    marker = tmp_path / "server-file.txt"
    marker.write_text(SECRET)
    here = __file__
    code = (
        "import os\n"
        "found = {}\n"
        f"for path in ['/etc/passwd', '/etc/shadow', {str(marker)!r}, {here!r}, '/work', '/home', '/root/.ssh']:\n"
        "    found[path] = os.path.exists(path)\n"
        "return (os.getuid(), os.getgid(), sorted(os.listdir('/')), found)"
    )
    result, _ = await step(code)
    assert result.error is None and result.value is not None
    uid, gid, root, found = eval(result.value)  # the child's repr of plain data
    assert (uid, gid) == (65534, 65534)
    assert not any(found.values()), found
    assert "etc" not in root and "work" not in root and "home" not in root


@needs_bwrap
async def test_open_etc_passwd_finds_no_such_file() -> None:
    result, _ = await step("open('/etc/passwd').read()")
    assert result.error is not None and "FileNotFoundError" in result.error


@needs_bwrap
async def test_the_sandbox_has_no_network() -> None:
    code = "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)"
    result, _ = await step(code)
    assert result.error is not None and "Network is unreachable" in result.error


@needs_bwrap
async def test_object_graph_escapes_reach_only_the_sandbox() -> None:
    # The classic escapes of restricted interpreters: here they work, and what they reach is the sandbox.
    code = (
        "subclasses = ().__class__.__bases__[0].__subclasses__()\n"
        "wrap = [c for c in subclasses if c.__name__ == '_wrap_close'][0]\n"
        "system = wrap.__init__.__globals__['system']\n"
        "imported = __import__('os').getuid()\n"
        "return (system('id'), imported, len(subclasses) > 10)"
    )
    result, _ = await step(code)
    assert result.error is None and result.value is not None
    status, uid, many = eval(result.value)
    assert status != 0 and uid == 65534 and many


@needs_bwrap
async def test_a_file_larger_than_the_limit_cannot_be_written() -> None:
    result, _ = await step("open('/tmp/big', 'wb').write(b'x' * (64 * 1024 * 1024))", Limits(timeout=20))
    assert result.error is not None
    assert (
        "File too large" in result.error or "file larger than the limit" in result.error or "No space" in result.error
    )


async def test_a_lying_child_is_stopped_without_harm(sandbox: str) -> None:
    code = (
        "import os\n"
        "out = move.__closure__  # the protocol is reachable; speaking it gains nothing\n"
        "os.write(1, b'not json')\n"
    )
    result, recorder = await step(code, sandbox=sandbox)
    assert result.error is None or "protocol" in result.error
    assert recorder.calls == []


async def test_steps_run_concurrently_and_a_hung_one_holds_up_no_other(sandbox: str) -> None:
    results: dict[str, StepResult] = {}

    async def run(key: str, code: str, limit: float) -> None:
        results[key], _ = await step(code, Limits(timeout=limit), sandbox)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "hung", "while True:\n    pass", 5)
            tg.start_soon(run, "quick", "return move('UP')", 20)
    assert results["quick"].value == "moved UP"
    assert results["hung"].error is not None and results["hung"].error.startswith("TimeoutError")


@pytest.mark.usefixtures("no_bwrap")
async def test_an_unavailable_sandbox_is_a_plain_error() -> None:
    with pytest.raises(SandboxUnavailable, match="ORS_CODEACT_SANDBOX=none"):
        await step("1")


# The hardening every sandbox shares (`ors_server.sandboxes.bubblewrap`), and a step's resource limits.


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in os.listdir(f"/proc/{parent}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{parent}/task/{task}/children") as file:
                children = [int(child) for child in file.read().split()]
                found += children
                todo += children
    return found


def host_uids(pid: int) -> list[int]:
    """The real, effective, saved and file-system uids of `pid` as the host sees them."""
    with open(f"/proc/{pid}/status") as file:
        return [int(n) for line in file if line.startswith("Uid:") for n in line.split()[1:]]


@needs_bwrap
async def test_a_step_is_never_root_outside_its_sandbox_and_cannot_write_proc() -> None:
    # A step once ran as the server's uid 0 outside its namespaces, with /proc/sys writable: it could rewrite
    # /proc/sys/kernel/core_pattern. Here it writes a sysctl's own value back (harmless even if it succeeded) and
    # opens other files of /proc for writing without writing anything.
    code = (
        "import errno, os\n"
        "refused = {}\n"
        "path = '/proc/sys/fs/lease-break-time'\n"
        "value = open(path).read()\n"
        "try:\n"
        "    with open(path, 'w') as file:\n"
        "        file.write(value)\n"
        "    refused[path] = None\n"
        "except OSError as exc:\n"
        "    refused[path] = errno.errorcode[exc.errno]\n"
        "for path in ['/proc/sysrq-trigger', '/proc/1/mem', '/proc/self/oom_score_adj']:\n"
        "    try:\n"
        "        os.close(os.open(path, os.O_WRONLY))\n"
        "        refused[path] = None\n"
        "    except OSError as exc:\n"
        "        refused[path] = errno.errorcode[exc.errno]\n"
        "look()\n"
        "return (os.getuid(), refused)"
    )
    seen: list[list[int]] = []

    async def look(name: str, arguments: dict[str, Any]) -> Any:
        # While the step waits for this answer: every process of the sandbox, as the host sees them.
        seen.extend(host_uids(pid) for pid in descendants(os.getpid()))
        return "looked"

    result = await run_step(code, [ToolSpec("look")], look, limits=LIMITS)
    assert result.error is None and result.value is not None, result
    uid, refused = eval(result.value)
    assert uid == 65534
    assert seen and all(uids == [65534] * 4 if os.geteuid() == 0 else 0 not in uids for uids in seen), seen
    assert all(refused.values()), refused


@needs_bwrap
async def test_the_sandboxs_pid_1_cannot_be_traced_from_inside() -> None:
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "seized = libc.ptrace(0x4206, 1, 0, 0)  # PTRACE_SEIZE: does not stop pid 1, should it ever succeed\n"
        "error = ctypes.get_errno()\n"
        "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "return (seized, error, *(status[k].strip() for k in ('NoNewPrivs', 'CapEff', 'CapBnd', 'Seccomp')))"
    )
    result, _ = await step(code)
    assert result.error is None and result.value is not None, result
    assert eval(result.value) == (-1, errno.EPERM, "1", "0" * 16, "0" * 16, "2")


@needs_bwrap
async def test_the_sandboxs_process_list_names_no_host_path() -> None:
    # bubblewrap's init is pid 1 of the sandbox, with bubblewrap's own command line: its options (the host paths
    # it binds, the environment it sets) were readable from the step's code.
    code = (
        "import os\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "return [open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode() for p in pids]"
    )
    result, _ = await step(code)
    assert result.error is None and result.value is not None, result
    lines = eval(result.value)
    assert any(line.startswith(("bwrap --args ", "/usr/bin/bwrap --args ")) for line in lines), lines
    assert not [line for line in lines if "--ro-bind" in line or "--setenv" in line or "--seccomp" in line], lines


THREADS = (
    "import threading\n"
    "threading.stack_size(64 * 1024)\n"
    "stop = threading.Event()\n"
    "started = 0\n"
    "try:\n"
    "    for _ in range(3000):\n"
    "        threading.Thread(target=stop.wait, daemon=True).start()\n"
    "        started += 1\n"
    "except RuntimeError:\n"
    "    pass\n"
)


@needs_bwrap
async def test_a_step_starts_threads_up_to_its_limit_and_no_step_takes_anothers() -> None:
    # All steps run as uid 65534; the thread limit counts in each sandbox's own user namespace.
    limits = Limits(timeout=30, processes=32)
    holding = anyio.Event()
    release = anyio.Event()
    counts: dict[str, int] = {}

    async def hold(name: str, arguments: dict[str, Any]) -> Any:
        holding.set()
        await release.wait()
        return "released"

    async def first() -> None:
        result = await run_step(THREADS + "hold()\nreturn started", [ToolSpec("hold")], hold, limits=limits)
        assert result.value is not None, result
        counts["first"] = int(result.value)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await holding.wait()  # the first step holds its threads meanwhile
            second, _ = await step(THREADS + "return started", limits)
            release.set()
    assert second.value is not None, second
    counts["second"] = int(second.value)
    # The sandbox's init and the step's main thread count too.
    assert counts == {"first": 30, "second": 30}


@needs_bwrap
async def test_a_step_writes_only_to_its_small_tmp() -> None:
    code = (
        "import errno\n"
        "out = {}\n"
        "for path in ['/x', '/dev/x', '/usr/x', '/tmp/x']:\n"
        "    try:\n"
        "        with open(path, 'wb') as file:\n"
        "            for _ in range(64):\n"
        "                file.write(b'x' * (1024 * 1024))\n"
        "                file.flush()\n"
        "        out[path] = 'written'\n"
        "    except OSError as exc:\n"
        "        out[path] = errno.errorcode[exc.errno]\n"
        "return out"
    )
    limits = Limits(timeout=30, tmp_bytes=4 * 1024 * 1024, file_bytes=128 * 1024 * 1024)
    result, _ = await step(code, limits)
    assert result.error is None and result.value is not None, result
    assert eval(result.value) == {"/x": "EROFS", "/dev/x": "EROFS", "/usr/x": "EROFS", "/tmp/x": "ENOSPC"}
