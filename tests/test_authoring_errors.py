"""The authoring API's own errors: mistakes in an environment class are caught when it is defined or served,
with a message naming the class and the rule, not at the first call."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from ors_server import Environment, GymEnvironment, TextBlock, ToolOutput, tool
from ors_server.http.app import create_app


class Move(BaseModel):
    x: int


def test_a_tool_with_more_than_one_argument_is_refused_when_the_class_is_defined():
    with pytest.raises(TypeError, match=r"tool Bad\.move must take no argument or exactly one pydantic model"):

        class Bad(Environment):
            @tool
            def move(self, x: int, y: int) -> ToolOutput:
                """Two plain arguments."""
                raise AssertionError


def test_a_tool_whose_argument_is_not_a_pydantic_model_is_refused():
    with pytest.raises(TypeError, match=r"tool Plain\.move"):

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
