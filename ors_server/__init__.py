"""ors-server: serve RL environments for LLM agents as sessions, over ORS, MCP and Eval Protocol's control plane.

What an environment author imports lives here; everything else in the package is internal.
"""

from ors_server.compose import HttpServer, StdioServer
from ors_server.environment import Environment, tool
from ors_server.gym import GymEnvironment
from ors_server.server import Server
from ors_server.types import Blocks, ImageBlock, Split, TextBlock, ToolOutput

__all__ = [
    "Blocks",
    "Environment",
    "GymEnvironment",
    "HttpServer",
    "ImageBlock",
    "Server",
    "Split",
    "StdioServer",
    "TextBlock",
    "ToolOutput",
    "tool",
]
