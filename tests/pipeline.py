"""A session store together with its call pipeline, for the tests that drive both without HTTP.

The store (`ors_server.sessions`) keeps sessions and their lifecycle; tool calls are the pipeline's
(`ors_server.calls`). Tests written against one object use this one, whose `call`, `start_call` and
`find_call` are the pipeline's.
"""

from __future__ import annotations

from typing import Any

from ors_server.calls import CallResult, Calls, ToolCall
from ors_server.sessions import Session, SessionStore
from ors_server.settings import Settings


class StoreWithCalls(SessionStore):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.calls = Calls(self)

    def start_call(self, session: Session, name: str, arguments: Any) -> ToolCall:
        return self.calls.start(session, name, arguments)

    async def call(self, session: Session, name: str, arguments: Any) -> CallResult:
        return await self.calls.call(session, name, arguments)

    def find_call(self, session: Session, call_id: str) -> ToolCall | None:
        return self.calls.find(session, call_id)
