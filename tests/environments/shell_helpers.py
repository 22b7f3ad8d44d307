"""Helpers for the shell environment's tests: sessions in a running store, commands, and the host's processes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from ors_server.environments.shell import Shell
from ors_server.sessions import Session, SessionStore
from ors_server.settings import Settings
from ors_server.types import ToolOutput
from tests.pipeline import StoreWithCalls


@asynccontextmanager
async def shell_session(
    task_spec: dict[str, Any] | None = None, settings: Settings | None = None, secrets: dict[str, str] | None = None
) -> AsyncIterator[tuple[SessionStore, Session]]:
    async with StoreWithCalls(settings or Settings()).run() as store:
        store.create("s", Shell, task_spec or {"id": "hello_file"}, secrets)
        yield store, await store.get_ready("s")


async def bash(store: SessionStore, session: Session, command: str) -> str:
    with anyio.fail_after(15):
        result = await store.call(session, "bash", {"command": command})
    assert isinstance(result, ToolOutput), result
    return result.blocks[0].text


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie awaiting its reaper counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def until_running(argument: str) -> str:
    """Shell code that returns once a process with `argument` on its command line runs (its exec is done)."""
    return f"until grep -qsaF -- {argument} /proc/[0-9]*/cmdline; do :; done"


def processes_with_argument(argument: str) -> list[int]:
    """Live processes (as the server sees them) with `argument` on their command line."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                if argument.encode() in file.read().split(b"\0") and alive(int(entry)):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def footprint(session: Session) -> tuple[int, Path]:
    assert isinstance(session.env, Shell) and session.env.shell is not None and session.env.root is not None
    pid = session.env.shell.pid
    assert pid is not None
    return pid, session.env.root


def unique_sleep() -> str:
    """A `sleep` argument no other process has, to find the process by."""
    return f"{1000 + int.from_bytes(os.urandom(3), 'big') / 10**8:.8f}"


async def start_background_process(store: SessionStore, session: Session) -> int:
    argument = unique_sleep()
    await bash(store, session, f"sleep {argument} >/dev/null 2>&1 & {until_running(argument)}")
    [pid] = processes_with_argument(argument)
    return pid
