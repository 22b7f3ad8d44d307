"""The host-process adapter for `openreward.environments.Environment` subclasses (see `ors_server.hosting.host`).

Executed inside the host process, in the framework's own virtual environment: it imports `openreward` and the
user's module, and nothing of `ors_server`. Every answer is what `openreward`'s own `Server` gives: the name is
`cls.name().lower()`, the splits come from `_list_splits_cached`, tasks from the class's (async) listings, tools
from `list_tools()` and calls go through `call_session_tool`, which validates the input, serialises calls per tool
and refuses calls after `finished`, exactly as there. `LoadFailed` and `Refused` are put here by the host.
"""

import importlib
import inspect

LoadFailed: type = Exception  # replaced by the host before this runs
Refused: type = Exception


def load(target, options):
    module_name, _, class_name = target.partition(":")
    try:
        from openreward.environments import Environment  # type: ignore[import-not-found]
        from openreward.environments.session import call_session_tool  # type: ignore[import-not-found]
        from openreward.environments.types import Split  # type: ignore[import-not-found]
        from openreward.environments.utils import run_user_callable  # type: ignore[import-not-found]
    except ImportError as exc:
        raise LoadFailed(
            f"this interpreter has no openreward package ({exc}); give the venv's python as @PYTHON"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name and module_name.split(".")[0] == exc.name.split(".")[0]:
            raise LoadFailed(f"no module '{exc.name}' in the working directory or on this interpreter's path") from None
        raise LoadFailed(f"importing module '{module_name}' failed: {type(exc).__name__}: {_first_line(exc)}") from None
    found = getattr(module, class_name, None)
    if found is None:
        raise LoadFailed(f"module '{module_name}' has no class '{class_name}'")
    if not (inspect.isclass(found) and issubclass(found, Environment)):
        raise LoadFailed(
            f"'{class_name}' in module '{module_name}' is not an openreward.environments.Environment subclass"
        )
    if inspect.isabstract(found):
        missing = ", ".join(sorted(found.__abstractmethods__))
        raise LoadFailed(f"'{class_name}' does not implement {missing}")
    return OpenRewardAdapter(found, call_session_tool, Split, run_user_callable, Environment)


def _input_schema(method):
    """The JSON Schema of a tool method's one pydantic argument, or None for a tool without arguments."""
    import typing

    function = inspect.unwrap(method)
    params = [p for p in inspect.signature(function).parameters.values() if p.name != "self"]
    if not params:
        return None
    return typing.get_type_hints(function)[params[0].name].model_json_schema()


def _call_rules(method):
    """How calls of a tool method may overlap, as its `@tool(concurrent=..., exclusive=...)` marks it: the server
    serves the same rules (a `@terminal` tool is exclusive there too)."""
    return {
        "concurrent": bool(getattr(method, "_env_tool_concurrent", False)),
        "exclusive": bool(getattr(method, "_env_tool_exclusive", False)),
    }


def _first_line(exc):
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


class OpenRewardAdapter:
    def __init__(self, cls, call_session_tool, split_type, run_user_callable, base):
        self.cls = cls
        self.base = base
        self.call_session_tool = call_session_tool
        self.split_type = split_type
        self.run = run_user_callable

    def describe(self):
        splits = []
        for split in self.cls._list_splits_cached():
            if isinstance(split, self.split_type):
                splits.append(split.model_dump())
            else:
                splits.append(
                    {"name": split, "type": split if split in ("train", "validation", "test") else "validation"}
                )
        listed = self.cls.list_tools()
        tools = [
            {
                "name": spec.name,
                "description": spec.description,
                "input_schema": spec.input_schema,
                **_call_rules(getattr(self.cls, spec.name, None)),
            }
            for spec in listed.tools
        ]
        if listed.terminal_tool is not None:
            # openreward's list hides the terminal tool; ours lists it, marked (clients that know nothing of
            # terminal tools can still call it).
            term = listed.terminal_tool
            tools.append(
                {
                    "name": term.name,
                    "description": term.description,
                    "input_schema": _input_schema(getattr(self.cls, term.name)),
                    "terminal": True,
                    **_call_rules(getattr(self.cls, term.name)),
                }
            )
        return {
            "name": self.cls.name().lower(),
            "description": (self.cls.__doc__ or "").strip(),
            "splits": splits,
            "tools": tools,
            "extra": {
                "task_tools": self._overrides("list_task_tools"),
                "score_group": bool(self.cls._supports_score_group()),
                "messages": self._overrides("get_messages"),
            },
        }

    def _overrides(self, method):
        return getattr(self.cls, method) is not getattr(self.base, method)

    async def request(self, instance, name, payload):
        if name == "task_tools":
            # The session's own tools, as openreward's server answers /task_tools (its list_session_tools): the
            # shared ones are the description's, so only the task's are sent.
            listed = await self.run(instance.list_task_tools)
            return [
                {
                    "name": spec.name,
                    "description": spec.description,
                    "input_schema": spec.input_schema,
                    **_call_rules(getattr(instance, spec.name, None)),
                }
                for spec in listed.tools
            ]
        if name == "messages":
            return [message.model_dump(mode="json") for message in await self.run(instance.get_messages)]
        if name == "score_group":
            from openreward.environments.types import GroupCandidate, GroupScore

            candidates = [GroupCandidate.model_validate(c) for c in payload]
            scores = await self.run(instance.score_group, candidates)
            return [
                (s if isinstance(s, GroupScore) else GroupScore(reward=float(s))).model_dump(mode="json")
                for s in scores
            ]
        raise Refused("not_found", f"the openreward adapter answers no request '{name}'")

    async def tasks(self, method, args):
        if method == "list_tasks":
            return list(await self.run(self.cls.list_tasks, *args))
        if method in ("num_tasks", "get_task", "get_task_range"):
            return await self.run(getattr(self.cls, method), *args)
        raise ValueError(f"unknown task method {method!r}")

    async def create(self, task_spec, secrets):
        instance = await self.run(self.cls, task_spec=task_spec, secrets=secrets)
        await self.run(instance.setup)
        return instance

    async def prompt(self, instance):
        return [block.model_dump() for block in await self.run(instance.get_prompt)]

    async def call(self, instance, tool, arguments):
        result = (await self.call_session_tool(instance, None, tool, arguments or {})).root
        if not result.ok:
            raise Refused(result.reason or "input_validation", result.error)
        return result.output.model_dump()

    async def reset(self, instance, task_spec, secrets):
        await self.delete(instance)
        return await self.create(task_spec, secrets)

    async def delete(self, instance):
        await self.run(instance.teardown)
