"""OpenEnv environments hosted unchanged (`--env openenv:MODULE:CLASS@PYTHON`): the two classes of `openenv_envs/`
(an `MCPEnvironment` and a plain `Environment` with a typed action), served side by side by OpenEnv's own
`create_app` and by ors-server from the same files. OpenEnv's `GenericEnvClient` and `MCPToolClient` (from
OpenEnv's venv, as a black box) must see the same observations, rewards and `done` on both; the same classes are
then driven over our ORS and MCP faces.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from ors_server.http.app import create_app
from ors_server.loading import LoadError, resolve_environments
from ors_server.settings import Settings
from tests.clients import client_venvs, harness
from tests.clients.harness import client_env, run_script, run_server, server_command
from tests.faces.mcp_helpers import mcp_client, text
from tests.serving import free_port, serve

pytestmark = [pytest.mark.clients, pytest.mark.anyio]

ENVS = Path(__file__).resolve().parent / "openenv_envs"
START_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def openenv_python() -> Path:
    return client_venvs.ensure_venv("openenv")


def specs(python: Path) -> list[str]:
    # The action type named with ?action= here (the class's type argument names it too: the workers test).
    guess = f"openenv:guess_env:GuessEnvironment?action=guess_env:GuessAction@{python}"
    return [f"openenv:arith_env:ArithEnvironment@{python}", guess]


@contextlib.contextmanager
def reference(python: Path, target: str, log_dir: Path) -> Iterator[str]:
    """OpenEnv's own server (`create_app` under uvicorn, in OpenEnv's venv) for `target`; yields its URL."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{target.replace(':', '_')}.log", "wb") as log:
        process = subprocess.Popen(
            [str(python), str(ENVS / "reference_app.py"), target, str(port)],
            cwd=ENVS,
            env=client_env(log_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:  # an external process gives no event to wait on: poll its health, bounded
            try:
                with opener.open(f"{url}/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"OpenEnv's server for {target} did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def references(openenv_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    logs = tmp_path_factory.mktemp("openenv-reference")
    with (
        reference(openenv_python, "guess_env:GuessEnvironment", logs) as guess,
        reference(openenv_python, "arith_env:ArithEnvironment", logs) as arith,
    ):
        yield guess, arith


@pytest.fixture(scope="module")
def ours(openenv_python: Path) -> Iterator[str]:
    """ors-server hosting both classes (in process; their host processes run OpenEnv's interpreter)."""
    environments = resolve_environments(specs(openenv_python), str(ENVS))
    with serve(create_app(environments, Settings())) as url:
        yield url


def side_by_side(python: Path, references: tuple[str, str], url: str, home: Path, envs=("guess", "arith")) -> dict:
    """What OpenEnv's clients saw of each environment in `envs` on OpenEnv's server (`a`) and on ours (`b`)."""
    theirs = dict(zip(("guess", "arith"), references, strict=True))
    paths = {"guess": "guessenvironment", "arith": "arith"}
    servers = {
        "a": {env: theirs[env] for env in envs},
        "b": {env: f"{url}/openenv/{paths[env]}" for env in envs},
    }
    return run_script(python, "openenv_side_by_side.py", json.dumps(servers), home=home, timeout=240)


def test_openenv_clients_see_the_same_on_both_servers(openenv_python, references, ours, tmp_path):
    seen = side_by_side(openenv_python, references, ours, tmp_path)

    for name in ("guess", "arith", "arith_mcp"):
        assert "raised" not in seen["a"][name], seen["a"][name]["raised"]
        assert "raised" not in seen["b"][name], seen["b"][name]["raised"]
        assert seen["b"][name] == seen["a"][name], name
    guess, arith, mcp = seen["b"]["guess"], seen["b"]["arith"], seen["b"]["arith_mcp"]
    # What the scenarios are about, so that equal answers are not equal by both being empty.
    assert [step["reward"] for step in guess["steps"]] == [0.0, 0.0, 1.0, None]
    assert [step["done"] for step in guess["steps"]] == [False, False, True, True]
    assert guess["steps"][3]["observation"]["hint"] == "The episode is over."  # a step after done reached the class
    assert guess["invalid"]["message"].endswith("(code: VALIDATION_ERROR)")
    assert guess["state_after"] == {"episode_id": "ep-9", "step_count": 1, "target": 7}
    assert arith["submit"]["reward"] == 1.0 and arith["submit"]["done"] is True
    assert arith["wrong"]["reward"] == 0.0
    assert arith["fail"]["observation"]["error"]["error_type"] == "execution_error"
    assert arith["bad_args"]["observation"]["error"]["error_type"] == "invalid_args"
    assert arith["after_done"]["observation"]["result"]["data"] == 2
    assert [tool["name"] for tool in mcp["tools"]] == ["add", "submit", "fail"]
    assert (mcp["add"], mcp["submit"]) == (42, "correct")
    assert "failed on purpose: mcp" in mcp["fail"]["message"]


def test_metadata_and_schema_are_the_classes_own(references, ours):
    guess, arith = references
    with httpx.Client(trust_env=False, timeout=30) as http:
        for theirs, path in ((guess, "guessenvironment"), (arith, "arith")):
            for info in ("metadata", "schema"):
                assert http.get(f"{ours}/openenv/{path}/{info}").json() == http.get(f"{theirs}/{info}").json()


def sse_end(response: httpx.Response) -> dict:
    """The data of the `end` event of an ORS call stream."""
    assert response.status_code == 200, response.text
    blocks = [block for block in response.text.replace("\r\n", "\n").split("\n\n") if block.strip()]
    event = dict(line.split(": ", 1) for line in blocks[-1].splitlines())
    assert event["event"] == "end", response.text
    return json.loads(event["data"])


def ors_call(http: httpx.Client, url: str, env: str, sid: str, name: str, arguments: dict) -> dict:
    response = http.post(f"{url}/{env}/call", json={"name": name, "input": arguments}, headers={"X-Session-ID": sid})
    return sse_end(response)


def test_the_typed_environment_over_ors_and_the_control_plane_is_one_step_tool(ours):
    with httpx.Client(trust_env=False, timeout=60) as http:
        [step] = http.get(f"{ours}/guessenvironment/tools").json()["tools"]
        assert step["name"] == "step" and step["input_schema"]["properties"]["guess"]["maximum"] == 20
        created = http.post(
            f"{ours}/create",
            json={"env_name": "guessenvironment", "task_spec": {"seed": 1, "target": 7}},
            headers={"X-Session-ID": "guess-ors"},
        )
        assert created.status_code == 200, created.text
        prompt = http.get(f"{ours}/guessenvironment/prompt", headers={"X-Session-ID": "guess-ors"}).json()
        assert json.loads(prompt[0]["text"]) == {"hint": "Guess a number from 1 to 20.", "tries_left": 5}
        control = {"mcp-session-id": "guess-ors"}
        initial = http.get(f"{ours}/guessenvironment/control/initial_state", headers=control).json()
        assert initial == {"hint": "Guess a number from 1 to 20.", "tries_left": 5}  # the reset observation's fields
        miss = ors_call(http, ours, "guessenvironment", "guess-ors", "step", {"guess": 3})
        assert (miss["output"]["reward"], miss["output"]["finished"]) == (0.0, False)
        assert json.loads(miss["output"]["blocks"][0]["text"]) == {"hint": "higher", "tries_left": 4}
        refused = ors_call(http, ours, "guessenvironment", "guess-ors", "step", {"guess": 99})
        assert refused["ok"] is False and refused["reason"] == "input_validation"
        hit = ors_call(http, ours, "guessenvironment", "guess-ors", "step", {"guess": 7})
        assert (hit["output"]["reward"], hit["output"]["finished"]) == (1.0, True)
        # After `done` the step still goes to the class, which answers it in its own words.
        after = ors_call(http, ours, "guessenvironment", "guess-ors", "step", {"guess": 7})
        assert json.loads(after["output"]["blocks"][0]["text"])["hint"] == "The episode is over."
        status = http.get(f"{ours}/guessenvironment/control/status", headers=control).json()
        assert (status["terminated"], status["step_count"], status["total_reward"]) == (True, 3, 1.0)
        assert http.post(f"{ours}/delete", headers={"X-Session-ID": "guess-ors"}).status_code == 200


async def test_the_mcp_environment_over_mcp_scores_its_tools(ours):
    async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
        created = await http.post(
            f"{ours}/create",
            json={"env_name": "arith", "task_spec": {"seed": 3}},
            headers={"X-Session-ID": "arith-mcp"},
        )
        assert created.status_code == 200, created.text
        prompt = (await http.get(f"{ours}/arith/prompt", headers={"X-Session-ID": "arith-mcp"})).json()
    a, b = map(int, re.findall(r"\d+", json.loads(prompt[0]["text"])["question"]))
    async with mcp_client(f"{ours}/arith/mcp/episodes/arith-mcp") as (session, _):
        assert [tool.name for tool in (await session.list_tools()).tools] == ["add", "submit", "fail"]
        added = await session.call_tool("add", {"a": 2, "b": 3})
        assert text(added) == "5" and added.structured_content["reward"] is None
        failed = await session.call_tool("fail", {"reason": "here"})
        assert "failed on purpose: here" in text(failed)
        submitted = await session.call_tool("submit", {"answer": a + b})
        assert text(submitted) == "correct"
        assert submitted.structured_content["reward"] == 1.0 and submitted.structured_content["finished"] is True


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("guess_env:GuessAction", r"'GuessAction' in module 'guess_env' is not an OpenEnv Environment"),
        ("guess_env:GuessEnvironment?action=guess_env:GuessState", r"\?action=guess_env:GuessState names no OpenEnv"),
    ],
)
def test_a_class_of_another_kind_is_one_line(openenv_python, target, message):
    # (A missing module or class is the host protocol's, tested with every framework.)
    with pytest.raises(LoadError, match=message) as raised:
        resolve_environments([f"openenv:{target}@{openenv_python}"], str(ENVS))
    assert "\n" not in str(raised.value)


def test_an_interpreter_without_openenv_is_one_line_exit_2(tmp_path):
    done = subprocess.run(
        [*server_command(), "serve", "--env", "openenv:guess_env:GuessEnvironment"],
        cwd=ENVS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    assert "no openenv package" in line


def test_two_workers_serve_the_same_episodes(openenv_python, references, tmp_path, monkeypatch):
    # Each worker starts a host process to describe the class before it serves: OpenEnv's import takes seconds.
    monkeypatch.setattr(harness, "SERVER_START_TIMEOUT", START_TIMEOUT)
    guess = f"openenv:guess_env:GuessEnvironment@{openenv_python}"
    with run_server(tmp_path / "server", "--workers", "2", "--env", guess, cwd=ENVS) as server:
        seen = side_by_side(openenv_python, references, server.url, tmp_path / "home", envs=("guess",))
    assert "raised" not in seen["b"]["guess"], seen["b"]["guess"]["raised"]
    assert seen["b"]["guess"] == seen["a"]["guess"]


def test_a_class_without_concurrent_sessions_gets_a_process_per_session(openenv_python):
    [solo] = resolve_environments([f"openenv:guess_env:SoloGuessEnvironment@{openenv_python}"], str(ENVS))
    with TestClient(create_app([solo], Settings()), base_url="http://127.0.0.1") as client:
        for sid in ("solo-1", "solo-2"):
            body = {"env_name": "sologuessenvironment", "task_spec": {"target": 4}}
            assert client.post("/create", json=body, headers={"X-Session-ID": sid}).status_code == 200
            assert client.get("/sologuessenvironment/prompt", headers={"X-Session-ID": sid}).status_code == 200
        assert solo.pool is not None and solo.pool.per_process == 1
        assert len([host for host in solo.pool.hosts if host.dead is None]) == 2
