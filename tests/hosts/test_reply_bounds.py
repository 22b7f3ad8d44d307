"""A host's reply is bounded by what `--max-output-chars` can need (issue 31 item 6): before, the server read a
reply of up to 256 MiB whole and only then applied the output limit (a hosted tool returning 200 M characters took
the server from 95 MB to 465 MB). Now the host refuses to send a reply past the bound (the call fails with
`output_too_large`, the session goes on), and a host that sends one anyway is ended on the reply's length header,
before any of it is read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ors_server.hosting.process import reply_limit
from ors_server.http.app import create_app
from ors_server.loading import resolve_environments
from ors_server.settings import Settings

HERE = Path(__file__).resolve().parent
OUTPUT_CHARS = 1000
FLOOD_CHARS = 100_000_000


def _end(text: str) -> dict:
    """The call's outcome: an `end` event's data, or an `error` event (the tool failed) as one with ok false."""
    last = [block for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()][-1]
    fields = dict(line.split(": ", 1) for line in last.splitlines())
    if fields["event"] == "error":
        return {"ok": False, "error": fields["data"]}
    assert fields["event"] == "end", fields
    return json.loads(fields["data"])


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    envs = resolve_environments(["isolated:native_envs:Fragile"], str(HERE))
    app = create_app(envs, Settings(tool_timeout=60.0, max_output_chars=OUTPUT_CHARS))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def _create(client: TestClient, sid: str) -> None:
    body = {"env_name": "fragile", "split": "train", "index": 0}
    assert client.post("/create", json=body, headers={"X-Session-ID": sid}).status_code == 200


def _call(client: TestClient, sid: str, name: str, arguments: dict | None = None) -> dict:
    response = client.post(
        "/fragile/call", json={"name": name, "input": arguments or {}}, headers={"X-Session-ID": sid}
    )
    assert response.status_code == 200, response.text
    return _end(response.text)


def _peak_rss_reset() -> None:
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")  # resets VmHWM, the peak resident size, to the current one


def _kib(field: str) -> int:
    with open("/proc/self/status") as file:
        return next(int(line.split()[1]) for line in file if line.startswith(field + ":"))


def test_a_reply_past_the_output_limit_is_refused_by_the_host_without_the_server_holding_it(client: TestClient) -> None:
    _create(client, "big")
    pid = _call(client, "big", "echo", {"text": "a"})["output"]["blocks"][0]["text"].split()[-1]
    _peak_rss_reset()
    before = _kib("VmRSS")
    flooded = _call(client, "big", "flood", {"chars": FLOOD_CHARS})
    grew = _kib("VmHWM") - before
    # A 100 MB reply read whole took this process up by ~200 MB (the bytes, then the decoded text).
    assert grew < 64 * 1024, f"the server's peak resident size grew by {grew} KiB for a refused reply"
    assert flooded["ok"] is False and f"more than the {reply_limit(OUTPUT_CHARS)}" in flooded["error"], flooded
    # The session and its host process go on.
    assert _call(client, "big", "echo", {"text": "b"})["output"]["blocks"][0]["text"] == f"b from {pid}"
    assert client.post("/delete", headers={"X-Session-ID": "big"}).status_code == 200


def test_a_host_that_sends_a_reply_past_the_bound_anyway_is_ended_on_its_header(client: TestClient) -> None:
    _create(client, "forger")
    forged = _call(client, "forger", "forge")
    # Before, the server waited for the 200 MB it was promised (within the old 256 MiB frame limit) until the tool
    # timeout; now the header alone ends the host, and the session with it.
    assert forged["ok"] is False, forged
    assert "sent a reply of 200000000 bytes" in forged["error"] and "the session ends" in forged["error"], forged
    assert client.get("/fragile/prompt", headers={"X-Session-ID": "forger"}).status_code == 410
    _create(client, "after")  # a new host process takes new sessions
    assert _call(client, "after", "echo", {"text": "c"})["ok"] is True
    client.post("/delete", headers={"X-Session-ID": "after"})
