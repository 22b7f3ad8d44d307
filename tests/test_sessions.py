"""The session core without HTTP: ids, readiness, the call pipeline, endings, the reaper, shutdown."""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import time
import tracemalloc

import anyio
import anyio.lowlevel
import pytest

from ors_server import Environment, TextBlock, ToolOutput, tool
from ors_server.calls import ToolCrashed, ToolRejected
from ors_server.episode import State
from ors_server.errors import (
    CapacityReached,
    InvalidSessionId,
    InvalidTask,
    SessionBusy,
    SessionDeleted,
    SessionExists,
    SessionExpired,
    SessionNotFound,
    SessionStarting,
    SetupFailed,
    ShuttingDown,
    WrongEnvironment,
)
from ors_server.sessions import SessionStore
from ors_server.settings import Settings
from tests.ors_envs import (
    FailingSetup,
    MathLike,
    OtherEnv,
    Seeded,
    SlowSetup,
    SlowTeardown,
    count,
    gate,
    journal,
    math_task,
    new_tag,
    secrets_seen,
)
from tests.pipeline import StoreWithCalls

pytestmark = pytest.mark.anyio


def settings(**overrides: object) -> Settings:
    return Settings(**{"ready_wait": 0.5, "call_linger": 0.5, "shutdown_grace": 1.0, **overrides})  # type: ignore[arg-type]


FAST = settings()


async def eventually(predicate, within: float = 5.0) -> None:
    """Poll `predicate`: the state it reads is changed by worker threads, which cannot set an anyio.Event."""
    with anyio.fail_after(within):
        while True:
            if predicate():
                return
            await anyio.sleep(0.01)


async def ready(store: SessionStore, sid: str, env_cls=MathLike, task_spec=None, secrets=None):
    store.create(sid, env_cls, task_spec if task_spec is not None else math_task(), secrets)
    with anyio.fail_after(5):
        return await store.get_ready(sid)


# Ids.


@pytest.mark.parametrize("sid", ["a", "A-b_c.d:e", "0" * 128, "fb6dd37b-14f2-4146-97df-3a637e379c55"])
async def test_valid_session_ids_are_accepted(sid: str) -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        store.create(sid, MathLike, math_task())
        assert sid in store


@pytest.mark.parametrize("sid", ["", "0" * 129, "a b", "a/b", "séssion", "a\tb", "x" * 10_240])
async def test_invalid_session_ids_are_refused(sid: str) -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        with pytest.raises(InvalidSessionId):
            store.create(sid, MathLike, math_task())
        assert len(store) == 0


async def test_creating_an_existing_session_id_raises_session_exists() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        store.create("dup", MathLike, math_task())
        with pytest.raises(SessionExists):
            store.create("dup", OtherEnv, {})
        assert store.get("dup").env_cls is MathLike


async def test_creating_beyond_max_sessions_raises_capacity_reached() -> None:
    store = StoreWithCalls(settings(max_sessions=2))
    async with store.run():
        store.create("one", MathLike, math_task())
        store.create("two", MathLike, math_task())
        with pytest.raises(CapacityReached):
            store.create("three", MathLike, math_task())
        await store.discard("one")
        store.create("three", MathLike, math_task())


# Finding sessions.


async def test_an_unknown_session_raises_session_not_found() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        with pytest.raises(SessionNotFound):
            store.get("nobody")


async def test_a_deleted_session_raises_session_deleted_and_a_reaped_one_session_expired() -> None:
    store = StoreWithCalls(settings(session_timeout=90))
    async with store.run():
        await ready(store, "deleted")
        await ready(store, "reaped")
        await store.discard("deleted", "deleted")
        await store.discard("reaped", "reaped")
        with pytest.raises(SessionDeleted) as deleted:
            store.get("deleted")
        assert type(deleted.value) is SessionDeleted and deleted.value.message == "Session deleted"
        with pytest.raises(SessionExpired) as expired:
            store.get("reaped")
        assert expired.value.status == 410
        assert expired.value.message == "Session expired after 90 s of inactivity (--session-timeout)"


