"""A task spec the environment refuses (`InvalidTaskSpec` from setup) is the client's mistake: a 400 with the
environment's message on every face, where any other exception in setup stays the server's 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from ors_server import Environment, InvalidTaskSpec, TextBlock, ToolOutput, tool
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.serving import serve


class Picky(Environment):
    """Wants `{"word": str}`; the word "boom" breaks its setup the way a bug would."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{"word": "hello"}]

    def setup(self) -> None:
        if not isinstance(self.task_spec.get("word"), str):
            raise InvalidTaskSpec('a picky task spec is {"word": str}')
        if self.task_spec["word"] == "boom":
            raise RuntimeError("setup hit a bug")

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Say {self.task_spec['word']}")]

    @tool
    def say(self) -> ToolOutput:
        """Say the word."""
        return ToolOutput(blocks=[TextBlock(text=self.task_spec["word"])], reward=1.0, finished=True)


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serve(create_app([Picky], Settings())) as url:
        yield url


def create(client: httpx.Client, task_spec: dict[str, Any]) -> dict[str, str]:
    sid = client.post("/create_session").json()["sid"]
    headers = {"X-Session-ID": sid}
    response = client.post("/create", json={"env_name": "picky", "task_spec": task_spec}, headers=headers)
    assert response.status_code == 200  # setup runs after /create answers, as the ORS reference does it
    return headers


def test_every_ors_request_to_a_session_whose_task_was_refused_is_a_400_with_the_environments_message(base):
    with httpx.Client(base_url=base, timeout=30) as client:
        headers = create(client, {"words": ["hello"]})
        detail = {"detail": 'invalid task spec: a picky task spec is {"word": str}'}
        for response in (
            client.get("/picky/prompt", headers=headers),
            client.post("/picky/call", json={"name": "say", "input": {}}, headers=headers),
        ):
            assert (response.status_code, response.json()) == (400, detail)
        assert client.post("/ping", headers=headers).json() == {"status": "ok"}
        assert client.post("/delete", headers=headers).status_code == 200


def test_any_other_exception_in_setup_is_still_the_servers_500(base):
    with httpx.Client(base_url=base, timeout=30) as client:
        headers = create(client, {"word": "boom"})
        response = client.get("/picky/prompt", headers=headers)
        assert (response.status_code, response.json()) == (500, {"detail": "RuntimeError: setup hit a bug"})
        good = create(client, {"word": "hello"})
        assert client.get("/picky/prompt", headers=good).json()[0]["text"] == "Say hello"


def test_an_openenv_reset_to_a_refused_task_says_why(base):
    url = base.replace("http://", "ws://") + "/openenv/picky/ws"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_spec": {"word": 7}}}))
        reply = json.loads(ws.recv(timeout=30))
    assert reply["type"] == "error"
    assert reply["data"]["message"] == 'invalid task spec: a picky task spec is {"word": str}'


def test_the_built_in_math_refuses_a_task_spec_without_question_and_answer():
    from ors_server.environments.math import Math

    with serve(create_app([Math], Settings())) as url, httpx.Client(base_url=url, timeout=30) as client:
        sid = client.post("/create_session").json()["sid"]
        headers = {"X-Session-ID": sid}
        client.post("/create", json={"env_name": "math", "task_spec": {"q": "1+1"}}, headers=headers)
        response = client.get("/math/prompt", headers=headers)
    assert response.status_code == 400
    assert response.json()["detail"].startswith('invalid task spec: a math task spec is {"question": str')
