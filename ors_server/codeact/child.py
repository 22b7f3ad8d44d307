"""The program that runs inside the sandbox: one CodeAct step, then exit.

It is started as `python -I -S -c <this file's source>`, so it uses the standard library only and imports
nothing of the server. It talks to the parent over its stdin/stdout with JSON lines:

    child  -> parent  {"ready": true}                               started, waiting for its request
    parent -> child   {"code": str, "tools": [{"name", "description", "params": [str]}], "limits": {...}}
    child  -> parent  {"call": name, "arguments": {...}}            a tool call from the code
    parent -> child   {"ok": value} | {"error": message}            its answer
    child  -> parent  {"done": {"output": str, "value": str|null, "error": str|null}}

after which the child waits to be killed (or for its stdin to end).

The limits are applied before the agent's code runs (rlimits can only be lowered afterwards). What the code
prints goes to a capped buffer, not to the protocol stream. The agent's code can still reach the protocol
(through the tool functions' closures, or fd numbers): that is allowed, since a child that speaks the
protocol itself gains nothing. The parent validates every message, caps its size, and runs only the tools
the session already offers.
"""

import _ast  # the compiler's syntax tree, without `ast`'s helpers: importing `ast` costs each sandbox ~6 ms of CPU
import io
import json
import os
import resource
import sys
import traceback


class ToolError(Exception):
    """A tool call from the code failed: unknown tool, bad arguments, the tool raised, or the episode ended."""


class CappedText(io.TextIOBase):
    """A text sink keeping the first `limit` characters and counting the rest."""

    def __init__(self, limit):
        self.limit = limit
        self.parts = []
        self.kept = 0
        self.dropped = 0

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def getvalue(self):
        text = "".join(self.parts)
        if self.dropped:
            text += f"\n[output truncated: {self.dropped} more characters]"
        return text


def apply_limits(limits):
    for name, value in limits.get("rlimits", {}).items():
        which = getattr(resource, name)
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                resource.setrlimit(which, (min(value, hard), hard))


def parse(code, filename="<code>"):
    return compile(code, filename, "exec", _ast.PyCF_ONLY_AST)


def child_nodes(node):
    """The nodes directly under `node`, in its fields' order."""
    for name in node._fields:
        value = getattr(node, name, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, _ast.AST):
                yield item


def compile_step(code):
    """Compile the step: a top-level `return` makes it a function body; else a final expression is its value.
    Every node of the trees compiled here comes from the parser, with its source location."""
    tree = parse(code)

    def returns_at_top(nodes):
        for node in nodes:
            if isinstance(node, _ast.Return):
                return True
            if isinstance(node, (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef, _ast.Lambda)):
                continue
            if returns_at_top(child_nodes(node)):
                return True
        return False

    if returns_at_top(tree.body):
        function = parse("def __codeact_step__():\n    pass\n").body[0]
        function.body = tree.body  # not empty: it holds the return
        tree.body = [function]
        return compile(tree, "<code>", "exec"), None, True
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = compile(_ast.Expression(tree.body.pop().value), "<code>", "eval")
    return compile(tree, "<code>", "exec"), last, False


def walk_causes(report):
    while report is not None:
        report = report.__cause__ or report.__context__
        if report is not None:
            yield report


def warm_up():
    """Run once, before saying ready, what every step runs first (the compiler, json): their code is then in
    memory, and a pooled sandbox's step does not wait for it (about half a millisecond)."""
    compile_step("for i in range(2):\n    f(a=i, b=[1.5, None])\nreturn i")
    compile_step("x = 1\nx")
    json.loads(json.dumps({"call": "f", "arguments": {"a": [1, 2.5, None, True, "x"]}}))


def main():
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    # The agent's code gets no way to the protocol through the standard streams.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    warm_up()
    # Started and waiting: a pooled sandbox is handed out only once this line has come.
    proto_out.write('{"ready": true}\n')
    proto_out.flush()
    request = json.loads(proto_in.readline())
    limits = request.get("limits", {})
    output = CappedText(int(limits.get("output_chars", 65536)))
    sys.stdout = sys.stderr = output
    sys.stdin = io.StringIO()

    def send(message):
        proto_out.write(json.dumps(message, default=repr) + "\n")
        proto_out.flush()

    def call(name, arguments):
        send({"call": name, "arguments": arguments})
        answer = json.loads(proto_in.readline() or "{}")
        if "ok" in answer:
            return answer["ok"]
        raise ToolError(answer.get("error", "the server did not answer the tool call"))

    tools = request.get("tools", [])
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "ToolError": ToolError}

    def make_tool(spec):
        name, params = spec["name"], list(spec.get("params") or [])

        def run_tool(*args, **kwargs):
            if len(args) > len(params):
                raise TypeError(f"{name}() takes {len(params)} positional arguments but {len(args)} were given")
            for param, value in zip(params, args, strict=False):
                if param in kwargs:
                    raise TypeError(f"{name}() got multiple values for argument {param!r}")
                kwargs[param] = value
            return call(name, kwargs)

        run_tool.__name__ = run_tool.__qualname__ = name
        run_tool.__doc__ = spec.get("description") or None
        return run_tool

    for spec in tools:
        if spec["name"].isidentifier():
            namespace[spec["name"]] = make_tool(spec)
    listing = [{"name": t["name"], "description": t.get("description", ""), "params": t.get("params")} for t in tools]
    namespace["list_tools"] = lambda: [dict(t) for t in listing]
    namespace["call_tool"] = lambda name, **arguments: call(name, arguments)

    apply_limits(limits)
    value = error = None
    try:
        body, last, wrapped = compile_step(request["code"])
        exec(body, namespace)
        if wrapped:
            result = namespace["__codeact_step__"]()
        else:
            result = eval(last, namespace) if last is not None else None
        if result is not None:
            value = result if isinstance(result, str) else repr(result)
    except MemoryError:
        error = f"MemoryError: the code ran out of memory (limit {limits.get('memory_bytes', '?')} bytes)"
    except BaseException:
        report = traceback.TracebackException(*sys.exc_info())
        # This program's own frames (named "<string>") mean nothing to the agent: it sees its code's and the library's.
        for each in [report, *walk_causes(report)]:
            each.stack = traceback.StackSummary.from_list([f for f in each.stack if f.filename != "<string>"])
        error = "".join(report.format()).rstrip()
    text_limit = int(limits.get("output_chars", 65536))
    if value is not None and len(value) > text_limit:
        value = value[:text_limit] + f"\n[value truncated: {len(value) - text_limit} more characters]"
    send({"done": {"output": output.getvalue(), "value": value, "error": error}})
    # The parent kills the whole sandbox as soon as it has read the result. Exiting here instead would have the
    # sandbox's teardown (three processes and their namespaces) compete with the parent for the CPU just as it
    # wakes to read the result (~1.5 ms, one step in three on two cores).
    proto_in.read()
    os._exit(0)  # the parent has gone: threads the code started must not keep the step alive


main()
