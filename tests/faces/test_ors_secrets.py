"""ORS secrets over real HTTP: both ways in reach the environment (checklist 15), and no secret value is
ever echoed in a response or written to a log, even when user code puts it in an exception."""

from __future__ import annotations

import base64
import json
import logging

import httpx
import pytest
from websockets.sync.client import connect

from tests.ors_envs import (
    Live,
    call,
    create,
    live_server,
    math_task,
    new_tag,
    post_sse,
    secrets_seen,
    sid_header,
    without_comments,
    x_secrets,
)
from tests.reliability.reliability_envs import ACCEPT_MCP, initialize_body, mcp_call

LOGGERS = ("ors_server", "ors_server.access", "uvicorn", "uvicorn.access", "uvicorn.error")


@pytest.mark.parametrize("allowed_domains", [True, False], ids=["openreward", "ors-sdk"])
def test_secrets_in_the_x_secrets_header_reach_the_environment_as_plain_values(
    client: httpx.Client, allowed_domains: bool
) -> None:
    tag = new_tag()
    headers = {"X-Secrets": x_secrets({"API_KEY": "k-1", "OTHER": "o-2"}, allowed_domains)}
    sid = create(client, math_task(0, tag), headers=headers)
    assert client.get("/prompt", headers=sid_header(sid)).status_code == 200
    assert secrets_seen(tag) == {"API_KEY": "k-1", "OTHER": "o-2"}


def test_secrets_in_the_create_body_reach_the_environment(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag), secrets={"DB_PASSWORD": "pw"})
    assert client.get("/prompt", headers=sid_header(sid)).status_code == 200
    assert secrets_seen(tag) == {"DB_PASSWORD": "pw"}


def test_header_and_body_secrets_merge_and_the_header_wins_on_a_collision(client: httpx.Client) -> None:
    tag = new_tag()
    headers = {"X-Secrets": x_secrets({"SHARED": "from-header", "H": "h"})}
    sid = create(client, math_task(0, tag), secrets={"SHARED": "from-body", "B": "b"}, headers=headers)
    assert client.get("/prompt", headers=sid_header(sid)).status_code == 200
    assert secrets_seen(tag) == {"SHARED": "from-header", "H": "h", "B": "b"}


