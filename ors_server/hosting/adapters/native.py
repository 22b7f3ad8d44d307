"""The host-process adapter for this server's own `Environment` subclasses: a native environment run in a host
process (`--env isolated:MODULE:CLASS[@PYTHON]`), so that one that crashes the interpreter, leaks or holds the GIL
costs only its host process. The interpreter must have `ors-server` installed (the server's own has).
`LoadFailed` and `Refused` are put here by the host (see `ors_server.hosting.host`).
"""

import asyncio
import base64
import importlib
import inspect

LoadFailed: type = Exception  # replaced by the host before this runs
Refused: type = Exception


def load(target, options):
    module_name, _, class_name = target.partition(":")
    try:
        from ors_server.environment import Environment, ToolDef
        from ors_server.types import GroupCandidate, GroupScore, Split, ToolOutput
    except ImportError as exc:
        raise LoadFailed(f"this interpreter has no ors_server package ({exc})") from None
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:
        raise LoadFailed(f"importing module '{module_name}' failed: {type(exc).__name__}: {exc}") from None
    found = getattr(module, class_name, None)
    if found is None:
        raise LoadFailed(f"module '{module_name}' has no class '{class_name}'")
    if not (inspect.isclass(found) and issubclass(found, Environment)):
        raise LoadFailed(f"'{class_name}' in module '{module_name}' is not an ors_server Environment subclass")
    return NativeAdapter(found, Environment, Split, ToolOutput, ToolDef, GroupCandidate, GroupScore)


async def _run(function, *args, **kwargs):
    if inspect.iscoroutinefunction(function):
        return await function(*args, **kwargs)
    result = await asyncio.to_thread(function, *args, **kwargs)
    return await result if inspect.isawaitable(result) else result


def _described(spec):
    return {
        "name": spec.name,
        "description": spec.description,
        "input_schema": spec.schema,
        "terminal": spec.terminal,
        "concurrent": spec.concurrent,
        "exclusive": spec.exclusive,
    }


