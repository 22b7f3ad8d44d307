"""The authoring API is light: importing `ors_server` and its authoring names loads neither the web server, the MCP
SDK nor Gymnasium (each in a fresh interpreter, since this one has loaded everything already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ["uvicorn", "starlette", "mcp", "gymnasium", "sse_starlette", "httpx2", "prometheus_client"]


def loaded_after(code: str) -> list[str]:
    """Which of HEAVY a fresh interpreter has loaded after running `code`."""
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import ors_server; ors_server.tool",
        "from ors_server import Environment, ToolOutput, TextBlock, ImageBlock, Split, Blocks, tool",
        "from ors_server import StdioServer, HttpServer",
    ],
)
def test_the_authoring_api_loads_no_server_mcp_or_gymnasium(code: str) -> None:
    assert loaded_after(code) == []


def test_an_environment_written_against_the_api_loads_none_of_them_either() -> None:
    code = (
        "from pydantic import BaseModel\n"
        "from ors_server import Environment, Split, StdioServer, TextBlock, ToolOutput, tool\n"
        "class Guess(BaseModel):\n    number: int\n"
        "class Game(Environment):\n"
        "    mcp_servers = [StdioServer('calc', ['true'])]\n"
        "    @classmethod\n    def list_splits(cls): return ['train']\n"
        "    @classmethod\n    def list_tasks(cls, split): return [{}]\n"
        "    def get_prompt(self): return [TextBlock(text='guess')]\n"
        "    @tool\n    def guess(self, params: Guess) -> ToolOutput:\n"
        "        '''Guess a number.'''\n        return ToolOutput(blocks=[TextBlock(text='no')])\n"
    )
    assert loaded_after(code) == []


def test_gymnasium_comes_with_the_gym_adapter_and_the_server_with_server() -> None:
    assert loaded_after("from ors_server import GymEnvironment") == ["gymnasium"]
    assert {"uvicorn", "starlette", "mcp"} <= set(loaded_after("from ors_server import Server"))
