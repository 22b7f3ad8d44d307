"""Serve a Gymnasium environment to an agent: one episode per session, one tool taking `{"action": str}`.

The tool's schema lists the actions as an `enum`; an action outside it (in any case) is an input error, as a
wrong type or a missing field is, and costs neither a step nor the episode.

    class FrozenLake(GymEnvironment):
        name = "frozen_lake"
        tool_name = "lake_move"
        action_names = {"LEFT": 0, "DOWN": 1, "RIGHT": 2, "UP": 3}

        @classmethod
        def make_env(cls, task_spec):
            return FrozenLakeEnv(desc=generate_random_map(4, seed=task_spec["seed"]))

        def observe(self, obs):
            return {"position": int(obs)}

Gymnasium itself steps the episode, and the task spec's `seed` is passed to `reset(seed=...)`, so an episode
replays exactly what gymnasium (and Eval Protocol's example servers) produce for that seed. The tool answers
with one text block holding the compact JSON observation plus `"action": "<NORMALIZED>"`, the shape Eval
Protocol's clients parse; reward and the end of the episode travel in the `ToolOutput`. Observations are plain text:
ANSI escape sequences (the colours of gymnasium's `ansi` renders) are removed from every string in them, since
they reach agents, episode records and logs raw.

Tasks are seeds: a lazy `train` split of `train_size` seeds (0, 1, ...), a `test` split of the next
`test_size` seeds, and an `examples` split with Eval Protocol's example rows (seeds 42, 123 and 456).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar

import gymnasium
from pydantic import AfterValidator, BaseModel, Field, JsonValue, create_model
from pydantic_core import PydanticCustomError

from ors_server.environment import Environment, ToolDef
from ors_server.types import Blocks, TextBlock, ToolOutput

EXAMPLE_SEEDS = (42, 123, 456)
MAX_TASK_RANGE = 10_000
"""The most tasks one `get_task_range` answers (and `list_tasks` lists) for the seed splits."""
ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
"""An ANSI CSI sequence (ECMA-48): colours and cursor moves, as terminal renders write them."""


class ActionInput(BaseModel):
    """The action tool's input. Each `GymEnvironment` subclass gets a model of its own (`action_model`) whose
    schema lists the class's actions as an `enum` and which accepts them in any case, spaces around ignored."""

    action: str


def action_model(names: Iterable[str]) -> type[ActionInput]:
    """An `ActionInput` whose `action` must be one of `names` (upper case), matched after `.strip().upper()`.

    An unknown action fails validation like a wrong type or a missing field: the agent's mistake, answered as an
    input error (ORS `input_validation`, MCP `isError`, an OpenEnv `invalid_args` observation). The tool does
    not run, so the step is not counted and the episode goes on.
    """
    valid: list[str] = list(names)

    def known(value: str) -> str:
        action = value.strip().upper()
        if action not in valid:
            # The "enum" type is pydantic's own for a value outside an enum; the text is Eval Protocol's.
            raise PydanticCustomError(
                "enum", "Invalid action '{action}'. Valid actions: {valid}", {"action": action, "valid": valid}
            )
        return action

    enum: list[JsonValue] = [*valid]
    field = Field(
        description=f"One of {', '.join(valid)} (lower case is accepted too).", json_schema_extra={"enum": enum}
    )
    return create_model("ActionInput", __base__=ActionInput, action=(Annotated[str, AfterValidator(known)], field))


