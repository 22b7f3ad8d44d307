"""The synchronous client: the async one, run on an event loop in a thread of its own.

One implementation serves both: the loop thread owns the connection pool and the sessions' keepalive pings, so
a session stays alive while the caller's thread is busy (an LLM call, say).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ors_client.aio import AsyncClient, AsyncSession
from ors_client.types import EpisodeResult, ToolOutput

T = TypeVar("T")


class Client:
    """`AsyncClient`'s surface without `await`; `rollouts` runs a plain-function policy in worker threads."""

    def __init__(self, base_url: str, api_key: str | None = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ors-client", daemon=True)
        self._thread.start()

        async def make() -> AsyncClient:
            return AsyncClient(base_url, api_key, **options)

        self.aio = self._run(make())
        """The `AsyncClient` underneath (its coroutines run on this client's loop only)."""

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("ors_client.Client used from its own event loop: use AsyncClient there")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.aio.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def environments(self) -> list[str]:
        return self._run(self.aio.environments())

    def tools(self, env: str) -> list[dict[str, Any]]:
        return self._run(self.aio.tools(env))

    def splits(self, env: str) -> list[dict[str, Any]]:
        return self._run(self.aio.splits(env))

    def tasks(self, env: str, split: str = "train") -> list[dict[str, Any]]:
        return self._run(self.aio.tasks(env, split))

    def num_tasks(self, env: str, split: str = "train") -> int:
        return self._run(self.aio.num_tasks(env, split))

    def task(self, env: str, split: str, index: int) -> dict[str, Any]:
        return self._run(self.aio.task(env, split, index))

    def session(self, env: str, task: dict[str, Any] | None = None, **options: Any) -> Session:
        """One episode, opened by `with` and deleted when the block ends (see `AsyncClient.session`)."""
        return Session(self, self.aio.session(env, task, **options))

    def group(self, env: str, task: dict[str, Any] | None = None, n: int = 8, **options: Any) -> list[Session]:
        """`n` open sessions on one task; each is a context manager that deletes it."""
        return [Session(self, s) for s in self._run(self.aio.group(env, task, n, **options))]

    def rollouts(
        self,
        env: str,
        tasks: Iterable[dict[str, Any]],
        policy: Callable[[Session], None],
        *,
        n: int = 1,
        concurrency: int | None = None,
        **options: Any,
    ) -> list[EpisodeResult]:
        """`policy(session)` `n` times per task, in `concurrency` worker threads (see `AsyncClient.rollouts`)."""
        width = min(concurrency or self.aio.max_concurrency, self.aio.max_concurrency)
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="ors-rollout") as pool:

            async def run_policy(session: AsyncSession) -> None:
                await asyncio.get_running_loop().run_in_executor(pool, policy, Session(self, session))

            return self._run(self.aio.rollouts(env, tasks, run_policy, n=n, concurrency=width, **options))


class Session:
    """One episode (see `AsyncSession`), driven synchronously."""

    def __init__(self, client: Client, session: AsyncSession) -> None:
        self._client = client
        self.aio = session

    def __enter__(self) -> Session:
        self._client._run(self.aio.open())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._client._run(self.aio.close())

    @property
    def id(self) -> str | None:
        return self.aio.id

    @property
    def env(self) -> str:
        return self.aio.env

    @property
    def task(self) -> dict[str, Any] | None:
        return self.aio.task

    @property
    def reward(self) -> float:
        return self.aio.reward

    @property
    def steps(self) -> int:
        return self.aio.steps

    @property
    def finished(self) -> bool:
        return self.aio.finished

    @property
    def labels(self) -> dict[str, str]:
        return self.aio.labels

    def ping(self) -> None:
        self._client._run(self.aio.ping())

    def prompt(self) -> list[dict[str, Any]]:
        return self._client._run(self.aio.prompt())

    def tools(self) -> list[dict[str, Any]]:
        return self._client._run(self.aio.tools())

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> ToolOutput:
        return self._client._run(self.aio.call(name, arguments))

    def openai_tools(self) -> list[dict[str, Any]]:
        return self.aio.openai_tools()

    def call_openai(self, tool_call: Any) -> dict[str, Any]:
        return self._client._run(self.aio.call_openai(tool_call))

    def messages(self) -> list[dict[str, Any]]:
        return self.aio.messages()
