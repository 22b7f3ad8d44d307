"""The host-process adapter for OpenEnv `Environment` and `MCPEnvironment` subclasses (see `ors_server.hosting.host`).

Executed inside the host process, in OpenEnv's own virtual environment: it imports `openenv` and the user's module,
and nothing of `ors_server`. Each session is one instance of the class, driven as OpenEnv's own server
(`create_app`, `openenv.core.env_server.http_server`) drives the instance of a WebSocket session:

- the instance is made by calling the class with no argument, and its sync methods run on a thread of the session's
  own (OpenEnv gives every session a one-thread executor); `reset_async` and `step_async` are awaited instead when
  the class overrides them, as there; an `MCPEnvironment` keeps its `mcp_session()` open for the session's life;
- an episode starts with `reset(**task_spec)`, keeping only the keys `reset`'s signature accepts (OpenEnv's rule for
  reset kwargs); a new episode of the same session resets the same instance;
- a step's action is the class's action type: `CallToolAction` for an `MCPEnvironment` (each MCP tool is one of our
  tools), else the `Action` subclass the class is parametrised with (`Environment[Act, Obs, State]`), the
  annotation of `step`'s `action`, or the one named with `?action=module:Class`, offered as one tool `step`;
- every step goes to the class, also after an observation said `done` (OpenEnv's server sends it on), so the
  framework decides what such a step means; observations are serialised as OpenEnv's `serialize_observation`
  does, and kept as the answer's `native` value for the OpenEnv face.

Names: `get_metadata().name` when the class overrides `get_metadata`, else the class name in lower case.
Secrets: OpenEnv has no place for them (its environments read their process environment), so they are not passed.
"""

import asyncio
import contextlib
import importlib
import inspect
import json
import sys
import typing
from concurrent.futures import ThreadPoolExecutor

# The host puts its own exception classes into this module's namespace before running it.
LoadFailed: type[Exception] = globals().get("LoadFailed", Exception)
Refused: type[Exception] = globals().get("Refused", Exception)

STEP_TOOL = "step"


class _NoWebInterface:
    """Hides OpenEnv's Gradio web interface, which a host never serves: importing it (Gradio) takes most of
    OpenEnv's import time (4 of 5 s of CPU here). OpenEnv's package imports it only if present, as when Gradio
    is not installed (`except ModuleNotFoundError` in `openenv.core.env_server`)."""

    NAME = "openenv.core.env_server.web_interface"

    def find_spec(self, name, path=None, target=None):
        if name == self.NAME:
            raise ModuleNotFoundError(f"No module named '{name}' (not used by ors-server's host)", name=name)
        return None


def load(target, options):
    if not any(isinstance(finder, _NoWebInterface) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NoWebInterface())
    try:
        from openenv.core.env_server import interfaces, mcp_environment, mcp_types, types  # type: ignore[import-not-found]
    except ImportError as exc:
        raise LoadFailed(
            f"this interpreter has no openenv package ({exc}); give the venv's python as @PYTHON"
        ) from None
    module_name, _, class_name = target.partition(":")
    found = getattr(_import(module_name), class_name, None)
    if found is None:
        raise LoadFailed(f"module '{module_name}' has no class '{class_name}'")
    if not (inspect.isclass(found) and issubclass(found, interfaces.Environment)):
        raise LoadFailed(
            f"'{class_name}' in module '{module_name}' is not an OpenEnv Environment or MCPEnvironment subclass"
        )
    if inspect.isabstract(found):
        missing = ", ".join(sorted(found.__abstractmethods__))
        raise LoadFailed(f"'{class_name}' does not implement {missing}")
    framework = _Framework(interfaces.Environment, mcp_environment.MCPEnvironment, mcp_types, types)
    if issubclass(found, mcp_environment.MCPEnvironment):
        action, observation = mcp_types.CallToolAction, mcp_types.CallToolObservation
    else:
        action = _named_class(options.get("action"), types.Action, "action") or _type_argument(found, 0, types.Action)
        if action is None:
            action = _step_annotation(found, "action", types.Action)
        if action is None:
            raise LoadFailed(
                f"cannot tell the action type of '{class_name}': parametrise it (Environment[MyAction, MyObservation, "
                "MyState]), annotate step(self, action: MyAction), or name it with ?action=module:Class"
            )
        observation = _named_class(options.get("observation"), types.Observation, "observation")
        observation = observation or _type_argument(found, 1, types.Observation)
        observation = observation or _step_annotation(found, "return", types.Observation) or types.Observation
    state = _type_argument(found, 2, types.State) or _state_annotation(found, types.State) or types.State
    return OpenEnvAdapter(found, framework, action, observation, state)


