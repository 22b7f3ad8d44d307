"""The call pipeline's one observation point: observers see every episode start and end and every finished call,
with what the episode records need (session id, environment, task spec, faces, tool, arguments, result, timing),
and an observer that fails never fails a call."""

from __future__ import annotations

import gc
import time
from typing import Any

import anyio
import httpx
import pytest

from ors_server import ToolOutput
from ors_server.calls import Calls, Observer, ToolCall, ToolCrashed, ToolRejected, wall_clock
from ors_server.codeact import bwrap_problem
from ors_server.episode import Episode, EpisodeEnd
from ors_server.http.app import create_app
from ors_server.sessions import Session, SessionStore
from ors_server.settings import Settings
from tests.ors_envs import FailingSetup, MathLike, Seeded, math_task

pytestmark = pytest.mark.anyio


class Heard(Observer):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.calls: list[dict[str, Any]] = []

    def episode_started(self, session: Session, episode: Episode) -> None:
        self.events.append(("started", session.id, episode.number, session.env_name, session.created_by))

    def episode_ended(self, session: Session, episode: Episode, how: EpisodeEnd) -> None:
        self.events.append(("ended", session.id, episode.number, how))

    def call_ended(self, call: ToolCall) -> None:
        self.calls.append(
            {
                "session": call.session.id,
                "episode": call.episode.number,
                "face": call.face,
                "tool": call.name,
                "arguments": call.arguments,
                "result": call.result,
                "started": call.started,
                "duration": call.duration,
                "step": call.step,
            }
        )


class Failing(Observer):
    def episode_started(self, session: Session, episode: Episode) -> None:
        raise RuntimeError("observer bug")

    def episode_ended(self, session: Session, episode: Episode, how: EpisodeEnd) -> None:
        raise RuntimeError("observer bug")

    def call_ended(self, call: ToolCall) -> None:
        raise RuntimeError("observer bug")


def settings(**overrides: Any) -> Settings:
    return Settings(**{"ready_wait": 5.0, "call_linger": 5.0, **overrides})


async def test_an_observer_sees_each_finished_call_with_its_face_tool_arguments_result_and_timing() -> None:
    store = SessionStore(settings())
    calls = Calls(store)
    heard = Heard()
    calls.observe(heard)
    async with store.run():
        store.create("s", MathLike, math_task())
        session = await store.get_ready("s")
        before = time.monotonic()
        await calls.call(session, "echo", {"text": "hi"}, face="mcp")
        await calls.call(session, "nosuch", {"x": 1}, face="ors")
        await calls.call(session, "boom", {})
        await calls.call(session, "submit", {"answer": "4"}, face="openenv")
    echo, unknown, boom, submit = heard.calls
    assert (echo["session"], echo["episode"], echo["face"], echo["tool"]) == ("s", 0, "mcp", "echo")
    assert echo["arguments"] == {"text": "hi"}
    assert isinstance(echo["result"], ToolOutput) and echo["result"].blocks[0].text == "hi"
    assert before <= echo["started"] and 0 <= echo["duration"] < 5
    assert abs(wall_clock(echo["started"]) - time.time()) < 5
    assert unknown["face"] == "ors" and unknown["arguments"] == {"x": 1}
    assert isinstance(unknown["result"], ToolRejected) and unknown["result"].reason == "not_found"
    assert boom["face"] is None and isinstance(boom["result"], ToolCrashed)
    assert submit["face"] == "openenv" and submit["result"].reward == 1.0 and submit["result"].finished
    assert all(call["step"] is None for call in heard.calls)


