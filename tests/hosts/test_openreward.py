"""An `openreward` environment (quiz.py) served by `openreward`'s own `Server` and by ours
(`--env openreward:quiz:Quiz@<venv python>`) side by side, from the same file: the official `openreward` client sees
the same names, tasks, prompts, outputs and rewards on both; ours serves it over MCP and OpenEnv too, to 100
concurrent sessions. From two workers, and its startup mistakes: test_openreward_startup.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client

from tests.clients import client_venvs
from tests.clients.harness import LOOPBACK, Server, _healthy, _stop, free_port, run_script, server_command

pytestmark = [pytest.mark.clients, pytest.mark.anyio]

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 180.0
"""openreward imports a large framework (6 s of CPU): on a loaded machine a host takes a while to start."""


@contextlib.contextmanager
def _process(argv: list[str], log_dir: Path, name: str) -> Iterator[Server]:
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{port}.log"
    env = {**client_venvs.clean_env(), "NO_PROXY": LOOPBACK, "OPENREWARD_DISABLE_UPDATE_CHECK": "1"}
    if name == "ours":
        env["PYTHONPATH"] = str(HERE.parents[1])  # this checkout's ors_server
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [part.replace("{port}", str(port)) for part in argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=HERE,
            env=env,
        )
    server = Server(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _healthy(server.url):  # an external process: poll its health, bounded
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{server.log_tail()}")
            time.sleep(0.2)
        yield server
    finally:
        _stop(process)


def _ours(python: Path, log_dir: Path, *args: str) -> contextlib.AbstractContextManager[Server]:
    serve = [*server_command(), "serve", "--port", "{port}", "--env", f"openreward:quiz:Quiz@{python}", *args]
    return _process(serve, log_dir, "ours")


@pytest.fixture(scope="module")
def ours(openreward_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with _ours(openreward_python, tmp_path_factory.mktemp("ours"), "--host-sessions", "50") as server:
        yield server


def _play(python: Path, server: Server, home: Path) -> dict:
    return run_script(python, str(HERE / "scripts" / "openreward_quiz.py"), server.url, home=home, server=server)


def test_the_openreward_client_sees_the_same_on_both_servers(
    openreward_python: Path, ours: Server, tmp_path: Path
) -> None:
    reference_argv = [str(openreward_python), str(HERE / "quiz.py"), "--port", "{port}"]
    with _process(reference_argv, tmp_path, "reference") as reference:
        theirs = _play(openreward_python, reference, tmp_path / "theirs")
    mine = _play(openreward_python, ours, tmp_path / "mine")
    assert mine == theirs
    # What they agree on is what the environment says.
    assert [tool["name"] for tool in mine["tools"]] == ["answer", "check_secret", "hint", "note"]
    assert mine["num_tasks"] == {"train": 3, "test": 2}
    assert mine["tasks"][0] == ["quiz", {"question": "2 + 2", "answer": "4"}]
    hint, secret, note_a, note_b, unknown, bad, right, after = mine["calls"]
    assert secret["blocks"][0]["text"] == "token present"
    assert note_b["blocks"][0]["text"] == "a | b | b" and note_b["reward"] == pytest.approx(0.3)
    assert unknown["error"]["type"] == bad["error"]["type"] == after["error"]["type"] == "ToolCallError"
    assert right["reward"] == 1.0 and right["finished"] is True
    assert mine["by_index"]["wrong"]["reward"] == 0.0
    assert mine["by_index"]["secret"]["blocks"][0]["text"] == "no token"


async def test_mcp_and_openenv_faces_play_the_hosted_environment(ours: Server) -> None:
    async with Client(f"{ours.url}/quiz/mcp", mode="legacy") as client:  # an episode of its own: train task 0
        assert sorted(tool.name for tool in (await client.list_tools()).tools) == [
            "answer",
            "check_secret",
            "hint",
            "note",
        ]
        hint = await client.call_tool("hint", {})
        assert hint.content[0].text == "1 digit(s)"
        bad = await client.call_tool("note", {"times": 2})
        assert bad.is_error
        right = await client.call_tool("answer", {"answer": "4"})
        assert right.structured_content["reward"] == 1.0 and right.structured_content["finished"] is True
    async with httpx.AsyncClient(base_url=f"{ours.url}/openenv/quiz", timeout=60) as http:

        async def rpc(method: str, params: dict) -> dict:
            answer = (
                await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            ).json()
            assert "error" not in answer, answer
            return answer["result"]

        created = await rpc("openenv/session/create", {})
        session_id = created["session_id"]
        note = await rpc("tools/call", {"name": "note", "arguments": {"text": "x"}, "session_id": session_id})
        assert "x" in json.dumps(note)
        await rpc("openenv/session/close", {"session_id": session_id})


async def test_a_hundred_concurrent_sessions(ours: Server) -> None:
    async with httpx.AsyncClient(base_url=ours.url, timeout=120) as http:

        async def episode(n: int) -> float:
            sid = f"many-{n}"
            created = await http.post(
                "/create", json={"env_name": "quiz", "split": "test", "index": n % 2}, headers={"X-Session-ID": sid}
            )
            assert created.status_code == 200, created.text
            answer = "5" if n % 2 == 0 else "0"
            async with http.stream(
                "POST",
                "/quiz/call",
                json={"name": "answer", "input": {"answer": answer}},
                headers={"X-Session-ID": sid},
            ) as stream:
                text = "".join([chunk async for chunk in stream.aiter_text()])
            await http.post("/delete", headers={"X-Session-ID": sid})
            data = json.loads(text.replace("\r\n", "\n").strip().split("\n")[-1].removeprefix("data: "))
            return float(data["output"]["reward"])

        rewards = await asyncio.gather(*(episode(n) for n in range(100)))
    assert rewards == [1.0 if n % 2 == 0 else 0.0 for n in range(100)]
