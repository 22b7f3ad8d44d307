"""One worker process: the unchanged server on a Unix socket, started by the local supervisor.

`python -m ors_server.scale.worker` reads its spec (environments, settings, socket path) as JSON from
`ORS_WORKER_SPEC`; the API key, if any, comes from `ORS_API_KEY` as for any server, never from argv.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Sequence

from ors_server.http.app import create_app
from ors_server.http.server import UvicornServer, configure_logging, uvicorn_config
from ors_server.loading import resolve_environments
from ors_server.settings import Settings

SPEC_VARIABLE = "ORS_WORKER_SPEC"


def spec(envs: Sequence[str], settings: Settings, uds: str) -> str:
    """The JSON a worker process is started with (the API key is left out: it travels in the environment).
    `app_dir` is the supervisor's working directory, where `--env module:Class` modules are imported from."""
    return json.dumps({"envs": list(envs), "settings": settings.to_json(), "uds": uds, "app_dir": os.getcwd()})


def _exit_with_parent() -> None:
    """A worker whose supervisor is gone (killed without a chance to stop it) drains and exits by itself."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> None:
    loaded = json.loads(os.environ[SPEC_VARIABLE])
    settings = Settings.from_json(loaded["settings"])
    configure_logging(settings.log_level)
    app = create_app(resolve_environments(loaded["envs"], loaded["app_dir"]), settings)
    config = uvicorn_config(app, settings, uds=loaded["uds"])
    _exit_with_parent()
    UvicornServer(config, on_exit=app.state.store.stop_admitting).run()


if __name__ == "__main__":
    main()
