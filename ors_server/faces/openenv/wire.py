"""The OpenEnv face's wire shapes, shared by its transports: actions, observations, error frames, JSON-RPC
replies, and the HTTP error body."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse, Response

from ors_server.calls import CallResult, ToolCrashed, ToolRejected
from ors_server.environment import Environment, ToolDef
from ors_server.errors import OrsError, SessionExpired
from ors_server.faces.ors import BodyInvalid
from ors_server.hosting import HostedEnvironment
from ors_server.sessions import Session
from ors_server.types import ImageBlock, TextBlock, ToolOutput

CREATED_BY = "openenv"
PREFIX = "/openenv"


# Wire models: what OpenEnv's clients send, validated as OpenEnv's own server validates it.


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Sent by clients that dump OpenEnv's pydantic actions (`model_dump()` adds it); ignored."""


class CallToolAction(_Action):
    """Call one tool of the environment: a step of the episode."""

    type: Literal["call_tool"] = "call_tool"
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ListToolsAction(_Action):
    """List the environment's tools with their input schemas (not a step)."""

    type: Literal["list_tools"] = "list_tools"


class ResetRequest(BaseModel):
    """`reset(**kwargs)`: every key is optional; keys OpenEnv's clients may send for other servers are ignored."""

    model_config = ConfigDict(extra="allow")
    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, max_length=255)
    task_spec: dict[str, Any] | None = None
    split: str | None = None
    index: int | None = Field(default=None, ge=0)

    def config(self) -> dict[str, Any]:
        """The task config for `task_from_seed`: the task form the client named, if any."""
        return {key: getattr(self, key) for key in ("task_spec", "split", "index") if getattr(self, key) is not None}


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    action: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = None


class StepFrame(BaseModel):
    type: Literal["step"]
    data: dict[str, Any]


ErrorType = Literal["execution_error", "invalid_args", "transport_error", "tool_not_found", "timeout"]


class ToolError(BaseModel):
    error_type: ErrorType
    message: str


class CallToolObservation(BaseModel):
    """The observation of a `call_tool` step: the tool's result (FastMCP's `CallToolResult` dump) or an error."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    tool_name: str
    result: dict[str, Any] | None
    error: ToolError | None


class EpisodeState(BaseModel):
    model_config = ConfigDict(extra="allow")
    episode_id: str | None = Field(description="The session id: ORS `/ping` and `/delete` take it.")
    step_count: int = Field(ge=0, description="Tool calls that returned a result in this episode.")


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    # Without the input: an action may carry whatever the agent typed.
    return [dict(error) for error in exc.errors(include_url=False, include_context=False, include_input=False)]


class FrameError(Exception):
    """An error envelope: `{"type": "error", "data": {"message", "code", **extra}}`."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.extra = code, message, extra

    def frame(self) -> str:
        return dumps({"type": "error", "data": {"message": self.message, "code": self.code, **self.extra}})


def invalid_frame(exc: ValidationError) -> FrameError:
    return FrameError("VALIDATION_ERROR", "Invalid message", errors=validation_errors(exc))


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


# Actions.


@dataclass(frozen=True)
class ToolCallAction:
    name: str
    arguments: dict[str, Any]


_LIST_TOOLS = ListToolsAction()


def unknown_session(key: Any, exc: OrsError) -> str:
    """OpenEnv's message for a session id that names no live session, saying so when it was reaped."""
    if isinstance(exc, SessionExpired):
        return f"Session {key} expired after {exc.timeout:g} s of inactivity (--session-timeout)"
    return f"Unknown session_id: {key}"


def described(env_cls: type[Environment]) -> dict[str, Any] | None:
    """What the host of an OpenEnv class described of it (`kind` "mcp" or "typed", its `metadata` and `schema`);
    None for every other class. Such a class is answered in OpenEnv's own words (see `native`)."""
    if issubclass(env_cls, HostedEnvironment):
        extra = env_cls.description.get("extra") or {}
        if extra.get("framework") == "openenv":
            return dict(extra)
    return None


def parse_action(env_cls: type[Environment], data: dict[str, Any]) -> ToolCallAction | ListToolsAction:
    """The action a step's data names; raises ValidationError for data that is no action."""
    native = described(env_cls)
    if native is not None and native.get("kind") == "typed":
        [spec] = env_cls.tools.values()
        return ToolCallAction(spec.name, data)  # the class's own action type: the class validates all of it
    kind = data.get("type")
    if kind == "list_tools":
        return ListToolsAction.model_validate(data)
    if kind is None and len(env_cls.tools) == 1 and native is None:
        [spec] = env_cls.tools.values()
        arguments = (spec.schema or {}).get("properties") or {}
        if isinstance(data.get("tool_name"), str) and "tool_name" not in arguments:
            # A call_tool action without its `type` (verifiers' OpenEnv taskset sends them so), which OpenEnv's
            # own server reads as call_tool, the field's default: not the only tool's arguments.
            action = CallToolAction.model_validate(data)
            return ToolCallAction(action.tool_name, action.arguments)
        # The only tool's arguments. A typed client's `model_dump()` adds `metadata`, which is not an argument.
        if "metadata" in data and "metadata" not in arguments:
            data = {key: value for key, value in data.items() if key != "metadata"}
        return ToolCallAction(spec.name, data)
    # Anything else must be a call_tool action (an unknown `type` fails on the literal).
    action = CallToolAction.model_validate(data)
    return ToolCallAction(action.tool_name, action.arguments)