async def test_each_reaped_session_is_logged_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ors_server.sessions")
    store = SessionStore(settings(session_timeout=60))
    async with store.run():
        for sid in ("idle-1", "idle-2", "busy"):
            await ready(store, sid)
        for sid in ("idle-1", "idle-2"):
            store.get(sid).last_active -= 75
        assert await store.reap() == 2
        await store.discard("busy", "deleted")
    reaped = [r for r in caplog.records if r.name == "ors_server.sessions" and "reaped" in r.getMessage()]
    lines = sorted(r.getMessage() for r in reaped)
    pattern = r"session (idle-\d) \(mathlike\) reaped: no request for (\d+) s \(--session-timeout 60\)"
    matches = [re.fullmatch(pattern, line) for line in lines]
    assert all(matches) and [m.group(1) for m in matches if m] == ["idle-1", "idle-2"], lines
    assert all(int(m.group(2)) >= 75 for m in matches if m), lines
    assert {r.levelno for r in reaped} == {logging.INFO}


async def test_a_deleted_session_id_can_be_created_again() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        await ready(store, "again")
        await store.discard("again")
        session = await ready(store, "again", OtherEnv, {"start": 3})
        assert session.env_cls is OtherEnv


async def test_tombstones_are_bounded_and_the_oldest_forgotten_answers_not_found() -> None:
    store = StoreWithCalls(settings(tombstones=2))
    async with store.run():
        for sid, how in (("s1", "reaped"), ("s2", "deleted"), ("s3", "reaped")):
            store.create(sid, MathLike, math_task())
            await store.discard(sid, how)  # type: ignore[arg-type]
        with pytest.raises(SessionNotFound):
            store.get("s1")
        with pytest.raises(SessionDeleted):
            store.get("s2")
        with pytest.raises(SessionExpired):
            store.get("s3")


async def test_getting_a_session_through_another_environment_raises_wrong_environment() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        await ready(store, "mine")
        with pytest.raises(WrongEnvironment):
            store.get("mine", "otherenv")
        assert store.get("mine", "mathlike").id == "mine"


async def test_get_refreshes_the_idle_timer() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "touched")
        session.last_active -= 100
        before = session.last_active
        store.get("touched")
        assert session.last_active > before + 99


# Setup and readiness.


async def test_create_returns_before_setup_and_builds_the_env_with_task_spec_and_secrets() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        session = store.create("s", SlowSetup, {"tag": tag}, {"KEY": "value"})
        assert session.state is State.SETTING_UP
        assert "setup-done" not in journal(tag)
        gate(tag).set()
        with anyio.fail_after(5):
            session = await store.get_ready("s")
        assert session.state is State.READY
        assert session.env is not None and session.env.task_spec == {"tag": tag}
        assert secrets_seen(tag) == {"KEY": "value"}
        assert journal(tag) == ["init", "setup", "setup-done"]


async def test_get_ready_raises_session_starting_after_ready_wait_while_setup_runs() -> None:
    tag = new_tag()
    store = StoreWithCalls(settings(ready_wait=0.2))
    try:
        async with store.run():
            store.create("slow", SlowSetup, {"tag": tag})
            with anyio.fail_after(5), pytest.raises(SessionStarting):
                await store.get_ready("slow")
            gate(tag).set()
            with anyio.fail_after(5):
                while True:
                    try:
                        await store.get_ready("slow")
                        break
                    except SessionStarting:
                        pass
    finally:
        gate(tag).set()


async def test_get_ready_raises_setup_failed_with_the_exception_type_and_text() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        store.create("fails", FailingSetup, {"tag": tag})
        with anyio.fail_after(5), pytest.raises(SetupFailed) as info:
            await store.get_ready("fails")
        assert info.value.message == "ValueError: setup exploded"
        assert store.get("fails").state is State.SETUP_FAILED


async def test_a_setup_error_has_secret_values_redacted() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        store.create("fails", FailingSetup, {"tag": tag}, {"TOKEN": "tok-very-secret"})
        with anyio.fail_after(5), pytest.raises(SetupFailed) as info:
            await store.get_ready("fails")
        assert "tok-very-secret" not in info.value.message
        assert info.value.message.startswith("ValueError: setup exploded")


