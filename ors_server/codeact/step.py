"""One CodeAct step: the agent's code runs in a sandbox, and its tool calls come back to the call pipeline.

The `execute_code` tool (`tool.py`) runs `execute_code` while its call holds the episode, and passes `call_tool`,
which runs one of the code's tool calls through the pipeline's own stages (validated, run, recorded and observed
like a call from a face). The step's reward is the sum of theirs; it finished the
episode if one of them did. A step that failed before any tool call succeeded raises `StepFailed` (nothing to
report); after one, its observation carries the error along with the rewards earned.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from ors_server.codeact.executor import Limits, StepResult, ToolCallFailed, ToolSpec, run_step
from ors_server.codeact.pool import SandboxPool
from ors_server.codeact.sandbox import SandboxUnavailable, sandbox_mode
from ors_server.environment import ToolDef
from ors_server.runtime.tool import ToolFailed
from ors_server.settings import Settings
from ors_server.types import TextBlock, ToolOutput

EXECUTE_CODE = "execute_code"

logger = logging.getLogger("ors_server.codeact")


class Failure(Protocol):
    """A tool call that did not produce a `ToolOutput` (the pipeline's `ToolRejected` or `ToolCrashed`)."""

    @property
    def message(self) -> str: ...


class StepFailed(ToolFailed):
    """The step produced nothing to report: its sandbox did not start, or its code failed before any tool call
    succeeded. The message is what the agent sees (secrets masked)."""


def limits(settings: Settings) -> Limits:
    """A step's limits: `--codeact-timeout` (within `--tool-timeout`), memory, threads, /tmp size, and output
    within `--max-output-chars`."""
    timeout = settings.codeact_timeout
    if settings.tool_timeout is not None:
        timeout = min(timeout, settings.tool_timeout)
    return Limits(
        timeout=timeout,
        memory_bytes=settings.codeact_memory_bytes,
        processes=settings.codeact_max_threads,
        tmp_bytes=settings.codeact_disk_bytes,
        output_chars=min(settings.codeact_output_chars, settings.max_output_chars),
    )


async def execute_code(
    code: str,
    tools: Sequence[ToolDef],
    call_tool: Callable[[str, Any], Awaitable[ToolOutput | Failure]],
    settings: Settings,
    redact: Callable[[str], str],
    session_id: str,
    pool: SandboxPool | None = None,
) -> ToolOutput:
    """Run `code` as one step with `tools` as its functions, in a sandbox of `pool` when it has one ready; raises
    StepFailed when there is nothing to report."""
    reward, finished, truncated, succeeded = 0.0, False, False, 0

    async def call(name: str, arguments: dict[str, Any]) -> Any:
        nonlocal reward, finished, truncated, succeeded
        if name == EXECUTE_CODE:
            raise ToolCallFailed("execute_code cannot be called from inside code")
        result = await call_tool(name, arguments)
        if not isinstance(result, ToolOutput):
            raise ToolCallFailed(result.message)
        succeeded += 1
        reward += float(result.reward or 0.0)
        finished, truncated = finished or result.finished, truncated or result.truncated
        return tool_value(result)

    try:
        sandbox = sandbox_mode(settings.codeact_sandbox)
        step = await run_step(code, tool_specs(tools), call, limits=limits(settings), sandbox=sandbox, pool=pool)
    except (SandboxUnavailable, OSError) as exc:
        raise StepFailed(f"execute_code could not start: {exc}") from None
    if step.stderr:
        logger.debug("execute_code stderr: %s", redact(step.stderr), extra={"session_id": session_id})
    text = redact(observation(step))
    if step.error is not None and not succeeded:
        raise StepFailed(text)
    return ToolOutput(
        blocks=[TextBlock(text=text)],
        metadata={"tool_calls": step.tool_calls},
        reward=reward,
        finished=finished,
        truncated=truncated,
    )


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
