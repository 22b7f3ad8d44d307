"""OpenEnv's own server for a test environment: `python reference_app.py MODULE:CLASS PORT` (in OpenEnv's venv).

The side-by-side tests run this next to ors-server hosting the same class, and drive both with OpenEnv's clients.
"""

from __future__ import annotations

import importlib
import sys


class NoWebInterface:
    """OpenEnv's Gradio web interface is not served here (ENABLE_WEB_INTERFACE is off) and takes most of OpenEnv's
    import time: hidden as OpenEnv's package expects when Gradio is missing (it catches ModuleNotFoundError)."""

    def find_spec(self, name, path=None, target=None):
        if name == "openenv.core.env_server.web_interface":
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None


sys.meta_path.insert(0, NoWebInterface())

import uvicorn  # noqa: E402
from openenv.core.env_server.http_server import create_app  # noqa: E402
from openenv.core.env_server.mcp_environment import MCPEnvironment  # noqa: E402
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation  # noqa: E402

APPS = {"guess_env:GuessEnvironment": ("GuessAction", "GuessObservation", "GuessState")}


def main() -> None:
    spec, port = sys.argv[1], int(sys.argv[2])
    module_name, _, class_name = spec.partition(":")
    module = importlib.import_module(module_name)
    env_cls = getattr(module, class_name)
    if issubclass(env_cls, MCPEnvironment):
        app = create_app(env_cls, CallToolAction, CallToolObservation, max_concurrent_envs=8)
    else:
        action, observation, state = (getattr(module, name) for name in APPS[spec])
        app = create_app(env_cls, action, observation, max_concurrent_envs=8, state_cls=state)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