async def test_deleting_a_session_while_a_request_waits_for_setup_raises_session_deleted() -> None:
    tag = new_tag()
    store = StoreWithCalls(settings(ready_wait=5.0))
    outcome: list[BaseException] = []

    async def wait_ready() -> None:
        try:
            await store.get_ready("gone")
        except Exception as exc:
            outcome.append(exc)

    try:
        async with store.run():
            store.create("gone", SlowSetup, {"tag": tag})
            with anyio.fail_after(5):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait_ready)
                    await anyio.wait_all_tasks_blocked()
                    await store.discard("gone")
    finally:
        gate(tag).set()
    assert len(outcome) == 1 and isinstance(outcome[0], SessionDeleted), outcome


# The call pipeline.


async def test_a_successful_call_records_reward_finished_and_step_count() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s", task_spec=math_task(0, tag))
        result = await store.call(session, "noargs", {})
        assert isinstance(result, ToolOutput) and result.blocks[0].text == "pong"
        assert (session.step_count, session.finished) == (1, False)
        result = await store.call(session, "submit", {"answer": "4"})
        assert isinstance(result, ToolOutput)
        assert (result.reward, result.finished) == (1.0, True)
        assert (session.step_count, session.last_reward, session.total_reward) == (2, 1.0, 1.0)
        assert session.finished and session.state is State.FINISHED


async def test_an_unknown_tool_is_rejected_as_not_found() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s")
        result = await store.call(session, "nosuch", {})
        assert isinstance(result, ToolRejected) and result.reason == "not_found"
        assert "nosuch" in result.message


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("submit", {}), ("submit", {"answer": ["4"]}), ("submit", None), ("noargs", {"unexpected": 1})],
)
async def test_invalid_input_is_rejected_as_input_validation_and_the_tool_does_not_run(
    name: str, arguments: object
) -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s", task_spec=math_task(0, tag))
        result = await store.call(session, name, arguments)
        assert isinstance(result, ToolRejected) and result.reason == "input_validation"
        assert count(tag, name) == 0
        assert session.step_count == 0


async def test_calls_after_the_episode_finished_are_rejected_and_not_run() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s", task_spec=math_task(0, tag))
        await store.call(session, "submit", {"answer": "wrong"})
        for name, arguments in [("noargs", {}), ("submit", {"answer": "4"}), ("nosuch", {})]:
            result = await store.call(session, name, arguments)
            assert isinstance(result, ToolRejected) and result.reason == "episode_finished", result
        assert count(tag, "noargs") == 0 and count(tag, "submit") == 1
        assert session.last_reward == 0.0


async def test_a_raising_tool_yields_tool_crashed_with_the_exception_text_and_the_session_lives_on() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s")
        result = await store.call(session, "boom", {})
        assert result == ToolCrashed("RuntimeError: kaboom")
        assert isinstance(await store.call(session, "noargs", {}), ToolOutput)


async def test_a_tool_returning_something_else_than_tool_output_yields_tool_crashed() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s")
        result = await store.call(session, "not_output", {})
        assert isinstance(result, ToolCrashed) and "ToolOutput" in result.message


async def test_a_tool_error_has_secret_values_redacted() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s", secrets={"A": "alpha-secret-1", "B": "beta-secret-2"})
        result = await store.call(session, "leak", {})
        assert isinstance(result, ToolCrashed)
        assert "alpha-secret-1" not in result.message and "beta-secret-2" not in result.message
        assert "cannot log in with" in result.message
        assert "alpha-secret-1" not in repr(session)


async def test_a_tool_slower_than_tool_timeout_is_rejected_as_timeout() -> None:
    store = StoreWithCalls(settings(tool_timeout=0.1))
    async with store.run():
        session = await ready(store, "s")
        with anyio.fail_after(5):
            result = await store.call(session, "sleep", {"seconds": 5})
        assert isinstance(result, ToolRejected) and result.reason == "timeout"


async def test_sync_tools_run_off_the_event_loop() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    try:
        async with store.run():
            session = await ready(store, "s", task_spec=math_task(0, tag))
            running = store.start_call(session, "wait", {})
            # Were the sync tool run on the loop, this test would never get to open the gate.
            await eventually(lambda: "wait-start" in journal(tag))
            with anyio.fail_after(5):
                gate(tag).set()
                result = await running.wait()
            assert isinstance(result, ToolOutput) and result.blocks[0].text == "waited"
    finally:
        gate(tag).set()


