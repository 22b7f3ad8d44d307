"""Which server process owns something it may leave behind (a sandbox's scratch directory, a Harbor container):
`<pid>.<start time>`, so that a later process given the same pid is not taken for it; and whether it still runs
(what `sweep_orphans` and `Podman.sweep_orphans` remove is what a process that is gone left)."""

from __future__ import annotations

import functools
import os


@functools.cache
def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot): with its pid, what tells it from a later process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def owner_id() -> str:
    """This process: `<pid>.<start time>`."""
    pid = os.getpid()
    return f"{pid}.{_start_time(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the process `owner` (an `owner_id()`) still runs; True when that cannot be told (nothing removed)."""
    pid, _, started = owner.partition(".")
    if not pid.isdigit():
        return True  # not ours to judge: leave it
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return not os.path.isdir("/proc/self")  # no /proc to ask: assume alive, remove nothing
    return fields[19].decode() == started and fields[0] != b"Z"
