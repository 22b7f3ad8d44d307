"""OpenEnv's own environments (`--env openenv:MODULE:CLASS`, hosted by `ors_server.hosting`), answered as OpenEnv's
`create_app` answers them rather than as the face renders our environments.

- A step's data is the class's own action: for a typed `Environment`, all of it is the arguments of its one tool
  `step`, validated by the class (`VALIDATION_ERROR` when it refuses); for an `MCPEnvironment`, RFC 003's
  `call_tool` (each MCP tool is one of our tools) and `list_tools` (sent to the class too, which may count it).
- The observation of a step, a reset's observation, `state`, `/metadata` and `/schema` are the class's own (the
  host adapter serialises them as OpenEnv's server does). An exception in the class is `EXECUTION_ERROR`.
- A reset's data is `reset()`'s keyword arguments: the task of the new episode (`reset(**task_spec)`).

Steps still run through the call pipeline (limits, timeouts, records, metrics), and every step reaches the class,
after `done` too (the description says `calls_after_finish`). What differs from OpenEnv's server: each reset builds
a new instance of the class (OpenEnv resets the socket's one instance), a session's first episode is reset with
`reset()`'s defaults as it opens (so a step before any reset frame plays it), and JSON-RPC `tools/call` runs as a
step of the episode, so its reward and `done` are recorded (OpenEnv calls the tool directly).
"""

from __future__ import annotations

from typing import Any

from ors_server.calls import CallResult, ToolCrashed, ToolRejected
from ors_server.faces.openenv.wire import FrameError
from ors_server.hosting import HostedEnvironment, HostedOutput
from ors_server.sessions import Session, SessionStore


def step_data(result: CallResult) -> dict[str, Any] | None:
    """The observation frame's data of a step, as the class answered it; None when the call never reached the
    class (refused here as for any environment: an unknown tool, a busy session). Raises the error frame OpenEnv
    sends for an action the class refused or a step that raised."""
    if isinstance(result, HostedOutput) and isinstance(result.native, dict):
        return dict(result.native)
    if isinstance(result, ToolCrashed):
        raise FrameError("EXECUTION_ERROR", result.message)
    if isinstance(result, ToolRejected) and result.reason == "input_validation":
        raise FrameError("VALIDATION_ERROR", "Invalid message", errors=[{"type": "value_error", "msg": result.message}])
    return None


def rpc_result(result: CallResult) -> dict[str, Any] | None:
    """A JSON-RPC `tools/call` answer of an MCP class: the tool's own result (FastMCP's dump); None when the call
    did not reach the class. Raises RuntimeError with the tool's error, which OpenEnv's `/mcp` answers -32603."""
    if not (isinstance(result, HostedOutput) and isinstance(result.native, dict)):
        return None
    observation = result.native.get("observation") or {}
    if observation.get("error"):
        raise RuntimeError(str(observation["error"].get("message")))
    answer = observation.get("result")
    return answer if isinstance(answer, dict) else None


async def ask(store: SessionStore, session: Session, name: str) -> Any:
    """Ask the episode's instance of the class for `name` (its `state`, its reset observation, a `list_tools`
    step), holding the episode alone, as every read of an episode does."""
    episode = session.episode
    if not await episode.admit():
        raise FrameError("EXECUTION_ERROR", "an earlier call of this session timed out and still runs")
    try:
        env = episode.env
        if not isinstance(env, HostedEnvironment) or episode.ended:
            raise FrameError("SESSION_ERROR", f"Session {session.id} has ended")
        try:
            return await env.request(name)
        except Exception as exc:
            raise FrameError("EXECUTION_ERROR", session.redact(str(exc) or type(exc).__name__)) from None
    finally:
        episode.release()