async def test_calls_of_one_tool_in_one_session_are_serialised() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s", task_spec=math_task(0, tag))
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(store.call, session, "sleep", {"seconds": 0.05})
        sleeps = [entry for entry in journal(tag) if entry.startswith("sleep")]
        assert sleeps == ["sleep-start", "sleep-end"] * 3


async def test_calls_into_different_sessions_run_concurrently() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        first = await ready(store, "first", task_spec=math_task(0, tag))
        second = await ready(store, "second", task_spec=math_task(0, tag))
        results: list[object] = []

        async def meet(session) -> None:
            results.append(await store.call(session, "rendezvous", {}))

        with anyio.fail_after(8):
            async with anyio.create_task_group() as tg:
                tg.start_soon(meet, first)
                tg.start_soon(meet, second)
        assert all(isinstance(r, ToolOutput) for r in results), results


async def test_a_finished_call_can_be_found_by_id_until_call_linger_passes() -> None:
    store = StoreWithCalls(settings(call_linger=0.2))
    async with store.run():
        session = await ready(store, "s")
        running = store.start_call(session, "noargs", {})
        assert len(running.id) == 32
        result = await running.wait()
        assert store.find_call(session, running.id) is running
        assert (await store.find_call(session, running.id).wait()) is result
        await eventually(lambda: store.find_call(session, running.id) is None)
        assert store.find_call(session, "0" * 32) is None


async def test_a_finished_call_kept_for_replay_holds_few_objects_for_the_garbage_collector() -> None:
    # Thousands of finished calls linger at a high call rate, and every full collection walks each of their
    # objects: a kept call is its slots and its result (it used to carry two events and a deque as well).
    store = StoreWithCalls(settings(call_linger=60.0))
    async with store.run():
        session = await ready(store, "s")
        for _ in range(50):  # warm: the first calls create caches of their own
            await store.call(session, "noargs", {})
        gc.collect()
        before = len(gc.get_objects())
        calls = 500
        for _ in range(calls):
            await store.call(session, "noargs", {})
        gc.collect()
        per_call = (len(gc.get_objects()) - before) / calls
        assert len(session.episode.calls) == 550
    assert per_call <= 8, per_call


async def test_a_call_id_is_scoped_to_its_session() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        first = await ready(store, "first")
        second = await ready(store, "second")
        running = store.start_call(first, "noargs", {})
        await running.wait()
        assert store.find_call(second, running.id) is None


# Endings.


async def test_discard_forgets_the_session_before_teardown_and_tears_down_exactly_once() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        await ready(store, "s", task_spec=math_task(0, tag))
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(store.discard, "s")
        assert "s" not in store
        assert await store.discard("s") is False
        assert count(tag, "teardown") == 1
    assert count(tag, "teardown") == 1


async def test_teardown_completes_even_when_the_discarding_caller_is_cancelled() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        await ready(store, "s", task_spec=math_task(0, tag))
        with anyio.CancelScope() as scope:
            scope.cancel()
            await store.discard("s")
        assert count(tag, "teardown") == 1
        assert "s" not in store


async def test_discarding_a_session_with_failed_setup_still_tears_it_down_once() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        store.create("fails", FailingSetup, {"tag": tag})
        with anyio.fail_after(5), pytest.raises(SetupFailed):
            await store.get_ready("fails")
        await store.discard("fails")
    assert count(tag, "teardown") == 1


async def test_discarding_a_session_whose_setup_is_still_running_does_not_wait_for_setup() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    try:
        async with store.run():
            store.create("slow", SlowSetup, {"tag": tag})
            await eventually(lambda: "setup" in journal(tag))
            with anyio.fail_after(3):
                await store.discard("slow")
            assert "slow" not in store
    finally:
        gate(tag).set()


