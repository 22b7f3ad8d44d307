"""The host process: loads one environment class of some framework and answers the server about it.

Run as `PYTHON -c <bootstrap> <rlimits>` in the server's working directory, the bootstrap reading this file's source
as the first frame on stdin (`process.BOOTSTRAP`), so that the user's `MODULE` imports from there (with `-c`,
`sys.path[0]` is the working directory) and nothing of `ors_server` needs to be importable or readable: this file is
standard library only, for it runs in a foreign virtual environment (the framework's).

The wire: on stdin, frames of a 4-byte big-endian length and that many bytes of UTF-8 JSON; on stdout, frames of a
4-byte big-endian length, the 8-byte id of the request answered, and the JSON. The server sends requests
`{"id": N, "op": OP, ...}`; the host answers each with `{"id": N, "ok": true, "value": ...}` or
`{"id": N, "ok": false, "error": {"type": ..., "message": ..., "reason": ...}}`, in any order (requests run
concurrently, as tasks of one asyncio loop). The id in the header lets the server refuse a reply on its length
alone, before reading it: a reply to `load`, `describe` or `tasks` may take `MAX_FRAME` bytes, any other
`reply_bytes` (what `--max-output-chars` can need, given in `load`). An answer longer than its bound is replaced
here by a refusal of reason "output_too_large"; a host that sends one anyway is ended by the server.
The first request is always `load`:

    load     {adapter, source, target, options, reply_bytes}
                                                 -> the description (see `describe` below); a failure has
                                                     type "LoadFailed" and a one-line message for the user
    describe {}                                  -> {"name", "splits": [{"name","type"}], "tools": [{"name",
                                                     "description","input_schema"}], "description", "extra"}
    tasks    {method, args}                      -> what the class's list_tasks/num_tasks/get_task/
                                                     get_task_range/task_from_seed returns
    create   {session, task_spec, secrets}       -> null (the instance is built and set up)
    prompt   {session}                           -> a list of blocks ({"type":"text","text"} / image)
    call     {session, tool, arguments}          -> {"blocks", "metadata", "reward", "finished"}; a refusal
                                                     (bad input, unknown tool, finished episode) is an error
                                                     of type "Refused" with a `reason`
    reset    {session, task_spec, secrets}       -> null (a new episode in the same session)
    delete   {session}                           -> null (torn down and forgotten)
    ping     {}                                  -> "pong"

The framework adapter is the `source` of a module (`ors_server/hosting/adapters/<framework>.py`) executed here,
with `LoadFailed` and `Refused` put in its namespace first. It defines `load(target, options)`, returning an
object with the methods `describe()`, `tasks(method, args)`, `create(task_spec, secrets)` (-> an instance),
`prompt(instance)`, `call(instance, tool, arguments)`, `reset(instance, task_spec, secrets)` (-> an instance) and
`delete(instance)`; each may be sync or async, and runs sync user code off the loop itself.

Never left behind: stdin is the server's pipe, read by a thread of its own; at its end (the server exited or was
killed, even with SIGKILL) the host kills its whole process group at once, user code and its children with it.
What user code prints goes to stderr (the server's log): stdout is the protocol's.
"""

import asyncio
import concurrent.futures
import inspect
import json
import os
import signal
import struct
import sys
import threading
import traceback

HEADER = struct.Struct(">I")
REPLY_HEADER = struct.Struct(">IQ")
"""A reply's header: its length and the id of the request it answers."""
MAX_FRAME = 256 * 1024 * 1024
LISTING_OPS = ("load", "describe", "tasks")
"""Requests whose answers are descriptions and task listings, bounded by `MAX_FRAME` rather than `reply_bytes`."""


class LoadFailed(Exception):
    """The target cannot be served: not importable, not found, or not a class of the adapter's framework."""


