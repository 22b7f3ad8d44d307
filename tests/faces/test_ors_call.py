"""ORS `/call` over real HTTP, asserted on the raw SSE bytes (checklist 19-26)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.ors_envs import (
    PNG_1X1,
    Event,
    Live,
    call,
    call_result,
    client_join,
    count,
    create,
    gate,
    journal,
    live_server,
    math_task,
    new_tag,
    parse_sse,
    post_sse,
    sid_header,
    without_comments,
)

CHUNK = 4096
KEEPALIVE = 0.2
TASK_ID = r"[0-9a-f]{32}"


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_server(sse_keepalive=KEEPALIVE, call_linger=1.0) as server:
        yield server


def openreward_events(raw: bytes) -> list[tuple[str, str]]:
    """The events as `openreward`'s `_parse_sse_events` reads them (aiohttp lines, `lstrip()`ped values)."""
    events: list[tuple[str, str]] = []
    name, data = None, []
    for raw_line in raw.split(b"\n"):
        line = raw_line.decode("utf-8", "ignore").rstrip("\r\n")
        if not line:
            if name:
                events.append((name, "\n".join(data)))
            name, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, value = line.split(":", 1)
        if field == "event":
            name = value.lstrip()
        elif field == "data":
            data.append(value.lstrip())
    return events


def openreward_result(raw: bytes) -> Any:
    """The result exactly as the `openreward` client rebuilds it from chunk and end events."""
    pieces = [data for name, data in openreward_events(raw) if name in ("chunk", "end")]
    return json.loads("".join(pieces))