async def test_a_session_discarded_right_after_create_tears_down_every_environment_it_built() -> None:
    tags = [new_tag() for _ in range(40)]
    store = StoreWithCalls(FAST)
    async with store.run():
        for i, tag in enumerate(tags):
            store.create(tag, MathLike, math_task(0, tag))
            for _ in range(i % 8):
                await anyio.lowlevel.checkpoint()
            await store.discard(tag)
        with contextlib.suppress(TimeoutError):
            await eventually(lambda: all(count(tag, "init") == count(tag, "teardown") for tag in tags), 2)
    leaked = [journal(tag) for tag in tags if count(tag, "init") != count(tag, "teardown")]
    assert not leaked, f"{len(leaked)} of {len(tags)} environments were built but never torn down: {leaked[:3]}"


async def test_teardown_of_a_session_discarded_during_setup_runs_after_setup_ends() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    try:
        async with store.run():
            store.create("slow", SlowSetup, {"tag": tag})
            await eventually(lambda: "setup" in journal(tag))
            with anyio.fail_after(5):
                await store.discard("slow")
            gate(tag).set()
            await eventually(lambda: {"setup-done", "teardown"} <= set(journal(tag)))
    finally:
        gate(tag).set()
    assert journal(tag) == ["init", "setup", "setup-done", "teardown"]


async def test_end_listeners_hear_how_each_session_ended() -> None:
    store = StoreWithCalls(FAST)
    heard: list[tuple[str, str]] = []
    store.on_end.append(lambda session, how: heard.append((session.id, how)))
    async with store.run():
        await ready(store, "deleted")
        await ready(store, "reaped")
        await ready(store, "shutdown")
        await store.discard("deleted")
        store.get("reaped").last_active -= 10_000
        await store.reap()
    assert sorted(heard) == [("deleted", "deleted"), ("reaped", "reaped"), ("shutdown", "shutdown")]
    assert store.counts["deleted"] == store.counts["reaped"] == store.counts["shutdown"] == 1


async def test_reap_discards_idle_sessions_only() -> None:
    idle_tag, busy_tag = new_tag(), new_tag()
    store = StoreWithCalls(settings(session_timeout=60))
    async with store.run():
        idle = await ready(store, "idle", task_spec=math_task(0, idle_tag))
        await ready(store, "busy", task_spec=math_task(0, busy_tag))
        idle.last_active = time.monotonic() - 61
        assert await store.reap() == 1
        assert "idle" not in store and "busy" in store
        assert count(idle_tag, "teardown") == 1 and count(busy_tag, "teardown") == 0
        with pytest.raises(SessionExpired):
            store.get("idle")


async def test_reap_spares_a_session_whose_call_is_still_running() -> None:
    tag = new_tag()
    store = StoreWithCalls(settings(session_timeout=60))
    try:
        async with store.run():
            session = await ready(store, "s", task_spec=math_task(0, tag))
            running = store.start_call(session, "wait", {})
            session.last_active = time.monotonic() - 61
            assert await store.reap() == 0
            assert "s" in store
            gate(tag).set()
            with anyio.fail_after(5):
                await running.wait()
    finally:
        gate(tag).set()


async def test_reap_ends_an_idle_session_whose_only_running_call_timed_out() -> None:
    tag = new_tag()
    store = StoreWithCalls(settings(session_timeout=60, tool_timeout=0.2))
    try:
        async with store.run():
            session = await ready(store, "s", task_spec=math_task(0, tag))
            with anyio.fail_after(5):
                result = await store.call(session, "wait", {})
            assert isinstance(result, ToolRejected) and result.reason == "timeout"
            assert session.running_calls == 1  # its thread still runs
            session.last_active = time.monotonic() - 61
            assert await store.reap() == 1
            assert "s" not in store
    finally:
        gate(tag).set()


