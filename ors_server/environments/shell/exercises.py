"""The exercises: small file-system tasks, each with the files it starts from and a check of the result.

A check reads the working directory from the host, after the episode's processes are gone, and sees it as the
agent did: paths are relative to the working directory, and symbolic links are followed the way the agent's
shell follows them (an absolute link to `/work/x` inside the sandbox means the working directory's `x`). A path
that leads anywhere outside the working directory counts as missing, so an agent's link cannot make a check
read, or quote, a file of the host.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_CHECKED_BYTES = 1024 * 1024
"""The most bytes of one file the checks read."""
MAX_SYMLINKS = 40
"""As many symbolic links as Linux follows in one path."""


@dataclass(frozen=True)
class Workdir:
    """A session's working directory: where it is on the host, and where the agent's shell sees it."""

    host: Path
    seen_as: str

    def resolve(self, name: str) -> Path | None:
        """The host path `name` leads to, following links as the agent's shell would; None if it leaves."""
        todo = list(reversed(PurePosixPath(name).parts))
        parts: list[str] = []
        links = 0
        while todo:
            part = todo.pop()
            if part in (".", "/"):
                continue
            if part == "..":
                if not parts:
                    return None
                parts.pop()
                continue
            path = self.host.joinpath(*parts, part)
            if not path.is_symlink():
                parts.append(part)
                continue
            links += 1
            if links > MAX_SYMLINKS:
                return None
            target = PurePosixPath(os.readlink(path))
            if target.is_absolute():
                if not target.is_relative_to(self.seen_as):
                    return None
                target, parts = target.relative_to(self.seen_as), []
            todo.extend(reversed(target.parts))
        return self.host.joinpath(*parts)

    def read(self, name: str) -> str | None:
        """The text of the regular file `name`, at most MAX_CHECKED_BYTES of it; None if it is no such file."""
        path = self.resolve(name)
        if path is None or not path.is_file():
            return None
        with path.open("rb") as file:
            return file.read(MAX_CHECKED_BYTES).decode("utf-8", errors="replace")

    def expect_text(self, name: str, expected: str) -> str | None:
        text = self.read(name)
        if text is None:
            return f"{name} does not exist or is not a regular file"
        if text.strip() != expected:
            return f"{name} should contain {expected!r}, not {text.strip()[:200]!r}"
        return None


NAMES = "\n".join(["mara", "olu", "ines", "mara", "bo", "olu", "zed", "ines", "amal", "bo"]) + "\n"
NUMBERS = "\n".join(str(n) for n in [17, 4, 250, 33, 9, 81, 2, 640, 15, 1]) + "\n"
DATA = "".join(f"record {i}: {'ok' if i % 3 else 'retry'}\n" for i in range(37))
CONFIG = "[server]\nport=8080\ndebug=false\nworkers=4\n"


def _check_hello(workdir: Workdir) -> str | None:
    return workdir.expect_text("hello.txt", "hi")


def _check_nested(workdir: Workdir) -> str | None:
    path = workdir.resolve("project/src/utils")
    return None if path is not None and path.is_dir() else "the directory project/src/utils does not exist"


def _check_count(workdir: Workdir) -> str | None:
    return workdir.expect_text("count.txt", str(DATA.count("\n")))


def _check_rename(workdir: Workdir) -> str | None:
    if os.path.lexists(workdir.host / "draft.txt"):
        return "draft.txt still exists"
    return workdir.expect_text("final.txt", "final text")


def _check_unique(workdir: Workdir) -> str | None:
    text = workdir.read("unique.txt")
    expected = sorted(set(NAMES.split()))
    if text is None or text.split() != expected:
        return f"unique.txt should list {expected}, one per line"
    return None


def _check_executable(workdir: Workdir) -> str | None:
    path = workdir.resolve("run.sh")
    if path is None or not path.is_file():
        return "run.sh is missing"
    if not path.stat().st_mode & stat.S_IXUSR:
        return "run.sh is not executable by its owner"
    return None if workdir.read("run.sh") == "#!/bin/sh\necho ok\n" else "run.sh was changed"


def _check_setting(workdir: Workdir) -> str | None:
    expected = CONFIG.replace("debug=false", "debug=true")
    return None if workdir.read("config.ini") == expected else f"config.ini should read {expected!r}"


