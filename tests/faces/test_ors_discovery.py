"""ORS discovery over real HTTP: health, environments, tools, splits and tasks (checklist 1-8, 32, 35)."""

from __future__ import annotations

import httpx
import pytest

from tests.ors_envs import MATH_TASKS, SubmitInput


def test_health_answers_status_ok(client: httpx.Client) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_list_environments_names_every_environment_lowercase_with_the_default_first(client: httpx.Client) -> None:
    response = client.get("/list_environments")
    assert response.status_code == 200
    assert response.json() == ["mathlike", "otherenv", "failingsetup", "slowsetup"]


def test_tools_lists_each_tool_with_exactly_name_description_and_input_schema(client: httpx.Client) -> None:
    response = client.get("/mathlike/tools")
    assert response.status_code == 200
    body = response.json()
    assert set(body) <= {"tools", "terminal_tool", "supports_score_group", "message_block_types"}
    tools = {t["name"]: t for t in body["tools"]}
    assert all(set(t) == {"name", "description", "input_schema"} for t in body["tools"]), body["tools"]
    assert {"submit", "noargs", "echo", "wait", "boom"} <= set(tools)
    assert tools["submit"] == {
        "name": "submit",
        "description": "Submit your answer to the math problem",
        "input_schema": SubmitInput.model_json_schema(),
    }


def test_a_tool_without_arguments_has_a_null_input_schema(client: httpx.Client) -> None:
    tools = {t["name"]: t for t in client.get("/mathlike/tools").json()["tools"]}
    assert tools["noargs"]["input_schema"] is None
    assert tools["noargs"]["description"] == "Answer pong; takes no arguments."


def test_environment_names_in_paths_are_case_insensitive(client: httpx.Client) -> None:
    assert client.get("/MathLike/tools").json() == client.get("/mathlike/tools").json()
    assert client.get("/OTHERENV/splits").json() == client.get("/otherenv/splits").json()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/nosuch/tools", None),
        ("GET", "/nosuch/splits", None),
        ("POST", "/nosuch/tasks", {"split": "train"}),
        ("POST", "/nosuch/num_tasks", {"split": "train"}),
        ("POST", "/nosuch/task", {"split": "train", "index": 0}),
        ("POST", "/nosuch/task_range", {"split": "train"}),
    ],
)
def test_an_unknown_environment_answers_404_with_a_detail(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    response = client.request(method, path, json=body)
    assert response.status_code == 404
    assert response.json() == {"detail": "unknown environment 'nosuch'"}


def test_splits_lists_name_and_type_and_plain_names_get_their_type(client: httpx.Client) -> None:
    assert client.get("/mathlike/splits").json() == [
        {"name": "train", "type": "train"},
        {"name": "test", "type": "test"},
    ]
    assert client.get("/otherenv/splits").json() == [
        {"name": "train", "type": "train"},
        {"name": "dev", "type": "validation"},
    ]


@pytest.mark.parametrize("split", ["train", "test"])
def test_tasks_lists_every_task_of_a_split_with_the_env_name(client: httpx.Client, split: str) -> None:
    response = client.post("/mathlike/tasks", json={"split": split})
    assert response.status_code == 200
    assert response.json() == {"tasks": MATH_TASKS[split], "env_name": "mathlike"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/mathlike/tasks", {"split": "nosuch"}),
        ("/mathlike/num_tasks", {"split": "nosuch"}),
        ("/mathlike/task", {"split": "nosuch", "index": 0}),
        ("/mathlike/task_range", {"split": "nosuch", "start": 0, "stop": 1}),
        ("/otherenv/num_tasks", {"split": "test"}),
    ],
)
def test_an_unknown_split_answers_400_invalid_split(client: httpx.Client, path: str, body: dict) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400
    assert response.json() == {"detail": "Invalid split"}


def test_tasks_of_an_environment_without_list_tasks_answers_400(client: httpx.Client) -> None:
    response = client.post("/otherenv/tasks", json={"split": "train"})
    assert response.status_code == 400
    assert isinstance(response.json()["detail"], str)


def test_num_tasks_counts_the_tasks_of_a_split(client: httpx.Client) -> None:
    assert client.post("/mathlike/num_tasks", json={"split": "train"}).json() == {"num_tasks": 5}
    assert client.post("/mathlike/num_tasks", json={"split": "test"}).json() == {"num_tasks": 1}
    assert client.post("/otherenv/num_tasks", json={"split": "train"}).json() == {"num_tasks": 2}


def test_task_returns_the_task_at_an_index_with_the_env_name(client: httpx.Client) -> None:
    response = client.post("/mathlike/task", json={"split": "train", "index": 2})
    assert response.status_code == 200
    assert response.json() == {"task": MATH_TASKS["train"][2], "env_name": "mathlike"}
    lazy = client.post("/otherenv/task", json={"split": "train", "index": 1})
    assert lazy.json() == {"task": {"start": 1}, "env_name": "otherenv"}


@pytest.mark.parametrize("index", [5, 100, -1])
def test_task_out_of_range_answers_400_invalid_index(client: httpx.Client, index: int) -> None:
    response = client.post("/mathlike/task", json={"split": "train", "index": index})
    assert response.status_code == 400
    assert response.json() == {"detail": "Invalid index"}


@pytest.mark.parametrize(
    ("start", "stop"),
    [(None, None), (0, 2), (1, None), (None, 3), (-2, None), (None, -1), (-4, -1), (3, 1), (0, 100), (10, 20)],
)
def test_task_range_follows_python_slice_rules(client: httpx.Client, start: int | None, stop: int | None) -> None:
    response = client.post("/mathlike/task_range", json={"split": "train", "start": start, "stop": stop})
    assert response.status_code == 200
    assert response.json() == {"tasks": MATH_TASKS["train"][start:stop], "env_name": "mathlike"}


def test_task_range_bounds_may_be_omitted(client: httpx.Client) -> None:
    response = client.post("/mathlike/task_range", json={"split": "test"})
    assert response.json() == {"tasks": MATH_TASKS["test"], "env_name": "mathlike"}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/tools", None),
        ("GET", "/splits", None),
        ("POST", "/tasks", {"split": "train"}),
        ("POST", "/num_tasks", {"split": "train"}),
        ("POST", "/task", {"split": "train", "index": 1}),
        ("POST", "/task_range", {"split": "train", "start": 1, "stop": 3}),
    ],
)
def test_bare_discovery_paths_answer_directly_for_the_default_environment(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    bare = client.request(method, path, json=body)
    assert bare.status_code == 200, (bare.status_code, bare.headers.get("location"))
    assert bare.json() == client.request(method, "/mathlike" + path, json=body).json()


def test_unknown_headers_the_clients_send_are_ignored(client: httpx.Client) -> None:
    headers = {"X-API-Key": "", "X-Deployment": "somewhere", "User-Agent": "openreward-sdk/0.1.167"}
    assert client.get("/mathlike/tools", headers=headers).status_code == 200
    assert client.post("/tasks", json={"split": "train"}, headers=headers).status_code == 200
    headers["X-API-Key"] = "not-checked-on-loopback"
    assert client.get("/list_environments", headers=headers).status_code == 200


def test_version_answers_a_version_string(client: httpx.Client) -> None:
    response = client.get("/version")
    assert response.status_code == 200
    assert isinstance(response.json()["version"], str)
