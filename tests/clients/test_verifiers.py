"""verifiers 0.4's OpenEnv taskset, installed from PyPI (`verifiers[openenv]`, which brings openenv-core 0.4), plays
`/openenv/frozen_lake` through one process and through `--workers 2`: its own episode loop (`OpenEnvEnv.run`) with a
scripted agent in place of a model (scripts/verifiers_openenv.py). Its actions carry no `type`
(`{"tool_name": "lake_move", "arguments": {...}}`), which OpenEnv's own server reads as `call_tool`, and ours too."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.clients.harness import server_command
from tests.hosts.test_openreward import _process

pytestmark = pytest.mark.clients


@pytest.mark.timeout(900)  # verifiers imports ~190 packages: over a minute on a loaded machine
def test_verifiers_openenv_taskset_walks_frozen_lake_to_its_goal(
    verifiers_python: Path, run_client: Callable[..., dict], tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        urls = []
        for args in ((), ("--workers", "2")):
            argv = [*server_command(), "serve", "--port", "{port}", "--env", "frozen_lake", *args]
            # With the hosts' start timeout: two workers take a while to start on a loaded machine.
            server = stack.enter_context(_process(argv, tmp_path / f"server{len(urls)}", "ours"))
            urls.append(f"{server.url}/openenv/frozen_lake")
        results = run_client(verifiers_python, "verifiers_openenv.py", *urls, timeout=600)

    for seen in results:
        assert seen["rewards"] == {"openenv_reward": 1.0}, seen  # the goal reached, step rewards summed
        assert seen["stopped"] is None
        assert seen["first_observation"]["grid"] == "xFFF\nHHFF\nFHHF\nHFFG"
        assert seen["errors"] == [None] * (len(seen["replies"]) - 1)  # each step a move, none invalid_args
