"""The `execute_code` tool as every face lists it, and the translations between the session core and a step.

The call pipeline (`ors_server.calls.Calls`) adds `EXECUTE_CODE_TOOL` to a session's tools when CodeAct is on
for it, runs the step (`ors_server.codeact.step`), and answers the code's tool calls through its own stages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ors_server.codeact.executor import StepResult, ToolSpec
from ors_server.environment import Environment, ToolDef
from ors_server.types import ToolOutput

EXECUTE_CODE = "execute_code"

DESCRIPTION = """Run Python code as one step.

Every other tool of this environment is a Python function here: call it with keyword arguments as in its
input schema (or positionally, in the schema's order); it returns the tool's text, and raises ToolError when
the call fails (for example after the episode has finished). list_tools() lists the tools.
What the code prints, and the value of a final expression or of a top-level `return`, is the observation.
Each step runs in a fresh sandbox: nothing persists between steps, there is no network, and only /tmp is
writable."""


class ExecuteCodeInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Python source to run; the environment's tools are functions in it.")


def _never_called(env: Environment, params: ExecuteCodeInput) -> ToolOutput:
    raise RuntimeError("execute_code is run by the session core, not as an environment method")


EXECUTE_CODE_TOOL = ToolDef(EXECUTE_CODE, DESCRIPTION, ExecuteCodeInput, _never_called)


def codeact_wanted(default: bool, *choices: Mapping[str, Any] | None) -> bool:
    """Whether a session has CodeAct: the first explicit `"codeact": true/false` among `choices` (its task
    spec, its binding config), else the server's `default` (`--codeact`)."""
    for choice in choices:
        if choice and isinstance(choice.get("codeact"), bool):
            return bool(choice["codeact"])
    return default


def with_execute_code(tools: Iterable[ToolDef]) -> list[ToolDef]:
    return [*[t for t in tools if t.name != EXECUTE_CODE], EXECUTE_CODE_TOOL]


def tool_specs(tools: Iterable[ToolDef]) -> list[ToolSpec]:
    """The tools as functions of the code; positional parameters follow the input schema's property order."""
    specs = []
    for tool in tools:
        if tool.name == EXECUTE_CODE:
            continue
        params: list[str] = []
        if tool.input_model is not None:
            params = [info.alias or name for name, info in tool.input_model.model_fields.items()]
        elif tool.schema:
            params = list(tool.schema.get("properties") or {})
        specs.append(ToolSpec(tool.name, tool.description, params))
    return specs


def tool_value(output: ToolOutput) -> Any:
    """What a tool call returns inside the code: its text, or its blocks as dicts when it returned images."""
    if all(block.type == "text" for block in output.blocks):
        return "\n".join(block.text for block in output.blocks if block.type == "text")
    return [block.model_dump(mode="json", exclude={"detail"}) for block in output.blocks]


def observation(result: StepResult) -> str:
    """The step's observation: what it printed, then its value, then its error."""
    parts = [result.output.rstrip("\n")] if result.output else []
    if result.value is not None:
        parts.append(result.value)
    if result.error is not None:
        parts.append(result.error)
    return "\n".join(parts) if parts else "(the code printed and returned nothing)"
