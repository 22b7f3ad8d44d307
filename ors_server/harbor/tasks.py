"""Harbor task directories, read as Harbor reads them.

A task is a directory holding `task.toml`, `instruction.md`, `environment/Dockerfile` (unless `task.toml` names a
`docker_image`), `tests/test.sh` and optionally `solution/solve.sh`. `task.toml` is Harbor's `TaskConfig`:

    [metadata]        anything; handed to clients in the task spec
    [verifier]        timeout_sec (600), env
    [agent]           timeout_sec (600)
    [environment]     build_timeout_sec (600), docker_image, cpus, memory_mb (or memory = "2G"), storage_mb (or
                      storage = "10G"), allow_internet (false here), workdir, env

Keys Harbor knows that do not change how a task runs here (`version`, `[task]`, `[solution]`, `gpus`, `os`, users)
are read silently; any other key is ignored with one warning naming it. A directory that cannot be used is one
`TaskError` line.
"""

from __future__ import annotations

import logging
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("ors_server.harbor")

DEFAULT_TIMEOUT = 600.0
"""Harbor's default for every `timeout_sec`."""

_KNOWN: dict[str, set[str] | None] = {
    "version": None,
    "schema_version": None,
    "source": None,
    "split": None,
    "task": None,
    "metadata": None,
    "solution": None,
    "verifier": {"timeout_sec", "env", "user"},
    "agent": {"timeout_sec", "setup_timeout_sec", "user"},
    "environment": {
        "build_timeout_sec",
        "docker_image",
        "cpus",
        "memory_mb",
        "memory",
        "storage_mb",
        "storage",
        "gpus",
        "tpus",
        "os",
        "allow_internet",
        "workdir",
        "env",
        "skip_tests",
    },
}
"""Tables of `task.toml` and their keys (None: any key) that are read without a warning."""


class TaskError(ValueError):
    """A task directory that cannot be served (one line, naming the directory)."""


@dataclass(frozen=True)
class HarborTask:
    """One task directory, as `task.toml` describes it."""

    name: str
    path: Path
    instruction: str
    metadata: dict[str, Any] = field(default_factory=dict)
    verifier_timeout: float = DEFAULT_TIMEOUT
    verifier_env: dict[str, str] = field(default_factory=dict)
    agent_timeout: float = DEFAULT_TIMEOUT
    build_timeout: float = DEFAULT_TIMEOUT
    docker_image: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    allow_internet: bool = False
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    def spec(self) -> dict[str, Any]:
        """The task spec clients see (and send back to name the task)."""
        return {
            "name": self.name,
            "instruction": self.instruction,
            "metadata": self.metadata,
            "agent_timeout_sec": self.agent_timeout,
            "verifier_timeout_sec": self.verifier_timeout,
            "allow_internet": self.allow_internet,
        }


def _size_mb(value: Any, key: str) -> int:
    """`memory = "2G"` and the like, in MiB."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(value), re.IGNORECASE)
    if match is None:
        raise ValueError(f"{key} = {value!r} is not a size like '2G' or '512M'")
    scale = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2).upper()]
    return max(1, int(float(match.group(1)) * scale))


def _number(table: dict[str, Any], key: str, default: float | None) -> float | None:
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{key} must be a positive number, got {value!r}")
    return float(value)


def _strings(table: dict[str, Any], key: str) -> dict[str, str]:
    value = table.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a table of strings")
    return {str(k): str(v) for k, v in value.items()}


def _warn_unknown(name: str, config: dict[str, Any]) -> None:
    unknown = []
    for key, value in config.items():
        if key not in _KNOWN:
            unknown.append(key)
        elif isinstance(value, dict) and _KNOWN[key] is not None:
            unknown += [f"{key}.{inner}" for inner in value if inner not in _KNOWN[key]]  # type: ignore[operator]
    if unknown:
        logger.warning("Harbor task %s: task.toml keys ignored: %s", name, ", ".join(unknown))


def read_task(path: Path) -> HarborTask:
    """The task in directory `path`; TaskError (one line) if it cannot be served."""
    name = path.name
    try:
        config = tomllib.loads((path / "task.toml").read_text(encoding="utf-8"))
        instruction = (path / "instruction.md").read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise TaskError(f"Harbor task {name} ({path}): no {Path(exc.filename).name}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TaskError(f"Harbor task {name} ({path}): {type(exc).__name__}: {exc}") from None
    _warn_unknown(name, config)
    try:
        environment = config.get("environment", {})
        verifier = config.get("verifier", {})
        agent = config.get("agent", {})
        for table, label in ((environment, "environment"), (verifier, "verifier"), (agent, "agent")):
            if not isinstance(table, dict):
                raise ValueError(f"[{label}] must be a table")
        memory = environment.get("memory_mb")
        if memory is None and "memory" in environment:
            memory = _size_mb(environment["memory"], "memory")
        storage = environment.get("storage_mb")
        if storage is None and "storage" in environment:
            storage = _size_mb(environment["storage"], "storage")
        image = environment.get("docker_image") or None
        metadata = config.get("metadata", {})
        task = HarborTask(
            name=name,
            path=path,
            instruction=instruction,
            metadata=metadata if isinstance(metadata, dict) else {"metadata": metadata},
            verifier_timeout=_number(verifier, "timeout_sec", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT,
            verifier_env=_strings(verifier, "env"),
            agent_timeout=_number(agent, "timeout_sec", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT,
            build_timeout=_number(environment, "build_timeout_sec", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT,
            docker_image=str(image) if image else None,
            cpus=_number(environment, "cpus", None),
            memory_mb=int(_number({"memory_mb": memory}, "memory_mb", None) or 0) or None,
            storage_mb=int(_number({"storage_mb": storage}, "storage_mb", None) or 0) or None,
            allow_internet=bool(environment.get("allow_internet", False)),
            workdir=str(environment["workdir"]) if environment.get("workdir") else None,
            env=_strings(environment, "env"),
        )
    except ValueError as exc:
        raise TaskError(f"Harbor task {name} ({path}): task.toml: {exc}") from None
    if task.docker_image is None and not (task.environment_dir / "Dockerfile").is_file():
        raise TaskError(f"Harbor task {name} ({path}): no environment/Dockerfile and no [environment] docker_image")
    if not (task.tests_dir / "test.sh").is_file():
        raise TaskError(f"Harbor task {name} ({path}): no tests/test.sh")
    return task


def is_task(path: Path) -> bool:
    return (path / "task.toml").is_file()


def read_tasks(root: Path) -> tuple[list[HarborTask], list[str]]:
    """The tasks under `root` (or `root` itself, if it is one), in directory-name order, and one line for each
    directory that cannot be served."""
    if is_task(root):
        candidates = [root]
    else:
        candidates = sorted(child for child in root.iterdir() if child.is_dir() and is_task(child))
    tasks, problems = [], []
    for candidate in candidates:
        try:
            tasks.append(read_task(candidate))
        except TaskError as exc:
            problems.append(str(exc))
    return tasks, problems
