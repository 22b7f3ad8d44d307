"""ORS as `openreward` 0.1.157-0.1.167 serves it, over real HTTP: `/tools` and `/task_tools` with `terminal_tool`,
`supports_score_group` and `message_block_types`; a task's own tools; `/messages`; `/score_group` (SSE like
`/call`, resumable by `task_id`, 404 before the stream where unsupported, never a step); toolsets refused with a
4xx that names them. The `openreward` client's view of the same is tests/hosts/test_openreward_contract.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from ors_server.environments.math import Math
from tests.clients.contract_envs import Contract
from tests.ors_envs import (
    MathLike,
    call,
    call_result,
    create,
    live_server,
    math_task,
    parse_sse,
    post_sse,
    sid_header,
    without_comments,
)

HINTED = {"question": "2 + 2", "answer": "4", "hint": "an even number"}
PLAIN = {"question": "3 + 4", "answer": "7"}


@pytest.fixture(scope="module")
def live() -> Iterator[Any]:
    with live_server([Contract, MathLike, Math], call_linger=5.0) as server:
        yield server


def said(text: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "blocks": [{"type": "text", "text": "What is 2 + 2?"}]},
            {"role": "assistant", "blocks": [{"type": "text", "text": text}]},
        ]
    }


def scores(raw: bytes) -> tuple[str, dict[str, Any]]:
    """The task id and the JSON answer of a complete `/score_group` stream."""
    result = call_result(parse_sse(raw))
    return parse_sse(raw)[0].data, result


def test_tools_report_the_terminal_tool_group_scoring_and_message_blocks(client) -> None:
    listed = client.get("/contract/tools").json()
    assert [t["name"] for t in listed["tools"]] == ["add", "submit"]  # the task's own `hint` is not shared
    assert listed["terminal_tool"] == {
        "name": "submit",
        "arg": "answer",
        "description": "Your final answer; ends the episode.",
    }
    assert listed["supports_score_group"] is True
    assert listed["message_block_types"] == ["text", "image", "reasoning", "tool_call", "tool_result"]
    plain = client.get("/mathlike/tools").json()
    assert (plain["terminal_tool"], plain["supports_score_group"]) == (None, False)


def test_a_tasks_own_tool_is_listed_and_callable_in_its_session_only(client) -> None:
    hinted = create(client, HINTED, env_name="contract")
    plain = create(client, PLAIN, env_name="contract")
    tools = client.get("/contract/task_tools", headers=sid_header(hinted)).json()["tools"]
    assert [t["name"] for t in tools] == ["add", "submit", "hint"]
    assert [t["name"] for t in client.get("/contract/task_tools", headers=sid_header(plain)).json()["tools"]] == [
        "add",
        "submit",
    ]
    answer = call_result(call(client, hinted, "hint", path="/contract/call"))
    assert answer["output"]["blocks"][0]["text"] == "an even number"
    refused = call_result(call(client, plain, "hint", path="/contract/call"))
    assert (refused["ok"], refused["reason"]) == (False, "not_found")


def test_messages_are_the_environments_conversation_or_the_prompt_as_one_user_turn(client) -> None:
    sid = create(client, HINTED, env_name="contract")
    assert client.get("/contract/messages", headers=sid_header(sid)).json() == [
        {
            "role": "system",
            "blocks": [{"type": "text", "text": "Answer with a number.", "detail": None}],
            "detail": None,
        },
        {"role": "user", "blocks": [{"type": "text", "text": "What is 2 + 2?", "detail": None}], "detail": None},
    ]
    other = create(client, math_task(), env_name="mathlike")
    [turn] = client.get("/mathlike/messages", headers=sid_header(other)).json()
    assert turn["role"] == "user"
    assert turn["blocks"] == client.get("/mathlike/prompt", headers=sid_header(other)).json()


def test_score_group_answers_one_score_per_candidate_and_ends_nothing(client) -> None:
    sid = create(client, HINTED, env_name="contract")
    body = {"candidates": [said("4"), {**said("5"), "metadata": {"rollout": 3}}]}
    response, raw = post_sse(client, "/contract/score_group", body, sid)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    task_id, answer = scores(raw)
    assert answer == {
        "scores": [{"reward": 1.0, "metadata": {"said": "4"}}, {"reward": 0.0, "metadata": {"said": "5"}}]
    }
    # Resumed by its id: the same answer, not a second run; an unknown id is an `error` event.
    _, again = post_sse(client, "/contract/score_group", {"candidates": [], "task_id": task_id}, sid)
    assert scores(again) == (task_id, answer)
    _, unknown = post_sse(client, "/contract/score_group", {"candidates": [], "task_id": "nope"}, sid)
    assert [(e.name, e.data) for e in parse_sse(unknown)] == [("error", "unknown task_id")]
    # Scoring took no step and ended nothing: the episode goes on, and is won by its own submit.
    assert (
        call_result(call(client, sid, "add", {"a": 1, "b": 2}, path="/contract/call"))["output"]["blocks"][0]["text"]
        == "3"
    )
    won = call_result(call(client, sid, "submit", {"answer": "4"}, path="/contract/call"))["output"]
    assert (won["reward"], won["finished"]) == (1.0, True)


def test_score_group_is_404_before_the_stream_where_the_environment_does_not_score(client) -> None:
    sid = create(client, math_task(), env_name="mathlike")
    response, raw = post_sse(client, "/mathlike/score_group", {"candidates": [said("4")]}, sid)
    assert response.status_code == 404
    assert json.loads(raw) == {"detail": "'mathlike' does not implement score_group"}


def test_a_candidate_that_breaks_the_message_rules_is_a_422(client) -> None:
    sid = create(client, HINTED, env_name="contract")
    tool_call_in_a_user_turn = {
        "messages": [{"role": "user", "blocks": [{"type": "tool_call", "id": "c", "name": "add", "input": {}}]}]
    }
    response, raw = post_sse(client, "/contract/score_group", {"candidates": [tool_call_in_a_user_turn]}, sid)
    assert response.status_code == 422, raw


def test_math_scores_each_candidates_final_answer_as_submit_judges_it(client) -> None:
    task = Math.list_tasks("train")[0]
    sid = create(client, task, env_name="math")
    by_call = {
        "messages": [
            {
                "role": "assistant",
                "blocks": [{"type": "tool_call", "id": "c1", "name": "submit", "input": {"answer": task["answer"]}}],
            }
        ]
    }
    body = {"candidates": [said(str(task["answer"])), said("definitely not it"), by_call]}
    _, answer = scores(post_sse(client, "/math/score_group", body, sid)[1])
    assert [s["reward"] for s in answer["scores"]] == [1.0, 0.0, 1.0]
    listed = client.get("/math/tools").json()
    assert listed["terminal_tool"]["name"] == "submit" and listed["supports_score_group"] is True


@pytest.mark.parametrize(
    ("env_name", "toolset", "says"),
    [
        ("contract", "vim", "unknown toolset 'vim'; toolsets: ["),
    ],
)
def test_a_toolset_the_session_cannot_have_is_a_400_naming_the_toolsets(client, env_name, toolset, says) -> None:
    response = client.post(
        "/create",
        json={"env_name": env_name, "task_spec": HINTED, "toolset_name": toolset},
        headers=sid_header(f"toolset-{toolset}"),
    )
    assert response.status_code == 400
    assert says in response.json()["detail"]


def test_events_of_a_scoring_stream_are_task_id_then_end(client) -> None:
    sid = create(client, HINTED, env_name="contract")
    _, raw = post_sse(client, "/contract/score_group", {"candidates": [said("4")]}, sid)
    assert [e.name for e in without_comments(parse_sse(raw))] == ["task_id", "end"]
