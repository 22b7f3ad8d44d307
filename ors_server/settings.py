"""Server settings: one frozen object, validated when it is built."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from ors_server.scale.ids import WorkerTag


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    envs: tuple[str, ...] = ()
    """Names of the environments to serve, in order (the first is the default); empty means all built-ins."""

    session_timeout: float = 900.0
    """Seconds without a session-bearing request after which a session is reaped."""
    max_sessions: int = 10_000
    ready_wait: float = 25.0
    """How long endpoints that need a ready session wait for `setup()` before answering 503."""
    tool_timeout: float | None = None
    """Seconds a tool call may run before its caller gets `timeout`; None for no limit. A sync tool's thread runs
    on until it returns, and its session refuses calls (`session_busy`) meanwhile."""
    tool_server_timeout: float = 60.0
    """Seconds a call to a composed MCP tool server may take (also bounded by `tool_timeout`); a server past it
    fails that call (`timeout`), never the session."""
    tool_server_start_timeout: float = 30.0
    """Seconds a composed MCP tool server may take to start and list its tools; past it, setup fails."""
    tool_server_log_bytes: int = 16 * 1024
    """Bytes of one stdio tool server process's stderr written to the log (whole lines); the rest is dropped."""
    tool_threads: int = 40
    """Worker threads for sync tool calls (a timed-out call keeps its thread until it really returns)."""
    discovery_threads: int = 8
    """Worker threads for listing splits and tasks, apart from tool calls."""
    lifecycle_threads: int = 16
    """Worker threads for task_from_seed, construction, setup, teardown and prompt reads, apart from tool calls."""
    max_output_chars: int = 16 * 1024 * 1024
    """The most characters a tool result's blocks may hold (text plus base64 image data)."""
    max_body_bytes: int = 4 * 1024 * 1024
    max_task_spec_bytes: int = 256 * 1024
    """The largest task spec (and MCP binding config) a session may hold, as compact UTF-8 JSON; 413 past it.
    With `max_sessions` it bounds what task specs can take: 10,000 x 256 KiB = 2.5 GiB at most."""
    max_replay_chars: int = 256 * 1024 * 1024
    """Characters of finished calls' results (text and image data) kept, across all sessions, for replay by
    `task_id`; past it the oldest are forgotten first (a replay of one answers as an unknown task_id)."""
    max_mcp_transports_per_session: int = 8
    """MCP transports (initialize handshakes) one session may have open at once; one more gets 429."""
    max_header_bytes: int = 64 * 1024
    """The largest request line plus headers a client may send (431 past it)."""
    header_timeout: float = 30.0
    """Seconds a client has to send a request's headers, from its first byte (from connecting, for a new
    connection); 408 and the connection closed past it."""
    body_timeout: float = 60.0
    """Seconds a client has to send a request's body once its headers are in; 408 and closed past it."""
    ws_write_buffer_bytes: int = 256 * 1024
    """Bytes queued to one WebSocket client past which nothing more is read from it until it has read (a quarter
    of it); what one connection holds is this plus the message being written plus the kernel's buffers."""
    ws_write_timeout: float = 20.0
    """Seconds a WebSocket client may read nothing of what is queued to it (past `ws_write_buffer_bytes`) before
    it is closed (1008) and its socket aborted."""
    sse_keepalive: float = 10.0
    """Seconds between SSE keepalive comments while a tool runs (the openreward client gives up after 30)."""
    call_linger: float = 60.0
    """Seconds a finished call's result stays available for replay by `task_id`."""
    tombstones: int = 10_000
    """How many deleted or reaped session ids are remembered, the latest ones (they answer 410 rather than 404:
    "Session deleted", or "Session expired after N s of inactivity"). Measured: 1.5 MB for 10,000 ids of 32
    characters, 2.4 MB at the 128-character limit."""
    shutdown_grace: float = 10.0
    """Seconds in-flight calls get to finish at shutdown before sessions are torn down."""
    teardown_timeout: float = 30.0
    api_key: str | None = field(default=None, repr=False)
    allowed_hosts: tuple[str, ...] = ()
    """Extra Host header values MCP accepts besides loopback (DNS-rebinding protection)."""
    log_level: str = "info"
    codeact: bool = False
    """Offer `execute_code` in every session (a session's task spec or binding config may say otherwise)."""
    codeact_sandbox: str = "bwrap"
    """How CodeAct steps are contained: 'bwrap', or 'none' (unsandboxed; `ORS_CODEACT_SANDBOX=none`)."""
    codeact_timeout: float = 30.0
    """Wall-clock seconds one `execute_code` step may run, its tool calls included."""
    codeact_memory_bytes: int = 512 * 1024 * 1024
    """The address-space limit of a step's process (RLIMIT_AS; a step is one process)."""
    codeact_max_threads: int = 64
    """Threads a step may run at once, counted in its own sandbox (RLIMIT_NPROC; it cannot start processes)."""
    codeact_disk_bytes: int = 16 * 1024 * 1024
    """The size of a step's /tmp, the only place it can write (a tmpfs, so memory; the rest is read-only)."""
    codeact_output_chars: int = 64 * 1024
    """What a step prints, and its value, are each cut to this many characters."""
    front_directory_size: int = 100_000
    """Session ids a front remembers the worker of (least recently used forgotten first; ~200 bytes each)."""
    worker_tag: str | None = None
    """Set on a worker behind a front (`w<index>-<incarnation>`): the session ids it mints name it."""

    def __post_init__(self) -> None:
        positive = (
            "session_timeout",
            "ready_wait",
            "tool_server_timeout",
            "tool_server_start_timeout",
            "sse_keepalive",
            "call_linger",
            "teardown_timeout",
            "codeact_timeout",
            "header_timeout",
            "body_timeout",
            "ws_write_timeout",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in (
            "max_sessions",
            "max_output_chars",
            "max_body_bytes",
            "max_header_bytes",
            "ws_write_buffer_bytes",
            "max_mcp_transports_per_session",
            "max_task_spec_bytes",
            "max_replay_chars",
            "tombstones",
            "front_directory_size",
            "codeact_memory_bytes",
            "codeact_max_threads",
            "codeact_disk_bytes",
            "codeact_output_chars",
            "tool_threads",
            "discovery_threads",
            "lifecycle_threads",
            "tool_server_log_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.tool_timeout is not None and self.tool_timeout <= 0:
            raise ValueError(f"tool_timeout must be positive or None, got {self.tool_timeout!r}")
        if self.shutdown_grace < 0:
            raise ValueError(f"shutdown_grace must not be negative, got {self.shutdown_grace!r}")
        if self.codeact_sandbox not in ("bwrap", "none"):
            raise ValueError(f"codeact_sandbox must be 'bwrap' or 'none', got {self.codeact_sandbox!r}")
        if self.worker_tag is not None:
            WorkerTag.parse(self.worker_tag)
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port!r}")

    def to_json(self) -> dict[str, Any]:
        """The settings as JSON values for another process of the deployment, without the API key (it travels in
        that process's environment, never in a spec another process could read)."""
        return {name: value for name, value in asdict(self).items() if name != "api_key"}

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Settings:
        """Settings sent by `to_json` (JSON lists back to tuples), the API key from the environment."""
        return cls.from_env(
            **{**values, "envs": tuple(values["envs"]), "allowed_hosts": tuple(values["allowed_hosts"])}
        )

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Settings from keyword overrides, with the API key from `ORS_API_KEY` when not given."""
        if overrides.get("api_key") is None and os.environ.get("ORS_API_KEY"):
            overrides["api_key"] = os.environ["ORS_API_KEY"]
        if overrides.get("codeact_sandbox") is None and os.environ.get("ORS_CODEACT_SANDBOX"):
            overrides["codeact_sandbox"] = os.environ["ORS_CODEACT_SANDBOX"].strip().lower()
        return cls(**overrides)  # type: ignore[arg-type]
