"""The session store under random operation sequences, checked against a model (hypothesis stateful testing).

The store runs on an event loop in a blocking portal, as it would under the app's lifespan; every rule
drives it through its public methods and compares what comes back with a plain-Python model: which ids are
live, deleted or reaped, which episodes finished, and how many steps and how much reward each one has.
Every environment instance the store builds journals its teardowns, so "exactly once" is checked per build.
"""

from __future__ import annotations

import itertools
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pydantic import BaseModel

from ors_server import TextBlock, ToolOutput, tool
from ors_server.calls import ToolCrashed, ToolRejected
from ors_server.errors import CapacityReached, SessionDeleted, SessionExists, SessionExpired, SessionNotFound
from ors_server.settings import Settings
from tests.ors_envs import SingleTask
from tests.pipeline import StoreWithCalls

MAX_SESSIONS = 4
IDS = [f"s{i}" for i in range(6)]


class StepInput(BaseModel):
    reward: float


class Built:
    """Every environment instance built during one run, in order."""

    instances: list[Tracked] = []


class Tracked(SingleTask):
    name = "tracked"

    @classmethod
    def task_from_seed(cls, seed: int | None, config: dict[str, Any]) -> dict[str, Any]:
        return {"seed": seed}

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        self.teardowns = 0
        Built.instances.append(self)

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="step")]

    def teardown(self) -> None:
        self.teardowns += 1

    @tool
    def step(self, params: StepInput) -> ToolOutput:
        """Pay the given reward."""
        return ToolOutput(blocks=[TextBlock(text="stepped")], reward=params.reward)

    @tool
    async def finish(self) -> ToolOutput:
        """End the episode, paying 1."""
        return ToolOutput(blocks=[TextBlock(text="done")], reward=1.0, finished=True)

    @tool
    def boom(self) -> ToolOutput:
        """Raise."""
        raise RuntimeError("boom")


@dataclass
class Model:
    steps: int = 0
    total: float = 0.0
    finished: bool = False
    idle: bool = False


rewards = st.sampled_from([0.0, 0.5, 1.0, -1.0])
ids = st.sampled_from(IDS)


class SessionStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Built.instances = []
        self.stack = ExitStack()
        self.portal = self.stack.enter_context(start_blocking_portal("asyncio"))
        settings_ = Settings(max_sessions=MAX_SESSIONS, session_timeout=3600, teardown_timeout=5, tombstones=100)
        self.store = StoreWithCalls(settings_)
        self.stack.enter_context(self.portal.wrap_async_context_manager(self.store.run()))
        self.live: dict[str, Model] = {}
        self.deleted: set[str] = set()
        self.reaped: set[str] = set()
        self.counts = {"created": 0, "deleted": 0, "reaped": 0}
        self.calls = itertools.count()

    def teardown(self) -> None:
        live = len(self.live)
        self.stack.close()  # the store's shutdown tears every live session down
        assert self.store.counts["shutdown"] == live
        assert [env.teardowns for env in Built.instances] == [1] * len(Built.instances)

    # Helpers run on the store's event loop.

    def _run(self, function: Any, *args: Any) -> Any:
        async def bounded() -> Any:
            with anyio.fail_after(10):
                return await function(*args)

        return self.portal.call(bounded)

    def _expect_gone(self, session_id: str) -> None:
        expected = (
            SessionExpired if session_id in self.reaped else SessionDeleted if session_id in self.deleted else None
        )
        with pytest.raises(expected or SessionNotFound) as gone:
            self.portal.call(self.store.get, session_id)
        if expected is SessionDeleted:
            assert type(gone.value) is SessionDeleted, "a deleted id does not say it expired"

    # Rules.

    @rule(session_id=ids, seed=st.none() | st.integers(0, 3))
    def create(self, session_id: str, seed: int | None) -> None:
        def create() -> Any:
            return self.store.create(session_id, Tracked, {"seed": seed}, seed=seed, config={})

        if session_id in self.live:
            with pytest.raises(SessionExists):
                self.portal.call(create)
            return
        if len(self.live) >= MAX_SESSIONS:
            with pytest.raises(CapacityReached):
                self.portal.call(create)
            return
        self.portal.call(create)
        self._run(self.store.get_ready, session_id)
        self.live[session_id] = Model()
        self.deleted.discard(session_id)
        self.reaped.discard(session_id)
        self.counts["created"] += 1

    @rule(session_id=ids, reward=rewards)
    def step(self, session_id: str, reward: float) -> None:
        self._call(session_id, "step", {"reward": reward}, reward)

    @rule(session_id=ids)
    def finish(self, session_id: str) -> None:
        self._call(session_id, "finish", {}, 1.0)

    @rule(session_id=ids, name=st.sampled_from(["boom", "nope"]), bad_input=st.booleans())
    def fail(self, session_id: str, name: str, bad_input: bool) -> None:
        self._call(session_id, "step" if bad_input else name, {"reward": "lots"} if bad_input else {}, None)

    def _call(self, session_id: str, name: str, arguments: dict[str, Any], reward: float | None) -> None:
        if session_id not in self.live:
            self._expect_gone(session_id)
            return
        model = self.live[session_id]
        session = self.portal.call(self.store.get, session_id)
        model.idle = False
        result = self._run(self.store.call, session, name, arguments)
        if model.finished:
            assert isinstance(result, ToolRejected) and result.reason == "episode_finished", result
            return
        if reward is None:
            assert isinstance(result, ToolCrashed | ToolRejected), result
            return
        assert not isinstance(result, ToolCrashed | ToolRejected), result
        model.steps += 1
        model.total += reward
        model.finished = name == "finish"

    @rule(session_id=ids)
    def delete(self, session_id: str) -> None:
        existed = self._run(self.store.discard, session_id, "deleted")
        assert existed == (session_id in self.live)
        if existed:
            del self.live[session_id]
            self.deleted.add(session_id)
            self.reaped.discard(session_id)
            self.counts["deleted"] += 1
        self._expect_gone(session_id)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def go_idle(self, data: st.DataObject) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.live)))
        session = self.portal.call(self.store.get, session_id)
        session.last_active -= 2 * self.store.settings.session_timeout
        self.live[session_id].idle = True

    @rule()
    def reap(self) -> None:
        idle = {session_id for session_id, model in self.live.items() if model.idle}
        assert self._run(self.store.reap) == len(idle)
        for session_id in idle:
            del self.live[session_id]
            self.reaped.add(session_id)
            self.deleted.discard(session_id)
            self.counts["reaped"] += 1
            self._expect_gone(session_id)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), seed=st.none() | st.integers(0, 3))
    def reset(self, data: st.DataObject, seed: int | None) -> None:
        session_id = data.draw(st.sampled_from(sorted(self.live)))
        session = self.portal.call(self.store.get, session_id)
        self._run(self.store.reset, session, seed)
        self.live[session_id] = Model()
        assert session.env is not None and session.env.task_spec == {"seed": seed}

    # Invariants.

    @invariant()
    def store_matches_model(self) -> None:
        assert sorted(s.id for s in self.store.sessions()) == sorted(self.live)
        for session in self.store.sessions():
            model = self.live[session.id]
            assert session.step_count == model.steps
            assert session.total_reward == pytest.approx(model.total)
            assert session.finished == model.finished
            assert not session.running_calls

    @invariant()
    def counters_match_model(self) -> None:
        for event, expected in self.counts.items():
            assert self.store.counts[event] == expected, event

    @invariant()
    def every_built_environment_is_torn_down_once_unless_it_is_current(self) -> None:
        current = {id(session.env) for session in self.store.sessions()}
        for env in Built.instances:
            assert env.teardowns == (0 if id(env) in current else 1)


SessionStoreMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
test_session_store_keeps_its_invariants_under_random_operations = SessionStoreMachine.TestCase
