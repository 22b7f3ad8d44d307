"""The ORS call path formats its SSE bytes directly (`result_bytes`, `sse.event_bytes`): they must be the bytes the
event objects encode to, which the official clients parse, for every kind of result and awkward text."""

import json
import random
import string

from ors_server.calls import ToolCrashed, ToolRejected
from ors_server.faces import sse
from ors_server.faces.ors import render_result, result_bytes
from ors_server.types import TextBlock, ToolOutput

AWKWARD = string.printable + "é\u2028\u2029\x85\x0b\x1c\x1d\x1e\x0c  "


def texts(count: int) -> list[str]:
    rng = random.Random(37)
    # Some longer than a chunk (4096 characters), so results are cut into several `chunk` events.
    return [
        "".join(rng.choice(AWKWARD) for _ in range(rng.randint(0, 9000 if i % 40 == 0 else 80))) for i in range(count)
    ]


def test_direct_result_bytes_equal_the_encoded_events_for_every_kind_of_result():
    for text in texts(400):
        results = [
            ToolOutput(blocks=[TextBlock(text=text)], reward=0.5, finished=True),
            ToolRejected("input_validation", text),
            ToolRejected("session_busy", text),  # not an ORS reason: sent with reason null
            ToolCrashed(text),
        ]
        for result in results:
            assert result_bytes(result) == b"".join(event.encode() for event in render_result(result))
        # An output is serialised by pydantic (`output_json`): the value the event objects carried before.
        assert _result_value(result_bytes(results[0])) == {"ok": True, "output": results[0].model_dump(mode="json")}


def _result_value(stream: bytes) -> object:
    """The JSON value of a result's `chunk`* `end` events, as the clients join their data lines."""
    lines = stream.decode().split(sse.SEP)
    data = "".join(line.removeprefix("data: ") for line in lines if line.startswith("data: "))
    assert not any(char in data for char in "\u2028\u2029\x85")
    return json.loads(data)


def test_direct_event_bytes_equal_the_encoded_event_with_line_breaks_joined():
    for text in texts(400):
        assert sse.event_bytes("task_id", text) == sse.event("task_id", text).encode()
