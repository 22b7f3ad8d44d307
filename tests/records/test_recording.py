"""Every face's episodes are recorded (with labels, secrets masked) and read back over REST: one server, with its
records in a temporary SQLite file, for the whole module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.faces.mcp_helpers import ACCEPT, Counter, call, raw_initialize
from tests.records.helpers import ended, episode, until
from tests.serving import serve

SECRET = "hunter2-very-secret"


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("records") / "episodes.db"


@pytest.fixture(scope="module")
def base(records: Path) -> Iterator[str]:
    with serve(create_app([Counter], Settings(records=str(records)))) as url:
        yield url


@pytest.fixture
def client(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=10) as client:
        yield client


def ors_create(client: httpx.Client, sid: str, labels: str | None = None, **body: Any) -> httpx.Response:
    headers = {"X-Session-ID": sid, **({"X-Episode-Labels": labels} if labels is not None else {})}
    return client.post("/create", headers=headers, json={"env_name": "counter", "task_spec": {"start": 5}, **body})


def ors_call(client: httpx.Client, sid: str, name: str, arguments: dict | None = None) -> str:
    response = client.post(
        "/counter/call", headers={"X-Session-ID": sid}, json={"name": name, "input": arguments or {}}
    )
    assert response.status_code == 200, response.text
    return response.text


def test_an_ors_episode_is_recorded_with_its_labels_calls_and_ending(client: httpx.Client) -> None:
    assert ors_create(client, "ors-1", "run=r1,group=g7").status_code == 200
    ors_call(client, "ors-1", "increment", {"by": 2})
    ors_call(client, "ors-1", "nope")
    ors_call(client, "ors-1", "finish")
    client.post("/delete", headers={"X-Session-ID": "ors-1"})

    record = ended(client, "ors-1")
    assert {k: record[k] for k in ("id", "session_id", "env", "face", "labels", "end_reason", "steps", "finished")} == {
        "id": "ors-1",
        "session_id": "ors-1",
        "env": "counter",
        "face": "ors",
        "labels": {"run": "r1", "group": "g7"},
        "end_reason": "deleted",
        "steps": 2,
        "finished": True,
    }
    assert record["reward"] == 1.5
    assert record["task"] == {"start": 5}
    assert record["prompt"] == [{"type": "text", "text": "count from 5"}, {"type": "text", "text": "use increment"}]
    first, unknown, last = record["calls"]
    assert first["face"] == "ors" and first["tool"] == "increment" and first["arguments"] == {"by": 2}
    assert first["ok"] is True
    assert first["output"] == {
        "blocks": [{"type": "text", "text": '{"count": 7}'}],
        "reward": 0.5,
        "finished": False,
        "metadata": None,
    }
    assert first["duration_ms"] >= 0 and first["started_at"].endswith("+00:00")
    assert unknown["ok"] is False and unknown["reason"] == "not_found" and "output" not in unknown
    assert last["output"]["finished"] is True and last["output"]["reward"] == 1.0
    assert record["started_at"] <= first["started_at"] <= record["ended_at"]


def test_secrets_never_reach_a_record(client: httpx.Client) -> None:
    assert ors_create(client, "secretive", secrets={"token": SECRET}, task_spec={"start": 1, "note": SECRET}).is_success
    ors_call(client, "secretive", "explode")
    ors_call(client, "secretive", "increment", {"by": 1, "extra": SECRET})  # refused: the input is checked
    ors_call(client, "secretive", f"say-{SECRET}")
    client.post("/delete", headers={"X-Session-ID": "secretive"})
    record = ended(client, "secretive")
    assert len(record["calls"]) == 3
    assert SECRET not in json.dumps(record)
    assert record["calls"][0]["error"] == "ValueError: kaboom at 1 with ***"
    assert record["task"]["note"] == "***"
    export = client.get("/episodes/export", params={"format": "jsonl"}).text
    assert SECRET not in export


def test_overlapping_secrets_and_secrets_in_labels_are_masked_whole(client: httpx.Client) -> None:
    # The shorter secret first: masked one after the other, it would leave the longer one's tail in the clear.
    short, long = "OverlapAAA", "OverlapAAA-BBBBB-tail"
    secrets = {"short": short, "token": long}
    response = ors_create(client, "overlap", f"run={long},{short}=x", secrets=secrets, task_spec={"start": 1})
    assert response.is_success
    answered = ors_call(client, "overlap", "explode")
    assert "kaboom at 1 with ***" in answered and "BBBBB" not in answered and short not in answered
    client.post("/delete", headers={"X-Session-ID": "overlap"})
    record = ended(client, "overlap")
    assert record["calls"][0]["error"] == "ValueError: kaboom at 1 with ***"
    assert record["labels"] == {"run": "***", "***": "x"}
    export = client.get("/episodes/export", params={"format": "jsonl"}).text
    for text in (json.dumps(record), export):
        assert short not in text and "BBBBB" not in text


def test_a_bad_labels_header_is_a_400_in_each_face_shape(base: str, client: httpx.Client) -> None:
    ors = ors_create(client, "bad-labels", "no-equals-sign")
    assert ors.status_code == 400 and "X-Episode-Labels" in ors.json()["detail"]
    too_many = ",".join(f"k{i}=v" for i in range(40))
    assert ors_create(client, "bad-labels", too_many).status_code == 400
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"clientInfo": {"name": "x", "version": "1"}}}
    mcp = client.post("/mcp/", json=body, headers={**ACCEPT, "X-Episode-Labels": "bad key=v"})
    assert mcp.status_code == 400 and mcp.json()["error"]["message"].startswith("X-Episode-Labels")
    rpc = client.post(
        "/openenv/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}},
        headers={"X-Episode-Labels": "=v"},
    )
    assert rpc.status_code == 400 and "label name" in rpc.json()["detail"]
    with pytest.raises(InvalidStatus) as refused:
        connect(base.replace("http", "ws") + "/openenv/ws", additional_headers={"X-Episode-Labels": "x"})
    assert refused.value.response.status_code == 400
    assert client.get("/episodes/bad-labels").status_code == 404


def test_a_rejected_label_name_or_pair_is_not_repeated_in_the_error(client: httpx.Client) -> None:
    # A client that put a token where a label belongs must not get it back (nor see it in a proxy's log of the 400).
    token = "sk-LabelLeak 123/abc"
    for header in (f"run=r1,{token}", f"{token}=x"):
        refused = ors_create(client, "label-leak", header, secrets={"key": "unrelated"})
        assert refused.status_code == 400
        assert "X-Episode-Labels" in refused.text and "LabelLeak" not in refused.text
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize"}
    body["params"] = {"clientInfo": {"name": "x", "version": "1", "_extra": {"labels": {token: "v"}}}}
    mcp = client.post("/mcp/", json=body, headers=ACCEPT)
    assert mcp.status_code == 400 and "label" in mcp.text and "LabelLeak" not in mcp.text


@pytest.mark.anyio
async def test_mcp_and_control_plane_episodes_and_resets_are_recorded(base: str, client: httpx.Client) -> None:
    async with httpx.AsyncClient() as http:
        opened = await raw_initialize(
            http,
            f"{base}/mcp/",
            {"session_id": "ep-row", "seed": 2, "labels": {"run": "eval-1"}},
            headers={"X-Episode-Labels": "group=g1"},
        )
        sid = opened.headers["mcp-session-id"]
        await call(http, f"{base}/mcp/", sid, "increment", {"by": 1})
        header = {"mcp-session-id": "ep-row"}
        reset = await http.post(f"{base}/control/reset_session", headers=header, json={"seed": 3})
        assert reset.status_code == 200
        await call(http, f"{base}/mcp/", sid, "finish")
        await http.delete(f"{base}/mcp/", headers={**ACCEPT, "mcp-session-id": sid})
        await http.get(f"{base}/control/initial_state", headers={"mcp-session-id": "control-only"})

    first = ended(client, "ep-row")
    assert first["face"] == "mcp" and first["end_reason"] == "reset"
    assert first["labels"] == {"run": "eval-1", "group": "g1"}
    assert first["task"] == {"start": 20}
    assert [(c["face"], c["tool"]) for c in first["calls"]] == [("mcp", "increment")]
    second = ended(client, "ep-row:1")
    assert second["session_id"] == "ep-row" and second["task"] == {"start": 30}
    assert [c["tool"] for c in second["calls"]] == ["finish"] and second["finished"] is True
    control = episode(client, "control-only")
    assert control["face"] == "control" and control["status"] == "live"


def test_openenv_socket_and_session_create_episodes_are_recorded(base: str, client: httpx.Client) -> None:
    url = base.replace("http", "ws") + "/openenv/counter/ws"
    with connect(url, additional_headers={"X-Episode-Labels": "run=ws"}) as ws:
        ws.send(json.dumps({"type": "state"}))
        session_id = json.loads(ws.recv(timeout=10))["data"]["episode_id"]
        ws.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "increment", "arguments": {}}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
    record = ended(client, session_id)
    assert record["face"] == "openenv" and record["labels"] == {"run": "ws"}
    assert [(c["face"], c["tool"], c["ok"]) for c in record["calls"]] == [("openenv", "increment", True)]

    created = client.post(
        "/openenv/counter/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}},
        headers={"X-Episode-Labels": "run=rpc"},
    ).json()["result"]["session_id"]
    assert episode(client, created)["labels"] == {"run": "rpc"}


def test_episodes_are_listed_newest_first_filtered_and_paged(client: httpx.Client) -> None:
    for n in range(5):
        assert ors_create(client, f"paged-{n}", f"run=paged,n={n % 2}").is_success
    client.post("/delete", headers={"X-Session-ID": "paged-4"})
    ended(client, "paged-4")

    def listed(**params: Any) -> dict:
        response = client.get("/episodes", params=params)
        assert response.status_code == 200, response.text
        return response.json()

    pages, cursor = [], None
    while True:
        page = listed(**{"label.run": "paged", "limit": 2, **({"cursor": cursor} if cursor else {})})
        pages.append([e["id"] for e in page["episodes"]])
        cursor = page["next"]
        if cursor is None:
            break
    assert pages == [["paged-4", "paged-3"], ["paged-2", "paged-1"], ["paged-0"]]
    assert [e["id"] for e in listed(**{"label.run": "paged", "label.n": "1"})["episodes"]] == ["paged-3", "paged-1"]
    assert [e["id"] for e in listed(**{"label.run": "paged", "status": "ended"})["episodes"]] == ["paged-4"]
    live = listed(**{"label.run": "paged", "status": "live"})["episodes"]
    assert len(live) == 4 and {e["status"] for e in live} == {"live"}
    summary = listed(**{"label.run": "paged", "limit": 1})["episodes"][0]
    assert set(summary) == {
        "id", "session_id", "env", "status", "face", "labels", "started_at", "ended_at", "end_reason", "steps",
        "reward", "finished", "truncated_bytes", "task",
    }  # fmt: skip
    assert summary["task"] == {"start": 5}
    since = live[-1]["started_at"]
    assert [e["id"] for e in listed(**{"label.run": "paged", "since": since})["episodes"]][-1] == "paged-0"
    assert listed(**{"label.run": "paged", "until": since})["episodes"] == []
    assert listed(env="nope")["episodes"] == []


@pytest.mark.parametrize(
    "query",
    [{"status": "gone"}, {"since": "yesterday"}, {"limit": "0"}, {"limit": "x"}, {"cursor": "nonsense"}],
)
def test_bad_list_parameters_are_a_400(client: httpx.Client, query: dict[str, str]) -> None:
    response = client.get("/episodes", params=query)
    assert response.status_code == 400 and response.json()["detail"]


def test_an_unknown_episode_is_a_404(client: httpx.Client) -> None:
    assert client.get("/episodes/nobody").json() == {"detail": "no such episode"}
    assert client.get("/episodes/nobody/events").status_code == 404
    assert client.get("/episodes/export", params={"format": "csv"}).status_code == 400


def test_export_streams_json_lines_in_both_formats(client: httpx.Client) -> None:
    assert ors_create(client, "exported", "run=export").is_success
    ors_call(client, "exported", "increment", {"by": 3})
    ors_call(client, "exported", "finish")
    client.post("/delete", headers={"X-Session-ID": "exported"})
    ended(client, "exported")
    lines = client.get("/episodes/export", params={"label.run": "export"}).text.splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["exported"]
    assert json.loads(lines[0])["calls"][0]["arguments"] == {"by": 3}
    rows = client.get("/episodes/export", params={"label.run": "export", "format": "evaluation_row"}).text
    row = json.loads(rows)
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert row["evaluation_result"]["score"] == 1.5
    assert row["input_metadata"]["session_data"]["labels"] == {"run": "export"}


def test_the_events_of_a_live_episode_stream_as_they_happen_then_end(base: str, client: httpx.Client) -> None:
    assert ors_create(client, "watched").is_success
    episode(client, "watched")
    seen: list[tuple[str, dict]] = []

    async def watch() -> None:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            async with http.stream("GET", "/episodes/watched/events") as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                name = None
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        name = line.removeprefix("event: ")
                    elif line.startswith("data: ") and name:
                        seen.append((name, json.loads(line.removeprefix("data: "))))
                        if name == "call":
                            await anyio.to_thread.run_sync(step)
                        if name == "end":
                            return

    calls = iter([("increment", {"by": 1}), ("finish", None)])

    def step() -> None:
        following = next(calls, None)
        if following is None:
            client.post("/delete", headers={"X-Session-ID": "watched"})
        else:
            ors_call(client, "watched", *following)

    async def main() -> None:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                await anyio.to_thread.run_sync(step)  # the first call, once the stream is (about to be) open

    anyio.run(main)
    assert [(name, data.get("tool", data.get("end_reason"))) for name, data in seen] == [
        ("call", "increment"),
        ("call", "finish"),
        ("end", "deleted"),
    ]
    # An ended episode replays its calls, then ends.
    replay = client.get("/episodes/watched/events").text
    assert replay.count("event: call") == 2 and "event: end" in replay


def test_without_the_api_key_the_readers_are_401(records: Path) -> None:
    with serve(create_app([Counter], Settings(records=str(records), api_key="k"))) as url:
        assert httpx.get(url + "/episodes").status_code == 401
        answer = httpx.get(url + "/episodes", headers={"Authorization": "Bearer k"})
        assert answer.status_code == 200 and answer.json()["episodes"]


def test_records_off_answers_404_saying_so() -> None:
    with serve(create_app([Counter], Settings(records="off"))) as url:
        response = httpx.get(url + "/episodes")
    assert response.status_code == 404 and "--records off" in response.json()["detail"]


def test_shutdown_ends_live_episodes_as_shutdown(records: Path, client: httpx.Client) -> None:
    with serve(create_app([Counter], Settings(records=str(records)))) as url:
        with httpx.Client(base_url=url) as other:
            assert ors_create(other, "at-shutdown").is_success
            ors_call(other, "at-shutdown", "increment")
    record = until(lambda: client.get("/episodes/at-shutdown").json(), lambda e: e.get("status") == "ended", "end")
    assert record["end_reason"] == "shutdown" and len(record["calls"]) == 1
