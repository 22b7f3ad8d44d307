"""Each built-in environment of this issue, end to end over real HTTP through the ORS face."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from ors_server.environments.blackjack import Blackjack
from ors_server.environments.cliff_walking import CliffWalking
from ors_server.environments.frozen_lake import FrozenLake
from ors_server.environments.math import Math
from ors_server.environments.shell import Shell
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.serving import serve


@pytest.fixture(scope="module")
def app() -> Starlette:
    return create_app([FrozenLake, CliffWalking, Blackjack, Shell, Math], Settings())


@pytest.fixture(scope="module")
def client(app: Starlette) -> Iterator[httpx.Client]:
    with serve(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


class Episode:
    def __init__(self, client: httpx.Client, env_name: str, task_spec: dict[str, Any]) -> None:
        self.client, self.env_name = client, env_name
        self.headers = {"X-Session-ID": uuid.uuid4().hex}
        body = {"env_name": env_name, "task_spec": task_spec}
        response = client.post("/create", json=body, headers=self.headers)
        assert response.status_code == 200, response.text

    def prompt(self) -> str:
        response = self.client.get(f"/{self.env_name}/prompt", headers=self.headers)
        assert response.status_code == 200, response.text
        [block] = response.json()
        return block["text"]

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        """The final SSE event of the call: ('end', parsed JSON) or ('error', message)."""
        body = {"name": name, "input": arguments}
        response = self.client.post(f"/{self.env_name}/call", json=body, headers=self.headers)
        assert response.status_code == 200, response.text
        events: list[tuple[str, str]] = []
        for raw in response.text.replace("\r\n", "\n").split("\n\n"):
            fields = dict(line.split(": ", 1) for line in raw.split("\n") if ": " in line and not line.startswith(":"))
            if "event" in fields:
                events.append((fields["event"], fields.get("data", "")))
        chunks = "".join(data for event, data in events if event == "chunk")
        event, data = events[-1]
        return (event, json.loads(chunks + data)) if event == "end" else (event, data)

    def output(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        event, data = self.call(name, arguments)
        assert event == "end" and data["ok"], data
        return data["output"]

    def delete(self) -> None:
        assert self.client.post("/delete", headers=self.headers).status_code == 200


def test_frozen_lake_episode_over_http(client: httpx.Client) -> None:
    episode = Episode(client, "frozen_lake", {"seed": 42})
    prompt = episode.prompt()
    assert "lake_move" in prompt and prompt.endswith('"grid":"xFHF\\nFHFF\\nFFFH\\nFHFG"}')
    outputs = [episode.output("lake_move", {"action": a}) for a in ["down", "DOWN", "RIGHT", "RIGHT", "DOWN", "RIGHT"]]
    last = outputs[-1]
    assert set(last) == {"blocks", "metadata", "reward", "finished"}
    assert (last["reward"], last["finished"]) == (1.0, True)
    assert json.loads(last["blocks"][0]["text"])["position"] == 15
    event, data = episode.call("lake_move", {"action": "UP"})
    assert event == "end" and data["reason"] == "episode_finished"
    episode.delete()


def test_invalid_action_over_http_is_an_input_validation_error_listing_the_actions(client: httpx.Client) -> None:
    episode = Episode(client, "frozen_lake", {"seed": 123})
    event, data = episode.call("lake_move", {"action": "fly"})
    assert (event, data["ok"], data["reason"]) == ("end", False, "input_validation")
    assert "Invalid action 'FLY'. Valid actions: ['LEFT', 'DOWN', 'RIGHT', 'UP']" in data["error"]
    assert json.loads(episode.output("lake_move", {"action": "RIGHT"})["blocks"][0]["text"])["position"] == 1
    episode.delete()


def test_cliff_walking_episode_over_http(client: httpx.Client) -> None:
    episode = Episode(client, "cliff_walking", {"seed": 42})
    assert "cliff_move" in episode.prompt()
    output = episode.output("cliff_move", {"action": "RIGHT"})
    assert (output["reward"], output["finished"]) == (-100.0, False)
    assert json.loads(output["blocks"][0]["text"]) == {
        "position": 36,
        "grid": "o  o  o  o  o  o  o  o  o  o  o  o\n" * 3 + "x  C  C  C  C  C  C  C  C  C  C  T\n\n",
        "action": "RIGHT",
    }
    episode.delete()


def test_blackjack_episode_over_http(client: httpx.Client) -> None:
    episode = Episode(client, "blackjack", {"seed": 42, "natural": False, "sab": False})
    assert episode.prompt().endswith('{"player_sum":15,"dealer_card":2,"usable_ace":0}')
    output = episode.output("blackjack_move", {"action": "stick"})
    assert output["finished"] and output["reward"] in (-1.0, 0.0, 1.0)
    episode.delete()


def test_game_splits_over_http(client: httpx.Client) -> None:
    assert client.post("/frozen_lake/num_tasks", json={"split": "train"}).json() == {"num_tasks": 1_000_000}
    assert client.post("/frozen_lake/tasks", json={"split": "train"}).status_code == 400
    assert client.post("/frozen_lake/task_range", json={"split": "train"}).status_code == 400
    response = client.post("/blackjack/tasks", json={"split": "examples"})
    assert [task["seed"] for task in response.json()["tasks"]] == [42, 123, 456]


def test_shell_episode_over_http(client: httpx.Client, app: Starlette) -> None:
    episode = Episode(client, "shell", {"id": "hello_file"})
    assert episode.prompt().startswith("Create a file named hello.txt")
    output = episode.output("bash", {"command": "export GREETING=hi; echo $GREETING > hello.txt; cat hello.txt"})
    assert output["blocks"][0]["text"] == "exit code: 0\nstdout:\nhi\n"
    root = app.state.store.get(episode.headers["X-Session-ID"]).env.root  # where the server keeps its directory
    assert (root / "work" / "hello.txt").read_text() == "hi\n"
    output = episode.output("submit", {})
    assert (output["reward"], output["finished"]) == (1.0, True)
    episode.delete()
    assert not root.exists()


@pytest.mark.parametrize(
    ("answer", "reward"),
    [(21, 1.0), (21.0, 1.0), ("21", 1.0), (" 21.0 ", 1.0), (22, 0.0), (2.1e1, 1.0)],
    ids=["int", "float", "string", "padded-string", "wrong-int", "exponent-float"],
)
def test_math_submit_takes_a_json_number_or_a_string(client: httpx.Client, answer: Any, reward: float) -> None:
    episode = Episode(client, "math", Math.get_task("train", 1))  # "What is 252 / 12?" -> "21"
    output = episode.output("submit", {"answer": answer})
    assert (output["reward"], output["finished"]) == (reward, True)
    episode.delete()


@pytest.mark.parametrize("answer", [True, None, [21], {"value": 21}], ids=["bool", "null", "list", "object"])
def test_math_submit_refuses_what_is_neither_a_number_nor_a_string(client: httpx.Client, answer: Any) -> None:
    episode = Episode(client, "math", Math.get_task("train", 1))
    event, data = episode.call("submit", {"answer": answer})
    assert (event, data["ok"], data["reason"]) == ("end", False, "input_validation")
    assert episode.output("submit", {"answer": 21})["reward"] == 1.0  # the episode goes on
    episode.delete()


def test_math_submit_schema_says_it_takes_numbers_and_strings(client: httpx.Client) -> None:
    [submit] = client.get("/math/tools").json()["tools"]
    assert submit["input_schema"]["properties"]["answer"]["anyOf"] == [
        {"type": "string"},
        {"type": "integer"},
        {"type": "number"},
    ]
