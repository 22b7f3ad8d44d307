"""An episode's environment instance, as the runtime runs the author's code on it.

    build       connect its MCP tool servers, construct it, run its setup, find the session's own tools
    read        a method that says something of the episode (prompt, conversation, first observation), its
                answer checked
    tear_down   after its running call (boundedly), its teardown, then its tool servers' connections closed

The session store decides when each happens and keeps the episode's lifecycle (`ors_server.sessions`); this
module is how, on the runtime's lifecycle threads. Sync author code takes one worker-thread hop, and none where
no code of the author's would run (the base class's constructor, setup or teardown).
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import TypeAdapter, ValidationError

from ors_server.compose.toolbox import Toolbox
from ors_server.environment import Environment
from ors_server.episode import Episode
from ors_server.errors import ReadFailed
from ors_server.runtime.resources import Runtime, run_user_code
from ors_server.runtime.worker_threads import run_in_thread
from ors_server.toolsets.session import episode_tools
from ors_server.types import Blocks, Message, TextBlock

if TYPE_CHECKING:
    from ors_server.sessions import Session

logger = logging.getLogger("ors_server.sessions")

TEARDOWN_LOCK_WAIT = 2.0
"""Seconds an ending episode's running call gets to finish before the environment is torn down under it."""
_blocks = TypeAdapter(Blocks)
_messages = TypeAdapter(list[Message])


class WrongReturn(TypeError):
    """An environment method returned something of the wrong type (the message names the method and the type)."""


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# Building.


async def build(runtime: Runtime, session: Session, episode: Episode) -> None:
    """Build `episode` of `session`, unless it ends first (then the store tears down what was built). Raises what
    setup raised."""
    if not episode.ended and session.env_cls.mcp_servers:
        await _open_toolbox(runtime, session, episode)
    if episode.ended:
        return
    if _constructs_inline(session.env_cls):
        _construct(session, episode)  # nothing that may block: a thread hop would be most of the cost
    else:
        await run_in_thread(functools.partial(_construct, session, episode), runtime.limiters["lifecycle"])
    assert episode.env is not None
    if inspect.iscoroutinefunction(episode.env.setup):
        await episode.env.setup()
    if session.env_cls.has_task_tools() or session.toolset is not None:
        run = functools.partial(run_user_code, limiter=runtime.limiters["lifecycle"])
        episode.found_own_tools(await episode_tools(episode.env, session.toolset, run))


def _construct(session: Session, episode: Episode) -> None:
    env = session.env_cls(task_spec=session.task_spec, secrets=session.secrets)
    episode.constructed(env)
    if not inspect.iscoroutinefunction(env.setup):
        env.setup()


def _constructs_inline(env_cls: type[Environment]) -> bool:
    """Whether building an instance runs no code of the author's on the event loop: `Environment`'s own
    constructor, and a `setup` that is the base's no-op or async (awaited on the loop anyway)."""
    return env_cls.__init__ is Environment.__init__ and (
        env_cls.setup is Environment.setup or inspect.iscoroutinefunction(env_cls.setup)
    )


async def _open_toolbox(runtime: Runtime, session: Session, episode: Episode) -> None:
    """Connect the episode to its environment's tool servers (and list their tools, the first time)."""
    assert runtime.task_group is not None
    settings = runtime.settings
    toolbox = Toolbox(session.env_cls.mcp_servers, settings.tool_server_log_bytes, runtime.confined)
    episode.connected(toolbox)
    await toolbox.open(runtime.task_group, settings.tool_server_start_timeout)
    await runtime.load_catalogue(session.env_cls, toolbox)


# Reading.


def prompt_blocks(class_name: str, value: Any) -> Blocks:
    """`get_prompt()`'s answer as blocks; WrongReturn naming the method and what it must return if it is not."""
    try:
        blocks: Blocks = _blocks.validate_python(value)
    except ValidationError:
        shown = repr(value)
        raise WrongReturn(
            f"{class_name}.get_prompt() returned {type(value).__name__} {shown[:60]}{'...' if len(shown) > 60 else ''}"
            "; it must return a list of TextBlock or ImageBlock, such as [TextBlock(text=...)]"
        ) from None
    return blocks


async def read(runtime: Runtime, session: Session, env: Environment, method: str) -> Any:
    """`env.<method>()`, checked (`get_prompt` as blocks, `get_messages` as messages); ReadFailed, masked, if it
    raises or returns the wrong thing (the author's bug, logged too)."""
    value: Any
    try:
        if method == "initial_observation" and type(env).initial_observation is Environment.initial_observation:
            # The default is the prompt's text: read (and check) the prompt, so a prompt of the wrong type is named
            # here too rather than read as an empty observation.
            blocks = prompt_blocks(type(env).__name__, await runtime.lifecycle(env.get_prompt))
            return "\n".join(block.text for block in blocks if isinstance(block, TextBlock))
        value = await runtime.lifecycle(getattr(env, method))
        if method == "get_prompt":
            return prompt_blocks(type(env).__name__, value)
        if method == "get_messages":
            return _messages.validate_python(list(value))
        return value
    except WrongReturn as exc:  # the author's bug, said plainly, in the log too
        logger.warning("session %s: %s", session.id, session.redact(str(exc)), extra={"session_id": session.id})
        raise ReadFailed(session.redact(str(exc))) from None
    except Exception as exc:
        raise ReadFailed(session.redact(f"{method} failed: {describe(exc)}")) from None


# Tearing down.


async def tear_down(runtime: Runtime, session: Session, episode: Episode) -> None:
    """Tear down an ended episode's environment after its running call (boundedly), then close its tool servers'
    connections. A teardown that raises or overruns `teardown_timeout` is logged; the ending goes on."""
    timeout = runtime.settings.teardown_timeout
    env = episode.take_env()
    if env is not None:
        # Give a running call a moment to finish; a hung one must not hold the ending, and teardown is what stops
        # it (a sandbox kills its processes).
        await episode.quiet(TEARDOWN_LOCK_WAIT)
        try:
            if type(env).teardown is not Environment.teardown:  # the base's is a no-op: no thread hop
                with anyio.fail_after(timeout):
                    await runtime.lifecycle(env.teardown)
        except Exception as exc:
            logger.error("teardown failed: %s", session.redact(describe(exc)), extra={"session_id": session.id})
    if episode.toolbox is not None:
        await episode.toolbox.close(timeout)