class Refused(Exception):
    """A call the environment did not run, for a reason the client can act on (its framework's words)."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


def _die():
    """The server is gone: end this process group now (user threads may be hung; no cleanup is waited for)."""
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(0)


def _read_exactly(fd, size):
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class Host:
    def __init__(self, loop, out_fd):
        self.loop = loop
        self.out_fd = out_fd
        self.adapter = None
        self.sessions = {}
        self.running = set()
        self.reply_bytes = MAX_FRAME
        """The longest answer to a request other than `LISTING_OPS` (set by `load`)."""

    def read_forever(self, in_fd):
        """On a thread of its own: frames from the server, handed to the loop; the pipe's end ends the host."""
        try:
            while True:
                head = _read_exactly(in_fd, HEADER.size)
                if head is None:
                    break
                (size,) = HEADER.unpack(head)
                if size > MAX_FRAME:
                    break
                body = _read_exactly(in_fd, size)
                if body is None:
                    break
                request = json.loads(body)
                self.loop.call_soon_threadsafe(self.start, request)
        finally:
            _die()

    def start(self, request):
        task = self.loop.create_task(self.handle(request))
        self.running.add(task)  # the loop keeps only weak references to its tasks
        task.add_done_callback(self.running.discard)

    def encode(self, message):
        # Not ASCII-only: a character then takes at most 6 bytes (a control character's escape), which is what the
        # server's bound on a reply counts on; a lone surrogate is written as its JSON escape.
        text = json.dumps(message, default=_jsonable, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")

    def send(self, rid, data):
        frame = REPLY_HEADER.pack(len(data), rid if isinstance(rid, int) and rid >= 0 else 0) + data
        while frame:  # on the loop's thread only, so frames never interleave
            written = os.write(self.out_fd, frame)
            frame = frame[written:]

    async def handle(self, request):
        rid = request.get("id")
        try:
            value = await getattr(self, "op_" + request["op"])(request)
            reply = {"id": rid, "ok": True, "value": value}
        except Refused as exc:
            reply = {"id": rid, "ok": False, "error": {"type": "Refused", "reason": exc.reason, "message": str(exc)}}
        except Exception as exc:
            if not isinstance(exc, LoadFailed):
                traceback.print_exc(file=sys.stderr)
            reply = {"id": rid, "ok": False, "error": {"type": type(exc).__name__, "message": str(exc)}}
        limit = MAX_FRAME if request.get("op") in LISTING_OPS else self.reply_bytes
        try:
            data = self.encode(reply)
        except (TypeError, ValueError) as exc:
            error = {"type": "TypeError", "message": f"the answer is not JSON: {exc}"}
            data = self.encode({"id": rid, "ok": False, "error": error})
        if len(data) > limit:
            what = f"'{request.get('tool')}'" if request.get("op") == "call" else f"the answer to '{request.get('op')}'"
            message = (
                f"{what} returned {len(data)} bytes as JSON, more than the {limit} a result may take "
                "(--max-output-chars: up to 6 bytes a character, and 1 MiB more)"
            )
            error = {"type": "Refused", "reason": "output_too_large", "message": message}
            data = self.encode({"id": rid, "ok": False, "error": error})
        self.send(rid, data)

    async def op_load(self, request):
        namespace = {"__name__": "ors_host_adapter", "LoadFailed": LoadFailed, "Refused": Refused}
        code = compile(request["source"], f"<ors-server adapter {request['adapter']}>", "exec")
        exec(code, namespace)
        namespace.update(LoadFailed=LoadFailed, Refused=Refused)  # over the adapter's own placeholders
        self.reply_bytes = int(request.get("reply_bytes") or MAX_FRAME)
        self.adapter = await _maybe(namespace["load"](request["target"], request.get("options") or {}))
        return await self.op_describe(request)

    async def op_describe(self, request):
        return await _maybe(self.adapter.describe())

    async def op_tasks(self, request):
        return await _maybe(self.adapter.tasks(request["method"], request["args"]))

    async def op_create(self, request):
        key = request["session"]
        if key in self.sessions:
            raise KeyError(f"session {key} exists")
        instance = await _maybe(self.adapter.create(request["task_spec"], request.get("secrets") or {}))
        self.sessions[key] = instance
        return None

    def _instance(self, request):
        try:
            return self.sessions[request["session"]]
        except KeyError:
            raise KeyError("no such session in this host process") from None

    async def op_prompt(self, request):
        return await _maybe(self.adapter.prompt(self._instance(request)))

    async def op_call(self, request):
        instance = self._instance(request)
        return await _maybe(self.adapter.call(instance, request["tool"], request.get("arguments")))

    async def op_reset(self, request):
        key = request["session"]
        self.sessions[key] = await _maybe(
            self.adapter.reset(self._instance(request), request["task_spec"], request.get("secrets") or {})
        )
        return None

    async def op_delete(self, request):
        instance = self.sessions.pop(request["session"], None)
        if instance is not None:
            await _maybe(self.adapter.delete(instance))
        return None

    async def op_request(self, request):
        """Anything else the server asks of an instance, by name (OpenEnv's `state`): the adapter's `request`."""
        answer = getattr(self.adapter, "request", None)
        if answer is None:
            raise Refused("not_found", f"this adapter answers no request '{request['name']}'")
        return await _maybe(answer(self._instance(request), request["name"], request.get("payload")))

    async def op_ping(self, request):
        return "pong"


async def _maybe(value):
    return await value if inspect.isawaitable(value) else value


def _jsonable(value):
    for method in ("model_dump", "to_dict", "dict"):  # pydantic models, dataclass-likes of the frameworks
        if hasattr(value, method):
            return getattr(value, method)()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def main():
    import resource

    for name, value in json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}").items():
        kind = getattr(resource, name)
        hard = resource.getrlimit(kind)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))
    if "" not in sys.path:
        sys.path.insert(0, "")  # the working directory, where the user's module lives
    # The protocol keeps stdin and a private copy of stdout; fd 1 becomes stderr, so prints cannot corrupt frames.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    loop = asyncio.new_event_loop()
    # Sync user code runs on the default executor (`asyncio.to_thread`, openreward's `run_user_callable`), whose
    # default size (CPUs + 4) would queue the sessions of a process behind a few slow or hung tools.
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="ors-host"))
    asyncio.set_event_loop(loop)
    host = Host(loop, out_fd)
    threading.Thread(target=host.read_forever, args=(0,), name="ors-host-reader", daemon=True).start()
    loop.run_forever()


if __name__ == "__main__":
    main()