class _Framework:
    """The OpenEnv names the adapter uses, imported once in `load`."""

    def __init__(self, environment, mcp_environment, mcp_types, types):
        self.environment = environment
        self.mcp_environment = mcp_environment
        self.mcp_types = mcp_types
        self.types = types


def _import(module_name):
    try:
        return importlib.import_module(module_name)
    except BaseException as exc:  # a module may raise anything at import, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, ModuleNotFoundError) and exc.name and module_name.split(".")[0] == exc.name.split(".")[0]:
            raise LoadFailed(f"no module '{exc.name}' in the working directory or on this interpreter's path") from None
        raise LoadFailed(f"importing module '{module_name}' failed: {type(exc).__name__}: {_first_line(exc)}") from None


def _first_line(exc):
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _named_class(spec, base, what):
    """The class `?action=module:Class` (or `?observation=`) names, checked to be an OpenEnv model of that kind."""
    if not spec:
        return None
    module_name, _, class_name = spec.partition(":")
    found = getattr(_import(module_name), class_name, None)
    if not (inspect.isclass(found) and issubclass(found, base)):
        raise LoadFailed(f"?{what}={spec} names no OpenEnv {base.__name__} subclass")
    return found


def _type_argument(cls, position, base):
    """The `position`th type argument of `Environment[Act, Obs, State]` in the class's bases, if it is a class."""
    for klass in cls.__mro__:
        for parametrised in getattr(klass, "__orig_bases__", ()):
            arguments = typing.get_args(parametrised)
            if len(arguments) == 3:
                found = arguments[position]
                if inspect.isclass(found) and issubclass(found, base):
                    return found
    return None


def _step_annotation(cls, name, base):
    try:
        hints = typing.get_type_hints(cls.step)
    except Exception:
        return None
    found = hints.get(name)
    return found if inspect.isclass(found) and issubclass(found, base) else None


def _state_annotation(cls, base):
    getter = getattr(inspect.getattr_static(cls, "state", None), "fget", None)
    try:
        found = typing.get_type_hints(getter).get("return") if getter else None
    except Exception:
        return None
    return found if inspect.isclass(found) and issubclass(found, base) else None


def _overrides(instance, name, base):
    return getattr(type(instance), name) is not getattr(base, name)


