"""Server settings: one frozen object, validated when it is built, grouped by concern.

Each group is a dataclass of its own (`Limits`, `Pools`, `Hosts`, `Network`, `Sandbox`, `Containers`, `Records`,
`Scale`), documented here, and `Settings` is all of them (a field is read flat: `settings.max_sessions`). Every
field is declared with `setting(...)`, which holds what the rest needs to know about it: its validation rule, and,
for the fields that `ors-server serve` sets, the flag's help and metavar. `serve_flags()` turns that into one table
(flag, field, type, default, help) from which the CLI builds its parser and against which a test checks the flags
table of docs/production.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ors_server.ids import WorkerTag

UI_SECRET_VARIABLE = "ORS_UI_SECRET"
"""How the /ui cookies' secret reaches the other processes of a deployment (`Settings.ui_secret`)."""

Rule = Literal["positive", "at_least_1", "positive_or_none", "at_least_1_or_none", "not_negative", "any"]


def setting(
    default: Any,
    help: str | None = None,
    *,
    rule: Rule = "any",
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    flag: str | None = None,
    shown: str | None = None,
    parse: Callable[[str], Any] | None = None,
    secret: bool = False,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A Settings field. `help` makes it a `serve` flag (`--` and the field's name with dashes, unless `flag`
    names it), `shown` is its default as the docs and help say it when the value itself says nothing
    (`$ORS_API_KEY`), `parse` reads the flag's text when the field's type cannot, `secret` keeps the field out
    of repr and of `to_json`; `factory` makes the default of each new Settings (then `default` is unused)."""
    metadata = {
        "help": help,
        "rule": rule,
        "metavar": metavar,
        "choices": choices,
        "flag": flag,
        "shown": shown,
        "parse": parse,
        "secret": secret,
    }
    if factory is not None:
        # Left out of ==: two Settings built alike are equal, whatever each made up (a random secret).
        return field(default_factory=factory, repr=not secret, compare=False, metadata=metadata)
    return field(default=default, repr=not secret, metadata=metadata)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {text!r}")
    return value


@dataclass(frozen=True)
class Limits:
    """What sessions and calls may take, in time, count and size: each bounds a resource a client can make the
    server hold, so that none grows without a documented limit."""

    session_timeout: float = setting(
        900.0,
        "idle seconds before reaping",
        rule="positive",
        metavar="S",
    )
    """Seconds without a session-bearing request after which a session is reaped."""
    tombstones: int = setting(
        10_000,
        "ended (deleted or reaped) session ids remembered, so they answer 410 rather than 404",
        rule="at_least_1",
        metavar="N",
    )
    """How many deleted or reaped session ids are remembered, the latest ones (they answer 410 rather than 404:
    "Session deleted", or "Session expired after N s of inactivity"). Measured: 1.5 MB for 10,000 ids of 32
    characters, 2.4 MB at the 128-character limit."""
    max_sessions: int = setting(
        10_000, "live sessions at most; more get 503 with Retry-After", rule="at_least_1", metavar="N"
    )
    ready_wait: float = setting(25.0, rule="positive")
    """How long endpoints that need a ready session wait for `setup()` before answering 503."""
    tool_timeout: float | None = setting(
        None, "seconds a tool call may run", rule="positive_or_none", metavar="S", shown="none"
    )
    """Seconds a tool call may run before its caller gets `timeout`; None for no limit. A sync tool's thread runs
    on until it returns, and its session refuses calls (`session_busy`) meanwhile."""
    tool_server_timeout: float = setting(
        60.0, "seconds a call to a composed MCP tool server may take", rule="positive", metavar="S"
    )
    """Seconds a call to a composed MCP tool server may take (also bounded by `tool_timeout`); a server past it
    fails that call (`timeout`), never the session."""
    tool_server_start_timeout: float = setting(
        30.0,
        "seconds a composed MCP tool server may take to start and list tools",
        rule="positive",
        metavar="S",
    )
    """Seconds a composed MCP tool server may take to start and list its tools; past it, setup fails."""
    tool_server_log_bytes: int = setting(
        16 * 1024,
        "bytes of one stdio tool server process's stderr that reach the log",
        rule="at_least_1",
        metavar="N",
    )
    """Bytes of one stdio tool server process's stderr written to the log (whole lines); the rest is dropped."""
    max_task_spec_bytes: int = setting(
        256 * 1024, "largest task spec or MCP config a session may hold", rule="at_least_1", metavar="N"
    )
    """The largest task spec (and MCP binding config) a session may hold, as compact UTF-8 JSON; 413 past it.
    With `max_sessions` it bounds what task specs can take: 10,000 x 256 KiB = 2.5 GiB at most."""
    max_replay_chars: int = setting(
        256 * 1024 * 1024, "finished call results kept for replay, in total", rule="at_least_1", metavar="N"
    )
    """Characters of finished calls' results (text and image data) kept, across all sessions, for replay by
    `task_id`; past it the oldest are forgotten first (a replay of one answers as an unknown task_id)."""
    max_mcp_transports_per_session: int = setting(
        8, "MCP transports one session may have open", rule="at_least_1", metavar="N"
    )
    """MCP transports (initialize handshakes) one session may have open at once; one more gets 429."""
    max_output_chars: int = setting(16 * 1024 * 1024, "largest tool result", rule="at_least_1", metavar="N")
    """The most characters a tool result's blocks may hold (text plus base64 image data)."""
    call_linger: float = setting(60.0, rule="positive")
    """Seconds a finished call's result stays available for replay by `task_id`."""
    shutdown_grace: float = setting(10.0, rule="not_negative")
    """Seconds in-flight calls get to finish at shutdown before sessions are torn down."""
    teardown_timeout: float = setting(30.0, rule="positive")
    """Seconds one session's `teardown()` may take before it is given up on."""


@dataclass(frozen=True)
class Pools:
    """Worker threads, one pool per kind of work, so that slow tools cannot starve listing tasks or starting
    episodes (and the reverse)."""

    tool_threads: int = setting(40, "worker threads for sync tools", rule="at_least_1", metavar="N")
    """Worker threads for sync tool calls (a timed-out call keeps its thread until it really returns)."""
    discovery_threads: int = setting(8, "worker threads for listing splits and tasks", rule="at_least_1", metavar="N")
    """Worker threads for listing splits and tasks, apart from tool calls."""
    lifecycle_threads: int = setting(
        16, "worker threads for setup, teardown, task_from_seed and prompt reads", rule="at_least_1", metavar="N"
    )
    """Worker threads for task_from_seed, construction, setup, teardown and prompt reads, apart from tool calls."""


@dataclass(frozen=True)
class Hosts:
    """Host processes: where environments of other frameworks (`openreward:`, `openenv:`, `isolated:`) run, each
    process holding several sessions, with a bound on how many there are and on what each may take."""

    host_sessions: int = setting(
        16, "sessions per host process of a hosted environment", rule="at_least_1", metavar="N"
    )
    """Sessions (episodes) one host process of a hosted environment (`openreward:`, `isolated:`) holds at most; a
    new one starts another process (see `ors_server.hosting`)."""
    host_processes: int = setting(16, "host processes per hosted environment", rule="at_least_1", metavar="N")
    """Host processes per hosted environment at most (per worker); a session past `host_processes` x
    `host_sessions` fails its setup with a message naming both."""
    host_memory_bytes: int = setting(
        8 * 1024**3, "address space of one host process (RLIMIT_AS)", rule="at_least_1", metavar="BYTES"
    )
    """Address space of each host process (RLIMIT_AS, set by the process on itself before it imports user code)."""
    host_tmp_bytes: int = setting(
        64 * 1024 * 1024,
        "size of the private /tmp of a host process or stdio tool server, the only place it can write",
        rule="at_least_1",
        metavar="BYTES",
    )
    """The size of the `/tmp` tmpfs (memory) of each sandboxed host process and stdio tool server process
    (`ors_server.sandboxes.confinement`)."""
    host_paths: tuple[str, ...] = setting(
        (),
        "a host path shown read-only to host processes and stdio tool servers besides what they need to start; "
        "repeat for more",
        flag="--host-path",
        metavar="PATH",
        shown="none",
    )
    """More host paths (a dataset, a cache) shown read-only to sandboxed host processes and stdio tool servers."""
    host_sandbox: str = setting("bwrap", choices=("bwrap", "none"))
    """How host processes and stdio tool servers are confined: 'bwrap', or 'none' (uid 65534 only, when the server
    is root; `ORS_HOST_SANDBOX=none`)."""
    host_start_timeout: float = setting(120.0, rule="positive")
    """Seconds a host process may take to start and load its environment class."""


@dataclass(frozen=True)
class Network:
    """Where the server listens, who may talk to it, and what one connection may make it hold (request heads and
    bodies, slow senders, WebSocket clients that do not read)."""

    host: str = setting("127.0.0.1", "address to listen on")
    port: int = setting(8000, "port to listen on")
    env_ports: tuple[str, ...] = setting(
        (),
        "listen on PORT too, where paths that name no environment mean NAME (for clients that send no variant, "
        "as the openreward SDK under TRL and SkyRL); repeat for more",
        flag="--env-port",
        metavar="NAME=PORT",
        shown="none",
    )
    """Ports of their own for environments: on each, every face answers as on `port`, and a request that names no
    environment (ORS's bare paths, `/create` without `env_name`, `/mcp`, `/control/*`, `/openenv`) means that
    environment rather than the first (`port_envs`)."""
    api_key: str | None = setting(
        None,
        "require this key (default: $ORS_API_KEY; none: open)",
        metavar="API_KEY",
        shown="`$ORS_API_KEY`",
        secret=True,
    )
    """The key every request but `/health` must carry; it travels to other processes of a deployment in their
    environment, never in `to_json`. Given on the command line it is visible to every local process (`ps`):
    `$ORS_API_KEY` or `api_key_file` keep it off."""
    api_key_file: str | None = setting(
        None,
        "read the key from this file (its first line), so that it is not on the command line",
        metavar="PATH",
        shown="none",
        secret=True,
    )
    """A file holding the key (its first line; surrounding whitespace ignored), read when the settings are built
    (`from_env`); not sent to other processes of a deployment, which get the key itself in their environment."""
    key_failures_per_minute: int = setting(
        20,
        "failed API key checks one client address may make per minute (a burst of as many); past it 429",
        rule="at_least_1",
        metavar="N",
    )
    """Wrong keys, tokens, cookies or login forms one client address may send a minute; past it every request of
    that address is refused with 429 and `Retry-After` until its budget has come back
    (`ors_server.http.key_throttle`)."""
    ui_login_seconds: float = setting(
        12 * 3600.0, "seconds a /ui login (its cookie) is valid", rule="positive", metavar="S"
    )
    ui_secret: str = setting(None, secret=True, factory=lambda: secrets.token_hex(32))
    """What the /ui cookies are signed with besides the key: new at each start of a deployment (so a restart revokes
    every cookie) and shared by its processes, in their environment (`ORS_UI_SECRET`) as the key is."""
    allowed_hosts: tuple[str, ...] = setting(
        (),
        "a Host header to accept besides loopback and --host (name:port, name, or name:*); repeat for more",
        flag="--allowed-host",
        metavar="HOST[:PORT]",
        shown="loopback and `--host`",
    )
    """Extra Host header values MCP accepts besides loopback (DNS-rebinding protection)."""
    max_body_bytes: int = setting(4 * 1024 * 1024, "largest request body", rule="at_least_1", metavar="N")
    max_header_bytes: int = setting(64 * 1024, "largest request head", rule="at_least_1", metavar="N")
    """The largest request line plus headers a client may send (431 past it)."""
    header_timeout: float = setting(
        30.0, "seconds a client has to send a request's headers", rule="positive", metavar="S"
    )
    """Seconds a client has to send a request's headers, from its first byte (from connecting, for a new
    connection); 408 and the connection closed past it."""
    body_timeout: float = setting(60.0, "seconds a client has to send a request's body", rule="positive", metavar="S")
    """Seconds a client has to send a request's body once its headers are in; 408 and closed past it."""
    ws_write_buffer_bytes: int = setting(
        256 * 1024,
        "bytes queued to a WebSocket client before it must read to be read from",
        rule="at_least_1",
        metavar="N",
    )
    """Bytes queued to one WebSocket client past which nothing more is read from it until it has read (a quarter
    of it); what one connection holds is this plus the message being written plus the kernel's buffers."""
    ws_write_timeout: float = setting(
        20.0, "seconds a WebSocket client may read nothing before it is closed", rule="positive", metavar="S"
    )
    """Seconds a WebSocket client may read nothing of what is queued to it (past `ws_write_buffer_bytes`) before
    it is closed (1008) and its socket aborted."""
    sse_keepalive: float = setting(10.0, rule="positive")
    """Seconds between SSE keepalive comments while a tool runs (the openreward client gives up after 30)."""
    log_level: str = setting(
        "info",
        "log level (debug also shows the traceback behind an environment that fails to load)",
        choices=("critical", "error", "warning", "info", "debug"),
    )


@dataclass(frozen=True)
class Sandbox:
    """CodeAct: whether sessions offer `execute_code`, and the limits of one step's sandbox (rlimits set inside
    it and a fixed-size /tmp). The shell environment's sandbox reads its own `ORS_SHELL_*` variables."""

    codeact: bool = setting(
        False,
        "offer execute_code (Python that calls the tools) in every session; sandboxed with bwrap, "
        "or unsandboxed with ORS_CODEACT_SANDBOX=none",
        shown="off",
    )
    """Offer `execute_code` in every session (a session's task spec or binding config may say otherwise)."""
    codeact_sandbox: str = setting("bwrap", choices=("bwrap", "none"))
    """How CodeAct steps are contained: 'bwrap', or 'none' (unsandboxed; `ORS_CODEACT_SANDBOX=none`)."""
    codeact_timeout: float = setting(
        30.0, "wall-clock seconds one execute_code step may run", rule="positive", metavar="S"
    )
    """Wall-clock seconds one `execute_code` step may run, its tool calls included."""
    codeact_memory_bytes: int = setting(
        512 * 1024 * 1024,
        "address space of an execute_code step's process (RLIMIT_AS)",
        rule="at_least_1",
        metavar="N",
    )
    """The address-space limit of a step's process (RLIMIT_AS; a step is one process)."""
    codeact_max_threads: int = setting(
        64,
        "threads an execute_code step may run at once (RLIMIT_NPROC in its sandbox)",
        rule="at_least_1",
        metavar="N",
    )
    """Threads a step may run at once, counted in its own sandbox (RLIMIT_NPROC; it cannot start processes)."""
    codeact_disk_bytes: int = setting(
        16 * 1024 * 1024,
        "size of an execute_code step's /tmp tmpfs, the only place it can write",
        rule="at_least_1",
        metavar="N",
    )
    """The size of a step's /tmp, the only place it can write (a tmpfs, so memory; the rest is read-only)."""
    codeact_pool: int = setting(
        2,
        "sandboxes started ahead of time for execute_code steps, each used by one step then destroyed (0: none)",
        rule="not_negative",
        metavar="N",
    )
    """Sandboxes started ahead of time so a step need not wait for one (`codeact/pool.py`). Each serves one step
    and is then destroyed; idle, each holds one waiting Python process (~10 MB) and its empty /tmp."""
    codeact_output_chars: int = setting(64 * 1024, rule="at_least_1")
    """What a step prints, and its value, are each cut to this many characters."""


@dataclass(frozen=True)
class Scale:
    """Serving from several processes: worker processes behind a session-routing front, on one host or as Ray
    actors. A worker gets these settings too (it reads only `worker_tag`)."""

    workers: int | None = setting(
        None,
        "serve from N worker processes behind a session-routing front (--max-sessions is split over them)",
        rule="at_least_1_or_none",
        metavar="N",
        shown="one process",
    )
    fronts: int = setting(
        1,
        "with --workers: M front processes share the port (the front's CPU per request is the first "
        "limit on one host); each follows the same worker table",
        rule="at_least_1",
        metavar="M",
    )
    ray: str | None = setting(
        None,
        "run the --workers as Ray actors on the cluster at ADDRESS (none: a new local Ray instance); "
        "needs the ray extra: pip install 'ors-server[ray]'",
        metavar="ADDRESS",
        shown="off",
    )
    """The Ray cluster's address; "" for a new local Ray instance; None: no Ray."""
    ray_placement: str = setting(
        "spread",
        "spread: workers round-robin over the cluster's nodes; pack: where Ray's scheduler puts them",
        choices=("spread", "pack"),
    )
    ray_worker_cpus: float = setting(1.0, "CPUs Ray reserves for each worker", rule="not_negative", metavar="N")
    ray_runtime_env: dict[str, Any] | None = setting(
        None,
        'Ray runtime_env of the deployment, e.g. \'{"working_dir": "."}\' or \'{"py_modules": ["mymodule.py"]}\': '
        "how a module:Class environment reaches the other nodes",
        metavar="JSON",
        shown="none",
        parse=_json_object,
    )
    front_directory_size: int = setting(
        100_000, "with --workers: session ids each front remembers the worker of", rule="at_least_1", metavar="N"
    )
    """Session ids a front remembers the worker of (least recently used forgotten first; ~200 bytes each)."""
    worker_tag: str | None = setting(None)
    """Set on a worker behind a front (`w<index>-<incarnation>`): the session ids it mints name it."""


@dataclass(frozen=True)
class Records:
    """Episode records: every episode, its calls and how it ended, kept in a database (`ors_server.records`)."""

    records: str | None = setting(
        None,
        "where episode records go: a SQLite file, a postgresql:// URL, or off",
        metavar="PATH|URL|off",
        shown="`$ORS_RECORDS`, else `./ors-episodes.db`",
    )
    """A SQLite file path, a `postgresql://` URL, or "off"; None: `$ORS_RECORDS`, else `ors-episodes.db` in the
    working directory."""
    records_keep_days: float | None = setting(
        None,
        "ended episodes older than this many days are forgotten",
        rule="positive_or_none",
        metavar="D",
        shown="none",
    )
    records_max_bytes: int | None = setting(
        None,
        "bytes the records hold at most (tasks, prompts, calls as UTF-8 JSON): the oldest ended episodes are "
        "forgotten past it, and what live episodes add past it is cut to a marker",
        rule="at_least_1_or_none",
        metavar="N",
        shown="none",
    )
    """A bound on what the records hold, counted as the UTF-8 bytes of the JSON text of tasks, prompts and calls
    plus a small allowance per row (so about the database's size). Each writer forgets the oldest ended episodes
    down to 7/8 of it every few seconds and whenever its share of the room left is spent; what it records past its
    share (live episodes are never forgotten) is kept as a marker that says how many bytes were left out."""
    records_call_max_bytes: int = setting(
        4 * 1024 * 1024,
        "bytes one call's record (arguments, output, error), a task or a prompt keeps at most; past it the text is "
        "cut, with a marker",
        rule="at_least_1",
        metavar="N",
    )
    """What one record row keeps at most: a larger one keeps the start of its text and a marker saying how many bytes
    were left out (the call's `truncated_bytes`). It also bounds what one read of the records holds."""
    records_queue: int = setting(
        10_000,
        "record items waiting for the database at most; past it new tool calls wait (backpressure)",
        rule="at_least_1",
        metavar="N",
    )
    """Items (episode starts and ends, calls) queued for the database writer at most; past it tool calls wait
    before they are admitted, and `ors_records_wait_seconds_total` counts the wait."""
    records_streams: int = setting(
        256,
        "event streams of episodes (/episodes/{id}/events) open at once at most, per process; past it 503",
        rule="at_least_1",
        metavar="N",
    )
    """Event streams a process keeps open at once (each holds a connection, and a live episode's is read again
    whenever something of it is recorded); past it a new one is refused with 503 and `Retry-After`."""


@dataclass(frozen=True)
class Containers:
    """Harbor tasks (`--env harbor:DIR`): where their images and containers live, what a container gets when its
    task does not say, and how many are kept started ahead of sessions (`ors_server.harbor`)."""

    harbor_pool: int = setting(
        1,
        "containers of each Harbor task kept started, with their shell open, ahead of sessions (0: none)",
        rule="not_negative",
        metavar="N",
    )
    """Warm containers per task (`harbor/pool.py`); each idle one holds a `sleep`, a shell and a podman client
    (~40 MB), and the pools of all tasks are started two at a time."""
    harbor_internet: bool = setting(
        False,
        "let Harbor tasks that set allow_internet = true reach the network (otherwise no task has any)",
        shown="off",
    )
    harbor_image: tuple[str, ...] = setting(
        (),
        "build a Dockerfile's FROM IMAGE (or use a docker_image) with the local image LOCAL instead; repeat for more",
        metavar="IMAGE=LOCAL",
        shown="none",
    )
    harbor_cpus: float = setting(
        1.0, "CPUs of a Harbor task's container when its task.toml does not say", rule="positive", metavar="N"
    )
    harbor_memory_mb: int = setting(
        2048,
        "memory (MiB) of a Harbor task's container when its task.toml does not say",
        rule="at_least_1",
        metavar="N",
    )
    harbor_dir: str | None = setting(
        None,
        "where Harbor tasks' images and containers are kept (podman's storage and configuration)",
        metavar="DIR",
        shown="`$ORS_HARBOR_DIR`, else `~/.cache/ors-server/harbor`",
    )


def read_key_file(path: str) -> str:
    """The API key in the file at `path`: its first line, stripped; ValueError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as file:
            key = file.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"api_key_file {path!r} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if not key:
        raise ValueError(f"api_key_file {path!r} holds no key (its first line is empty)")
    return key


def _env_ports(entries: tuple[str, ...], main_port: int) -> dict[int, str]:
    """`env_ports` entries as {port: environment name}; ValueError naming the entry that is not NAME=PORT with a
    port of its own (1..65535, not the main one, not given twice) and an environment named once."""
    found: dict[int, str] = {}
    for entry in entries:
        name, sep, port_text = entry.rpartition("=")
        name = name.strip()
        if not (sep and name and port_text.strip().isdigit()):
            raise ValueError(f"env_ports entries must be NAME=PORT, got {entry!r}")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise ValueError(f"env_ports: the port of {entry!r} must be in 1..65535")
        if port == main_port:
            raise ValueError(f"env_ports: {entry!r} gives the main port ({main_port}) to '{name}'")
        if port in found:
            raise ValueError(f"env_ports: port {port} is given twice ('{found[port]}' and '{name}')")
        if name.lower() in (known.lower() for known in found.values()):
            raise ValueError(f"env_ports: '{name}' is given two ports")
        found[port] = name
    return found


_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "positive": (lambda v: v > 0, "must be positive"),
    "at_least_1": (lambda v: v >= 1, "must be at least 1"),
    "positive_or_none": (lambda v: v is None or v > 0, "must be positive or None"),
    "at_least_1_or_none": (lambda v: v is None or v >= 1, "must be at least 1 or None"),
    "not_negative": (lambda v: v >= 0, "must not be negative"),
}


# Field order is the reverse of this list (dataclasses collect fields from the last base first).
@dataclass(frozen=True)
class Settings(Scale, Records, Containers, Sandbox, Network, Hosts, Pools, Limits):
    """Everything a server (or a deployment of several processes) is told, validated when it is built; error
    messages name the field and the rule."""

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            rule = spec.metadata["rule"]
            if rule != "any" and not _RULES[rule][0](value):
                raise ValueError(f"{spec.name} {_RULES[rule][1]}, got {value!r}")
            choices = spec.metadata["choices"]
            if choices is not None and value not in choices:
                raise ValueError(f"{spec.name} must be {' or '.join(map(repr, choices))}, got {value!r}")
        if self.worker_tag is not None:
            WorkerTag.parse(self.worker_tag)
        for entry in self.harbor_image:
            source, sep, target = entry.partition("=")
            if not (sep and source.strip() and target.strip()):
                raise ValueError(f"harbor_image entries must be FROM=LOCAL, got {entry!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port!r}")
        _env_ports(self.env_ports, self.port)

    @property
    def port_envs(self) -> dict[int, str]:
        """`env_ports` as {port: environment name}."""
        return _env_ports(self.env_ports, self.port)

    def to_json(self) -> dict[str, Any]:
        """The settings as JSON values for another process of the deployment, without the API key (it travels in
        that process's environment, never in a spec another process could read)."""
        return {spec.name: getattr(self, spec.name) for spec in dataclasses.fields(self) if not spec.metadata["secret"]}

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Settings:
        """Settings sent by `to_json` (JSON lists back to tuples), the API key from the environment."""
        lists = {spec.name for spec in dataclasses.fields(cls) if isinstance(spec.default, tuple)}
        return cls.from_env(**{name: tuple(v) if name in lists else v for name, v in values.items()})

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Settings from keyword overrides, with the API key from `api_key_file` or else `ORS_API_KEY` when not
        given, and the /ui cookies' secret from `ORS_UI_SECRET` (the deployment's) or else a new one."""
        key_file = overrides.get("api_key_file")
        if key_file is not None:
            if overrides.get("api_key") is not None:
                raise ValueError("api_key and api_key_file are both given: give the key one way")
            overrides["api_key"] = read_key_file(str(key_file))
        if overrides.get("api_key") is None and os.environ.get("ORS_API_KEY"):
            overrides["api_key"] = os.environ["ORS_API_KEY"]
        if overrides.get("ui_secret") is None:
            overrides.pop("ui_secret", None)  # a new one, unless the deployment's is in the environment
            if os.environ.get(UI_SECRET_VARIABLE):
                overrides["ui_secret"] = os.environ[UI_SECRET_VARIABLE]
        if overrides.get("host_sandbox") is None and os.environ.get("ORS_HOST_SANDBOX"):
            overrides["host_sandbox"] = os.environ["ORS_HOST_SANDBOX"].strip().lower()
        if overrides.get("codeact_sandbox") is None and os.environ.get("ORS_CODEACT_SANDBOX"):
            overrides["codeact_sandbox"] = os.environ["ORS_CODEACT_SANDBOX"].strip().lower()
        return cls(**overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Flag:
    """One `serve` flag: the Settings field it sets (None for `--env`, which names environments, not a
    setting), how its text is read, its default, and its help."""

    flag: str
    field: str | None
    type: Callable[[str], Any] | None
    """None for a switch (`--codeact`)."""
    default: Any
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    repeat: bool = False
    """The flag may be given again; the field holds every value, in order."""
    optional_value: bool = False
    """The flag may be given without a value (`--ray` alone: a new local Ray instance, the value "")."""
    shown: str | None = None
    group: str = "environments"
    """The title of the flag's group in `serve --help`."""

    @property
    def shown_default(self) -> str:
        """The default as the flags table of docs/production.md says it."""
        if self.shown is not None:
            return self.shown
        if isinstance(self.default, float) and self.default.is_integer():
            return str(int(self.default))
        return "none" if self.default is None else str(self.default)


ENV_FLAG = Flag(
    "--env",
    None,
    str,
    (),
    "serve this environment (a built-in name or module:Class); repeat for more; default: all built-ins",
    metavar="NAME",
    repeat=True,
    shown="all built-ins",
)

# The groups in the order `serve --help` shows them, with their titles there.
GROUPS: dict[type, str] = {
    Network: "network and security",
    Limits: "limits",
    Pools: "thread pools",
    Hosts: "host processes (environments of other frameworks)",
    Sandbox: "CodeAct sandbox",
    Containers: "Harbor tasks (containers)",
    Records: "episode records",
    Scale: "scale-out",
}


def serve_flags() -> list[Flag]:
    """Every `serve` flag: `--env` first, then the settings' flags group by group."""
    hints = typing.get_type_hints(Settings)
    flags = [ENV_FLAG]
    for group, title in GROUPS.items():
        for spec in dataclasses.fields(group):
            meta = spec.metadata
            if meta["help"] is None:
                continue
            kind = hints[spec.name]
            flags.append(
                Flag(
                    flag=meta["flag"] or "--" + spec.name.replace("_", "-"),
                    field=spec.name,
                    type=meta["parse"] or _reader(kind),
                    default=spec.default,
                    help=meta["help"],
                    metavar=meta["metavar"],
                    choices=meta["choices"],
                    repeat=typing.get_origin(kind) is tuple,
                    optional_value=spec.name == "ray",
                    shown=meta["shown"],
                    group=title,
                )
            )
    return flags


def _reader(kind: Any) -> Callable[[str], Any] | None:
    """How a flag's text becomes a value of the field's type: the one type it names besides None (`float | None`
    reads a float), the item type of a tuple, or None for a bool (a switch)."""
    if kind is bool:
        return None
    args = [arg for arg in typing.get_args(kind) if arg is not type(None) and arg is not Ellipsis]
    reader = args[0] if args else kind
    return typing.cast(Callable[[str], Any], reader)
