"""The host protocol with a native environment (`isolated:`): an environment in host processes behaves as one in
process through the ORS and MCP faces (a task's own tools, a conversation, a terminal tool, group scoring and a
toolset over its sandbox: `Twin` served both ways, side by side), and a host that crashes or hangs costs only its
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
from tests.hosts.native_envs import Twin
from tests.ors_envs import parse_sse
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
    envs = resolve_environments(["isolated:native_envs:Fragile", "isolated:native_envs:Twin"], str(HERE))
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


async def _play_twin(http: httpx.AsyncClient) -> dict:
    """Everything of the newest contract, asked of `twin` through raw HTTP: the answers, with what differs from one
    server to the next by design (task ids, the sandbox's directory) replaced by placeholders."""
    seen: dict = {"tools": (await http.get("/twin/tools")).json()}
    hinted, plain = "twin-hinted", "twin-plain"
    for sid, index, toolset in ((hinted, 0, "claude-code"), (plain, 1, None)):
        body = {"env_name": "twin", "split": "train", "index": index, "toolset_name": toolset}
        assert (await http.post("/create", json=body, headers={"X-Session-ID": sid})).status_code == 200
    refused = await http.post("/create", json={"env_name": "twin", "split": "train", "index": 0, "toolset_name": "vim"})
    seen["unknown_toolset"] = (refused.status_code, refused.json())
    workdir = ""

    async def post(sid: str, path: str, body: dict) -> list:
        answer = await http.post(path, json=body, headers={"X-Session-ID": sid, "Accept": "text/event-stream"})
        assert answer.status_code == 200, answer.text
        events = [(e.name, e.data.replace(workdir, "WORK") if workdir else e.data) for e in parse_sse(answer.content)]
        return [(name, "TASK-ID" if name == "task_id" else data) for name, data in events]

    async def call(sid: str, name: str, arguments: dict) -> list:
        return await post(sid, "/twin/call", {"name": name, "input": arguments})

    pwd = await call(hinted, "bash", {"command": "pwd"})
    workdir = json.loads(pwd[-1][1])["output"]["blocks"][0]["text"].split("\n")[0].strip()
    assert workdir.startswith("/") and "twin-" in workdir, pwd
    for sid in (hinted, plain):
        headers = {"X-Session-ID": sid}
        seen[sid] = {
            "task_tools": (await http.get("/twin/task_tools", headers=headers)).json(),
            "messages": (await http.get("/twin/messages", headers=headers)).json(),
            "prompt": (await http.get("/twin/prompt", headers=headers)).json(),
        }
    question = {"role": "user", "blocks": [{"type": "text", "text": "What is 2 + 2?"}]}
    said = [
        {"messages": [question, {"role": "assistant", "blocks": [{"type": "text", "text": text}]}]}
        for text in ("4", "5")
    ]
    seen["scores"] = await post(hinted, "/twin/score_group", {"candidates": said})
    boom = [{"messages": [{"role": "assistant", "blocks": [{"type": "text", "text": "boom"}]}]}]
    seen["scoring_failed"] = await post(hinted, "/twin/score_group", {"candidates": boom})
    seen["calls"] = [
        await call(hinted, "hint", {}),
        await call(plain, "hint", {}),
        await call(hinted, "add", {"a": 2, "b": 5}),
        await call(hinted, "add", {"a": "two"}),
        await call(hinted, "write", {"file_path": "notes/a.txt", "content": "one\ntwo\n"}),
        await call(hinted, "edit", {"file_path": "notes/a.txt", "old_string": "two", "new_string": "three"}),
        await call(hinted, "read", {"file_path": f"{workdir}/notes/a.txt"}),
        await call(hinted, "read", {"file_path": "missing.txt"}),
        await call(hinted, "glob", {"pattern": "*.txt"}),
        await call(hinted, "bash", {"command": "printf 'x\\0y' | od -c | head -1; cat notes/a.txt; exit 3"}),
        await call(plain, "bash", {"command": "true"}),
        await call(hinted, "submit", {"answer": "4"}),
        await call(hinted, "add", {"a": 1, "b": 1}),
    ]
    for sid in (hinted, plain):
        await http.post("/delete", headers={"X-Session-ID": sid})
    return seen


@pytest.mark.anyio
async def test_an_isolated_native_answers_the_newest_contract_as_in_process(client: httpx.Client) -> None:
    app = create_app([Twin], Settings(tool_timeout=3.0))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as http:
            in_process = await _play_twin(http)
    async with httpx.AsyncClient(base_url=client.base_url, timeout=60) as http:
        isolated = await _play_twin(http)
    assert isolated == in_process
    # And what was compared is the contract, not two equal failures.
    assert in_process["tools"]["terminal_tool"] == {
        "name": "submit",
        "arg": "answer",
        "description": "Your final answer; ends the episode.",
    }
    assert in_process["tools"]["supports_score_group"] is True
    hinted, plain = in_process["twin-hinted"], in_process["twin-plain"]
    claude_code = ["bash", "glob", "grep", "read", "write", "edit", "todo_write"]
    assert [t["name"] for t in hinted["task_tools"]["tools"]] == ["add", "submit", "hint", *claude_code]
    assert [t["name"] for t in plain["task_tools"]["tools"]] == ["add", "submit"]
    assert [m["role"] for m in hinted["messages"]] == ["system", "user"]
    scores = json.loads(in_process["scores"][-1][1])
    assert [s["reward"] for s in scores["scores"]] == [1.0, 0.0]
    assert in_process["scoring_failed"][-1] == ("error", "cannot judge 'boom'")
    calls = [json.loads(events[-1][1]) for events in in_process["calls"]]
    assert calls[0]["output"]["blocks"][0]["text"] == "an even number" and calls[1]["reason"] == "not_found"
    assert calls[3]["reason"] == "input_validation"
    assert "1\tone\n     2\tthree" in calls[6]["output"]["blocks"][0]["text"]
    assert "missing.txt" in calls[7]["output"]["blocks"][0]["text"]
    assert "a.txt" in calls[8]["output"]["blocks"][0]["text"]
    assert (calls[11]["output"]["reward"], calls[11]["output"]["finished"]) == (1.0, True)
    assert calls[12]["reason"] == "episode_finished"
    assert in_process["unknown_toolset"][0] == 400


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
