"""`openreward` 0.1.157-0.1.167's contract, as its own client uses it, on `openreward`'s own `Server` and on ours,
side by side: a task's own tool (`/task_tools`, and the call), a conversation (`/messages`), a `@terminal` tool
(`terminal_tool` in `/tools`, `call_terminal_tool`), group scoring (`/score_group`, which ends nothing) and
`/version`. Ours plays the same environment hosted (`openreward:contract:Contract`, tests/hosts/contract.py) and
written against ors_server's API (tests/clients/contract_envs.py), in process and in host processes (`isolated:`).

One difference is ours by design: the terminal tool stays in the tool lists (openreward's server hides it), so
clients that know nothing of terminal tools (TRL 1.16, MCP clients) can still call it.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.clients.harness import run_script, server_command
from tests.hosts.test_openreward import HERE, _process

pytestmark = pytest.mark.clients

SCRIPT = str(HERE.parent / "clients" / "scripts" / "openreward_contract.py")


def _without_terminal(seen: dict) -> dict:
    lists = ("tools", "hinted_tools", "plain_tools")
    return {key: [t for t in value if t != "submit"] if key in lists else value for key, value in seen.items()}


@pytest.mark.timeout(900)  # four servers, two of them importing openreward: minutes on a loaded machine
def test_the_newest_contract_is_the_same_on_the_reference_and_on_ours(openreward_python: Path, tmp_path: Path) -> None:
    python = str(openreward_python)
    servers = {
        "reference": [python, str(HERE / "contract.py"), "--port", "{port}"],
        "ours": [
            *(server_command() + ["serve", "--port", "{port}"]),
            *("--env", f"openreward:contract:Contract@{python}", "--env", f"openreward:contract:Turns@{python}"),
        ],
        "native": [
            *(server_command() + ["serve", "--port", "{port}"]),
            *("--env", "tests.clients.contract_envs:Contract", "--env", "tests.clients.contract_envs:Turns"),
        ],
        "isolated": [
            *(server_command() + ["serve", "--port", "{port}"]),
            *("--env", "isolated:tests.clients.contract_envs:Contract"),
            *("--env", "isolated:tests.clients.contract_envs:Turns"),
        ],
    }
    seen = {}
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(4) as starting:
        # Started together (each takes seconds to import its framework). `_process` gives this checkout to "ours"
        # only; the native environments import from it too.
        started = {
            name: starting.submit(
                stack.enter_context, _process(argv, tmp_path, "reference" if name == "reference" else "ours")
            )
            for name, argv in servers.items()
        }
        for name, future in started.items():
            server = future.result()
            seen[name] = run_script(openreward_python, SCRIPT, server.url, home=tmp_path / name, server=server)

    assert _without_terminal(seen["ours"]) == _without_terminal(seen["reference"])
    assert seen["native"] == seen["ours"]
    assert seen["isolated"] == seen["native"]
    mine = seen["ours"]
    assert mine["terminal_tool"] == {
        "name": "submit",
        "arg": "answer",
        "description": "Your final answer; ends the episode.",
    }
    assert mine["supports_score_group"] is True and mine["is_final"] is True
    assert mine["hinted_tools"] == ["add", "hint", "submit"] and mine["plain_tools"] == ["add", "submit"]
    assert mine["hint"]["text"] == ["an even number"]
    assert [m["role"] for m in mine["messages"]] == ["system", "user"]
    assert [s["reward"] for s in mine["scores"]] == [1.0, 0.0, 1.0]
    assert mine["after_scoring"] == {"reward": None, "finished": False, "text": ["2"]}
    assert mine["terminal"] == {"reward": 1.0, "finished": True}
    assert mine["after_terminal"]["error"]["reason"] == "episode_finished"
    assert mine["version_keys"] == ["build_sha", "version"]
    # Calls take turns as the reference serves them (the same on all three): the calls of one tool in order, a
    # concurrent tool's and another tool's alongside them, a call queued behind a finishing one refused, an
    # exclusive call after the running ones and before the ones that came after it.
    turns = mine["turns"]
    assert turns["peek"]["text"] == ["inside=1 entered=1"], turns
    assert turns["other"]["text"] == ["other"] and turns["open"]["text"] == ["open"]
    assert turns["first"] == {"reward": 0.0, "finished": True, "text": ["opened"]}
    assert turns["second"] == {"error": {"reason": "episode_finished"}}, turns
    assert turns["after"]["error"]["reason"] == "episode_finished"
    assert turns["held"]["text"] == ["timed out"] and turns["graded"]["finished"] is True
    assert turns["peeked"] == {"error": {"reason": "episode_finished"}}, turns