def _check_clean(workdir: Workdir) -> str | None:
    build = workdir.resolve("build")
    if build is None or not build.is_dir():
        return "build/ is gone"
    left = sorted(str(p.relative_to(build.parent)) for p in build.rglob("*.tmp"))
    if left:
        return f"these .tmp files are left: {left}"
    kept = ["build/keep.txt", "build/sub/notes.md", "build/sub/deeper/data.csv"]
    missing = [name for name in kept if workdir.read(name) is None]
    return f"these files should have been kept: {missing}" if missing else None


def _check_sum(workdir: Workdir) -> str | None:
    return workdir.expect_text("sum.txt", str(sum(int(n) for n in NUMBERS.split())))


def _check_largest(workdir: Workdir) -> str | None:
    return workdir.expect_text("largest.txt", "app-2.log")


def _check_link(workdir: Workdir) -> str | None:
    if not (workdir.host / "current").is_symlink():
        return "current is not a symbolic link"
    target = workdir.resolve("current")
    return (
        None
        if target is not None and target == workdir.resolve("releases/v2")
        else "current does not point to releases/v2"
    )


def _check_archive(workdir: Workdir) -> str | None:
    path = workdir.resolve("backup.tar.gz")
    if path is None or not path.is_file() or path.stat().st_size > MAX_CHECKED_BYTES:
        return "backup.tar.gz is missing (or larger than expected)"
    try:
        with tarfile.open(path, "r:gz") as archive:
            names = {name.removeprefix("./") for name in archive.getnames()}
    except (tarfile.TarError, OSError, EOFError) as exc:
        return f"backup.tar.gz is not a gzip-compressed tar archive ({exc})"
    missing = {"docs/intro.md", "docs/usage.md"} - names
    return f"backup.tar.gz lacks {sorted(missing)}" if missing else None


@dataclass(frozen=True)
class Exercise:
    id: str
    instruction: str
    check: Callable[[Workdir], str | None]
    """None when the working directory solves the exercise, else what is wrong."""
    files: dict[str, str] = field(default_factory=dict)


TRAIN = [
    Exercise("hello_file", "Create a file named hello.txt containing the text hi.", _check_hello),
    Exercise("nested_dirs", "Create the directory project/src/utils, with its parent directories.", _check_nested),
    Exercise(
        "count_lines",
        "Write the number of lines in data.txt to a new file count.txt.",
        _check_count,
        {"data.txt": DATA},
    ),
    Exercise("rename_file", "Rename draft.txt to final.txt.", _check_rename, {"draft.txt": "final text\n"}),
    Exercise(
        "unique_sorted",
        "Write the distinct lines of names.txt, sorted alphabetically, one per line, to unique.txt.",
        _check_unique,
        {"names.txt": NAMES},
    ),
    Exercise(
        "make_executable", "Make run.sh executable by its owner.", _check_executable, {"run.sh": "#!/bin/sh\necho ok\n"}
    ),
    Exercise(
        "replace_setting",
        "In config.ini, change the line debug=false to debug=true and leave every other line as it is.",
        _check_setting,
        {"config.ini": CONFIG},
    ),
    Exercise(
        "clean_tmp",
        "Delete every file whose name ends in .tmp anywhere under build/, and keep every other file.",
        _check_clean,
        {
            "build/a.tmp": "x\n",
            "build/keep.txt": "keep\n",
            "build/sub/b.tmp": "x\n",
            "build/sub/notes.md": "notes\n",
            "build/sub/deeper/c.tmp": "x\n",
            "build/sub/deeper/data.csv": "1,2\n",
        },
    ),
]
TEST = [
    Exercise(
        "sum_numbers",
        "numbers.txt holds one integer per line. Write their sum to sum.txt.",
        _check_sum,
        {"numbers.txt": NUMBERS},
    ),
    Exercise(
        "largest_file",
        "Write the name (only the file name) of the largest file in logs/ to largest.txt.",
        _check_largest,
        {"logs/app-1.log": "a" * 300, "logs/app-2.log": "b" * 4000, "logs/app-3.log": "c" * 1200},
    ),
    Exercise(
        "symlink_release",
        "Create a symbolic link named current that points to the directory releases/v2.",
        _check_link,
        {"releases/v1/VERSION": "1\n", "releases/v2/VERSION": "2\n"},
    ),
    Exercise(
        "archive_docs",
        "Create a gzip-compressed tar archive backup.tar.gz of the docs directory (members named docs/...).",
        _check_archive,
        {"docs/intro.md": "# Intro\n", "docs/usage.md": "# Usage\n"},
    ),
]
EXERCISES = {exercise.id: exercise for exercise in TRAIN + TEST}
