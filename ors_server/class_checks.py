"""What a server checks of an environment class before it serves it: the class methods that describe its tasks
return what they must. A wrong type found here stops the server with one line naming the class, the method and
what it should return, where it would otherwise answer its clients nonsense (`list_splits()` returning "train"
made `/splits` list the splits `t`, `r`, `a`, `i`, `n`).

Only what is cheap and synchronous is asked: the splits, each split's task count, and the task list when the
class lists its tasks. A method the class does not offer (`NotImplementedError`) or that raises is skipped, as are
classes whose answers come from a host process."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ors_server.environment import Environment
from ors_server.types import Split


class ClassCheckFailed(ValueError):
    """An environment class returns the wrong thing from a method that describes its tasks."""


def check_tasks(env_cls: type[Environment]) -> None:
    """Raise ClassCheckFailed naming the class and the method if its splits or tasks are of the wrong type."""
    from ors_server.hosting.environment import HostedEnvironment

    if issubclass(env_cls, HostedEnvironment):
        return
    name = env_cls.__name__
    splits = _asked(env_cls.list_splits)
    if splits is _SKIPPED:
        return
    if isinstance(splits, str | bytes) or not isinstance(splits, Sequence):
        raise ClassCheckFailed(
            f"{name}.list_splits() returned {_shown(splits)}; it must return a list of split names or Splits, "
            'such as ["train", "test"]'
        )
    for split in splits:
        if not isinstance(split, str | Split):
            raise ClassCheckFailed(
                f"{name}.list_splits() returned a list holding {_shown(split)}; each split is a name (str) or a Split"
            )
    for split in splits:
        _check_split(env_cls, Split.of(split).name)


def _check_split(env_cls: type[Environment], split: str) -> None:
    name = env_cls.__name__
    if env_cls.list_tasks.__func__ is not Environment.list_tasks.__func__:  # type: ignore[attr-defined]
        tasks = _asked(env_cls.list_tasks, split)
        if tasks is not _SKIPPED:
            if isinstance(tasks, str | bytes | dict) or not isinstance(tasks, Sequence):
                raise ClassCheckFailed(
                    f"{name}.list_tasks({split!r}) returned {_shown(tasks)}; it must return a list of task specs "
                    "(dicts)"
                )
            for task in tasks:
                if not isinstance(task, dict):
                    raise ClassCheckFailed(
                        f"{name}.list_tasks({split!r}) returned a list holding {_shown(task)}; each task spec is a dict"
                    )
    count = _asked(env_cls.num_tasks, split)
    if count is _SKIPPED:
        return
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ClassCheckFailed(f"{name}.num_tasks({split!r}) returned {_shown(count)}; it must return an int >= 0")
    if count and env_cls.get_task.__func__ is not Environment.get_task.__func__:  # type: ignore[attr-defined]
        task = _asked(env_cls.get_task, split, 0)  # a lazy dataset: its first task alone, however many it has
        if task is not _SKIPPED and not isinstance(task, dict):
            raise ClassCheckFailed(
                f"{name}.get_task({split!r}, 0) returned {_shown(task)}; it must return a task spec (dict)"
            )


_SKIPPED = object()


def _asked(method: Callable[..., Any], *args: Any) -> Any:
    """What `method(*args)` returns; `_SKIPPED` if the class does not offer it (`NotImplementedError`), cannot
    answer now (it raises: its requests will say so), or answers asynchronously."""
    try:
        value = method(*args)
    except Exception:
        return _SKIPPED
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()
        return _SKIPPED
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