async def test_a_sync_tool_past_tool_timeout_keeps_the_episode_busy_until_its_thread_returns() -> None:
    tag = new_tag()
    store = StoreWithCalls(settings(tool_timeout=0.5))
    try:
        async with store.run():
            session = await ready(store, "s", task_spec=math_task(0, tag))
            hung = store.start_call(session, "wait", {})
            await eventually(lambda: count(tag, "wait-start") == 1)
            queued = store.start_call(session, "wait", {})  # queued behind it: calls of one tool take turns
            with anyio.fail_after(5):
                timed_out = await hung.wait()
                refused_queued = await queued.wait()
                refused = await store.call(session, "echo", {"text": "too soon"})
            assert isinstance(timed_out, ToolRejected) and timed_out.reason == "timeout"
            assert isinstance(refused_queued, ToolRejected) and refused_queued.reason == "session_busy"
            assert isinstance(refused, ToolRejected) and refused.reason == "session_busy"
            assert count(tag, "echo") == 0 and count(tag, "wait-end") == 0 and count(tag, "wait-start") == 1
            with pytest.raises(SessionBusy):
                await store.read_prompt(session)
            gate(tag).set()
            await eventually(lambda: count(tag, "wait-end") == 1 and not session.episode.overdue)
            with anyio.fail_after(5):
                after = await store.call(session, "echo", {"text": "now"})
            # What the overdue call returned in the end is dropped: only the echo counts as a step.
            assert isinstance(after, ToolOutput) and session.step_count == 1
    finally:
        gate(tag).set()


async def test_the_background_reaper_tears_down_an_idle_session_while_a_touched_one_survives() -> None:
    idle_tag, kept_tag = new_tag(), new_tag()
    store = StoreWithCalls(settings(session_timeout=0.4))
    async with store.run():
        await ready(store, "idle", task_spec=math_task(0, idle_tag))
        await ready(store, "kept", task_spec=math_task(0, kept_tag))
        with anyio.fail_after(5):
            while count(idle_tag, "teardown") == 0:
                store.get("kept")
                await anyio.sleep(0.05)
        assert "kept" in store and "idle" not in store
        assert count(idle_tag, "teardown") == 1 and count(kept_tag, "teardown") == 0


async def test_shutdown_tears_down_every_session_once_and_refuses_new_ones() -> None:
    tags = [new_tag() for _ in range(5)]
    store = StoreWithCalls(FAST)
    async with store.run():
        for i, tag in enumerate(tags):
            await ready(store, f"s{i}", task_spec=math_task(0, tag))
        await store.discard("s0")
    assert len(store) == 0
    assert [count(tag, "teardown") for tag in tags] == [1] * 5
    with pytest.raises(ShuttingDown):
        store.create("late", MathLike, math_task())


async def test_shutdown_lets_a_running_call_finish_within_the_grace_period() -> None:
    tag = new_tag()
    store = StoreWithCalls(settings(shutdown_grace=5.0))
    results: list[object] = []
    async with store.run():
        session = await ready(store, "s", task_spec=math_task(0, tag))
        running = store.start_call(session, "sleep", {"seconds": 0.2})
    results.append(running.result)
    assert isinstance(results[0], ToolOutput)
    assert journal(tag)[-3:] == ["sleep-start", "sleep-end", "teardown"]


async def test_a_thousand_sessions_created_and_discarded_leave_the_store_empty() -> None:
    store = StoreWithCalls(settings(ready_wait=10))  # a thousand setups queue for worker threads
    async with store.run():
        for i in range(1000):
            store.create(f"s{i}", OtherEnv, {"start": i})
        with anyio.fail_after(10):
            for i in range(1000):
                await store.get_ready(f"s{i}")
            for i in range(1000):
                assert await store.discard(f"s{i}")
        assert len(store) == 0
        assert store.counts["created"] == store.counts["deleted"] == 1000


async def test_an_idle_session_is_light_the_events_and_locks_nobody_waits_on_are_not_made() -> None:
    # Servers hold tens of thousands of idle sessions. An anyio.Event or Lock is ~700 bytes; a session used to
    # hold four (setup ended, session ended, episode lock, reset lock): ~5.4 KB a session, now ~2.8 KB.
    store = StoreWithCalls(settings(ready_wait=10))
    async with store.run():
        for i in range(50):  # warm: first uses fill caches of their own
            await ready(store, f"warm{i}", OtherEnv, {"start": i})
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            sessions = 500
            for i in range(sessions):
                store.create(f"s{i}", OtherEnv, {"start": i})
            with anyio.fail_after(10):
                for i in range(sessions):
                    await store.get_ready(f"s{i}")
            gc.collect()
            per_session = (tracemalloc.get_traced_memory()[0] - before) / sessions
        finally:
            tracemalloc.stop()
    assert per_session < 4000, per_session


