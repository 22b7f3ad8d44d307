"""An episode owns its state: its transitions are its methods, and no other module writes its fields."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import anyio
import pytest

from ors_server.episode import Episode, State
from ors_server.types import TextBlock, ToolOutput

PACKAGE = Path(__file__).resolve().parents[1] / "ors_server"
FIELDS = {f.name for f in dataclasses.fields(Episode)}
MUTATORS = {"pop", "popitem", "clear", "update", "setdefault", "add", "discard", "remove", "append", "set", "cancel"}


def _is_episode(node: ast.expr) -> bool:
    """`episode`, `call.episode`, `session.episode`, `self.episode`...: an expression naming an episode."""
    return (isinstance(node, ast.Name) and node.id == "episode") or (
        isinstance(node, ast.Attribute) and node.attr == "episode"
    )


def _episode_field(node: ast.expr) -> str | None:
    """The field of an episode `node` is (`episode.state`), or is inside (`episode.calls[...]`)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in FIELDS and _is_episode(node.value):
        return node.attr
    return None


def writes(tree: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        for target in targets:
            for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                name = _episode_field(part)
                if name is not None:
                    found.append(f"line {node.lineno}: {name}")
    return sorted(found, key=lambda entry: int(entry.split(":")[0].removeprefix("line ")))


def test_the_reader_finds_writes_of_an_episodes_fields() -> None:
    code = "episode.state = 1\ncall.episode.overdue += 1\nsession.episode.calls.pop('x')\ndel episode.calls['y']\n"
    code += "episode.lock.release()\nx = episode.state\nepisode.record(None)\n"
    assert writes(ast.parse(code)) == ["line 1: state", "line 2: overdue", "line 3: calls", "line 4: calls"]


@pytest.mark.parametrize(
    "path", sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "episode.py")
)
def test_no_module_but_the_episode_writes_its_fields(path: str) -> None:
    assert writes(ast.parse((PACKAGE / path).read_text(encoding="utf-8"))) == []


def test_a_finishing_output_finishes_the_episode_and_a_refusal_after_it_keeps_its_reward() -> None:
    episode = Episode()
    episode.set_up()
    episode.record(ToolOutput(blocks=[TextBlock(text="ok")], reward=0.5))
    episode.record(ToolOutput(blocks=[TextBlock(text="won")], reward=1.0, finished=True, truncated=True))
    assert (episode.state, episode.step_count, episode.total_reward, episode.truncated) == (
        State.FINISHED,
        2,
        1.5,
        True,
    )
    episode.record(None, keep_last_reward=True)
    assert episode.last_reward == 1.0
    episode.record(None)
    assert (episode.last_reward, episode.step_count) == (0.0, 2)


@pytest.mark.anyio
async def test_an_overdue_call_refuses_the_calls_queued_behind_it_and_every_call_until_it_ends() -> None:
    episode = Episode()
    assert await episode.admit()
    refused: list[bool] = []
    async with anyio.create_task_group() as group:

        async def queued() -> None:
            refused.append(not await episode.admit())

        group.start_soon(queued)
        await anyio.wait_all_tasks_blocked()
        episode.mark_overdue()
    assert refused == [True]
    assert not await episode.admit()
    episode.overdue_ended()
    episode.release()
    assert await episode.admit()


def test_ending_an_episode_being_built_leaves_its_teardown_to_the_builder_once() -> None:
    episode = Episode()
    assert episode.end() is False and episode.ready.is_set()
    episode.done_building()
    assert episode.begin_teardown() and not episode.begin_teardown()
