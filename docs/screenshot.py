"""Make the README's screenshots of `/ui`: a real server with a few episodes, photographed by headless chromium.

    python docs/screenshot.py            # writes docs/ui-episodes.png and docs/ui-episode.png

It needs the `[test]` extra (Playwright, which drives the system's chromium: Debian's `chromium` package, or the
binary named by ORS_CHROMIUM; nothing is downloaded). The server runs in this process, on a free loopback port,
with its episode records in a temporary directory; the episodes are played over ORS with httpx.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ors_server.environments.frozen_lake import FrozenLake  # noqa: E402
from ors_server.environments.math import TASKS, Math  # noqa: E402
from ors_server.http.app import create_app  # noqa: E402
from ors_server.http.server import uvicorn_config  # noqa: E402
from ors_server.settings import Settings  # noqa: E402

KEY = "screenshot-key"
VIEWPORT = {"width": 1180, "height": 760}
EPISODE_VIEWPORT = {"width": 1180, "height": 1180}


def play(
    client: httpx.Client, env: str, labels: str, task: dict[str, Any], moves: list[tuple[str, dict[str, Any]]]
) -> str:
    sid = client.post("/create_session").json()["sid"]
    created = client.post(
        "/create", headers={"X-Session-ID": sid, "X-Episode-Labels": labels}, json={"env_name": env, **task}
    )
    created.raise_for_status()
    for name, arguments in moves:
        client.post(
            f"/{env}/call", headers={"X-Session-ID": sid}, json={"name": name, "input": arguments}
        ).raise_for_status()
    return sid


def episodes(client: httpx.Client) -> str:
    """Two ended math episodes (one right, one wrong), and a FrozenLake episode played to its goal and not yet
    deleted (live); the lake's id."""
    for index, right in ((0, True), (1, False)):
        answer = str(TASKS["train"][index]["answer"]) if right else "12345"
        sid = play(
            client, "math", "run=demo,model=m1", {"split": "train", "index": index}, [("submit", {"answer": answer})]
        )
        client.post("/delete", headers={"X-Session-ID": sid})
    # Train task 0's lake is xFFF / HHFF / FHHF / HFFG: six moves to the goal (reward 1 on the last).
    moves = [("lake_move", {"action": action}) for action in ("RIGHT", "RIGHT", "DOWN", "RIGHT", "DOWN", "DOWN")]
    return play(client, "frozen_lake", "run=demo,model=m1", {"split": "train", "index": 0}, moves)


def main() -> None:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("ORS_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        sys.exit("no chromium: install Debian's `chromium` or set ORS_CHROMIUM")
    with tempfile.TemporaryDirectory() as records:
        app = create_app([Math, FrozenLake], Settings(api_key=KEY, records=str(Path(records) / "episodes.db")))
        config = uvicorn_config(app, app.state.settings, host="127.0.0.1", port=0, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:  # a thread gives no event to wait on: poll, bounded
            if not thread.is_alive():
                sys.exit("the server did not start")
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, headers={"X-API-Key": KEY}, timeout=30) as client:
                lake = episodes(client)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium)
                page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
                page.goto(base + "/ui")
                page.fill("input[name=key]", KEY)
                page.click("#login button[type=submit]")
                page.wait_for_selector(f'#episodes tr[data-id="{lake}"]')
                page.screenshot(path=str(ROOT / "docs" / "ui-episodes.png"))
                page.set_viewport_size(EPISODE_VIEWPORT)
                page.goto(f"{base}/ui/episode?id={lake}")
                page.wait_for_selector("#calls .call >> nth=5")
                page.screenshot(path=str(ROOT / "docs" / "ui-episode.png"))
                browser.close()
        finally:
            server.should_exit = True
            thread.join(timeout=30)


if __name__ == "__main__":
    main()