def test_a_session_without_secrets_gets_an_empty_dict(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    assert client.get("/prompt", headers=sid_header(sid)).status_code == 200
    assert secrets_seen(tag) == {}


@pytest.mark.parametrize(
    "header",
    [
        "not base64 !!",
        base64.b64encode(b"not json").decode(),
        base64.b64encode(b'["a list"]').decode(),
        base64.b64encode(json.dumps({"K": "no-value-wrapper-s3cr3t"}).encode()).decode(),
        base64.b64encode(json.dumps({"K": {"value": ["not-a-str-s3cr3t"]}}).encode()).decode(),
    ],
    ids=["not-base64", "not-json", "not-object", "no-value", "value-not-str"],
)
def test_a_malformed_x_secrets_header_answers_400_without_echoing_it(client: httpx.Client, header: str) -> None:
    sid = f"bad-secrets-{new_tag()}"
    response = client.post("/create", json={"task_spec": math_task()}, headers={**sid_header(sid), "X-Secrets": header})
    assert response.status_code == 400, response.text
    assert isinstance(response.json()["detail"], str)
    assert "s3cr3t" not in response.text and header not in response.text
    assert client.post("/ping", headers=sid_header(sid)).status_code == 404


def test_no_secret_is_ever_echoed_or_logged(caplog: pytest.LogCaptureFixture) -> None:
    header_secret, body_secret, setup_secret = "hdr-S3CRET-4d1f", "body-S3CRET-9a7e", "setup-S3CRET-22b0"
    header_value = x_secrets({"API_TOKEN": header_secret})
    forbidden = [header_secret, body_secret, setup_secret, header_value]
    seen: list[str] = []

    def keep(response: httpx.Response, text: str | None = None) -> httpx.Response:
        seen.append(text if text is not None else response.text)
        seen.append(json.dumps(dict(response.headers)))
        return response

    handler = caplog.handler
    loggers = [logging.getLogger(name) for name in LOGGERS]
    caplog.set_level(logging.DEBUG)
    with live_server(log_level="debug") as live:
        for logger in loggers:
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
        try:
            client = live.client
            secret_headers = {"X-Secrets": header_value}
            keep(client.post("/create_session", headers=secret_headers))
            sid = create(
                client, math_task(0), env_name="mathlike", secrets={"DB_PASSWORD": body_secret}, headers=secret_headers
            )
            keep(client.post("/ping", headers=sid_header(sid)))
            keep(client.get("/prompt", headers=sid_header(sid)))
            keep(client.get("/task_tools", headers=sid_header(sid)))

            leak = without_comments(call(client, sid, "leak"))
            assert [e.name for e in leak] == ["task_id", "error"]
            seen.append(leak[1].data)
            assert "cannot log in with" in leak[1].data and "***" in leak[1].data

            for name, arguments in [("boom", {}), ("nosuch", {}), ("submit", {})]:
                response, raw = post_sse(client, "/mathlike/call", {"name": name, "input": arguments}, sid)
                keep(response, raw.decode())

            # A setup error carrying a secret is redacted.
            failing = create(client, {"tag": new_tag()}, env_name="failingsetup", secrets={"TOKEN": setup_secret})
            failed = keep(client.get("/prompt", headers=sid_header(failing)))
            assert failed.status_code == 500
            assert failed.json()["detail"].startswith("ValueError: setup exploded")

            keep(client.post("/delete", headers=sid_header(sid)))
            keep(client.post("/delete", headers=sid_header(failing)))
            keep(client.post("/delete_session", headers=sid_header(sid)))
        finally:
            for logger in loggers:
                logger.removeHandler(handler)

    assert any(record.name.startswith(("uvicorn", "ors_server")) for record in caplog.records), "no logs captured"
    echoed = [text for text in seen if any(secret in text for secret in forbidden)]
    assert not echoed, f"responses echo a secret: {echoed}"
    rendered = [record.getMessage() + " " + repr(vars(record)) for record in caplog.records]
    logged = [text for text in rendered if any(secret in text for secret in forbidden)]
    assert not logged, f"log records carry a secret: {logged}"


@pytest.mark.parametrize(
    "body",
    [
        {"env_name": "mathlike", "secrets": {"DB_PASSWORD": "body-S3CRET-9a7e"}},
        {"task_spec": math_task(), "split": "train", "index": 0, "secrets": {"DB_PASSWORD": "body-S3CRET-9a7e"}},
        {"task_spec": "not an object", "secrets": {"DB_PASSWORD": "body-S3CRET-9a7e"}},
        {"task_spec": math_task(), "secrets": {"DB_PASSWORD": ["body-S3CRET-9a7e"]}},
    ],
    ids=["no-task", "both-task-forms", "task-not-object", "secret-not-str"],
)
def test_a_create_body_that_fails_validation_does_not_echo_its_secrets(
    client: httpx.Client, body: dict, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    response = client.post("/create", json=body, headers=sid_header(f"s-{new_tag()}"))
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], list)
    assert "body-S3CRET-9a7e" not in response.text
    assert "body-S3CRET-9a7e" not in caplog.text


def test_a_tool_input_error_does_not_echo_a_secret_value_the_agent_typed(client: httpx.Client) -> None:
    secret = "typed-S3CRET-51c9"
    sid = create(client, math_task(0), secrets={"DB_PASSWORD": secret})
    response, raw = post_sse(client, "/mathlike/call", {"name": "submit", "input": {"answer": [secret]}}, sid)
    assert b'"reason":"input_validation"' in raw
    assert secret.encode() not in raw


def test_an_unknown_tool_named_like_a_secret_is_masked_on_every_face(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "tool-S3CRET-7e21"
    client = live.client
    caplog.set_level(logging.INFO, logger="ors_server.access")
    sid = create(client, math_task(0), env_name="mathlike", secrets={"DB_PASSWORD": secret})
    seen: list[str] = []

    _, raw = post_sse(client, "/mathlike/call", {"name": secret, "input": {}}, sid)
    seen.append(raw.decode())
    assert b'"reason":"not_found"' in raw and b"***" in raw

    opened = client.post("/mathlike/mcp/", json=initialize_body(), headers={**ACCEPT_MCP, "X-Session-ID": sid})
    assert opened.status_code == 200, opened.text
    result = mcp_call(client, "/mathlike/mcp/", opened.headers["mcp-session-id"], secret, {})
    seen.append(json.dumps(result))
    assert result["isError"] and "***" in result["content"][0]["text"]

    url = live.url.replace("http://", "ws://") + f"/openenv/mathlike/ws?session_id={sid}"
    with connect(url, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": secret}}))
        reply = str(ws.recv(timeout=10))
    seen.append(reply)
    assert "tool_not_found" in reply and "***" in reply

    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": secret, "session_id": sid}}
    answer = client.post("/openenv/mathlike/mcp", json=rpc)
    seen.append(answer.text)
    assert "error" in answer.json()

    echoed = [text for text in seen if secret in text]
    assert not echoed, f"responses echo the secret: {echoed}"
    lines = [r.getMessage() for r in caplog.records if r.name == "ors_server.access"]
    assert [line for line in lines if "tool=***" in line], lines
    assert not [line for line in lines if secret in line], lines
