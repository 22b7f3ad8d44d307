"""Play `contract` and `turns` (tests/hosts/contract.py, tests/clients/contract_envs.py) with the official
`openreward` client, and calls over raw HTTP beside it: `openreward_contract.py URL`: a task's own tool, a
conversation, a terminal tool, group scoring and the version; calls that take turns (serialised per tool, concurrent,
exclusive; a call queued behind a finishing one refused).

Prints one line `ORS-CLIENT-RESULT <json>`. Runs in the openreward venv.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

import requests  # noqa: E402
from openreward import OpenReward  # noqa: E402
from openreward.api.environments.types import GroupCandidate, Message, TextBlock, ToolCallBlock  # noqa: E402


def _call(session, tool, arguments):
    try:
        out = session.call_tool(tool, arguments)
    except Exception as exc:
        return {"error": {"type": type(exc).__name__, "reason": getattr(exc, "reason", None)}}
    return {"reward": out.reward, "finished": out.finished, "text": [b.text for b in out.blocks]}


def _said(text: str) -> list[Message]:
    return [
        Message(role="user", blocks=[TextBlock(text="What is 2 + 2?")]),
        Message(role="assistant", blocks=[TextBlock(text=text)]),
    ]


def _start(base_url: str, sid: str, tool: str, arguments: dict):
    """Start a call over raw HTTP, as a client without the SDK does (with the SDK's `X-Deployment` header), and read
    its stream up to the `task_id` event: from then on the server holds the call (running, or queued)."""
    response = requests.post(
        f"{base_url}/turns/call",
        headers={"X-Session-ID": sid, "X-Deployment": "turns", "Accept": "text/event-stream"},
        json={"name": tool, "input": arguments},
        stream=True,
        timeout=120,
    )
    assert response.status_code == 200, (response.status_code, response.text)
    lines = response.iter_lines(decode_unicode=True)
    for line in lines:
        if line.startswith("event:") and line.split(":", 1)[1].strip() == "task_id":
            break
    return lines


def _result(lines) -> dict:
    """The rest of a raw call's stream: what it ended with."""
    event, data = None, ""
    for line in lines:
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and event in ("chunk", "end"):
            data += line[5:].removeprefix(" ")
            if event == "end":
                break
    answer = json.loads(data)
    if not answer["ok"]:
        return {"error": {"reason": answer.get("reason")}}
    output = answer["output"]
    return {"reward": output["reward"], "finished": output["finished"], "text": [b["text"] for b in output["blocks"]]}


def _turns(client, base_url: str) -> dict:
    seen: dict = {}
    env = client.environments.get(name="turns", variant="turns", base_url=base_url)
    [task] = env.list_tasks("train")
    with env.session(task=task) as session:
        first = _start(base_url, session.sid, "hold", {"finish": True})
        second = _start(base_url, session.sid, "hold", {})  # queued behind the first: one tool, in order
        seen["peek"] = _call(session, "peek", {})  # concurrent: runs alongside the holds
        seen["other"] = _call(session, "other", {})  # another tool: runs alongside them
        seen["open"] = _call(session, "open", {})
        seen["first"], seen["second"] = _result(first), _result(second)  # the first finished the episode
        seen["after"] = _call(session, "other", {})
    with env.session(task=task) as session:
        held = _start(base_url, session.sid, "hold", {"seconds": 2.0})
        graded = _start(base_url, session.sid, "grade", {})  # exclusive: waits for the hold
        peeked = _start(base_url, session.sid, "peek", {})  # held behind the exclusive call, which finishes
        seen["held"], seen["graded"], seen["peeked"] = _result(held), _result(graded), _result(peeked)
    return seen


def main() -> None:
    base_url = sys.argv[1]
    seen: dict = {}
    with OpenReward(api_key="local") as client:
        env = client.environments.get(name="contract", base_url=base_url)
        seen["tools"] = sorted(t.name for t in env.list_tools())
        terminal = env.terminal_tool()
        seen["terminal_tool"] = None if terminal is None else dataclasses.asdict(terminal)
        seen["supports_score_group"] = env.supports_score_group()
        hinted, plain = env.list_tasks("train")
        with env.session(task=hinted) as session:
            seen["version_keys"] = sorted(session.version())
            seen["hinted_tools"] = sorted(t.name for t in session.list_tools())
            seen["messages"] = [{"role": m.role, "text": [b.text for b in m.blocks]} for m in session.get_messages()]
            seen["openai_messages"] = session.get_messages(format="openai")
            seen["hint"] = _call(session, "hint", {})
            seen["add"] = _call(session, "add", {"a": 2, "b": 5})
            scores = session.score_group(
                [
                    _said("4"),
                    GroupCandidate(messages=_said("5"), metadata={"rollout": 7}),
                    [
                        Message(role="user", blocks=[TextBlock(text="What is 2 + 2?")]),
                        Message(
                            role="assistant",
                            blocks=[ToolCallBlock(id="c1", name="add", input={"a": 2, "b": 2}), TextBlock(text="4")],
                        ),
                    ],
                ]
            )
            seen["scores"] = [dataclasses.asdict(score) for score in scores]
            seen["after_scoring"] = _call(session, "add", {"a": 1, "b": 1})  # scoring ended nothing
            seen["is_final"] = session.is_assistant_message_final()
            out = session.call_terminal_tool("4")
            seen["terminal"] = {"reward": out.reward, "finished": out.finished}
            seen["after_terminal"] = _call(session, "add", {"a": 1, "b": 1})
        with env.session(task=plain) as session:
            seen["plain_tools"] = sorted(t.name for t in session.list_tools())
            seen["plain_prompt"] = [b.text for b in session.get_prompt()]
        seen["turns"] = _turns(client, base_url)
    print("ORS-CLIENT-RESULT " + json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
