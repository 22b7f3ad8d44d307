"""`ors-client`: a light async client for Open Reward Standard servers, for rollouts at scale.

from ors_client import AsyncClient

async with AsyncClient("http://127.0.0.1:8000") as c:
    async with c.session("math", task=(await c.tasks("math"))[0]) as s:
        print(await s.prompt())
        print((await s.call("submit", {"answer": "4"})).reward)
"""

from ors_client.aio import AsyncClient, AsyncSession, Group
from ors_client.errors import (
    AuthError,
    ConnectionFailed,
    OrsError,
    Redirected,
    ResponseTooLarge,
    ServerFull,
    SessionExpired,
    SessionNotFound,
    StreamCut,
    ToolError,
)
from ors_client.sync import Client, Session
from ors_client.types import EpisodeResult, ToolOutput

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AuthError",
    "Client",
    "ConnectionFailed",
    "EpisodeResult",
    "Group",
    "OrsError",
    "Redirected",
    "ResponseTooLarge",
    "ServerFull",
    "Session",
    "SessionExpired",
    "SessionNotFound",
    "StreamCut",
    "ToolError",
    "ToolOutput",
]