def jsonable(value: Any) -> Any:
    """`value` with numpy scalars and arrays (and tuples) turned into plain JSON types."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    return value


def plain_text(value: Any) -> Any:
    """`value` (a JSON value) with ANSI escape sequences removed from every string in it."""
    if isinstance(value, str):
        return ANSI_ESCAPE.sub("", value)
    if isinstance(value, dict):
        return {key: plain_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_text(item) for item in value]
    return value


class GymEnvironment(Environment):
    """An `Environment` whose episode is a Gymnasium env, driven through one action tool.

    Subclasses set `action_names` and either `env_id` (made with `gymnasium.make`) or a `make_env`
    factory, and usually `tool_name`, `observe` and `instructions`. Task specs are `{"seed": int, ...}`
    plus whatever `make_env` reads; `"max_steps"` in a task spec overrides the class's step limit.
    """

    env_id: ClassVar[str | None] = None
    """A registered Gymnasium id for the default `make_env` (`gymnasium.make(env_id, render_mode=...)`)."""
    render_mode: ClassVar[str | None] = None
    """Passed to `gymnasium.make` by the default `make_env`."""
    tool_name: ClassVar[str] = "step"
    """The name of the action tool."""
    tool_description: ClassVar[str | None] = None
    """The action tool's description; by default one naming the valid actions."""
    action_names: ClassVar[Sequence[str] | Mapping[str, int]] = ()
    """The actions the agent may name: a list (action i is the i-th name) or a dict of name -> action."""
    max_steps: ClassVar[int | None] = 100
    """Steps after which an unfinished episode ends as truncated; None for no limit."""
    task_defaults: ClassVar[dict[str, Any]] = {}
    """Keys every generated task spec (train, test, examples) carries besides its seed."""
    example_config: ClassVar[dict[str, Any]] = {}
    example_seeds: ClassVar[tuple[int, ...]] = EXAMPLE_SEEDS
    """The `examples` split is one task per seed, `example_config` plus the seed: the `environment_context`
    of Eval Protocol's example dataset rows."""
    train_size: ClassVar[int] = 1_000_000
    test_size: ClassVar[int] = 1_000
    step_inline: ClassVar[bool] = False
    """Step the env on the event loop rather than on a tool thread: for envs whose step takes microseconds (the
    toy-text games), where the thread hop is most of a call's cost. The loop waits for each step, and
    `--tool-timeout` cannot stop one, so leave it off for any env whose step may take longer."""

    actions: ClassVar[dict[str, int]]
    """The normalized (upper-case) action names -> gymnasium actions (read-only)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = cls.action_names
        pairs = names.items() if isinstance(names, Mapping) else ((n, i) for i, n in enumerate(names))
        cls.actions = {str(name).strip().upper(): action for name, action in pairs}
        # The tool's name is a class attribute, so it cannot come from a `@tool` decorator; register the one
        # action tool as an explicit entry instead (a subclass renaming it replaces the inherited entry).
        action_tools = (GymEnvironment._act, GymEnvironment._act_inline)
        tools = {name: t for name, t in cls.tools.items() if t.function not in action_tools}
        if cls.tool_name in tools:
            raise TypeError(f"{cls.__name__} has a @tool named '{cls.tool_name}', the name of its action tool")
        description = cls.tool_description or (
            f"Take one action in the environment. Actions: {', '.join(cls.actions)}. Returns the new observation."
        )
        act = GymEnvironment._act_inline if cls.step_inline else GymEnvironment._act
        tools[cls.tool_name] = ToolDef(cls.tool_name, description, action_model(cls.actions), act)
        cls.tools = tools

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        seed = self.task_spec.get("seed")
        if seed is None:
            # Name the drawn seed in the task spec, so even an unseeded episode can be replayed.
            seed = self.task_spec["seed"] = random.randrange(2**31)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"task_spec 'seed' must be a non-negative integer, got {seed!r}")
        limit = self.task_spec.get("max_steps", self.max_steps)
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValueError(f"task_spec 'max_steps' must be a positive integer or null, got {limit!r}")
        self.seed: int = seed
        self.step_limit: int | None = limit
        self.env: gymnasium.Env | None = None
        self.steps = 0
        self._initial: dict[str, Any] | None = None

    # What subclasses override.

    @classmethod
    def make_env(cls, task_spec: dict[str, Any]) -> gymnasium.Env:
        """A new, not yet reset, Gymnasium env for `task_spec`."""
        if cls.env_id is None:
            raise NotImplementedError(f"{cls.__name__} must set env_id or override make_env")
        kwargs: dict[str, Any] = {"render_mode": cls.render_mode} if cls.render_mode else {}
        return gymnasium.make(cls.env_id, **kwargs)

    def observe(self, obs: Any) -> dict[str, Any]:
        """The observation as the agent sees it: a JSON-serialisable dict (`self.env` is the live env).

        By default a dict observation as is, anything else as `{"observation": obs}`. ANSI escapes in its strings
        are removed afterwards (so a `render()` in `ansi` mode arrives as plain text, without its colours).
        """
        value = jsonable(obs)
        return value if isinstance(value, dict) else {"observation": value}

    def instructions(self) -> str:
        """What the agent is asked to do; the prompt adds the initial observation."""
        return (
            f"You are acting in the {self.name} environment. Use the {self.tool_name} tool with one of the "
            f"actions {', '.join(self.actions)} to act; each call returns the new observation."
        )

    # Tasks: seeds, generated on demand.

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test", "examples"]

    @classmethod
    def num_tasks(cls, split: str) -> int:
        if split == "train":
            return cls.train_size
        if split == "test":
            return cls.test_size
        if split == "examples":
            return len(cls.example_seeds)
        raise ValueError(f"unknown split {split!r}; splits: {cls.list_splits()}")

    @classmethod
    def get_task(cls, split: str, index: int) -> dict[str, Any]:
        if not 0 <= index < cls.num_tasks(split):
            raise IndexError(index)
        if split == "examples":
            return {**cls.task_defaults, **cls.example_config, "seed": cls.example_seeds[index]}
        seed = index if split == "train" else cls.train_size + index
        return {**cls.task_defaults, "seed": seed}

    @classmethod
    def get_task_range(cls, split: str, start: int | None, stop: int | None) -> list[dict[str, Any]]:
        indices = range(cls.num_tasks(split))[start:stop]
        if len(indices) > MAX_TASK_RANGE:
            raise ValueError(f"at most {MAX_TASK_RANGE} tasks per range; ask for a smaller start:stop")
        return [cls.get_task(split, i) for i in indices]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        if cls.num_tasks(split) > MAX_TASK_RANGE:
            raise NotImplementedError(
                f"split {split!r} has {cls.num_tasks(split)} tasks; use num_tasks, get_task and get_task_range"
            )
        return cls.get_task_range(split, None, None)

    @classmethod
    def task_from_seed(cls, seed: int | None, config: dict[str, Any]) -> dict[str, Any]:
        """The config (an Eval Protocol row's `environment_context`) with the seed, as the task spec.

        The seed falls back to `config["seed"]`; a config naming a `task_spec` or an `index` is resolved
        as `Environment.task_from_seed` does.
        """
        if isinstance(config.get("task_spec"), dict) or isinstance(config.get("index"), int):
            return super().task_from_seed(seed, config)
        spec = {**cls.task_defaults, **config}
        if seed is not None:
            spec["seed"] = seed
        return spec

    # One episode.

    def setup(self) -> None:
        self.env = self.make_env(self.task_spec)
        obs, _info = self.env.reset(seed=self.seed)
        self._initial = plain_text(self.observe(obs))

    def teardown(self) -> None:
        if self.env is not None:
            self.env.close()

    def initial_observation(self) -> dict[str, Any]:
        """The observation the episode started from (what Eval Protocol's `/control/initial_state` returns)."""
        if self._initial is None:
            raise RuntimeError("the episode has not been set up")
        return dict(self._initial)

    def get_prompt(self) -> Blocks:
        observation = json.dumps(self.initial_observation(), separators=(",", ":"))
        return [TextBlock(text=f"{self.instructions()}\n\nInitial observation:\n{observation}")]

    async def _act_inline(self, params: ActionInput) -> ToolOutput:
        """The action tool of a `step_inline` env: the same step, on the event loop (a coroutine function is run
        there by the call pipeline)."""
        return self._act(params)

    def _act(self, params: ActionInput) -> ToolOutput:
        """Registered as the action tool under `tool_name` (see `__init_subclass__`)."""
        action = params.action  # validated against `actions` already (`action_model`)
        if self.env is None:
            raise RuntimeError("the episode has not been set up")
        obs, reward, terminated, truncated, info = self.env.step(self.actions[action])
        self.steps += 1
        if not (terminated or truncated) and self.step_limit is not None and self.steps >= self.step_limit:
            truncated = True
        text = json.dumps({**plain_text(self.observe(obs)), "action": action}, separators=(",", ":"))
        return ToolOutput(
            blocks=[TextBlock(text=text)],
            metadata=jsonable(info) or None,
            reward=float(reward),
            finished=bool(terminated or truncated),
            truncated=bool(truncated and not terminated),
        )


__all__ = ["ActionInput", "GymEnvironment", "action_model"]
