"""TRL 1.16's own ORS integration (`trl.experimental.openreward`) against servers:
`trl_openreward.py [GROUP/]KIND=URL ...` (GROUP tells apart servers of one KIND, e.g. one process and two workers:
one TRL import plays them all).

What a GRPO run does with it, without a model: `OpenRewardSpec(URL)` builds the dataset and discovers the tools
(per-task ones through a probe session's `/task_tools`), `environment_factory()` makes the rollout environment,
whose `reset()` opens a session and whose bound tool methods call it; `reward_funcs` reads the episode's reward.
KIND picks the scripted actions and names the environment (`OpenRewardSpec(env_name=KIND)`, which TRL puts in
`/create` when it resets with a task spec; without it TRL sends "env"): math, frozen_lake, shell or contract (a
hosted openreward environment whose first task adds a `hint` tool). TRL passes no variant: the SDK reaches the
server's environment at its bare paths, on the hosts `OPENREWARD_API_URL` and `OPENREWARD_SESSION_URL` name.

Prints one line `ORS-CLIENT-RESULT <json>`, what each `[GROUP/]KIND` saw. Runs in the trl venv.
"""

from __future__ import annotations

import inspect
import json
import os
import sys

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from _common import lake_route  # noqa: E402
from trl.experimental.openreward import OpenRewardSpec  # noqa: E402


def _tools(env) -> list[str]:
    """The tool methods TRL's trainer would collect (public callables other than reset)."""
    return sorted(
        name
        for name, member in inspect.getmembers(type(env), inspect.isfunction)
        if not name.startswith("_") and name != "reset"
    )


def play_math(url: str) -> dict:
    spec = OpenRewardSpec(url, num_tasks=2, env_name=ENV_NAME)
    rows = spec.train_dataset
    env = spec.environment_factory()
    seen = {"rows": len(rows), "columns": sorted(rows.column_names), "tools": _tools(env)}
    seen["prompt"] = env.reset(task_index=0)
    seen["right"] = env.submit(answer=str(rows[0]["answer"]))
    seen["reward_right"] = spec.reward_funcs([env])
    env.reset(task_spec={"question": "What is 6 * 7?", "answer": "42"})
    seen["wrong"] = env.submit(answer="41")
    seen["after_finish"] = env.submit(answer="42")
    seen["rewards_wrong"] = env.rewards
    seen["reward_wrong"] = spec.reward_funcs([env])
    env.reset(task_index=1)
    seen["untouched_reward"] = spec.reward_funcs([env])
    env._close()
    return seen


def play_frozen_lake(url: str) -> dict:
    spec = OpenRewardSpec(url, indices=[0], env_name=ENV_NAME)
    env = spec.environment_factory()
    seen = {"tools": _tools(env)}
    prompt = env.reset(task_index=0)
    grid = json.loads(prompt.split("Initial observation:\n", 1)[1])["grid"].split("\n")
    seen["moves"] = [env.lake_move(action=move) for move in lake_route(grid)]
    seen["finished"] = env.finished
    seen["reward"] = spec.reward_funcs([env])
    seen["bad_action"] = env.reset(task_index=0) and env.lake_move(action="SIDEWAYS")
    env._close()
    return seen


def play_shell(url: str) -> dict:
    spec = OpenRewardSpec(url, indices=[0], env_name=ENV_NAME)
    env = spec.environment_factory()
    seen = {"tools": _tools(env), "prompt": env.reset(task_index=0)}  # hello_file
    seen["bash"] = env.bash(command="printf hi > hello.txt && cat hello.txt")
    seen["submit"] = env.submit()
    seen["reward"] = spec.reward_funcs([env])
    env._close()
    return seen


def play_contract(url: str) -> dict:
    spec = OpenRewardSpec(url, indices=[0, 1], env_name=ENV_NAME)  # tools discovered in both tasks' sessions, merged
    env = spec.environment_factory()
    seen = {"tools": _tools(env)}
    env.reset(task_index=0)
    seen["hint"] = env.hint()
    seen["submit"] = env.submit(answer="4")
    seen["reward"] = spec.reward_funcs([env])
    env.reset(task_index=1)  # a task without a hint
    seen["no_hint"] = env.hint()
    env._close()
    return seen


ENV_NAME: str | None = None
"""`OpenRewardSpec(env_name=...)`: what TRL puts in `/create` when it resets with a task spec (else "env")."""
PLAYS = {"math": play_math, "frozen_lake": play_frozen_lake, "shell": play_shell, "contract": play_contract}


def main() -> None:
    global ENV_NAME
    seen = {}
    for arg in sys.argv[1:]:  # [GROUP/]KIND=URL, each environment on a server of its own
        label, url = arg.split("=", 1)
        kind = label.rsplit("/", 1)[-1]
        ENV_NAME = kind
        os.environ["OPENREWARD_API_URL"] = os.environ["OPENREWARD_SESSION_URL"] = url
        seen[label] = PLAYS[kind](url)
    print("ORS-CLIENT-RESULT " + json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
