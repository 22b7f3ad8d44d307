"""The `openreward` client as TRL and SkyRL configure it, without a variant:
`openreward_env_port.py NAME=PORT_URL,MAIN_URL ...` (one server each; the client is imported once for all).

PORT_URL is an environment's own port (`--env-port frozen_lake=PORT`), given as a trainer gives it: in
`OPENREWARD_API_URL` and `OPENREWARD_SESSION_URL`. Plays frozen_lake task 0 to its goal there; lists the tools at
MAIN_URL's bare paths (the server's first environment); and records what the client makes of a base URL with a
path (`http://host:port/frozen_lake`), which is why an environment gets a port rather than a path.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from _common import lake_route, report  # noqa: E402
from openreward import OpenReward  # noqa: E402


def play(port_url: str, main_url: str) -> dict:
    os.environ["OPENREWARD_API_URL"] = os.environ["OPENREWARD_SESSION_URL"] = port_url
    seen: dict = {}
    with OpenReward(api_key="local") as client:
        env = client.environments.get("frozen_lake")  # no variant: the bare paths
        seen["splits"] = env.list_splits()
        seen["tools"] = [tool.name for tool in env.list_tools()]
        with env.session(split="train", index=0) as session:
            prompt = session.get_prompt()[0].text
            grid = json.loads(prompt.split("Initial observation:\n", 1)[1])["grid"].split("\n")
            outputs = [session.call_tool("lake_move", {"action": move}) for move in lake_route(grid)]
            seen["rewards"] = [output.reward for output in outputs]
            seen["finished"] = outputs[-1].finished
        seen["main_tools"] = [tool.name for tool in client.environments.get("any", base_url=main_url).list_tools()]
        try:
            client.environments.get("any", base_url=f"{port_url}/frozen_lake")
            seen["path_without_slash"] = "accepted"
        except ValueError as exc:
            seen["path_without_slash"] = str(exc)
        slashed = client.environments.get("any", base_url=f"{port_url}/frozen_lake/")
        seen["path_with_slash_create"] = str(slashed._async.client._build_url("/create"))  # the SDK's session
    return seen


def main() -> None:
    seen = {}
    for arg in sys.argv[1:]:
        name, urls = arg.split("=", 1)
        port_url, main_url = urls.split(",")
        seen[name] = play(port_url, main_url)
    report(seen)


if __name__ == "__main__":
    main()