class NativeAdapter:
    def __init__(self, cls, base, split_type, output_type, tool_type, candidate_type, score_type):
        self.cls = cls
        self.base = base
        self.split_type = split_type
        self.output_type = output_type
        self.tool_type = tool_type
        self.candidate_type = candidate_type
        self.score_type = score_type
        self.task_tools = {}
        """Each live instance's own tools, by `id(instance)` (forgotten at its `delete`)."""
        self.sandboxes = {}
        """Each live instance's sandbox for toolsets, by `id(instance)`, once the server has asked for it."""

    def describe(self):
        # The shared tools only: a task's own (`@tool(shared=False)`, or made at run time) are each session's,
        # asked for once its setup has ended (`request("task_tools")`).
        tools = [_described(t) for t in self.cls.tools.values() if t.shared]
        return {
            "name": self.cls.name,
            "description": (self.cls.__doc__ or "").strip(),
            "splits": [self.split_type.of(s).model_dump() for s in self.cls.list_splits()],
            "tools": tools,
            "extra": {
                "task_tools": self.cls.has_task_tools(),
                "score_group": self.cls.supports_score_group(),
                "messages": self.cls.get_messages is not self.base.get_messages,
                "sandbox": self.cls.has_toolset_sandbox(),
            },
        }

    async def request(self, instance, name, payload):
        if name == "task_tools":
            return [_described(t) for t in (await self._task_tools(instance)).values()]
        if name == "messages":
            return [message.model_dump(mode="json") for message in await _run(instance.get_messages)]
        if name == "score_group":
            candidates = [self.candidate_type.model_validate(c) for c in payload]
            scores = await _run(instance.score_group, candidates)
            return [
                (s if isinstance(s, self.score_type) else self.score_type(reward=float(s))).model_dump(mode="json")
                for s in scores
            ]
        if name.startswith("sandbox"):
            return await self._sandbox(instance, name, payload)
        raise Refused("not_found", f"the native adapter answers no request '{name}'")

    async def _sandbox(self, instance, name, payload):
        """The instance's `toolset_sandbox()`, which the server's toolsets act on through these requests: `sandbox`
        (its working directory, or None), then `sandbox_run`, `sandbox_read` and `sandbox_write` (bytes as
        base64), each answered by the sandbox's own method, errors included."""
        if name == "sandbox":
            sandbox = await _run(instance.toolset_sandbox)
            if sandbox is None:
                return None
            self.sandboxes[id(instance)] = sandbox
            return {"workdir": sandbox.workdir}
        sandbox = self.sandboxes.get(id(instance))
        if sandbox is None:
            raise RuntimeError("this episode has no sandbox for toolsets")
        if name == "sandbox_run":
            stdin = payload.get("stdin")
            result = await sandbox.run(
                payload["command"],
                time_limit=payload["time_limit"],
                stdin=None if stdin is None else base64.b64decode(stdin),
                cwd=payload.get("cwd"),
                max_output=payload["max_output"],
            )
            return {
                "exit_code": result.exit_code,
                "stdout": base64.b64encode(result.stdout).decode(),
                "stderr": base64.b64encode(result.stderr).decode(),
                "truncated": result.truncated,
                "timed_out": result.timed_out,
            }
        if name == "sandbox_read":
            data = await sandbox.read_file(payload["path"], max_bytes=payload["max_bytes"])
            return base64.b64encode(data).decode()
        if name == "sandbox_write":
            await sandbox.write_file(payload["path"], base64.b64decode(payload["data"]))
            return None
        raise Refused("not_found", f"the native adapter answers no request '{name}'")

    async def _task_tools(self, instance):
        """The instance's own tools by name, found once (as the server's `episode_tools` finds them in process)."""
        found = self.task_tools.get(id(instance))
        if found is None:
            found = {}
            if self.cls.has_task_tools():
                for entry in await _run(instance.list_task_tools):
                    spec = self.cls.tools.get(entry) if isinstance(entry, str) else entry
                    if not isinstance(spec, self.tool_type):
                        raise TypeError(
                            f"{self.cls.__name__}.list_task_tools() returned {entry!r}: give names of the class's "
                            "@tool methods, or ToolDefs"
                        )
                    found[spec.name] = spec
            self.task_tools[id(instance)] = found
        return found

    async def tasks(self, method, args):
        if method not in ("list_tasks", "num_tasks", "get_task", "get_task_range", "task_from_seed"):
            raise ValueError(f"unknown task method {method!r}")
        value = await _run(getattr(self.cls, method), *args)
        return list(value) if method in ("list_tasks", "get_task_range") else value

    async def create(self, task_spec, secrets):
        instance = await _run(self.cls, task_spec=task_spec, secrets=secrets)
        await _run(instance.setup)
        return instance

    async def prompt(self, instance):
        return [block.model_dump() for block in await _run(instance.get_prompt)]

    async def call(self, instance, tool, arguments):
        spec = self.cls.tools.get(tool)
        if spec is None or not spec.shared:
            # A task's own tool is callable only in the sessions whose list_task_tools() names it.
            spec = (await self._task_tools(instance)).get(tool)
        if spec is None:
            raise Refused("not_found", f"'{tool}' is not a valid tool")
        args = ()
        if spec.input_model is not None:
            try:
                args = (spec.input_model.model_validate(arguments or {}),)
            except ValueError as exc:
                # As the server says it in process: without the input (it may hold what the agent typed).
                errors = exc.errors(include_url=False, include_context=False, include_input=False)
                raise Refused("input_validation", f"Tool input validation error: {errors}") from None
        elif arguments:
            raise Refused("input_validation", f"Tool input validation error: '{tool}' takes no arguments") from None
        output = await _run(spec.function, instance, *args)
        if not isinstance(output, self.output_type):
            raise TypeError(f"tool '{tool}' returned {type(output).__name__}, not a ToolOutput")
        dumped = output.model_dump()
        dumped["truncated"] = output.truncated
        return dumped

    async def reset(self, instance, task_spec, secrets):
        await self.delete(instance)
        return await self.create(task_spec, secrets)

    async def delete(self, instance):
        self.task_tools.pop(id(instance), None)
        self.sandboxes.pop(id(instance), None)
        await _run(instance.teardown)
