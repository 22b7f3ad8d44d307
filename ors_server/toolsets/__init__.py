"""Toolsets: the tools of a coding harness (claude-code, codex, gemini-cli, ...), acting on a session's `Sandbox`.

A client asks for one at ORS `/create` (`toolset_name`: claude-code, cli, codex, gemini-cli, hermes, openclaw);
the session then has the toolset's tools, with the names and input schemas of `openreward`'s built-in toolsets, on
every face. They act only through the episode's sandbox
(`Environment.toolset_sandbox()`), so every path they touch is the sandbox's.
"""

from __future__ import annotations

from ors_server.environment import Environment, ToolDef
from ors_server.sandboxes.interface import Sandbox
from ors_server.toolsets.base import Toolset
from ors_server.toolsets.claude_code import ClaudeCode
from ors_server.toolsets.cli import CLI
from ors_server.toolsets.codex import Codex
from ors_server.toolsets.gemini_cli import GeminiCli
from ors_server.toolsets.hermes import Hermes
from ors_server.toolsets.openclaw import OpenClaw

TOOLSETS: dict[str, type[Toolset]] = {
    toolset.name: toolset for toolset in (ClaudeCode, CLI, Codex, GeminiCli, Hermes, OpenClaw)
}
"""Each toolset by the name a client asks for."""


def toolset_tools(name: str, sandbox: Sandbox) -> dict[str, ToolDef]:
    """The tools of toolset `name` over `sandbox`, by name (a new instance: its state is the episode's)."""
    return TOOLSETS[name](sandbox).tools()


def toolset_problem(name: str, env_cls: type[Environment]) -> str | None:
    """Why a session of `env_cls` cannot have toolset `name` (None when it can): a message naming the toolsets."""
    if name not in TOOLSETS:
        return f"unknown toolset {name!r}; toolsets: {sorted(TOOLSETS)}"
    if not env_cls.has_toolset_sandbox():
        return (
            f"toolset {name!r} needs a sandbox to act on, and '{env_cls.name}' has none (toolsets: {sorted(TOOLSETS)}; "
            "they run on environments with a sandbox, such as 'shell')"
        )
    return None
