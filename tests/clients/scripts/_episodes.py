"""One script body for both ORS clients: `openreward`'s and `ors-sdk`'s sync APIs have the same shape.

`env` is the client's sync `Environment`. Every step records what the client returned, and the
status `POST /ping` answers for the session's id once the client's context manager has exited.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from _common import live_sessions, ping_status


def _blocks(blocks: list[Any]) -> list[dict]:
    return [dataclasses.asdict(block) for block in blocks]


def _error(exc: Exception) -> dict:
    return {"type": type(exc).__name__, "reason": getattr(exc, "reason", None), "message": str(exc)}


def _call(session: Any, tool: str, arguments: dict) -> dict:
    try:
        out = session.call_tool(tool, arguments)
    except Exception as exc:  # the client's typed errors are what we observe
        return {"error": _error(exc)}
    return {"reward": out.reward, "finished": out.finished, "blocks": _blocks(out.blocks), "metadata": out.metadata}


def wrong(answer: str) -> str:
    return f"{answer}1"


def run(env: Any, base_url: str, answer_key: str) -> dict:
    result: dict[str, Any] = {}
    result["splits"] = env.list_splits()
    result["tools"] = [dataclasses.asdict(tool) for tool in env.list_tools()]
    result["num_tasks"] = env.num_tasks("train")
    tasks = env.list_tasks("train")
    result["tasks"] = {
        "count": len(tasks),
        "environment_names": sorted({task.environment_name for task in tasks}),
        "first": tasks[0].task_spec,
    }
    first = tasks[0]
    second = env.get_task("train", 1)
    result["task_1"] = {"environment_name": second.environment_name, "task_spec": second.task_spec}

    # A correct answer to a task given as a spec, then a call after the episode finished.
    with env.session(task=first) as session:
        sid = session.sid
        prompt = session.get_prompt()
        tools = session.list_tools()
        correct = _call(session, "submit", {"answer": str(first.task_spec[answer_key])})
        after_finish = _call(session, "submit", {"answer": str(first.task_spec[answer_key])})
        live_during = live_sessions(base_url)
    result["by_task"] = {
        "sid": sid,
        "prompt": _blocks(prompt),
        "tools": [tool.name for tool in tools],
        "correct": correct,
        "after_finish": after_finish,
        "live_sessions_during": live_during,
        "ping_after_exit": ping_status(base_url, sid),
    }

    # A wrong answer to a task named by split and index.
    with env.session(split="train", index=1) as session:
        sid = session.sid
        prompt = session.get_prompt()
        wrong_answer = _call(session, "submit", {"answer": wrong(str(second.task_spec[answer_key]))})
    result["by_index"] = {
        "sid": sid,
        "prompt": _blocks(prompt),
        "wrong": wrong_answer,
        "ping_after_exit": ping_status(base_url, sid),
    }

    # Client mistakes cost neither the session nor the episode.
    with env.session(task=first) as session:
        sid = session.sid
        unknown_tool = _call(session, "no_such_tool", {})
        bad_input = _call(session, "submit", {"answer": [42]})  # math takes a number or a string, not a list
        missing_input = _call(session, "submit", {})
        still_correct = _call(session, "submit", {"answer": str(first.task_spec[answer_key])})
    result["mistakes"] = {
        "sid": sid,
        "unknown_tool": unknown_tool,
        "bad_input": bad_input,
        "missing_input": missing_input,
        "then_correct": still_correct,
        "ping_after_exit": ping_status(base_url, sid),
    }
    result["live_sessions_after"] = live_sessions(base_url)
    return result