async def test_using_the_store_before_it_runs_is_a_clear_error() -> None:
    store = StoreWithCalls(FAST)
    with pytest.raises(RuntimeError, match="store.run"):
        store.create("s", MathLike, math_task())


# Reset (Eval Protocol's reset_session goes through the core).


async def test_reset_tears_down_the_old_episode_and_starts_a_fresh_one() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s", task_spec=math_task(0, tag))
        await store.call(session, "submit", {"answer": "4"})
        await store.reset(session, seed=None)
        assert journal(tag) == ["init", "setup", "submit", "teardown", "init", "setup"]
        assert session.state is State.READY and not session.finished
        assert (session.step_count, session.last_reward, session.total_reward) == (0, 0.0, 0.0)
        result = await store.call(session, "submit", {"answer": "4"})
        assert isinstance(result, ToolOutput) and result.reward == 1.0
    assert count(tag, "teardown") == 2


async def test_reset_with_a_config_takes_the_new_task_and_a_bad_one_keeps_the_episode() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        session = await ready(store, "s", task_spec=math_task(0, tag))
        await store.reset(session, seed=None, config={"split": "test", "index": 0})
        assert session.task_spec == MathLike.get_task("test", 0)
        assert session.config == {"split": "test", "index": 0}
        episode = session.episode
        with pytest.raises(InvalidTask):
            await store.reset(session, seed=None, config={"split": "nope"})
        assert session.episode is episode and session.config == {"split": "test", "index": 0}
        result = await store.call(session, "submit", {"answer": "5"})
        assert isinstance(result, ToolOutput) and result.reward == 1.0


# Get-or-create.


async def test_open_creates_an_unknown_session_from_task_from_seed_and_then_attaches_to_it() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        session, created = await store.open("row-1", MathLike, seed=1, config={"index": 0}, created_by="control")
        assert created and session.created_by == "control" and session.task_spec == MathLike.get_task("train", 0)
        again, created_again = await store.open("row-1", MathLike, seed=5, config={}, created_by="mcp")
        assert again is session and not created_again


async def test_concurrent_opens_of_one_new_id_get_one_session() -> None:
    store = StoreWithCalls(FAST)
    opened = []
    async with store.run():

        async def open_it() -> None:
            opened.append(await store.open("same", MathLike, config={}, created_by="mcp"))

        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(open_it)
        assert len({id(session) for session, _ in opened}) == 1
        assert [created for _, created in opened].count(True) == 1
        assert store.counts["created"] == 1


async def test_open_refuses_a_live_session_of_another_environment_unless_any_env() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        await store.open("s", OtherEnv, config={}, created_by="ors")
        with pytest.raises(WrongEnvironment):
            await store.open("s", MathLike, config={}, created_by="mcp")
        session, created = await store.open("s", MathLike, config={}, created_by="control", any_env=True)
        assert session.env_cls is OtherEnv and not created


async def test_a_failing_task_from_seed_is_an_invalid_task_error() -> None:
    store = StoreWithCalls(FAST)
    async with store.run():
        with pytest.raises(InvalidTask, match="no task for seed 3"):
            await store.open("s", MathLike, seed=3, config={"split": "nope"}, created_by="mcp")
        assert "s" not in store


async def test_an_invalid_task_error_quotes_a_big_config_only_in_part() -> None:
    """The error goes back to the client that sent the config: a short quote says which config, not all of it."""
    store = StoreWithCalls(FAST)
    big = {"split": "nope", "padding": "x" * 100_000}
    async with store.run():
        with pytest.raises(InvalidTask) as refused:
            await store.open("s", MathLike, seed=3, config=big, created_by="mcp")
    message = str(refused.value)
    assert message.startswith("no task for seed 3 and config {'split': 'nope', 'padding': 'xxx")
    assert len(message) < 1_000


