"""What operators see: `/metrics` follows sessions and calls; access logs name the request but never a secret."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ors_server.environments.frozen_lake import FrozenLake
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.ors_envs import new_tag
from tests.reliability.reliability_envs import ACCEPT_MCP, Faulty, mcp_call, mcp_open, ors_call, ors_result
from tests.serving import serve

SECRET_HEADER_VALUE = "s3cr3t-from-header-value"
SECRET_BODY_VALUE = "s3cr3t-from-body-value"


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with serve(create_app([Faulty, FrozenLake], Settings()), log_level="info") as url:
        with httpx.Client(base_url=url, timeout=15) as http:
            yield http


def samples(client: httpx.Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of `/metrics`, keyed by (sample name, labels)."""
    text = client.get("/metrics").text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: dict, name: str, default: float = 0.0, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), default)


def create(client: httpx.Client, sid: str) -> None:
    body = {"env_name": "faulty", "task_spec": {"tag": new_tag()}}
    assert client.post("/create", json=body, headers={"X-Session-ID": sid}).status_code == 200


def test_metrics_count_live_sessions_lifecycle_events_and_calls_by_outcome(client: httpx.Client):
    before = samples(client)
    first, second = f"m-{uuid.uuid4().hex}", f"m-{uuid.uuid4().hex}"
    create(client, first)
    create(client, second)
    assert ors_result(ors_call(client, first, "note", {"text": "a"}, "faulty"))["ok"]
    assert ors_result(ors_call(client, first, "note", {"text": "b"}, "faulty"))["ok"]
    assert ors_call(client, first, "boom", {}, "faulty")[-1][0] == "error"
    assert ors_result(ors_call(client, second, "fly", {}, "faulty"))["reason"] == "not_found"
    key = uuid.uuid4().hex
    transport = mcp_open(client, "/frozen_lake/mcp/", {"session_id": key, "seed": 42})
    mcp_call(client, "/frozen_lake/mcp/", transport, "lake_move", {"action": "RIGHT"})

    during = samples(client)
    assert value(during, "ors_live_sessions", env="faulty") == 2
    assert value(during, "ors_live_sessions", env="frozen_lake") == 1

    client.post("/delete", headers={"X-Session-ID": first})
    client.delete("/frozen_lake/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})
    after = samples(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert value(after, "ors_live_sessions", env="faulty") == 1
    assert ("ors_live_sessions", frozenset({("env", "frozen_lake")})) not in after
    assert grew("ors_sessions_total", event="created") == 3
    assert grew("ors_sessions_total", event="deleted") == 2
    assert grew("ors_tool_calls_total", env="faulty", tool="note", outcome="ok") == 2
    assert grew("ors_tool_calls_total", env="faulty", tool="boom", outcome="crashed") == 1
    assert grew("ors_tool_calls_total", env="faulty", tool="<unknown>", outcome="not_found") == 1
    assert grew("ors_tool_calls_total", env="frozen_lake", tool="lake_move", outcome="ok") == 1
    assert grew("ors_tool_call_seconds_count", env="faulty") == 4
    for face in ("ors", "mcp"):
        assert grew("ors_request_seconds_count", face=face) > 0
    client.post("/delete", headers={"X-Session-ID": second})
    assert value(samples(client), "ors_live_sessions", env="faulty") == 0


def test_access_log_lines_name_session_environment_tool_and_status_but_never_a_secret(client, caplog):
    caplog.set_level(logging.INFO, logger="ors_server.access")
    sid = f"log-{uuid.uuid4().hex}"
    header = base64.b64encode(json.dumps({"TOKEN": {"value": SECRET_HEADER_VALUE}}).encode()).decode()
    body = {"env_name": "faulty", "task_spec": {"tag": new_tag()}, "secrets": {"KEY": SECRET_BODY_VALUE}}
    created = client.post("/create", json=body, headers={"X-Session-ID": sid, "X-Secrets": header})
    assert created.status_code == 200
    assert ors_result(ors_call(client, sid, "note", {"text": SECRET_BODY_VALUE}, "faulty"))["ok"]
    client.get("/faulty/control/reward", headers={"mcp-session-id": sid})
    client.post("/delete", headers={"X-Session-ID": sid})

    lines = [r.getMessage() for r in caplog.records if r.name == "ors_server.access"]
    call = [line for line in lines if "path=/faulty/call" in line]
    assert len(call) == 1, lines
    for field in (f"session={sid}", "env=faulty", "tool=note", "status=200", "face=ors", "method=POST"):
        assert field in call[0].split(), (field, call[0])
    control = [line for line in lines if "path=/faulty/control/reward" in line]
    assert control and f"session={sid}" in control[0] and "face=control" in control[0] and "status=200" in control[0]
    create_line = [line for line in lines if "path=/create" in line]
    assert create_line and f"session={sid}" in create_line[0]
    for secret in (SECRET_HEADER_VALUE, SECRET_BODY_VALUE, header):
        assert secret not in caplog.text


def test_a_line_break_in_a_path_is_escaped_and_never_forges_a_second_access_log_line(client, caplog):
    caplog.set_level(logging.INFO, logger="ors_server.access")
    forged = "status=200 face=ors session=admin"
    for path in (f"/faulty/x%0a{forged.replace(' ', '%20')}", "/faulty/a%0d%0b%1b[31m%e2%80%a8%22%5c"):
        client.get(path)
    lines = [r.getMessage() for r in caplog.records if r.name == "ors_server.access"]
    assert len(lines) == 2, lines
    for line in lines:
        assert line.isprintable(), line  # no newline, carriage return, escape or line separator of any kind
    assert lines[0].startswith('method=GET path="/faulty/x\\nstatus=200 face=ors session=admin" status=404'), lines[0]
    assert lines[1].startswith('method=GET path="/faulty/a\\r\\x0b\\x1b[31m\\u2028\\"\\\\" status=404'), lines[1]


def test_control_characters_in_a_session_header_are_escaped_in_the_access_log(client, caplog):
    caplog.set_level(logging.INFO, logger="ors_server.access")
    client.post("/ping", headers={"X-Session-ID": b"a\tb\x85c d"})  # a tab and NEL (a line break to str.splitlines)
    line = next(r.getMessage() for r in caplog.records if r.name == "ors_server.access")
    assert line.isprintable() and 'session="a\\tb\\x85c d"' in line, line
