"""The authoring API's own errors: mistakes in an environment class are caught when it is defined or served,
with a message naming the class and the rule, not at the first call."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from starlette.testclient import TestClient

from ors_server import Environment, GymEnvironment, Split, TextBlock, ToolOutput, tool
from ors_server.environments.frozen_lake import FrozenLake
from ors_server.http.app import create_app
from ors_server.settings import Settings


class Move(BaseModel):
    x: int


def test_a_tool_with_more_than_one_argument_is_refused_when_the_class_is_defined():
    with pytest.raises(TypeError, match=r"tool Bad\.move must take no argument or exactly one pydantic model"):

        class Bad(Environment):
            @tool
            def move(self, x: int, y: int) -> ToolOutput:
                """Two plain arguments."""
                raise AssertionError


def test_a_tool_whose_argument_is_not_a_pydantic_model_is_refused_saying_how_to_fix_it():
    fix = r"one model: `class MoveInput\(BaseModel\): x: int` and `def move\(self, params: MoveInput\)"
    with pytest.raises(TypeError, match=r"tool Plain\.move .*" + fix):

        class Plain(Environment):
            @tool
            def move(self, x: int) -> ToolOutput:
                """One plain argument."""
                raise AssertionError


def test_a_tool_with_one_model_argument_is_accepted_with_its_schema():
    class Good(Environment):
        @tool
        def move(self, params: Move) -> ToolOutput:
            """Move."""
            raise AssertionError

    assert Good.tools["move"].input_model is Move and Good.tools["move"].schema == Move.model_json_schema()


def test_a_gym_environment_with_a_tool_named_like_its_action_tool_is_refused():
    with pytest.raises(TypeError, match="named 'step', the name of its action tool"):

        class Twice(GymEnvironment):
            tool_name = "step"
            action_names = ["LEFT"]

            @tool
            def step(self) -> ToolOutput:
                """A second tool called step."""
                raise AssertionError


def test_two_environments_of_one_name_are_refused_when_served():
    class One(Environment):
        name = "same"

        def get_prompt(self):
            return [TextBlock(text="one")]

        @tool
        def noop(self) -> ToolOutput:
            """Nothing."""
            raise AssertionError

    class Other(One):
        name = "SAME"

    with pytest.raises(ValueError, match="two environments are named 'SAME'"):
        create_app([One, Other])


def test_an_environment_without_tools_is_refused_when_served():
    class Toolless(Environment):
        def get_prompt(self):
            return [TextBlock(text="no tools")]

    with pytest.raises(ValueError, match="'toolless' has no @tool methods"):
        create_app([Toolless])


def test_an_environment_without_a_prompt_is_refused_when_served():
    class Promptless(Environment):
        @tool
        def noop(self) -> ToolOutput:
            """Nothing."""
            raise AssertionError

    with pytest.raises(ValueError, match=r"'promptless' has no get_prompt\(\)"):
        create_app([Promptless])


def _served(**methods: Any) -> type[Environment]:
    """A class with a prompt and a tool, and `methods` (class methods, or `get_prompt`) as given."""
    body: dict[str, Any] = {
        "get_prompt": lambda self: [TextBlock(text="prompt")],
        "noop": tool(lambda self: ToolOutput(blocks=[TextBlock(text="ok")])),
    }
    for name, function in methods.items():
        body[name] = function if name == "get_prompt" else classmethod(function)
    return type("Wrong", (Environment,), body)


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        ({"list_splits": lambda cls: "train"}, r"Wrong\.list_splits\(\) returned str 'train'; it must return a list"),
        ({"list_splits": lambda cls: ["train", 3]}, r"Wrong\.list_splits\(\) returned a list holding int 3"),
        (
            {"list_splits": lambda cls: ["train"], "list_tasks": lambda cls, split: {"q": 1}},
            r"Wrong\.list_tasks\('train'\) returned dict .*; it must return a list of task specs",
        ),
        (
            {"list_splits": lambda cls: ["train"], "list_tasks": lambda cls, split: ["a question"]},
            r"Wrong\.list_tasks\('train'\) returned a list holding str 'a question'; each task spec is a dict",
        ),
        (
            {"list_splits": lambda cls: ["train"], "num_tasks": lambda cls, split: "12"},
            r"Wrong\.num_tasks\('train'\) returned str '12'; it must return an int >= 0",
        ),
        (
            {
                "list_splits": lambda cls: ["train"],
                "num_tasks": lambda cls, split: 10**9,
                "get_task": lambda cls, split, index: f"task {index}",
            },
            r"Wrong\.get_task\('train', 0\) returned str 'task 0'; it must return a task spec \(dict\)",
        ),
    ],
)
def test_splits_and_tasks_of_the_wrong_type_are_refused_when_served(methods: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_app([_served(**methods)])


def test_tasks_a_class_does_not_list_or_cannot_list_yet_pass_the_startup_check() -> None:
    def unavailable(cls: Any, split: str) -> int:
        raise RuntimeError("the dataset is fetched on first use")

    create_app([_served(list_splits=lambda cls: ["train"], num_tasks=unavailable)])
    create_app([_served(list_splits=lambda cls: [Split(name="train", type="train")])])
    create_app([FrozenLake])  # a lazy split of many seeds: list_tasks raises NotImplementedError


def test_a_prompt_of_the_wrong_type_is_answered_with_the_method_and_the_type_it_must_return() -> None:
    env_cls = _served(list_splits=lambda cls: ["train"], get_prompt=lambda self: "a plain string")
    with TestClient(create_app([env_cls], Settings(records="off")), base_url="http://127.0.0.1") as client:
        assert (
            client.post(
                "/create", headers={"X-Session-ID": "s"}, json={"env_name": "wrong", "task_spec": {}}
            ).status_code
            == 200
        )
        answer = client.get("/wrong/prompt", headers={"X-Session-ID": "s"})
    assert answer.status_code == 500
    assert answer.json()["detail"] == (
        "Wrong.get_prompt() returned str 'a plain string'; it must return a list of TextBlock or ImageBlock, "
        "such as [TextBlock(text=...)]"
    )


class TwoFields(BaseModel):
    answer: str
    why: str


def test_a_class_with_two_terminal_tools_is_refused():
    from ors_server import terminal

    with pytest.raises(TypeError, match=r"Twice has more than one @terminal tool"):

        class Twice(Environment):
            @terminal
            @tool
            def one(self) -> ToolOutput:
                """One."""
                raise AssertionError

            @tool
            @terminal
            def two(self) -> ToolOutput:
                """Two, the decorators the other way round."""
                raise AssertionError


def test_a_terminal_tool_whose_model_has_two_fields_is_refused():
    from ors_server import terminal

    with pytest.raises(TypeError, match=r"@terminal tool Wide\.submit must take no argument or a model of one field"):

        class Wide(Environment):
            @terminal
            @tool
            def submit(self, params: TwoFields) -> ToolOutput:
                """Two fields: which one takes the message?"""
                raise AssertionError


def test_terminal_marks_only_tools():
    from ors_server import terminal

    with pytest.raises(TypeError, match="@terminal marks a @tool method"):
        terminal("not a method")