async def test_open_checks_admission_before_running_task_from_seed() -> None:
    store = StoreWithCalls(settings(max_sessions=1))
    async with store.run():
        await store.open("a", MathLike, config={}, created_by="mcp")
        with pytest.raises(CapacityReached):
            await store.open("b", MathLike, config={"split": "nope"}, created_by="mcp")  # not InvalidTask


# Races around reset: each of these failed before episodes were split from sessions.


async def test_reset_never_revives_a_session_deleted_while_the_old_episode_tears_down() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run(), anyio.create_task_group() as group:
        session = await ready(store, "s", SlowTeardown, math_task(0, tag))
        group.start_soon(store.reset, session, None)
        await eventually(lambda: count(tag, "teardown-start") == 1)
        await store.discard("s", "deleted")
        gate(tag + "-teardown").set()
        with anyio.fail_after(5):
            await session.ended.wait()
    assert session.state is State.DELETED and "s" not in store
    assert count(tag, "init") == count(tag, "teardown")


async def test_a_delete_during_a_resets_rebuild_tears_the_new_environment_down_once_and_ends_the_session() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run(), anyio.create_task_group() as group:
        gate(tag).set()
        session = await ready(store, "s", SlowSetup, math_task(0, tag))
        gate(tag).clear()
        group.start_soon(store.reset, session, None)
        await eventually(lambda: count(tag, "setup") == 2)
        await store.discard("s", "deleted")
        gate(tag).set()
        with anyio.fail_after(5):
            await session.ended.wait()
        assert journal(tag) == ["init", "setup", "setup-done", "teardown", "init", "setup", "setup-done", "teardown"]
        assert session.state is State.DELETED


async def test_shutdown_during_a_resets_rebuild_ends_without_waiting_its_teardown_timeout() -> None:
    tag = new_tag()
    store = StoreWithCalls(settings(teardown_timeout=60.0))

    async def release_when_closing() -> None:
        await eventually(lambda: store.closing)
        gate(tag).set()

    with anyio.fail_after(15):
        async with store.run(), anyio.create_task_group() as group:
            gate(tag).set()
            session = await ready(store, "s", SlowSetup, math_task(0, tag))
            gate(tag).clear()
            group.start_soon(store.reset, session, None)
            await eventually(lambda: count(tag, "setup") == 2)
            group.start_soon(release_when_closing)
            await store.shutdown()
    assert session.ended.is_set() and count(tag, "teardown") == 2


async def test_task_from_seed_runs_once_per_seeded_reset() -> None:
    tag = new_tag()
    store = StoreWithCalls(FAST)
    async with store.run():
        session, _ = await store.open("s", Seeded, seed=1, config={"tag": tag}, created_by="mcp")
        await store.get_ready("s")
        await store.reset(session, seed=2)
        assert journal(tag) == ["task_from_seed 1", "init", "setup", "task_from_seed 2", "teardown", "init", "setup"]
        assert session.seed == 2 and session.task_spec == {"tag": tag, "seed": 2}


# A session's own tools (`list_task_tools`).


class _OwnTools(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="?")]

    def list_task_tools(self) -> list[str]:
        return self.task_spec.get("own", [])

    @tool(shared=False)
    def secret(self) -> ToolOutput:
        """A task's own tool."""
        return ToolOutput(blocks=[TextBlock(text="found")])


async def test_list_task_tools_naming_no_tool_fails_setup_with_a_message_that_says_so() -> None:
    async with StoreWithCalls(Settings()).run() as store:
        store.create("own", _OwnTools, {"own": ["secret", "nosuch"]})
        with pytest.raises(SetupFailed, match=r"_OwnTools.list_task_tools\(\) returned 'nosuch'"):
            await store.get_ready("own")


async def test_an_unshared_tool_runs_only_in_sessions_whose_task_offers_it() -> None:
    async with StoreWithCalls(Settings()).run() as store:
        store.create("with", _OwnTools, {"own": ["secret"]})
        store.create("without", _OwnTools, {})
        offered = await store.call(await store.get_ready("with"), "secret", {})
        refused = await store.call(await store.get_ready("without"), "secret", {})
    assert isinstance(offered, ToolOutput) and offered.blocks[0].text == "found"
    assert isinstance(refused, ToolRejected) and refused.reason == "not_found"