def _accepted(function, kwargs):
    """The keyword arguments `function` accepts (all of them when it takes **kwargs): OpenEnv's `_get_valid_kwargs`."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(kwargs)
    return {key: value for key, value in kwargs.items() if key in parameters}


def serialize(observation):
    """An observation as OpenEnv's server sends it: its fields but reward and done under `observation`, and its
    metadata repeated at the top level when not empty (`openenv.core.env_server.serialization`)."""
    payload = {
        "observation": observation.model_dump(mode="json", exclude={"reward", "done"}),
        "reward": observation.reward,
        "done": observation.done,
    }
    if observation.metadata:
        payload["metadata"] = payload["observation"]["metadata"]
    return payload


def _text(payload):
    """What an agent reads of an observation (ORS and MCP faces): a tool's text content when it is a tool result,
    else the observation's fields as JSON (empty metadata left out)."""
    fields = dict(payload["observation"])
    if not fields.get("metadata"):
        fields.pop("metadata", None)
    if "tool_name" in fields and ("result" in fields or "error" in fields):
        if fields.get("error"):
            return fields["error"].get("message", "")
        content = (fields.get("result") or {}).get("content") or []
        texts = [block.get("text", "") for block in content if block.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


class Session:
    """One session: its instance, the thread its sync code runs on, and its open MCP session."""

    def __init__(self, env, executor):
        self.env = env
        self.executor = executor
        self.stack = contextlib.AsyncExitStack()
        self.reset_payload = None

    async def run(self, function, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: function(*args, **kwargs))


class OpenEnvAdapter:
    def __init__(self, cls, framework, action, observation, state):
        self.cls = cls
        self.framework = framework
        self.action = action
        self.observation = observation
        self.state = state
        self.mcp = issubclass(cls, framework.mcp_environment)
        self._tools = None

    # What the class is.

    async def describe(self):
        probe = await self._open()
        try:
            metadata = await probe.run(probe.env.get_metadata)
            if self.mcp:
                listed = await probe.env._async_handle_list_tools()
                tools = [tool.model_dump(mode="json") for tool in listed.tools]
            else:
                doc = inspect.getdoc(self.action) or ""
                if doc == inspect.getdoc(self.framework.types.Action):
                    doc = ""
                description = doc or f"Take a step in {self.cls.__name__}: the action is a {self.action.__name__}."
                tools = [
                    {"name": STEP_TOOL, "description": description, "input_schema": self.action.model_json_schema()}
                ]
        finally:
            await self._close(probe)
        overridden = self.cls.get_metadata is not self.framework.environment.get_metadata
        name = metadata.name if overridden and metadata.name else self.cls.__name__.lower()
        metadata_dump = metadata.model_dump(mode="json")
        return {
            "name": name,
            "description": metadata.description or (inspect.getdoc(self.cls) or "").split("\n")[0],
            "splits": [],
            # One action at a time, whichever tool: an OpenEnv class's state is one, stepped in order.
            "tools": [{**tool, "exclusive": True} for tool in tools],
            "calls_after_finish": True,
            "sessions_per_process": None if getattr(self.cls, "SUPPORTS_CONCURRENT_SESSIONS", False) else 1,
            "extra": {
                "framework": "openenv",
                "task_from_seed": True,
                "initial_observation": True,
                "kind": "mcp" if self.mcp else "typed",
                "metadata": metadata_dump,
                "schema": {
                    "action": self.action.model_json_schema(),
                    "observation": self.observation.model_json_schema(),
                    "state": self.state.model_json_schema(),
                    "reset_observation": self.observation.model_json_schema(),
                },
            },
        }

    def tasks(self, method, args):
        if method == "task_from_seed":
            # A task is reset's keyword arguments: the client's own, or the seed it gave.
            seed, config = args
            task_spec = config.get("task_spec")
            if isinstance(task_spec, dict):
                return task_spec
            return {} if seed is None else {"seed": seed}
        if method == "list_splits":
            return []
        raise Refused("not_found", f"{self.cls.__name__} has no tasks to list: give reset's arguments as a task_spec")

    # Sessions.

    async def _open(self):
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="openenv-session")
        session = Session(None, executor)
        try:
            session.env = await session.run(self.cls)
            factory = getattr(session.env, "mcp_session", None)
            if callable(factory):
                await session.stack.enter_async_context(factory())
        except BaseException:
            await self._close(session)
            raise
        return session

    async def _close(self, session):
        try:
            await session.stack.aclose()
            if session.env is not None:
                await session.run(session.env.close)
        finally:
            session.executor.shutdown(wait=False)

    async def create(self, task_spec, secrets):
        session = await self._open()
        try:
            await self._reset(session, task_spec)
        except BaseException:
            await self._close(session)
            raise
        return session

    async def reset(self, session, task_spec, secrets):
        await self._reset(session, task_spec)
        return session

    async def _reset(self, session, task_spec):
        env = session.env
        if _overrides(env, "reset_async", self.framework.environment):
            observation = await env.reset_async(**_accepted(env.reset_async, task_spec or {}))
        else:
            observation = await session.run(env.reset, **_accepted(env.reset, task_spec or {}))
        session.reset_payload = serialize(observation)

    def prompt(self, session):
        return [{"type": "text", "text": _text(session.reset_payload)}]

    async def call(self, session, tool, arguments):
        action = self._action(tool, arguments)
        env = session.env
        if _overrides(env, "step_async", self.framework.environment):
            observation = await env.step_async(action)
        else:
            observation = await session.run(env.step, action)
        if not isinstance(observation, self.framework.types.Observation):
            raise TypeError(f"{self.cls.__name__}.step returned {type(observation).__name__}, not an Observation")
        payload = serialize(observation)
        reward = observation.reward
        return {
            "blocks": [{"type": "text", "text": _text(payload)}],
            "metadata": payload.get("metadata"),
            "reward": None if reward is None else float(reward),
            "finished": bool(observation.done),
            "native": payload,
        }

    def _action(self, tool, arguments):
        from pydantic import ValidationError

        arguments = {} if arguments is None else arguments
        if self.mcp:
            if not isinstance(arguments, dict):
                raise Refused("input_validation", f"Tool input validation error: '{tool}' takes an object")
            return self.framework.mcp_types.CallToolAction(tool_name=tool, arguments=arguments)
        if tool != STEP_TOOL:
            raise Refused("not_found", f"'{tool}' is not a valid tool")
        try:
            return self.action.model_validate(arguments)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            raise Refused("input_validation", f"Tool input validation error: {errors}") from None

    async def request(self, session, name, payload):
        if name == "reset_observation":
            return session.reset_payload
        if name == "initial_observation":  # for the control plane's initial_state: the observation's fields
            fields = dict(session.reset_payload["observation"])
            if not fields.get("metadata"):
                fields.pop("metadata", None)
            return fields
        if name == "list_tools" and self.mcp:
            # A list_tools step goes to the class, as OpenEnv's server sends it (the class may count it).
            action = self.framework.mcp_types.ListToolsAction()
            if _overrides(session.env, "step_async", self.framework.environment):
                return serialize(await session.env.step_async(action))
            return serialize(await session.run(session.env.step, action))
        if name == "state":
            state = session.env.state
            return state.model_dump(mode="json") if hasattr(state, "model_dump") else dict(state or {})
        raise Refused("not_found", f"no request '{name}'")

    async def delete(self, session):
        await self._close(session)
