"""The authoring API: an `Environment` subclass with `@tool` methods is all an environment author writes.

    class Math(Environment):
        name = "math"

        @classmethod
        def list_splits(cls): return ["train", "test"]

        @classmethod
        def list_tasks(cls, split): return TASKS[split]

        def get_prompt(self): return [TextBlock(text=self.task_spec["question"])]

        @tool
        def submit(self, params: SubmitInput) -> ToolOutput:
            "Submit your final answer."
            ...

The shape (method names, types, the `(task_spec, secrets)` constructor) is that of `openreward.environments`,
so an environment written for it ports by changing its imports.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ValidationError

from ors_server.compose.servers import HttpServer, StdioServer, ToolServer
from ors_server.runtime.tool import Refused
from ors_server.types import GroupCandidate, GroupScore, ImageBlock, Message, Split, TextBlock, ToolOutput

if TYPE_CHECKING:
    from ors_server.episode import Episode
    from ors_server.runtime.tool import ToolRun
    from ors_server.sandboxes.interface import Sandbox


@dataclass(frozen=True)
class ToolDef:
    """One tool of an environment class, as every face describes it."""

    name: str
    description: str
    input_model: type[BaseModel] | None
    function: Callable[..., Any]
    input_schema: dict[str, Any] | None = None
    """The input schema as given, for a tool without an input model (a composed MCP server's tool)."""
    terminal: bool = False
    """The tool that takes the model's final message (`@terminal`)."""
    shared: bool = True
    """Listed for every session of the class. An unshared tool (`@tool(shared=False)`) is a task's own: listed and
    callable only in sessions whose `list_task_tools()` names it."""
    runs_after_finish: bool = False
    """Called even after a tool finished the episode (a hosted framework's own rule); refused otherwise."""
    concurrent: bool = False
    """Its calls overlap with every other call of the session (`@tool(concurrent=True)`); by default the calls of
    one tool run one at a time (`ors_server.runtime.call_gate`)."""
    exclusive: bool = False
    """A call waits for every other call of the session to end and holds new ones until it has ended
    (`@tool(exclusive=True)`, and every terminal tool)."""

    def __post_init__(self) -> None:
        if self.terminal and self.concurrent:
            raise TypeError(f"terminal tool '{self.name}' cannot be concurrent: it grades the episode, serialised")
        if self.terminal and not self.exclusive:
            object.__setattr__(self, "exclusive", True)  # openreward: "@terminal tools are always exclusive"

    @cached_property
    def schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the input, or None for a tool without arguments."""
        return self.input_model.model_json_schema() if self.input_model else self.input_schema

    # The call pipeline runs every tool through these (`ors_server.runtime.tool.Tool`); the subclasses of other
    # sources (composed, hosted, CodeAct) override them.

    def check(self, arguments: Any) -> Any:
        """The arguments after the environment, as a tuple: the input model's instance, or none."""
        if self.input_model is not None:
            try:
                return (self.input_model.model_validate(arguments if arguments is not None else {}),)
            except ValidationError as exc:
                # Without the input: it may hold what the agent typed, secrets included.
                errors = exc.errors(include_url=False, include_context=False, include_input=False)
                raise Refused("input_validation", f"Tool input validation error: {errors}") from None
        if arguments:
            raise Refused("input_validation", f"Tool input validation error: '{self.name}' takes no arguments")
        return ()

    async def run(self, run: ToolRun, checked: Any) -> Any:
        return await run.user_code(self.function, run.env, *checked)

    def record(self, episode: Episode, output: ToolOutput) -> None:
        episode.record(output)


class _ToolMethod:
    """What `@tool` leaves on the class: the function itself, plus the explicit marker we collect."""

    def __init__(
        self, function: Callable[..., Any], *, shared: bool = True, concurrent: bool = False, exclusive: bool = False
    ) -> None:
        self.function = function
        self.shared = shared
        self.concurrent = concurrent
        self.exclusive = exclusive
        self.terminal = False

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return self.function.__get__(instance, owner)


def tool(
    function: Callable[..., Any] | None = None,
    *,
    shared: bool = True,
    concurrent: bool = False,
    exclusive: bool = False,
) -> Any:
    """Mark a method as a tool the agent may call.

    The method takes no argument or one pydantic model (its JSON Schema is the tool's input schema),
    returns a `ToolOutput`, and may be sync or async. Its docstring is the tool's description.
    `@tool(shared=False)` makes it a task's own tool: hidden from the class's tool list, offered (listed and
    callable) only in sessions whose `list_task_tools()` names it.

    As in `openreward`, the calls of one tool in one session run one at a time, in order (calls of different
    tools overlap), and a call queued behind one that finished the episode is refused without running.
    `concurrent=True` lets its calls overlap with every other call (for tools that grant no reward and share no
    state: a shell, file reads). `exclusive=True` (and every `@terminal` tool) waits for every call of the
    session to end and holds new ones until it returns, so nothing changes the state it grades.
    """

    def wrap(f: Callable[..., Any]) -> _ToolMethod:
        method = _ToolMethod(f, shared=shared, concurrent=concurrent, exclusive=exclusive)
        method.terminal = bool(getattr(f, "_ors_terminal", False))
        return method

    return wrap if function is None else wrap(function)


def terminal(method: Any) -> Any:
    """Mark a `@tool` as the environment's terminal tool: the one a harness feeds the model's final plain message
    to, rather than waiting for a tool call (ORS `/tools` reports it as `terminal_tool: {name, arg, description}`;
    `openreward`'s `session.call_terminal_tool(text)` calls it). Stack it on `@tool`, in either order. The tool takes
    no argument or a model of one field (which receives the message); a class has at most one. It stays in the
    tool list, so clients that know nothing of terminal tools can still call it."""
    if not isinstance(method, _ToolMethod):
        if callable(method):  # `@terminal` above `@tool`'s function: wait for `@tool` to wrap it
            method._ors_terminal = True
            return method
        raise TypeError("@terminal marks a @tool method")
    method.terminal = True
    return method


def _input_model(cls_name: str, name: str, function: Callable[..., Any]) -> type[BaseModel] | None:
    try:
        signature = inspect.signature(function, eval_str=True)
    except (NameError, TypeError):
        signature = inspect.signature(function)
    params = list(signature.parameters.values())[1:]  # drop self
    if not params:
        return None
    annotation = params[0].annotation
    if len(params) == 1 and inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    model = "".join(part.title() for part in name.split("_")) + "Input"
    fields = "; ".join(
        f"{p.name}: {_annotation_text(p.annotation)}"
        + ("" if p.default is inspect.Parameter.empty else f" = {p.default!r}")
        for p in params
    )
    raise TypeError(
        f"tool {cls_name}.{name} must take no argument or exactly one pydantic model argument, got {signature}. "
        f"Put its arguments in one model: `class {model}(BaseModel): {fields}` and "
        f"`def {name}(self, params: {model}) -> ToolOutput`"
    )


def _annotation_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return "Any"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


PROGRESS_REPORTER: ContextVar[Callable[[float, float | None, str | None], None] | None] = ContextVar(
    "ors_progress_reporter", default=None
)
"""Set by the call pipeline around a tool run whose caller asked for progress (read by `report_progress`)."""


class InvalidTaskSpec(ValueError):
    """Raise it from `__init__` or `setup()` when the session's task spec names no task of yours (a missing key,
    an index outside its split). The client sent the spec, so every face answers the session's requests with a
    400 carrying your message, where any other exception in setup is the server's 500."""


class Environment:
    """One episode of a task. Subclass it, give it splits, tasks, a prompt and `@tool` methods.

    A new instance is made for every episode (a session's first, and one per reset), with the session's
    `task_spec` and the `secrets` the client passed. `setup()` and `teardown()` may be sync or async and run
    once each per instance; sync code runs in a worker thread, so it may block.
    """

    name: ClassVar[str]
    """The environment's name on the wire. Defaults to the class name lowercased."""

    tools: ClassVar[dict[str, ToolDef]]
    """The class's tools by name, collected from its `@tool` methods (read-only)."""

    mcp_servers: ClassVar[Sequence[ToolServer]] = ()
    """MCP servers whose tools join the environment's own: `StdioServer(name, command)` (a process per episode)
    or `HttpServer(name, url)` (an MCP session per episode). Their tools are named `<server>__<tool>`, listed
    with the environment's own on every face, and called through the same pipeline; they earn no reward and
    never end the episode. The connections open before `setup()` and close after `teardown()`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__.lower()
        tools: dict[str, ToolDef] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if isinstance(value, _ToolMethod):
                    doc = inspect.getdoc(value.function) or ""
                    if value.terminal and value.concurrent:
                        raise TypeError(
                            f"@terminal tool {cls.__name__}.{attr} is marked concurrent=True: a terminal tool grades "
                            "the episode, so it runs alone"
                        )
                    tools[attr] = ToolDef(
                        attr,
                        doc.strip(),
                        _input_model(cls.__name__, attr, value.function),
                        value.function,
                        shared=value.shared,
                        terminal=value.terminal,
                        concurrent=value.concurrent,
                        exclusive=value.exclusive,
                    )
                elif attr in tools:
                    del tools[attr]  # a subclass replaced the tool with a plain attribute
        cls.tools = tools
        terminals = [t for t in tools.values() if t.terminal]
        if len(terminals) > 1:
            raise TypeError(f"{cls.__name__} has more than one @terminal tool: {[t.name for t in terminals]}")
        for t in terminals:
            if t.input_model is not None and len(t.input_model.model_fields) != 1:
                raise TypeError(
                    f"@terminal tool {cls.__name__}.{t.name} must take no argument or a model of one field (the "
                    f"message), not {list(t.input_model.model_fields)}"
                )
        names = [server.name for server in cls.mcp_servers]
        if len(set(names)) != len(names):
            raise TypeError(f"{cls.__name__}.mcp_servers has two servers of the same name: {names}")
        for server in cls.mcp_servers:
            if not isinstance(server, StdioServer | HttpServer):
                raise TypeError(f"{cls.__name__}.mcp_servers holds {server!r}, not a StdioServer or HttpServer")

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        self.task_spec: dict[str, Any] = dict(task_spec or {})
        self.secrets: dict[str, str] = dict(secrets or {})

    # Tasks. Override list_tasks, or num_tasks + get_task (+ get_task_range) for large or lazy datasets.

    @classmethod
    def list_splits(cls) -> Sequence[str | Split]:
        """The splits this environment offers; the first is the default."""
        raise NotImplementedError

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[dict[str, Any]]:
        """Every task spec of `split`, in a fixed order (the order defines task indices)."""
        raise NotImplementedError

    @classmethod
    def num_tasks(cls, split: str) -> int:
        return len(cls.list_tasks(split))

    @classmethod
    def get_task(cls, split: str, index: int) -> dict[str, Any]:
        """The task at `index` of `split`; raises IndexError outside `0 <= index < num_tasks(split)`."""
        if index < 0:
            raise IndexError(index)
        return cls.list_tasks(split)[index]

    @classmethod
    def get_task_range(cls, split: str, start: int | None, stop: int | None) -> Sequence[dict[str, Any]]:
        """Tasks `start:stop` of `split`, with Python's slice rules."""
        return cls.list_tasks(split)[start:stop]

    @classmethod
    def task_from_seed(cls, seed: int | None, config: dict[str, Any]) -> dict[str, Any]:
        """The task for a session named by a seed and a config rather than a task spec (Eval Protocol rows).

        `config` may carry a `task_spec`, or a `split` and an `index`. Otherwise the seed picks a task of
        `config["split"]` (default: the first split): task `seed % num_tasks`, or task 0 without a seed.
        Seeded environments (games) override this to put the seed into the task spec.
        """
        if isinstance(config.get("task_spec"), dict):
            return config["task_spec"]
        split = config.get("split") or Split.of(cls.list_splits()[0]).name
        index = config.get("index")
        if not isinstance(index, int):
            index = (seed or 0) % max(cls.num_tasks(split), 1)
        return cls.get_task(split, index)

    # One episode.

    def get_prompt(self) -> Sequence[TextBlock | ImageBlock] | Awaitable[Sequence[TextBlock | ImageBlock]]:
        """The blocks that open the episode (usually the task statement)."""
        raise NotImplementedError

    def get_messages(self) -> Sequence[Message] | Awaitable[Sequence[Message]]:
        """The episode's opening as a role-tagged conversation (ORS `/messages`). By default the prompt as one user
        turn; a conversation-shaped task overrides it."""
        prompt = self.get_prompt()
        if inspect.isawaitable(prompt):
            return _as_user_turn(prompt)
        return [Message(role="user", blocks=list(prompt))]

    def score_group(
        self, candidates: Sequence[GroupCandidate]
    ) -> Sequence[GroupScore | float] | Awaitable[Sequence[GroupScore | float]]:
        """Score a group of candidate completions for this episode's task, one score per candidate, index-aligned
        (bare floats are taken as rewards). Sync or async. Override it to offer ORS `/score_group` (`/tools` then
        reports `supports_score_group`); raise when judging fails, never make up scores. Scoring reads the
        candidates only: it never advances or ends the episode."""
        raise NotImplementedError(f"{type(self).__name__} does not score groups")

    @classmethod
    def supports_score_group(cls) -> bool:
        """Whether the class scores groups (it overrides `score_group`)."""
        return cls.score_group is not Environment.score_group

    @classmethod
    def terminal_tool(cls) -> ToolDef | None:
        """The class's `@terminal` tool, if it has one."""
        return next((t for t in cls.tools.values() if t.terminal), None)

    def initial_observation(self) -> Any | Awaitable[Any]:
        """The episode's first observation, as Eval Protocol's control plane serves it (`initial_state`):
        a JSON object, or anything JSON-serialisable (served as `{"observation": ...}`).

        By default, the text of the prompt's text blocks, one per line. Gym environments return the observation.
        """
        prompt = self.get_prompt()
        if inspect.isawaitable(prompt):
            return _text_of_awaited(prompt)
        return _text_of(prompt)

    def report_progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Tell the caller of the running tool how far it has got: an MCP client that sent a `progressToken`
        gets `notifications/progress` (`progress`=done, `total`, `message`). Call it from inside a tool, sync or
        async; outside a tool call, or when nobody asked, it does nothing. `done` must grow from one report to
        the next (MCP requires it): a report that does not is dropped."""
        reporter = PROGRESS_REPORTER.get()
        if reporter is not None:
            reporter(done, total, message)

    def setup(self) -> None | Awaitable[None]:
        """Prepare the episode. Runs in the background after the session is created."""

    def teardown(self) -> None | Awaitable[None]:
        """Release what the episode holds. Runs exactly once when the episode ends, however it ends."""

    def list_task_tools(self) -> Sequence[str | ToolDef] | Awaitable[Sequence[str | ToolDef]]:
        """This episode's own tools, beyond the class's shared ones: names of the class's `@tool(shared=False)`
        methods (or `ToolDef`s made at run time, whose function is called as `function(env, *args)`). Asked once
        `setup()` has ended; the session then lists and accepts them on every face (ORS `/task_tools`). Sync or
        async. By default none."""
        return ()

    @classmethod
    def has_task_tools(cls) -> bool:
        """Whether sessions of the class may have tools of their own (it overrides `list_task_tools`)."""
        return cls.list_task_tools is not Environment.list_task_tools

    def toolset_sandbox(self) -> Sandbox | None:
        """The episode's `Sandbox`, which a toolset a client asks for at `/create` (`toolset_name`: claude-code,
        codex, gemini-cli, ...) acts on; asked once `setup()` has ended. Override it in an environment that has
        one (the `shell` environment returns its bubblewrap sandbox): only such environments accept toolsets.
        The environment owns the sandbox (it closes it in `teardown()`). Returning None refuses the toolset for
        this episode."""
        return None

    @classmethod
    def has_toolset_sandbox(cls) -> bool:
        """Whether the class offers a sandbox to toolsets (it overrides `toolset_sandbox`)."""
        return cls.toolset_sandbox is not Environment.toolset_sandbox


def _text_of(blocks: Sequence[TextBlock | ImageBlock]) -> str:
    return "\n".join(block.text for block in blocks if isinstance(block, TextBlock))


async def _as_user_turn(blocks: Awaitable[Sequence[TextBlock | ImageBlock]]) -> list[Message]:
    return [Message(role="user", blocks=list(await blocks))]


async def _text_of_awaited(blocks: Awaitable[Sequence[TextBlock | ImageBlock]]) -> str:
    return _text_of(await blocks)


__all__ = ["Environment", "ToolDef", "ToolOutput", "terminal", "tool"]
