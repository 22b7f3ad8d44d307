"""The host protocol with a native environment (`isolated:`): an environment in host processes behaves as one in
process through the ORS and MCP faces (a task's own tools included), and a host that crashes or hangs costs only its
sessions."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from ors_server.http.app import create_app
from ors_server.loading import LoadError, resolve_environments
from ors_server.settings import Settings
from tests.clients.harness import _healthy, free_port, server_command
from tests.faces.mcp_helpers import mcp_client, text
from tests.serving import serve

HERE = Path(__file__).resolve().parent


def _sse_end(text: str) -> dict:
    """The `end` (or `error`) event of an ORS call stream."""
    events = [block for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()]
    last = dict(line.split(": ", 1) for line in events[-1].splitlines())
    return {"event": last["event"], "data": json.loads(last["data"]) if last["event"] == "end" else last["data"]}


def _error(end: dict) -> str:
    """The error text of a failed call: an `error` event (the tool failed), or an `end` event with ok false."""
    if end["event"] == "error":
        return str(end["data"])
    assert end["data"]["ok"] is False, end
    return str(end["data"]["error"])


@pytest.fixture(scope="module")
def client():
    # A real server (the MCP client needs one), driven by plain HTTP requests.
    envs = resolve_environments(["isolated:native_envs:Fragile"], str(HERE))
    app = create_app(envs, Settings(tool_timeout=3.0, host_sessions=2))
    with serve(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def _create(client: httpx.Client, sid: str, index: int = 0) -> None:
    response = client.post(
        "/create", json={"env_name": "fragile", "split": "train", "index": index}, headers={"X-Session-ID": sid}
    )
    assert response.status_code == 200, response.text


def _call(client: httpx.Client, sid: str, name: str, arguments: dict | None = None) -> dict:
    response = client.post(
        "/fragile/call", json={"name": name, "input": arguments or {}}, headers={"X-Session-ID": sid}
    )
    assert response.status_code == 200, response.text
    return _sse_end(response.text)


def test_describes_lists_and_runs_like_a_native_environment(client: httpx.Client) -> None:
    tools = client.get("/fragile/tools").json()["tools"]
    assert [t["name"] for t in tools] == ["echo", "whoami", "meet", "crash", "hang", "flood", "forge"]
    assert tools[0]["input_schema"]["required"] == ["text"]
    assert client.get("/fragile/splits").json() == [
        {"name": "train", "type": "train"},
        {"name": "test", "type": "test"},
    ]
    assert client.post("/fragile/num_tasks", json={"split": "test"}).json() == {"num_tasks": 2}
    assert client.post("/fragile/task", json={"split": "train", "index": 2}).json()["task"] == {
        "n": 2,
        "split": "train",
    }
    assert client.post("/fragile/task", json={"split": "train", "index": 9}).status_code == 400
    _create(client, "a", 1)
    assert client.get("/fragile/prompt", headers={"X-Session-ID": "a"}).json()[0]["text"] == "task 1"
    end = _call(client, "a", "echo", {"text": "hi"})
    assert end["event"] == "end" and end["data"]["output"]["reward"] == 0.5
    assert end["data"]["output"]["blocks"][0]["text"].startswith("hi from ")
    refused = _call(client, "a", "echo", {"txt": "hi"})
    assert refused["data"]["ok"] is False and refused["data"]["reason"] == "input_validation"
    if os.geteuid() == 0:
        assert _call(client, "a", "whoami")["data"]["output"]["blocks"][0]["text"] == "65534"
    assert client.post("/delete", headers={"X-Session-ID": "a"}).status_code == 200


def test_a_tasks_own_tool_is_listed_and_called_in_its_session_only(client: httpx.Client) -> None:
    _create(client, "own", 1)  # train task 1 offers `clue`
    _create(client, "plain", 0)
    own = client.get("/fragile/task_tools", headers={"X-Session-ID": "own"}).json()["tools"]
    plain = client.get("/fragile/task_tools", headers={"X-Session-ID": "plain"}).json()["tools"]
    shared = ["echo", "whoami", "meet", "crash", "hang", "flood", "forge"]
    assert [t["name"] for t in own] == [*shared, "clue"] and [t["name"] for t in plain] == shared
    assert own[-1]["input_schema"]["required"] == ["about"] and "task 1 only" in own[-1]["description"]
    assert "clue" not in [t["name"] for t in client.get("/fragile/tools").json()["tools"]]
    answered = _call(client, "own", "clue", {"about": "x"})
    assert answered["event"] == "end" and answered["data"]["output"]["blocks"][0]["text"].startswith("x: task 1, pid ")
    assert _call(client, "own", "clue", {"topic": "x"})["data"]["reason"] == "input_validation"
    assert _call(client, "plain", "clue", {"about": "x"})["data"]["reason"] == "not_found"
    for sid in ("own", "plain"):
        assert client.post("/delete", headers={"X-Session-ID": sid}).status_code == 200


@pytest.mark.anyio
async def test_a_tasks_own_tool_is_listed_and_called_over_mcp_in_its_session_only(client: httpx.Client) -> None:
    url = str(client.base_url.join("/fragile/mcp"))
    async with httpx.AsyncClient(base_url=client.base_url, timeout=60) as http:
        for sid, index in (("own-mcp", 1), ("plain-mcp", 0)):
            body = {"env_name": "fragile", "split": "train", "index": index}
            assert (await http.post("/create", json=body, headers={"X-Session-ID": sid})).status_code == 200
        try:
            async with mcp_client(url, headers={"X-Session-ID": "own-mcp"}) as (session, _):
                own = [tool.name for tool in (await session.list_tools()).tools]
                answered = await session.call_tool("clue", {"about": "y"})
            async with mcp_client(url, headers={"X-Session-ID": "plain-mcp"}) as (session, _):
                plain = [tool.name for tool in (await session.list_tools()).tools]
                refused = await session.call_tool("clue", {"about": "y"})
        finally:
            for sid in ("own-mcp", "plain-mcp"):
                await http.post("/delete", headers={"X-Session-ID": sid})
    assert own[-1] == "clue" and "clue" not in plain and "echo" in plain
    assert not answered.is_error and text(answered).startswith("y: task 1, pid ")
    assert refused.is_error


def test_a_crashed_host_ends_only_its_sessions_and_is_replaced(client: httpx.Client) -> None:
    _create(client, "c1")
    _create(client, "c2")  # host_sessions=2: the same process as c1
    _create(client, "other")  # the next process
    before = _call(client, "other", "echo", {"text": "x"})["data"]["output"]["blocks"][0]["text"]
    crashed = _call(client, "c1", "crash")
    assert "host process" in _error(crashed) and "the session ends" in _error(crashed)
    assert client.get("/fragile/prompt", headers={"X-Session-ID": "c1"}).status_code == 410  # the session ended
    deadline = time.monotonic() + 30  # c2 shared the dead process: it ends too, without a call of its own
    while client.get("/fragile/prompt", headers={"X-Session-ID": "c2"}).status_code != 410:
        assert time.monotonic() < deadline, "c2 outlived its host process"
        time.sleep(0.05)
    assert _call(client, "other", "echo", {"text": "x"})["data"]["output"]["blocks"][0]["text"] == before
    _create(client, "c3")  # a new process takes new sessions
    assert _call(client, "c3", "echo", {"text": "y"})["event"] == "end"
    for sid in ("other", "c3"):
        client.post("/delete", headers={"X-Session-ID": sid})


def test_a_hung_call_times_out_and_ends_its_session_only(client: httpx.Client) -> None:
    _create(client, "h1")
    _create(client, "h2")
    hung = _call(client, "h1", "hang")
    assert "did not finish within 3 s" in _error(hung)
    assert client.get("/fragile/prompt", headers={"X-Session-ID": "h1"}).status_code == 410
    assert _call(client, "h2", "echo", {"text": "still"})["event"] == "end"  # its process still answers
    _create(client, "h3")  # but takes no new session: it was retired
    assert _call(client, "h3", "echo", {"text": "z"})["event"] == "end"
    for sid in ("h2", "h3"):
        client.post("/delete", headers={"X-Session-ID": sid})


def test_startup_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=r"no class 'Nope'"):
        resolve_environments(["isolated:native_envs:Nope"], str(HERE))
    with pytest.raises(LoadError, match=r"no interpreter '/nonexistent/python'"):
        resolve_environments(["isolated:native_envs:Fragile@/nonexistent/python"], str(HERE))
    with pytest.raises(LoadError, match=r"not an ors_server Environment subclass"):
        resolve_environments(["isolated:native_envs:EchoInput"], str(HERE))


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_host_processes_do_not_outlive_a_killed_server(tmp_path: Path) -> None:
    port = free_port()
    argv = [*server_command(), "serve", "--port", str(port), "--env", "isolated:native_envs:Fragile"]
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1])}
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen(argv, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        url = f"http://127.0.0.1:{port}"
        while not _healthy(url):  # an external process: poll, bounded
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.2)
        created = httpx.post(
            f"{url}/create",
            json={"env_name": "fragile", "split": "train", "index": 0},
            headers={"X-Session-ID": "k"},
            timeout=60,
        )
        assert created.status_code == 200
        assert httpx.get(f"{url}/fragile/prompt", headers={"X-Session-ID": "k"}, timeout=60).status_code == 200
        hosts = _children(server.pid)
        assert hosts
    finally:
        server.kill()
        server.wait()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in hosts):
        assert time.monotonic() < deadline, f"host processes {hosts} outlived the server"
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.anyio
async def test_sync_tools_of_many_sessions_run_at_once_in_one_host_process() -> None:
    # The default executor of the host's loop would run CPUs + 4 (6 here) sync tools at once: the eighth waits.
    envs = resolve_environments(["isolated:native_envs:Fragile"], str(HERE))
    app = create_app(envs, Settings(host_sessions=8, tool_timeout=60.0))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=90) as http:

            async def meet(n: int) -> str:
                headers = {"X-Session-ID": f"m{n}"}
                body = {"env_name": "fragile", "split": "train", "index": 0}
                assert (await http.post("/create", json=body, headers=headers)).status_code == 200
                answer = await http.post("/fragile/call", json={"name": "meet", "input": {}}, headers=headers)
                return answer.text

            answers = await asyncio.gather(*(meet(n) for n in range(8)))
    assert all('"text":"met"' in answer for answer in answers), answers
