"""fastmcp 4 in its default mode (it probes `server/discover`): FrozenLake episodes through an episode URL, through
`X-Session-ID`, through the plain `/frozen_lake/mcp` and `/mcp` (its protocol session's own episode), and (forced to
2025) through its protocol session; rewards read from `structuredContent`. Each way's failure is reported as its own.

Usage: fastmcp_episode.py ORS_URL   (a server whose default environment is frozen_lake)
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

from _common import lake_route, post, report
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport


def create(base: str, seed: int) -> str:
    sid = f"fastmcp-{uuid.uuid4().hex[:12]}"
    body = json.dumps({"env_name": "frozen_lake", "task_spec": {"seed": seed}}).encode()
    status, text = post(base, "/create", {"X-Session-ID": sid, "Content-Type": "application/json"}, body)
    if status != 200:
        raise RuntimeError(f"/create answered {status}: {text}")
    return sid


async def play(client: Client) -> dict:
    prompt = (await client.get_prompt("task")).messages[0].content.text
    grid = json.loads(prompt.split("Initial observation:\n", 1)[1])["grid"]
    steps = []
    for action in lake_route(grid.split("\n")):
        result = await client.call_tool("lake_move", {"action": action})
        steps.append({"text": result.content[0].text, "structured": result.structured_content})
    version = getattr(client.session, "protocol_version", None)
    return {"protocol_version": version, "steps": steps}


async def attempt(client: Client) -> dict:
    """Play one episode with `client`, or say how it failed (so one way's failure does not hide the others)."""
    try:
        async with client:
            return await play(client)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


async def main(base: str) -> dict:
    out = {}
    out["episode_url"] = await attempt(Client(f"{base}/frozen_lake/mcp/episodes/{create(base, 3)}"))
    transport = StreamableHttpTransport(f"{base}/frozen_lake/mcp", headers={"X-Session-ID": create(base, 4)})
    out["x_session_id"] = await attempt(Client(transport))
    # As users write it: unchanged code, no episode named, the default mode.
    out["plain_env_url"] = await attempt(Client(f"{base}/frozen_lake/mcp"))
    out["plain_default_url"] = await attempt(Client(f"{base}/mcp"))
    out["protocol_session"] = await attempt(Client(f"{base}/frozen_lake/mcp", mode="legacy"))
    return out


if __name__ == "__main__":
    report(asyncio.run(main(sys.argv[1])))
