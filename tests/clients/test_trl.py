"""TRL 1.16's own ORS integration (`trl.experimental.openreward`, over the `openreward` client), installed from PyPI
in a venv of its own (CPU torch, no model: scripted actions), against our server: `OpenRewardSpec`'s dataset, tool
discovery (a task's own tools through `/task_tools`), `environment_factory`, `reset` by index and by task spec,
the bound tool methods and `reward_funcs`, on `math`, `frozen_lake`, `shell` and a hosted `openreward` environment
whose first task adds a `hint` tool; through one process, and `math` and the hosted one through `--workers 2` (a
task's own tools found in a probe session, used in the rollouts' sessions, placed on either worker). One TRL
process plays every server: its import (torch, transformers) is the slowest of the suite.

TRL passes no variant: the SDK uses bare paths, at the hosts `OPENREWARD_API_URL` and `OPENREWARD_SESSION_URL`
name, and reaches each server's first environment. TRL puts `env_name` in `/create` only when it resets with a task
spec, and then the name it was given (`OpenRewardSpec(env_name=...)`, "env" without one): the script passes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.clients.harness import server_command
from tests.hosts.test_openreward import _process

pytestmark = pytest.mark.clients

ENVIRONMENTS = {
    "math": "math",
    "frozen_lake": "frozen_lake",
    "shell": "shell",
    "contract": "openreward:contract:Contract",
}


MODES = {
    "one-process": ((), tuple(ENVIRONMENTS)),
    "two-workers": (("--workers", "2"), ("math", "contract")),
}
"""Each mode's `serve` arguments and the environments played through it (each on a server of its own)."""


@pytest.mark.timeout(1200)  # TRL imports torch and transformers: tens of seconds on a loaded machine
def test_trl_plays_every_environment_through_its_own_env_code_in_one_process_and_through_two_workers(
    trl_python: Path, openreward_python: Path, run_client: Callable[..., dict], tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(6) as starting:
        # Every server started together (the hosted ones import openreward: seconds each), and one TRL process
        # (torch and transformers: the slowest import of the suite) plays them all, labelled MODE/KIND.
        started = {}
        for mode, (args, kinds) in MODES.items():
            for kind in kinds:
                spec = ENVIRONMENTS[kind]
                if kind == "contract":
                    spec = f"{spec}@{openreward_python}"
                # Started in tests/hosts (the hosted environment's module), with the hosts' start timeout.
                argv = [*server_command(), "serve", "--port", "{port}", "--env", spec, *args]
                server = _process(argv, tmp_path / mode / kind, "ours")
                started[f"{mode}/{kind}"] = starting.submit(stack.enter_context, server)
        targets = [f"{label}={future.result().url}" for label, future in started.items()]
        played = run_client(
            trl_python, "trl_openreward.py", *targets, env={"TRL_EXPERIMENTAL_SILENCE": "1"}, timeout=600
        )

    for mode, (_, kinds) in MODES.items():
        seen = {kind: played[f"{mode}/{kind}"] for kind in kinds}
        if "frozen_lake" in seen:
            lake = seen["frozen_lake"]
            assert lake["tools"] == ["lake_move"] and lake["finished"] is True and lake["reward"] == [1.0]
            assert lake["bad_action"].startswith("Error: input_validation")
            shell = seen["shell"]
            assert shell["tools"] == ["bash", "submit"] and shell["bash"].endswith("stdout:\nhi")
            assert shell["reward"] == [1.0]

        math = seen["math"]
        assert math["tools"] == ["submit"] and math["rows"] == 2, mode
        assert {"prompt", "task_index", "question", "answer"} <= set(math["columns"])
        assert (math["right"], math["reward_right"]) == ("Correct!", [1.0]), mode
        assert (math["wrong"], math["reward_wrong"]) == ("Wrong", [0.0]), mode  # a task spec of its own, by reset
        assert math["after_finish"].startswith("Error: episode_finished")
        assert math["untouched_reward"] == [None]

        contract = seen["contract"]
        assert contract["tools"] == ["add", "hint", "submit"], mode  # task 0's hint, found by TRL's /task_tools probe
        assert contract["hint"] == "an even number" and contract["reward"] == [1.0]
        assert contract["no_hint"].startswith("Error: not_found")  # task 1 has no hint
