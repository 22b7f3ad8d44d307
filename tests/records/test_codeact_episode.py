"""A CodeAct episode recorded as the model saw it: FrozenLake played in two `execute_code` steps of three moves each.

The model made two calls; its code made six. The record lists all eight, each with its `id`, the six naming their
step; it counts two steps and the reward of the steps; the `evaluation_row` export has exactly the model's two
calls (validated by Eval Protocol's `EvaluationRow` in its own venv), with the code's calls in each tool message's
`control_plane_step`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ors_server.codeact import bwrap_problem
from ors_server.environments.frozen_lake import FrozenLake
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.records.helpers import ended, eval_protocol_reads
from tests.serving import serve

SANDBOX = "bwrap" if bwrap_problem() is None else "none"
SEED = 0  # map SFFF / HHFF / FHHF / HFFG: three moves right, then three down reach the goal
STEPS = [
    "for move in ['RIGHT'] * 3:\n    print(lake_move(action=move))",
    "for move in ['DOWN'] * 3:\n    print(lake_move(action=move))",
]
SESSION = "codeact-lake"

VALIDATE = """
import json, sys
from eval_protocol.models import EvaluationRow
row = EvaluationRow.model_validate(json.loads(open(sys.argv[1]).read()))
print("ORS-RESULT " + json.dumps({
    "tools": [c.function.name for m in row.messages for c in (m.tool_calls or [])],
    "roles": [m.role for m in row.messages],
    "steps": row.get_steps(), "total_reward": row.get_total_reward(), "terminated": row.get_terminated(),
    "inner": [len((m.control_plane_step or {}).get("inner_calls", [])) for m in row.messages if m.role == "tool"],
    "score": row.evaluation_result.score,
}))
"""


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """The server's URL and the record of the episode, ended."""
    records = tmp_path_factory.mktemp("codeact-records") / "episodes.db"
    settings = Settings(records=str(records), codeact=True, codeact_sandbox=SANDBOX, codeact_timeout=10)
    with serve(create_app([FrozenLake], settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        headers = {"X-Session-ID": SESSION}
        created = client.post("/create", headers=headers, json={"env_name": "frozen_lake", "task_spec": {"seed": SEED}})
        assert created.status_code == 200, created.text
        for code in STEPS:
            answer = client.post(
                "/frozen_lake/call", headers=headers, json={"name": "execute_code", "input": {"code": code}}
            )
            assert answer.status_code == 200 and '"ok": true' in answer.text.replace('"ok":true', '"ok": true')
        client.post("/delete", headers=headers)
        yield url, ended(client, SESSION)


def test_the_record_counts_the_models_two_steps_and_links_each_move_to_its_step(
    played: tuple[str, dict[str, Any]],
) -> None:
    _, record = played
    calls = record["calls"]
    assert [c["tool"] for c in calls] == ["lake_move"] * 3 + ["execute_code"] + ["lake_move"] * 3 + ["execute_code"]
    assert all(isinstance(c["id"], str) and c["id"] for c in calls) and len({c["id"] for c in calls}) == 8
    first, second = calls[3], calls[7]
    assert [c["step"] for c in calls[:3]] == [first["id"]] * 3 and [c["step"] for c in calls[4:7]] == [second["id"]] * 3
    assert "step" not in first and "step" not in second
    assert [c["arguments"]["action"] for c in calls if c["tool"] == "lake_move"] == ["RIGHT"] * 3 + ["DOWN"] * 3
    assert record["steps"] == 2
    assert record["reward"] == 1.0 and record["finished"] is True
    assert first["output"]["reward"] == 0.0 and second["output"]["reward"] == 1.0


@pytest.mark.clients
def test_the_evaluation_row_holds_only_the_models_calls_and_validates_as_eval_protocols(
    played: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, _ = played
    rows = httpx.get(url + "/episodes/export", params={"format": "evaluation_row"}, timeout=30).text.splitlines()
    assert len(rows) == 1
    row = json.loads(rows[0])
    model_calls = [c for m in row["messages"] for c in m.get("tool_calls") or []]
    assert [c["function"]["name"] for c in model_calls] == ["execute_code", "execute_code"]
    assert [json.loads(c["function"]["arguments"])["code"] for c in model_calls] == STEPS
    assert row["execution_metadata"]["tool_call_count"] == 2
    inner = row["messages"][2]["control_plane_step"]["inner_calls"]
    assert [c["arguments"] for c in inner] == [{"action": "RIGHT"}] * 3

    assert eval_protocol_reads(VALIDATE, rows[0], tmp_path) == {
        "tools": ["execute_code", "execute_code"],
        "roles": ["user", "assistant", "tool", "assistant", "tool"],
        "steps": 2,
        "total_reward": 1.0,
        "terminated": True,
        "inner": [3, 3],
        "score": 1.0,
    }
