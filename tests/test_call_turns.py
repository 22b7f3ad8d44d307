"""How calls share an episode, as `openreward`'s server decides it (`ors_server.runtime.call_gate`): the calls of one
tool run one at a time in the order they came, other tools' calls alongside; `@tool(concurrent=True)` alongside
anything; `@tool(exclusive=True)` and `@terminal` tools alone, before the calls that came after them; a call queued
behind the one that finished the episode is refused, and a result of a call during which another finished it is
dropped. Driven through the call pipeline without HTTP; tests/hosts/test_openreward_contract.py holds the same
contract side by side with the reference server, over raw HTTP and with openreward's own client."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from ors_server import Environment, TextBlock, ToolOutput, terminal, tool
from ors_server.calls import CallResult, ToolCall, ToolRejected
from ors_server.runtime.call_gate import CallGate
from ors_server.settings import Settings
from tests.pipeline import StoreWithCalls

pytestmark = pytest.mark.anyio


class Step(BaseModel):
    n: int = 0
    finish: bool = False


class Turns(Environment):
    """Every call logs its entry and exit; `hold` waits until `open` is called."""

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        self.opened = asyncio.Event()
        self.log: list[str] = []

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Take turns.")]

    async def _hold(self, name: str, params: Step) -> ToolOutput:
        self.log.append(f"{name}{params.n}+")
        await self.opened.wait()
        self.log.append(f"{name}{params.n}-")
        return ToolOutput(blocks=[TextBlock(text=name)], reward=1.0, finished=params.finish)

    @tool
    async def hold(self, params: Step) -> ToolOutput:
        return await self._hold("hold", params)

    @tool
    async def other(self, params: Step) -> ToolOutput:
        return await self._hold("other", params)

    @tool(concurrent=True)
    async def free(self, params: Step) -> ToolOutput:
        return await self._hold("free", params)

    @tool(concurrent=True)
    async def open(self) -> ToolOutput:
        self.opened.set()
        return ToolOutput(blocks=[TextBlock(text="open")])

    @tool(exclusive=True)
    async def alone(self, params: Step) -> ToolOutput:
        self.log.append(f"alone{params.n}")
        return ToolOutput(blocks=[TextBlock(text="alone")], reward=1.0, finished=params.finish)


async def _turns(store: StoreWithCalls) -> tuple[Any, Turns]:
    store.create("turns", Turns, {})
    with anyio.fail_after(5):
        session = await store.get_ready("turns")
    env = session.episode.env
    assert isinstance(env, Turns)
    return session, env


def _start(store: StoreWithCalls, session: Any, name: str, **arguments: Any) -> ToolCall:
    return store.start_call(session, name, arguments)


async def _results(*calls: ToolCall) -> list[CallResult]:
    with anyio.fail_after(5):
        return [await call.wait() for call in calls]


async def test_calls_of_one_tool_run_in_the_order_they_came_and_other_tools_run_alongside() -> None:
    store = StoreWithCalls(Settings())
    async with store.run():
        session, env = await _turns(store)
        holds = [_start(store, session, "hold", n=n) for n in range(3)]
        other = _start(store, session, "other", n=0)
        await anyio.wait_all_tasks_blocked()
        assert env.log == ["hold0+", "other0+"]  # one call of `hold` in, the other tool's alongside
        await _results(_start(store, session, "open"))
        await _results(*holds, other)
        assert [entry for entry in env.log if entry.startswith("hold")] == [
            "hold0+",
            "hold0-",
            "hold1+",
            "hold1-",
            "hold2+",
            "hold2-",
        ]


async def test_a_concurrent_tools_calls_run_alongside_each_other_and_every_serialised_call() -> None:
    store = StoreWithCalls(Settings())
    async with store.run():
        session, env = await _turns(store)
        calls = [_start(store, session, "hold", n=0), _start(store, session, "free", n=1)]
        calls.append(_start(store, session, "free", n=2))
        await anyio.wait_all_tasks_blocked()
        assert env.log == ["hold0+", "free1+", "free2+"]
        await _results(_start(store, session, "open"), *calls)


async def test_an_exclusive_call_waits_for_the_running_calls_and_goes_before_those_that_came_after_it() -> None:
    store = StoreWithCalls(Settings())
    async with store.run():
        session, env = await _turns(store)
        running = _start(store, session, "hold", n=0)
        exclusive = _start(store, session, "alone", n=1)
        later = _start(store, session, "free", n=2)
        await anyio.wait_all_tasks_blocked()
        assert env.log == ["hold0+"]  # the exclusive call waits, and the concurrent one that came after it too
        env.opened.set()  # from the test: `open` itself would wait behind the exclusive call
        await _results(running, exclusive, later)
        assert env.log == ["hold0+", "hold0-", "alone1", "free2+", "free2-"]


async def test_a_call_queued_behind_the_call_that_finishes_the_episode_is_refused_without_running() -> None:
    store = StoreWithCalls(Settings())
    async with store.run():
        session, env = await _turns(store)
        finishing = _start(store, session, "hold", n=0, finish=True)
        queued = _start(store, session, "hold", n=1)
        await anyio.wait_all_tasks_blocked()
        await _results(_start(store, session, "open"))
        done, refused = await _results(finishing, queued)
        assert isinstance(done, ToolOutput) and done.finished
        assert isinstance(refused, ToolRejected) and refused.reason == "episode_finished"
        assert "hold1+" not in env.log
        assert (session.episode.step_count, session.last_reward) == (2, 1.0)  # `hold0` and `open`


async def test_the_first_finished_wins_when_two_tools_finish_the_episode_alongside_each_other() -> None:
    store = StoreWithCalls(Settings())
    async with store.run():
        session, env = await _turns(store)
        first = _start(store, session, "hold", n=0, finish=True)
        second = _start(store, session, "other", n=1, finish=True)
        await anyio.wait_all_tasks_blocked()
        env.opened.set()
        won, dropped = await _results(first, second)
        assert isinstance(won, ToolOutput) and won.finished
        assert isinstance(dropped, ToolRejected) and dropped.reason == "episode_finished"
        assert "another call finished the episode meanwhile" in dropped.message
        assert (session.episode.step_count, session.episode.total_reward) == (1, 1.0)  # one grade, not two


async def test_an_episodes_gate_is_a_few_slots_again_once_its_calls_have_ended() -> None:
    # Every episode has a gate, idle sessions included: what it holds while calls run is let go after them.
    store = StoreWithCalls(Settings())
    async with store.run():
        session, env = await _turns(store)
        calls = [_start(store, session, "hold", n=0), _start(store, session, "hold", n=1)]
        await anyio.wait_all_tasks_blocked()
        await _results(_start(store, session, "open"), *calls)
        gate = session.episode.gate
        assert gate.tools is None and gate._queue is None and not gate.busy and sys.getsizeof(gate) <= 64


class Answer(BaseModel):
    answer: str


def test_a_terminal_tool_is_exclusive_and_may_not_be_concurrent() -> None:
    class Graded(Turns):
        @terminal
        @tool
        def submit(self, params: Answer) -> ToolOutput:
            return ToolOutput(blocks=[TextBlock(text="ok")], finished=True)

    assert Graded.tools["submit"].exclusive and not Graded.tools["hold"].exclusive
    with pytest.raises(TypeError, match="concurrent"):

        class Wrong(Turns):
            @terminal
            @tool(concurrent=True)
            def submit(self, params: Answer) -> ToolOutput:
                return ToolOutput(blocks=[TextBlock(text="ok")], finished=True)


async def test_a_wait_cancelled_just_as_it_was_granted_gives_the_episode_back() -> None:
    gate = CallGate()
    assert gate.try_enter(None, True)
    waiting = asyncio.ensure_future(gate.enter("hold", False))
    await anyio.wait_all_tasks_blocked()
    gate.leave(None, True)  # hands the episode to the waiter...
    waiting.cancel()  # ...which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not gate.busy and gate.tools is None and gate.try_enter(None, True)
