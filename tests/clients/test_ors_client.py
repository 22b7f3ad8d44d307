"""`ors-client` (client/), installed alone in a fresh venv, against our server and `openreward`'s reference `Server`.

Both servers serve the environments of `client_envs.py` (the reference its copy in
`scripts/client_envs_reference.py`); the checks live in `scripts/ors_client_checks.py`. The keepalive check runs
against our server only: the reference reaps after a fixed 900 s, too long for a test.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients import client_venvs
from tests.clients.harness import SCRIPTS, Server, _healthy, _stop, client_env, free_port

pytestmark = pytest.mark.clients

ENVS = ("--env", "tests.clients.client_envs:Quiz", "--env", "tests.clients.client_envs:Toolbox")
REFERENCE_START_TIMEOUT = 90.0
"""The reference imports a large framework: on a loaded machine it takes a while to answer."""


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from tests.clients.harness import run_server

    with run_server(tmp_path_factory.mktemp("ours"), *ENVS) as running:
        yield running


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, openreward_python: Path) -> Iterator[Server]:
    """`openreward`'s own `Server` with the same environments, from the openreward venv."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("reference") / f"reference-{port}.log"
    env = client_env(log_path.parent)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(openreward_python), str(SCRIPTS / "client_envs_reference.py"), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    server = Server(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    try:
        deadline = time.monotonic() + REFERENCE_START_TIMEOUT
        while not _healthy(server.url):  # an external process: poll its health, bounded
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the reference server did not start:\n{server.log_tail()}")
            time.sleep(0.2)
        yield server
    finally:
        _stop(process)


@pytest.fixture(params=["ours", "reference"])
def served(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue(request.param)


@pytest.fixture
def check(ors_client_python: Path, run_client):
    """`check(name, server, *options)`: the JSON that `ors_client_checks.py name` reported."""

    def run(
        name: str, server: Server, *options: str, url: str | None = None, timeout: float = 120, env: dict | None = None
    ) -> dict:
        script = "ors_client_checks.py"
        return run_client(
            ors_client_python, script, name, url or server.url, *options, server=server, timeout=timeout, env=env
        )

    return run


def test_the_client_venv_holds_only_ors_client_and_httpx(ors_client_python: Path):
    listed = subprocess.run(
        [str(ors_client_python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        env=client_venvs.clean_env(),
    ).stdout
    installed = {line.split("==")[0].lower() for line in listed.split()}
    allowed = {"ors-client", "httpx", "httpcore", "anyio", "idna", "certifi", "h11", "sniffio", "exceptiongroup"}
    allowed |= {"typing-extensions", "typing_extensions", "pip", "setuptools"}
    assert "ors-client" in installed
    assert installed <= allowed, installed - allowed


def test_discovery(check, served):
    result = check("discovery", served)

    assert result["environments"] == ["quiz", "toolbox"]
    tools = {t["name"]: t for t in result["tools"]}
    assert {"add", "note", "finish", "crash", "slow", "big", "check_secret"} <= set(tools)
    assert all(set(t) == {"name", "description", "input_schema"} for t in result["tools"])
    assert tools["add"]["input_schema"]["required"] == ["a", "b"]
    assert [s["name"] for s in result["splits"]] == ["train", "test"]
    assert result["tasks"][0] == {"question": "What is 2+2?", "answer": "4"}
    assert result["num_tasks"] == len(result["tasks"]) == 5
    assert result["task_2"] == result["tasks"][2]
    assert result["unknown_env"] == {"type": "OrsError", "status": 404}


def test_a_wrong_or_missing_api_key_is_an_auth_error(check, start_server):
    server = start_server("--api-key", "k3y", *ENVS)
    result = check("auth", server, env={"ORS_TEST_API_KEY": "k3y"})

    assert result["environments"]["status"] == 401 and result["environments"]["detail"]
    assert result["session"]["status"] == 401
    assert result["with_key"] == 1.0


def test_math_episode_async(check, served):
    result = check("math_async", served)

    assert result["prompt"][0]["type"] == "text" and result["prompt"][0]["text"] == "What is 3+4?"
    assert result["right"] == {"ok": True, "reward": 1.0, "finished": True, "text": "Correct!"}
    assert result["again"]["ok"] is False and result["again"]["reason"] == "episode_finished"
    assert result["state"] == {"reward": 1.0, "steps": 2, "finished": True, "labels": {"run": "r1", "odd": "a=b,c d"}}
    assert result["after_close"] in ("SessionNotFound", "SessionExpired")
    assert result["wrong"] == {"reward": 0.0, "text": "Wrong"}


def test_ids_are_made_by_the_client_once_the_server_says_it_takes_them(check, ours, reference):
    """Our server says so on `/create_session`: one round trip, then the client makes its ids. The reference does
    not say so: every session asks it."""
    assert check("own_ids", ours) == {"create_session": 1, "rewards": [0.0, 0.0, 0.0]}
    assert check("own_ids", reference) == {"create_session": 3, "rewards": [0.0, 0.0, 0.0]}


def test_math_episode_sync(check, served):
    result = check("math_sync", served)

    assert result["prompt"][0]["text"] == "What is 5+8?"
    assert result["out"] == {"reward": 1.0, "finished": True, "text": "Correct!"}
    assert result["roles"] == ["user", "assistant", "tool"]
    assert result["group_rewards"] == [1.0, 0.0, 0.0]
    assert result["rollouts"] == [{"reward": 1.0, "steps": 1, "error": None}] * 10


def test_multi_tool_episode(check, served):
    result = check("multi_tool", served)

    assert result["tools"] == sorted(["add", "note", "finish", "crash", "slow", "big", "check_secret"])
    assert result["added"] == "42"
    assert result["notes"] == ["1 notes", "2 notes"]
    assert result["refused"]["unknown"]["reason"] == "not_found"
    assert result["refused"]["bad_input"]["reason"] == "input_validation"
    assert not result["refused"]["unknown"]["ok"] and result["refused"]["unknown"]["error"]
    assert result["crashed"] is not None and "kaboom" in result["crashed"]
    assert result["big_exact"], "a result in several SSE chunks must join back exactly"
    assert result["finished"] == {"text": "first | second", "reward": 2.0, "finished": True}
    assert result["after"] == {"ok": False, "reason": "episode_finished"}
    assert result["session"] == {"reward": 3.0, "steps": 9, "finished": True}


def test_secrets_reach_the_environment(check, served):
    assert check("secrets", served) == {"right": "match", "wrong": "no match", "none": "no match"}


def test_group_of_eight_sessions_on_one_task(check, served):
    result = check("group", served)

    assert result["ids"] == 8
    assert result["prompts"] == ["What is 1+9?"] * 8
    assert result["rewards"] == [1.0, 0.0] * 4
    assert result["after_close"] in ("SessionNotFound", "SessionExpired")


def test_sixteen_sessions_wait_for_four_server_slots(check, start_server):
    server = start_server("--max-sessions", "4", *ENVS)
    result = check("crowd", server, "--sessions", "16", "--max-concurrency", "16")

    assert result["results"] == [i + 1 for i in range(16)], "every session completes"
    assert result["peak"] <= 4 + 1  # +1: a slot freed by /delete is taken before the deleter counts itself out
    assert result["statuses"].get("503", 0) > 0, "the server was full and said so; the client waited"


def test_sixteen_sessions_wait_for_four_client_slots_on_the_reference(check, reference):
    result = check("crowd", reference, "--sessions", "16", "--max-concurrency", "4")

    assert result["results"] == [i + 1 for i in range(16)]
    assert result["peak"] <= 4


def test_pings_keep_a_session_alive_past_the_idle_timeout(check, start_server):
    # Pings every second against a 3 s timeout: two seconds of slack for a loaded machine.
    server = start_server("--session-timeout", "3", *ENVS)
    result = check("keepalive", server, "--idle", "7")

    assert result["idle_timeout"] == 3, "our server advertises its idle timeout on /create"
    assert result["kept"] == "3"
    assert result["dropped"] in ("SessionNotFound", "SessionExpired"), "without pings the session is reaped"


class CuttingProxy:
    """A TCP proxy that breaks a call's event stream right after its `task_id` event: once, or every time."""

    def __init__(self, upstream_port: int, always: bool) -> None:
        self.upstream_port = upstream_port
        self.always = always
        self.cuts = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._writers: list[asyncio.StreamWriter] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        for writer in self._writers:
            writer.transport.abort()
        # Aborted sockets end every handler's reads, so the handlers finish on their own.
        pending = asyncio.all_tasks(self._loop)
        if pending:
            self._loop.run_until_complete(asyncio.wait(pending, timeout=10))
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers += [writer, up_writer]
        slow_call = False  # whether the request now in flight on this connection calls the `slow` tool

        async def forward() -> None:
            nonlocal slow_call
            while data := await reader.read(65536):
                slow_call = b'"slow"' in data
                up_writer.write(data)
                await up_writer.drain()

        pump = asyncio.ensure_future(forward())
        try:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
                started = b"event: task_id" in data and b"event: end" not in data and b"event: error" not in data
                if slow_call and started and (self.always or self.cuts == 0):
                    self.cuts += 1
                    break
        finally:
            pump.cancel()
            for w in (writer, up_writer):
                w.transport.abort()


def test_a_cut_stream_is_resumed_by_task_id(check, served):
    with CuttingProxy(int(served.url.rsplit(":", 1)[1]), always=False) as proxy:
        result = check("resume", served, "--seconds", "1.5", url=f"http://127.0.0.1:{proxy.port}")

    assert proxy.cuts == 1
    assert result == {"text": "slept 1", "then": "2"}, "resumed, and the tool ran once"


def test_a_stream_cut_every_time_fails_with_a_clear_error(check, served):
    # Long enough that the resumes (ours answers each after half a second) all see the call still running.
    with CuttingProxy(int(served.url.rsplit(":", 1)[1]), always=True) as proxy:
        result = check("resume", served, "--seconds", "5", url=f"http://127.0.0.1:{proxy.port}")

    assert result["error"] == "StreamCut"
    assert "resumed 3 times" in result["detail"]
    assert proxy.cuts == 4
    assert result["then"] == "2", "the session outlives the failed call"


def test_openai_tool_calls_from_a_scripted_policy(check, served):
    result = check("openai", served)

    functions = {t["function"]["name"]: t for t in result["tools"]}
    assert functions["add"]["type"] == "function"
    assert functions["add"]["function"]["parameters"]["required"] == ["a", "b"]
    assert functions["finish"]["function"]["parameters"]["type"] == "object"
    replies = result["replies"]
    assert replies[0] == {"role": "tool", "tool_call_id": "c1", "content": "42"}
    assert replies[1] == {"role": "tool", "tool_call_id": "c2", "content": "1 notes"}
    assert replies[2]["tool_call_id"] == "c3" and "not valid JSON" in replies[2]["content"]
    assert replies[3]["tool_call_id"] == "c4" and replies[3]["content"].startswith("Error:")
    assert replies[4] == {"role": "tool", "tool_call_id": "c5", "content": "the sum is 42"}
    messages = result["messages"]
    assert messages[0] == {"role": "user", "content": "Add, take notes, then finish."}
    assert [m["role"] for m in messages[1:]] == ["assistant", "tool"] * 5
    assert messages[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 20, "b": 22}'}
    assert result["reward"] == 1.5


def test_rollouts_over_200_episodes_with_one_broken_environment(check, served):
    result = check("rollouts", served, timeout=240)

    results = result["results"]
    assert len(results) == 200
    assert [(r["task"], r["sample"]) for r in results] == [(t, s) for t in range(50) for s in range(4)]
    failed = [r for r in results if r["error"]]
    assert [r["task"] for r in failed] == [17] * 4
    assert all("broken" in r["error"] or "500" in r["error"] for r in failed), failed[0]
    assert all(r["reward"] == 1.0 and r["steps"] == 1 for r in results if not r["error"])
    assert result["labels"] == ['{"run": "r200"}']
    assert result["progress_last"] == [200, 200] and result["progress_calls"] == 200