def action_schema(env_cls: type[Environment]) -> dict[str, Any]:
    """The JSON Schema of a step's data: RFC 003's two actions, and for a one-tool environment its arguments."""
    options = [CallToolAction.model_json_schema(), ListToolsAction.model_json_schema()]
    schema: dict[str, Any] = {"description": "RFC 003 actions: call_tool (a step of the episode) or list_tools."}
    if len(env_cls.tools) == 1:
        [spec] = env_cls.tools.values()
        arguments = dict(spec.schema or {"type": "object", "properties": {}})
        if "$defs" in arguments:
            schema["$defs"] = arguments.pop("$defs")
        arguments["title"] = f"{spec.name} arguments"
        arguments["description"] = (
            f"This environment has one tool, so a step whose data has no `type` is the arguments of `{spec.name}`."
        )
        options.append(arguments)
        schema["description"] += f" Data without a `type` is the arguments of the only tool, `{spec.name}`."
    schema["anyOf"] = options
    return schema


# Rendering results.


def tool_specs(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """The tools (`Calls.tools`) as a `list_tools` observation lists them (`input_schema`, as OpenEnv's `Tool`)."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.schema or {"type": "object", "properties": {}}}
        for t in tools
    ]


def mcp_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """The tools as JSON-RPC `tools/list` answers them: MCP `Tool` dumps, camelCase."""
    return [
        {
            "name": spec["name"],
            "title": None,
            "description": spec["description"],
            "inputSchema": spec["input_schema"],
            "outputSchema": None,
            "icons": None,
            "annotations": None,
            "meta": None,
            "execution": None,
        }
        for spec in tool_specs(tools)
    ]


def call_tool_result(output: ToolOutput) -> dict[str, Any]:
    """A tool's output as FastMCP's `CallToolResult` dump, the shape OpenEnv's clients read (`data` above all:
    `MCPToolClient.call_tool` returns it)."""
    content: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in output.blocks:
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": block.text, "annotations": None, "meta": None})
            texts.append(block.text)
        elif isinstance(block, ImageBlock):
            content.append(
                {"type": "image", "data": block.data, "mimeType": block.mimeType, "annotations": None, "meta": None}
            )
    data = "\n".join(texts) if texts else None
    return {"content": content, "structured_content": None, "meta": None, "data": data, "is_error": False}


def tool_error(name: str, result: ToolRejected | ToolCrashed) -> ToolError:
    """A failed call as `CallToolObservation.error`, typed as OpenEnv types its MCP environments' failures."""
    if isinstance(result, ToolCrashed):
        message = f"Error calling tool '{name}': {result.message}"
        lowered = result.message.lower()
        kind: ErrorType = "invalid_args" if "invalid" in lowered or "argument" in lowered else "execution_error"
        return ToolError(error_type=kind, message=message)
    if result.reason == "not_found":
        return ToolError(error_type="tool_not_found", message=f"Unknown tool: '{name}'")
    if result.reason == "input_validation":
        return ToolError(error_type="invalid_args", message=result.message)
    if result.reason == "timeout":
        return ToolError(error_type="timeout", message=result.message)
    return ToolError(error_type="execution_error", message=result.message)


def step_payload(name: str, result: CallResult, session: Session) -> dict[str, Any]:
    """The `data` of the observation frame a `call_tool` step answers."""
    if isinstance(result, ToolOutput):
        metadata = result.metadata or {}
        observation = {"metadata": metadata, "tool_name": name, "result": call_tool_result(result), "error": None}
        payload: dict[str, Any] = {"observation": observation, "reward": result.reward, "done": result.finished}
        if metadata:
            payload["metadata"] = metadata  # OpenEnv copies non-empty observation metadata to the top level
        return payload
    name = session.redact(name)  # the name the client asked for may be any string, a secret value too
    error = tool_error(name, result).model_dump()
    observation = {"metadata": {}, "tool_name": name, "result": None, "error": error}
    return {"observation": observation, "reward": None, "done": session.finished}


def list_tools_payload(tools: Sequence[ToolDef]) -> dict[str, Any]:
    return {"observation": {"metadata": {}, "tools": tool_specs(tools)}, "reward": None, "done": False}


def reset_payload(observation: Any) -> dict[str, Any]:
    """The episode's initial observation as a reset's observation: a JSON object as is (the control plane's
    `initial_state` rule), anything else as `{"observation": value}`."""
    fields = dict(observation) if isinstance(observation, dict) else {"observation": observation}
    fields.setdefault("metadata", {})
    return {"observation": fields, "reward": 0.0, "done": False}


# JSON-RPC.

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
SERVER_UNAVAILABLE = -32000


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def rpc_reply(request_id: Any, result: Any = None, error: RpcError | None = None) -> dict[str, Any]:
    if error is not None:
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": error.code, "message": error.message, "data": error.data},
        }
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


# The face.


def server_version() -> str:
    try:
        return dist_version("ors-server")
    except PackageNotFoundError:
        return "0"


def render_error(exc: OrsError) -> Response:
    """HTTP errors in FastAPI's shape, as OpenEnv's server (a FastAPI app) answers them."""
    detail = exc.errors if isinstance(exc, BodyInvalid) else exc.message
    return JSONResponse({"detail": detail}, exc.status, headers=exc.headers)
