"""Run a command as an unprivileged user: `python -I -S launch.py UID [--show PATH]... COMMAND...`, started as root.

Drops to uid/gid UID with no supplementary groups and `no_new_privs`, then execs COMMAND (same pid, so the process
group the server kills is still this one). A path the command needs (its program, its installation, its virtual
environment, the working directory, and each `--show PATH`) that lies under a directory UID may not enter (a Python
installed under `/root`, mode 0700) could not be reached as UID; for such a path this first makes a mount namespace
of the process's own in which that directory is an empty read-only tmpfs showing only the needed entry, bound from
the host, and so on down the path, one closed directory after another. The rest of each such directory stays
hidden, and the host's mounts are untouched. Where a namespace cannot be made (no CAP_SYS_ADMIN, as in a default
container), the command starts without one, and fails if UID cannot reach what it needs.

The host sandbox (`ors_server.sandboxes.confinement`) runs bubblewrap through this when the server is root, with
the paths it binds as `--show`: bubblewrap, started as UID, can then reach them.

Standard library only, and nothing of `ors_server` imported: this runs before the ids are dropped.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38


def blocked(path: str) -> tuple[str, str] | None:
    """(the first directory above `path` that others may not enter, its entry on the way to `path`), or None."""
    parts = os.path.realpath(path).split("/")[1:]
    current = "/"
    for part in parts:
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return current, part
        current = os.path.join(current, part)
    return None


def needed(command: list[str]) -> list[str]:
    """What the command needs to reach: its program, the installation the program belongs to (`..` of its real
    directory: a Python's `lib/`), the virtual environment it is run from (`..` of the directory it is named in:
    `pyvenv.cfg` and `site-packages`, as in a venv made by `mkdtemp`, mode 0700), and the working directory."""
    program = os.path.abspath(shutil.which(command[0]) or command[0])
    real = os.path.realpath(program)
    return [real, os.path.dirname(os.path.dirname(real)), os.path.dirname(os.path.dirname(program)), os.getcwd()]


MAX_DEPTH = 16
"""Closed directories opened one below another on the way to one path, at most."""


def expose(paths: list[str]) -> None:
    """In a new mount namespace, replace each blocking directory by a tmpfs showing only the entries needed, again
    for the next blocking directory below, until every path can be reached."""
    libc: ctypes.CDLL | None = None
    for _ in range(MAX_DEPTH):
        plan: dict[str, set[str]] = {}
        for path in paths:
            found = blocked(path)
            if found is not None:
                plan.setdefault(found[0], set()).add(found[1])
        if not plan:
            return
        if libc is None:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWNS) != 0:
                print(
                    f"launch: no mount namespace ({os.strerror(ctypes.get_errno())}): {sorted(plan)} stay closed",
                    file=sys.stderr,
                )
                return
            _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
        _open_up(libc, plan)


def _open_up(libc: ctypes.CDLL, plan: dict[str, set[str]]) -> None:
    for directory, entries in plan.items():
        held = {entry: os.open(os.path.join(directory, entry), os.O_PATH) for entry in entries}
        _mount(libc, "tmpfs", directory, "tmpfs", 0, "mode=0755,size=64k")
        for entry, fd in held.items():
            target = os.path.join(directory, entry)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(target)
            else:
                open(target, "w").close()
            _mount(libc, f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            os.close(fd)
        _mount(libc, None, directory, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def _mount(libc: ctypes.CDLL, source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    encode = lambda text: text.encode() if text is not None else None  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(kind), flags, encode(data) if data else None) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}: {os.strerror(ctypes.get_errno())}")


def main(arguments: list[str]) -> None:
    agent, rest = int(arguments[0]), arguments[1:]
    shown: list[str] = []
    while rest[:1] == ["--show"]:
        shown.append(rest[1])
        rest = rest[2:]
    command = rest
    expose(needed(command) + shown)
    os.setgroups([])
    os.setgid(agent)
    os.setuid(agent)
    ctypes.CDLL(None).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"launch: cannot run {command[0]!r} as uid {agent}: {exc}", file=sys.stderr)
        sys.exit(126)


if __name__ == "__main__":
    main(sys.argv[1:])
