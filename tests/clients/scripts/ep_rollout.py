"""Eval Protocol's real rollout client, with a scripted policy in place of an LLM, against our server.

`ep_rollout.py URL SCENARIO...` runs each scenario and reports `{scenario: summary}`; a scenario that
raises reports `{"error": traceback}` so the others still run. Scenarios:

- `frozen_lake`, `cliff_walking`, `blackjack`: one scripted row each, on `/{env}/mcp`;
- `concurrent`: 8 FrozenLake rows with distinct row ids (so distinct EP session ids), run at once;
- `repeat`: the same FrozenLake and Blackjack rows rolled out twice, one after the other.

EP's recipe (eval-protocol-mcp-gym.md §3.2): subclass `LLMBasePolicy`, answer `_make_llm_call` with an
OpenAI-shaped response. Per row summary: steps, total reward, termination reason, the user message
(the initial observation as EP rendered it), every step's control-plane record and tool observation.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import traceback
import uuid

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DISABLE_EP_SQLITE_LOG", "1")

import eval_protocol as ep  # noqa: E402
from _common import live_sessions, report  # noqa: E402
from eval_protocol.mcp.execution.base_policy import LLMBasePolicy  # noqa: E402
from eval_protocol.mcp.execution.manager import ExecutionManager  # noqa: E402
from eval_protocol.models import EvaluationRow, InputMetadata, Message  # noqa: E402

FROZEN_LAKE_SEED_42_WIN = ["DOWN", "DOWN", "RIGHT", "RIGHT", "DOWN", "RIGHT"]
CLIFF_WALK = ["RIGHT", "UP", *["RIGHT"] * 11, "DOWN"]  # into the cliff once, then around it: 14 steps, -113

GAMES = {
    "frozen_lake": {
        "tool": "lake_move",
        "context": {"game": "FrozenLake", "map_name": "4x4", "seed": 42},
        "system": "You play FrozenLake. Use the lake_move tool with actions LEFT, DOWN, RIGHT, UP.",
    },
    "cliff_walking": {
        "tool": "cliff_move",
        "context": {"game": "CliffWalking", "seed": 42},
        "system": "You play CliffWalking. Use the cliff_move tool with actions LEFT, DOWN, RIGHT, UP.",
    },
    "blackjack": {
        "tool": "blackjack_move",
        "context": {"game": "Blackjack", "natural": False, "sab": False, "seed": 42},
        "system": "You play Blackjack. Use the blackjack_move tool with actions STICK or HIT.",
    },
}


class ScriptedPolicy(LLMBasePolicy):
    """Plays a fixed list of actions, then answers with a plain message (finish reason `stop`)."""

    def __init__(self, tool: str, actions: list[str]):
        super().__init__(model_id="scripted", temperature=0.0, max_tokens=1)
        self.tool, self.actions, self.turns = tool, actions, {}

    def _convert_mcp_tools_to_llm_format(self, tools):
        return [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description") or "",
                    "parameters": t.get("input_schema") or {},
                },
            }
            for t in tools
        ]

    async def _make_llm_call(self, messages, tools):
        # One conversation history list per rollout, so its identity keys the rollout's script position.
        turn = self.turns.get(id(messages), 0)
        self.turns[id(messages)] = turn + 1
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if turn < len(self.actions):
            call = {
                "id": f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {"name": self.tool, "arguments": json.dumps({"action": self.actions[turn]})},
            }
            message = {"content": None, "tool_calls": [call]}
            return {"choices": [{"message": message, "finish_reason": "tool_calls"}], "usage": usage}
        return {"choices": [{"message": {"content": "done"}, "finish_reason": "stop"}], "usage": usage}


def make_row(game: str, row_id: str) -> EvaluationRow:
    spec = GAMES[game]
    return EvaluationRow(
        messages=[Message(role="system", content=spec["system"])],
        input_metadata=InputMetadata(
            row_id=row_id,
            dataset_info={"environment_context": dict(spec["context"]), "user_prompt_template": "{observation}"},
        ),
    )


def _literal(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError):
        return None


def _json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def summarize(row: EvaluationRow) -> dict:
    user = next((m.content for m in row.messages if m.role == "user"), None)
    steps = [m for m in row.messages if m.control_plane_step]
    status_reason = row.rollout_status.get_termination_reason() if row.rollout_status else None
    return {
        "row_id": row.input_metadata.row_id,
        "steps": row.get_steps(),
        "total_reward": row.get_total_reward(),
        "termination_reason": getattr(status_reason, "value", status_reason),
        "rollout_status_code": row.rollout_status.code if row.rollout_status else None,
        "initial_text": user,
        "initial_observation": _literal(user),
        "step_rewards": [m.control_plane_step.get("reward") for m in steps],
        "step_terminated": [m.control_plane_step.get("terminated") for m in steps],
        "step_sources": [m.control_plane_step.get("info") for m in steps],
        "observations": [_json(m.content) for m in steps],
    }


URL_TEMPLATE = "{base}/{game}/mcp"


async def rollout(url_template: str, game: str, row_ids: list[str], actions: list[str]) -> list[dict]:
    rows = [make_row(game, row_id) for row_id in row_ids]
    policy = ScriptedPolicy(GAMES[game]["tool"], actions)
    url = url_template.format(game=game)
    envs = ep.make(url, evaluation_rows=rows, model_id=policy.model_id)
    tasks = ExecutionManager().execute_rollouts(
        envs, policy, semaphore=asyncio.Semaphore(8), steps=30, evaluation_rows=rows
    )
    return [summarize(row) for row in await asyncio.gather(*tasks)]


async def scenario(url_template: str, name: str) -> dict | list:
    if name == "frozen_lake":
        return (await rollout(url_template, "frozen_lake", ["fl_001"], FROZEN_LAKE_SEED_42_WIN))[0]
    if name == "cliff_walking":
        return (await rollout(url_template, "cliff_walking", ["cw_001"], CLIFF_WALK))[0]
    if name == "blackjack":
        return (await rollout(url_template, "blackjack", ["bj_001"], ["STICK"]))[0]
    if name == "concurrent":
        return await rollout(
            url_template, "frozen_lake", [f"fl_concurrent_{i}" for i in range(8)], FROZEN_LAKE_SEED_42_WIN
        )
    if name == "repeat":
        return {
            "frozen_lake": [
                (await rollout(url_template, "frozen_lake", ["fl_repeat"], FROZEN_LAKE_SEED_42_WIN))[0]
                for _ in range(2)
            ],
            "blackjack": [(await rollout(url_template, "blackjack", ["bj_repeat"], ["STICK"]))[0] for _ in range(2)],
        }
    raise ValueError(f"unknown scenario {name!r}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--url-template", default=URL_TEMPLATE, help="the MCP URL, from {base} and {game}")
    args = parser.parse_args()
    url_template = args.url_template.replace("{base}", args.base_url)
    result = {}
    for name in args.scenarios:
        try:
            result[name] = await asyncio.wait_for(scenario(url_template, name), timeout=120)
        except Exception:  # report it and go on with the other scenarios
            result[name] = {"error": traceback.format_exc()}
    result["live_sessions_after"] = await settled_live_sessions(args.base_url)
    report(result)


async def settled_live_sessions(base_url: str, within: float = 5.0) -> int | None:
    """The server's live session count once it reaches 0, or as it stands after `within` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        count = await asyncio.to_thread(live_sessions, base_url)
        if not count or asyncio.get_running_loop().time() > deadline:
            return count
        await asyncio.sleep(0.1)


if __name__ == "__main__":
    asyncio.run(main())