class Reader:
    """Incremental reads of a streaming response, with the arrival time of every raw piece."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.raw = b""
        self.arrivals: list[tuple[float, bytes]] = []
        self._pieces = response.iter_raw()

    def _read(self) -> bool:
        piece = next(self._pieces, None)
        if piece is None:
            return False
        self.arrivals.append((time.monotonic(), piece))
        self.raw += piece
        return True

    def until(self, needle: bytes, times: int = 1) -> bytes:
        """Read until `needle` occurred `times` times (each read is bounded by the client's timeout)."""
        while self.raw.count(needle) < times:
            assert self._read(), f"the stream ended before {needle!r}: {self.raw!r}"
        return self.raw

    def rest(self) -> bytes:
        while self._read():
            pass
        return self.raw


@contextmanager
def open_call(client: httpx.Client, sid: str, body: dict, path: str = "/mathlike/call") -> Iterator[Reader]:
    headers = {**sid_header(sid), "Accept": "text/event-stream"}
    with client.stream("POST", path, json=body, headers=headers) as response:
        assert response.status_code == 200
        yield Reader(response)


# Shape of a successful call


def test_a_fast_call_sends_exactly_task_id_then_end_with_crlf_framing(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    response, raw = post_sse(client, "/mathlike/call", {"name": "submit", "input": {"answer": "4"}}, sid)
    assert response.status_code == 200
    text = raw.decode()
    match = re.fullmatch(rf"event: task_id\r\ndata: ({TASK_ID})\r\n\r\nevent: end\r\ndata: (.*)\r\n\r\n", text)
    assert match, text
    assert json.loads(match.group(2)) == {
        "ok": True,
        "output": {
            "blocks": [{"type": "text", "text": "Correct!", "detail": None}],
            "metadata": None,
            "reward": 1.0,
            "finished": True,
        },
    }


def test_call_answers_with_event_stream_headers(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    response, _ = post_sse(client, "/mathlike/call", {"name": "noargs", "input": {}}, sid)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "no-cache" in response.headers["cache-control"]
    assert response.headers["x-accel-buffering"] == "no"


def test_the_stream_has_no_id_or_retry_fields(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    _, raw = post_sse(client, "/mathlike/call", {"name": "noargs", "input": {}}, sid)
    assert not re.search(rb"(^|\r\n)(id|retry):", raw)


def test_a_successful_result_has_exactly_blocks_metadata_reward_and_finished(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    result = call_result(call(client, sid, "echo", {"text": "hello"}))
    assert result == {
        "ok": True,
        "output": {
            "blocks": [{"type": "text", "text": "hello", "detail": None}],
            "metadata": {"length": 5},
            "reward": None,
            "finished": False,
        },
    }


def test_a_wrong_answer_gets_reward_zero_and_finishes(client: httpx.Client) -> None:
    sid = create(client, math_task(1))
    output = call_result(call(client, sid, "submit", {"answer": "4"}))["output"]
    assert (output["reward"], output["finished"], output["blocks"][0]["text"]) == (0.0, True, "Wrong")


def test_image_blocks_travel_with_data_and_mime_type(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    output = call_result(call(client, sid, "picture"))["output"]
    assert output["blocks"] == [{"type": "image", "data": PNG_1X1, "mimeType": "image/png", "detail": None}]


def test_a_tool_without_arguments_accepts_an_empty_input(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    assert call_result(call(client, sid, "noargs", {}))["output"]["blocks"][0]["text"] == "pong"


# Tool-level failures stay inside `end`


def test_an_unknown_tool_ends_with_ok_false_not_found(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    result = call_result(call(client, sid, "nosuch", {}))
    assert result["ok"] is False and result["reason"] == "not_found"
    assert "nosuch" in result["error"]


@pytest.mark.parametrize("arguments", [{}, {"answer": ["4"]}, {"answer": 4}, {"wrong": "4"}])
def test_invalid_input_ends_with_ok_false_input_validation_and_the_tool_does_not_run(
    client: httpx.Client, arguments: dict
) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    result = call_result(call(client, sid, "submit", arguments))
    assert result["ok"] is False and result["reason"] == "input_validation"
    assert isinstance(result["error"], str)
    assert count(tag, "submit") == 0
    assert call_result(call(client, sid, "submit", {"answer": "4"}))["output"]["reward"] == 1.0


def test_every_call_after_the_episode_finished_ends_with_episode_finished_and_does_not_run(
    client: httpx.Client,
) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    assert call_result(call(client, sid, "submit", {"answer": "4"}))["output"]["finished"] is True
    for name, arguments in [("noargs", {}), ("submit", {"answer": "4"}), ("echo", {"text": "x"})]:
        result = call_result(call(client, sid, name, arguments))
        assert result["ok"] is False and result["reason"] == "episode_finished", result
        assert isinstance(result["error"], str)
    assert count(tag, "submit") == 1 and count(tag, "noargs") == 0 and count(tag, "echo") == 0
    assert client.post("/ping", headers=sid_header(sid)).status_code == 200


# Exceptions escaping the tool


def test_a_raising_tool_sends_task_id_then_an_error_event_with_the_exception_text_and_no_end(
    client: httpx.Client,
) -> None:
    sid = create(client, math_task(0))
    response, raw = post_sse(client, "/mathlike/call", {"name": "boom", "input": {}}, sid)
    assert response.status_code == 200
    assert re.fullmatch(
        rf"event: task_id\r\ndata: {TASK_ID}\r\n\r\nevent: error\r\ndata: RuntimeError: kaboom\r\n\r\n", raw.decode()
    )
    assert call_result(call(client, sid, "noargs"))["ok"] is True


def test_a_tool_returning_something_else_sends_an_error_event_and_no_end(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    events = without_comments(call(client, sid, "not_output"))
    assert [e.name for e in events] == ["task_id", "error"]
    assert events[1].data


# Chunking


def test_a_result_of_at_most_4096_characters_comes_in_end_alone(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    events = without_comments(call(client, sid, "echo", {"text": "x" * 3000}))
    assert [e.name for e in events] == ["task_id", "end"]


def assert_chunked(events: list[Event], text: str) -> list[str]:
    """Checks the chunking rules and that both a strict reader and the client get `text` back."""
    events = without_comments(events)
    names = [e.name for e in events]
    assert names[0] == "task_id" and names[-1] == "end" and set(names[1:-1]) == {"chunk"}, names
    pieces = [e.data for e in events[1:]]
    assert len(pieces) >= 3
    assert all(0 < len(p) <= CHUNK for p in pieces), [len(p) for p in pieces]
    assert all(not p[0].isspace() for p in pieces), [p[:10] for p in pieces]
    joined = "".join(pieces)
    assert client_join(events) == joined
    assert json.loads(joined)["output"]["blocks"][0]["text"] == text
    return pieces


@pytest.mark.parametrize(
    "text",
    [
        "x" * 9000,
        "word " * 2400,
        "ab  " * 3000,
        "a" + " " * 300 + "b" + " " * 5000 + "c" * 4000 + " " * 700,
        "héllo wörld 🎉 ünïcode " * 600,
        'line\none "quoted" \\ back\tslash \r\n' * 400,
        "sep\u2028para\u2029next\x85 " * 800,
    ],
    ids=["plain", "words", "double-spaces", "space-runs", "unicode", "escapes", "unicode-line-separators"],
)
def test_a_long_result_is_cut_into_chunks_that_rejoin_exactly_for_the_client(client: httpx.Client, text: str) -> None:
    sid = create(client, math_task(0))
    response, raw = post_sse(client, "/mathlike/call", {"name": "echo", "input": {"text": text}}, sid)
    assert response.status_code == 200
    assert_chunked(parse_sse(raw), text)
    assert openreward_result(raw)["output"]["blocks"][0]["text"] == text


def test_spaces_at_every_4096_boundary_never_start_a_chunk(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    marker = "MARKER"
    short = without_comments(call(client, sid, "echo", {"text": marker}))[-1].data
    offset = short.index(marker)
    text = list("abcdefghij" * 1500)
    for boundary in range(CHUNK, len(text) + offset, CHUNK):
        for position in (boundary - 1, boundary, boundary + 1):
            if 0 <= position - offset < len(text):
                text[position - offset] = " "
    spaced = "".join(text)
    response, raw = post_sse(client, "/mathlike/call", {"name": "echo", "input": {"text": spaced}}, sid)
    pieces = assert_chunked(parse_sse(raw), spaced)
    assert "".join(pieces).index(spaced) == offset
    assert openreward_result(raw)["output"]["blocks"][0]["text"] == spaced


def test_whitespace_longer_than_a_chunk_still_reaches_the_client_intact(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    text = "start" + " " * 10_000 + "end"
    response, raw = post_sse(client, "/mathlike/call", {"name": "echo", "input": {"text": text}}, sid)
    events = without_comments(parse_sse(raw))
    pieces = [e.data for e in events[1:]]
    assert all(0 < len(p) <= CHUNK and not p[0].isspace() for p in pieces), [p[:10] for p in pieces]
    assert openreward_result(raw)["output"]["blocks"][0]["text"] == text


# Keepalive


def test_keepalive_comments_arrive_at_least_every_sse_keepalive_seconds_while_a_tool_runs(
    client: httpx.Client,
) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    try:
        with open_call(client, sid, {"name": "wait", "input": {}}) as reader:
            reader.until(b"event: task_id\r\n")
            started = time.monotonic()
            reader.until(b": ping", times=4)
            gate(tag).set()
            raw = reader.rest()
        pings = [t for t, piece in reader.arrivals if b": ping" in piece and t >= started]
        gaps = [b - a for a, b in zip([started, *pings], pings, strict=False)]
        assert max(gaps) < KEEPALIVE * 4, gaps
        comments = [e for e in parse_sse(raw) if e.name == ":"]
        assert len(comments) >= 4
        assert all(re.fullmatch(r"ping - \S.*", c.data) for c in comments), comments
        assert call_result(parse_sse(raw))["output"]["blocks"][0]["text"] == "waited"
    finally:
        gate(tag).set()


def test_keepalive_comments_sit_between_events_as_their_own_blocks(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    try:
        with open_call(client, sid, {"name": "wait", "input": {}}) as reader:
            reader.until(b": ping", times=2)
            gate(tag).set()
            raw = reader.rest()
        pings = r"(: ping - [^\r\n]+\r\n\r\n)+"
        end = r"event: end\r\ndata: [^\r\n]+\r\n\r\n"
        assert re.fullmatch(rf"event: task_id\r\ndata: {TASK_ID}\r\n\r\n{pings}{end}", raw.decode()), raw
    finally:
        gate(tag).set()


# Progress


def progress_events(raw: bytes) -> list[dict]:
    return [json.loads(data) for name, data in openreward_events(raw) if name == "progress"]


def test_progress_reports_of_a_fast_call_come_before_its_result_in_the_one_response(client: httpx.Client) -> None:
    sid = create(client, math_task(0, new_tag()))
    _, raw = post_sse(client, "/mathlike/call", {"name": "count", "input": {"steps": 5}}, sid)
    names = [name for name, _ in openreward_events(raw)]
    assert names == ["task_id", *["progress"] * 5, "end"]
    expected = [{"progress": float(n), "total": 5.0, "message": f"step {n}"} for n in range(1, 6)]
    assert progress_events(raw) == expected
    assert openreward_result(raw)["output"]["blocks"][0]["text"] == "counted 5"


def test_progress_reports_of_a_slow_call_stream_as_they_happen(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    try:
        with open_call(client, sid, {"name": "count", "input": {"steps": 5, "gated": True}}) as reader:
            reader.until(b"event: progress", times=4)  # before the tool is let through to its last step
            assert b"event: end" not in reader.raw
            gate(tag).set()
            raw = reader.rest()
    finally:
        gate(tag).set()
    assert [p["progress"] for p in progress_events(raw)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [name for name, _ in openreward_events(raw)][-1] == "end"
    assert openreward_result(raw)["output"]["reward"] == 1.0


# Resume by task_id


def task_id_of(raw: bytes) -> str:
    match = re.match(rb"event: task_id\r\ndata: ([0-9a-f]{32})\r\n\r\n", raw)
    assert match, raw
    return match.group(1).decode()


def test_reposting_with_the_task_id_while_running_reattaches_without_running_the_tool_again(
    client: httpx.Client, live: Live
) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    try:
        with open_call(client, sid, {"name": "wait", "input": {}}) as first:
            task_id = task_id_of(first.until(b"\r\n\r\n"))
            with httpx.Client(base_url=live.url, timeout=10) as other:
                body = {"name": "wait", "input": {}, "task_id": task_id}
                with open_call(other, sid, body) as second:
                    assert task_id_of(second.until(b"\r\n\r\n")) == task_id
                    gate(tag).set()
                    replayed = second.rest()
            original = first.rest()
        assert call_result(parse_sse(replayed)) == call_result(parse_sse(original))
        assert call_result(parse_sse(original))["output"]["blocks"][0]["text"] == "waited"
        assert count(tag, "wait-start") == 1
    finally:
        gate(tag).set()


def test_reposting_with_the_task_id_after_the_call_ended_replays_the_same_result(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    _, original = post_sse(client, "/mathlike/call", {"name": "submit", "input": {"answer": "4"}}, sid)
    task_id = task_id_of(original)
    body = {"name": "submit", "input": {"answer": "4"}, "task_id": task_id}
    _, replayed = post_sse(client, "/mathlike/call", body, sid)
    assert without_comments(parse_sse(replayed)) == without_comments(parse_sse(original))
    assert count(tag, "submit") == 1


@pytest.mark.parametrize(
    "body",
    [
        {"name": "submit", "input": {"answer": "4"}},
        {"name": "echo", "input": {"text": "word " * 3000}},  # metadata, and a result of several chunks
        {"name": "picture", "input": {}},
        {"name": "nope", "input": {}},  # a refusal (kept as it is)
    ],
)
def test_a_result_kept_as_json_replays_the_same_bytes(
    live: Live, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]
) -> None:
    from ors_server import calls

    monkeypatch.setattr(calls, "PACK_AFTER", 0.0)  # packed at the next call's end, rather than 2 s after its own
    sid = create(live.client, math_task(0))
    _, original = post_sse(live.client, "/mathlike/call", body, sid)
    task_id = task_id_of(original)
    post_sse(live.client, "/mathlike/call", {"name": "noargs", "input": {}}, sid)  # packs the first
    kept = live.app.state.store.get(sid).episode.calls[task_id]
    assert (kept._packed is not None) == (body["name"] != "nope")
    _, replayed = post_sse(live.client, "/mathlike/call", {**body, "task_id": task_id}, sid)
    assert without_comments(parse_sse(replayed)) == without_comments(parse_sse(original))


def test_a_long_result_replays_in_the_same_chunks(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    body: dict[str, Any] = {"name": "echo", "input": {"text": "word " * 3000}}
    _, original = post_sse(client, "/mathlike/call", body, sid)
    body["task_id"] = task_id_of(original)
    _, replayed = post_sse(client, "/mathlike/call", body, sid)
    assert without_comments(parse_sse(replayed)) == without_comments(parse_sse(original))


def test_a_replay_of_a_raising_call_sends_the_same_error(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    _, original = post_sse(client, "/mathlike/call", {"name": "boom", "input": {}}, sid)
    body = {"name": "boom", "input": {}, "task_id": task_id_of(original)}
    _, replayed = post_sse(client, "/mathlike/call", body, sid)
    assert replayed == original
    assert count(tag, "boom") == 1


def test_an_unknown_task_id_sends_only_an_error_event(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    body = {"name": "noargs", "input": {}, "task_id": "0" * 32}
    response, raw = post_sse(client, "/mathlike/call", body, sid)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert raw == b"event: error\r\ndata: unknown task_id\r\n\r\n"


def test_a_task_id_of_another_session_is_unknown(client: httpx.Client) -> None:
    tag = new_tag()
    first = create(client, math_task(0, tag))
    second = create(client, math_task(0, tag))
    _, original = post_sse(client, "/mathlike/call", {"name": "noargs", "input": {}}, first)
    body = {"name": "noargs", "input": {}, "task_id": task_id_of(original)}
    _, raw = post_sse(client, "/mathlike/call", body, second)
    assert raw == b"event: error\r\ndata: unknown task_id\r\n\r\n"
    assert count(tag, "noargs") == 1


def test_a_finished_call_is_forgotten_after_call_linger(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    _, original = post_sse(client, "/mathlike/call", {"name": "noargs", "input": {}}, sid)
    body = {"name": "noargs", "input": {}, "task_id": task_id_of(original)}
    deadline = time.monotonic() + 5
    while (raw := post_sse(client, "/mathlike/call", body, sid)[1]) != b"event: error\r\ndata: unknown task_id\r\n\r\n":
        assert raw.startswith(b"event: task_id"), raw
        assert time.monotonic() < deadline, "the call was never forgotten"
        time.sleep(0.1)


def test_a_call_keeps_running_when_its_client_disconnects_and_can_be_resumed(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    try:
        with open_call(client, sid, {"name": "wait", "input": {}}) as first:
            task_id = task_id_of(first.until(b"\r\n\r\n"))
        gate(tag).set()
        _, raw = post_sse(client, "/mathlike/call", {"name": "wait", "input": {}, "task_id": task_id}, sid)
        assert call_result(parse_sse(raw))["output"]["blocks"][0]["text"] == "waited"
        assert count(tag, "wait-start") == 1
    finally:
        gate(tag).set()


# Concurrency


def test_calls_of_one_tool_in_one_session_are_serialised(live: Live) -> None:
    tag = new_tag()
    sid = create(live.client, math_task(0, tag))
    results: list[dict] = []

    def sleep_call() -> None:
        with httpx.Client(base_url=live.url, timeout=10) as own:
            results.append(call_result(call(own, sid, "sleep", {"seconds": 0.1})))

    threads = [threading.Thread(target=sleep_call) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 3 and all(r["ok"] for r in results)
    assert [e for e in journal(tag) if e.startswith("sleep")] == ["sleep-start", "sleep-end"] * 3


def test_calls_into_different_sessions_run_concurrently(live: Live) -> None:
    tag = new_tag()
    sids = [create(live.client, math_task(0, tag)) for _ in range(2)]
    results: list[dict] = []

    def meet(sid: str) -> None:
        with httpx.Client(base_url=live.url, timeout=10) as own:
            results.extend(e.__dict__ for e in without_comments(call(own, sid, "rendezvous")) if e.name != "task_id")

    threads = [threading.Thread(target=meet, args=(sid,)) for sid in sids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert [r["name"] for r in results] == ["end", "end"], results