async def test_an_observer_hears_each_episode_start_and_end_once_with_how_it_ended() -> None:
    store = SessionStore(settings(session_timeout=60))
    calls = Calls(store)
    heard = Heard()
    calls.observe(heard)
    async with store.run():
        store.create("deleted", MathLike, math_task(), created_by="mcp")
        store.create("reset", Seeded, {"seed": 1})
        session = await store.get_ready("reset")
        await store.reset(session, 2)
        await store.reset(session, 3)
        store.create("reaped", MathLike, math_task())
        store.create("failed", FailingSetup, {})
        store.create("shutdown", MathLike, math_task())
        await store.get_ready("deleted")
        await store.discard("deleted")
        (await store.get_ready("reaped")).last_active -= 61
        await store.reap()
        with pytest.raises(Exception, match="setup"):
            await store.get_ready("failed")
    events = heard.events
    assert ("started", "deleted", 0, "mathlike", "mcp") in events and ("ended", "deleted", 0, "deleted") in events
    assert [e for e in events if e[1] == "reset"] == [
        ("started", "reset", 0, "seeded", "ors"),
        ("started", "reset", 1, "seeded", "ors"),
        ("ended", "reset", 0, "reset"),
        ("started", "reset", 2, "seeded", "ors"),
        ("ended", "reset", 1, "reset"),
        ("ended", "reset", 2, "shutdown"),
    ]
    assert ("ended", "reaped", 0, "reaped") in events
    assert [e for e in events if e[1] == "failed" and e[0] == "ended"] == [("ended", "failed", 0, "setup_failed")]
    assert ("ended", "shutdown", 0, "shutdown") in events


async def test_an_observer_that_raises_is_logged_and_fails_nothing(caplog: pytest.LogCaptureFixture) -> None:
    store = SessionStore(settings())
    calls = Calls(store)
    heard = Heard()
    calls.observe(Failing())
    calls.observe(heard)
    async with store.run():
        store.create("s", MathLike, math_task())
        session = await store.get_ready("s")
        result = await calls.call(session, "submit", {"answer": "4"})
        assert isinstance(result, ToolOutput) and result.reward == 1.0
        assert session.step_count == 1 and session.finished
        await store.reset(session, None)
        assert await store.discard("s")
    assert [call["tool"] for call in heard.calls] == ["submit"]  # the observer after the failing one still heard
    assert [e[0] for e in heard.events] == ["started", "started", "ended", "ended"]
    assert sum("observer bug" in r.getMessage() or "failed" in r.getMessage() for r in caplog.records) >= 4


async def test_a_kept_call_lets_go_of_its_arguments_once_observed() -> None:
    store = SessionStore(settings())
    calls = Calls(store)
    async with store.run():
        store.create("s", MathLike, math_task())
        session = await store.get_ready("s")
        arguments = {"text": "x" * 100}
        running = calls.start(session, "echo", arguments)
        await running.wait()
        assert running.arguments is None
        assert not any(referrer is running for referrer in gc.get_referrers(arguments))
        assert calls.find(session, running.id) is running


async def test_a_call_over_ors_is_observed_as_the_ors_faces() -> None:
    app = create_app([MathLike], settings())
    heard = Heard()
    app.state.calls.observe(heard)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http,
    ):
        headers = {"X-Session-ID": "s"}
        response = await http.post("/create", json={"env_name": "mathlike", "task_spec": math_task()}, headers=headers)
        assert response.status_code == 200, response.text
        with anyio.fail_after(10):
            response = await http.post("/mathlike/call", json={"name": "noargs", "input": {}}, headers=headers)
        assert response.status_code == 200
    assert [(c["face"], c["tool"]) for c in heard.calls] == [("ors", "noargs")]


async def test_the_tool_calls_of_a_codeact_step_are_observed_before_the_step_and_name_it() -> None:
    sandbox = "bwrap" if bwrap_problem() is None else "none"
    store = SessionStore(settings(codeact_sandbox=sandbox))
    calls = Calls(store)
    heard = Heard()
    calls.observe(heard)
    async with store.run():
        store.create("s", MathLike, {**math_task(), "codeact": True})
        session = await store.get_ready("s")
        step = calls.start(session, "execute_code", {"code": "echo(text='a')\nsubmit(answer='4')"}, face="mcp")
        result = await step.wait()
    assert isinstance(result, ToolOutput), result
    assert [(c["tool"], c["step"], c["face"]) for c in heard.calls] == [
        ("echo", step.id, "mcp"),
        ("submit", step.id, "mcp"),
        ("execute_code", None, "mcp"),
    ]
    assert heard.calls[1]["arguments"] == {"answer": "4"}
