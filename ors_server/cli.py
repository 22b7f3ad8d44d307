"""`ors-server serve` and `ors-server envs`."""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

from ors_server.environment import Environment
from ors_server.loading import LoadError, resolve_environments
from ors_server.registry import Registry
from ors_server.settings import Settings
from ors_server.types import Split

LOAD_ERROR_EXIT = 2  # as argparse exits for a usage error: the command line names something that is not there


# The `serve` flags that set one Settings field each: (field, type, metavar, help). The flag is the field's
# name with dashes; its default is the field's.
SETTING_FLAGS: list[tuple[str, type, str, str]] = [
    ("session_timeout", float, "S", "idle seconds before reaping"),
    ("tombstones", int, "N", "ended (deleted or reaped) session ids remembered, so they answer 410 rather than 404"),
    ("max_sessions", int, "N", "live sessions at most; more get 503 with Retry-After"),
    ("tool_timeout", float, "S", "seconds a tool call may run"),
    ("tool_server_timeout", float, "S", "seconds a call to a composed MCP tool server may take"),
    ("tool_server_start_timeout", float, "S", "seconds a composed MCP tool server may take to start and list tools"),
    ("tool_server_log_bytes", int, "N", "bytes of one stdio tool server process's stderr that reach the log"),
    ("tool_threads", int, "N", "worker threads for sync tools"),
    ("discovery_threads", int, "N", "worker threads for listing splits and tasks"),
    ("lifecycle_threads", int, "N", "worker threads for setup, teardown, task_from_seed and prompt reads"),
    ("max_body_bytes", int, "N", "largest request body"),
    ("max_task_spec_bytes", int, "N", "largest task spec or MCP config a session may hold"),
    ("max_replay_chars", int, "N", "finished call results kept for replay, in total"),
    ("max_mcp_transports_per_session", int, "N", "MCP transports one session may have open"),
    ("max_header_bytes", int, "N", "largest request head"),
    ("header_timeout", float, "S", "seconds a client has to send a request's headers"),
    ("body_timeout", float, "S", "seconds a client has to send a request's body"),
    ("ws_write_buffer_bytes", int, "N", "bytes queued to a WebSocket client before it must read to be read from"),
    ("ws_write_timeout", float, "S", "seconds a WebSocket client may read nothing before it is closed"),
    ("max_output_chars", int, "N", "largest tool result"),
    ("codeact_timeout", float, "S", "wall-clock seconds one execute_code step may run"),
    ("codeact_memory_bytes", int, "N", "address space of an execute_code step's process (RLIMIT_AS)"),
    ("codeact_max_threads", int, "N", "threads an execute_code step may run at once (RLIMIT_NPROC in its sandbox)"),
    ("codeact_disk_bytes", int, "N", "size of an execute_code step's /tmp tmpfs, the only place it can write"),
    ("front_directory_size", int, "N", "with --workers: session ids each front remembers the worker of"),
]


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags (`--sess 5` is a mistake, not `--session-timeout 5`), and a subcommand reports its own
    unknown arguments with its own usage (argparse leaves them to the top-level parser)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_abbrev=False, formatter_class=_Help, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


class _Help(argparse.HelpFormatter):
    """Each flag's default after its help, where there is one to show (not for flags that are off or unset)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, [], argparse.SUPPRESS) and action.option_strings
        if shown and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ors-server", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser(
        "serve", help="serve environments over ORS, MCP and the control plane", description="Serve environments."
    )
    serve.add_argument("--host", default=Settings.host, help="address to listen on")
    serve.add_argument("--port", type=int, default=Settings.port, help="port to listen on")
    serve.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="serve this environment (a built-in name or module:Class); repeat for more; default: all built-ins",
    )
    for name, kind, metavar, text in SETTING_FLAGS:
        flag = "--" + name.replace("_", "-")
        serve.add_argument(flag, dest=name, type=kind, default=getattr(Settings, name), metavar=metavar, help=text)
    serve.add_argument("--api-key", default=None, help="require this key (default: $ORS_API_KEY; none: open)")
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a Host header to accept besides loopback and --host (name:port, name, or name:*); repeat for more",
    )
    serve.add_argument(
        "--codeact",
        action="store_true",
        help="offer execute_code (Python that calls the tools) in every session; sandboxed with bwrap, "
        "or unsandboxed with ORS_CODEACT_SANDBOX=none",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="serve from N worker processes behind a session-routing front (--max-sessions is split over them)",
    )
    serve.add_argument(
        "--fronts",
        type=int,
        default=1,
        metavar="M",
        help="with --workers: M front processes share the port (the front's CPU per request is the first "
        "limit on one host); each follows the same worker table",
    )
    serve.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the --workers as Ray actors on the cluster at ADDRESS (none: a new local Ray instance); "
        "needs the ray extra: pip install 'ors-server[ray]'",
    )
    serve.add_argument(
        "--ray-placement",
        choices=["spread", "pack"],
        default="spread",
        help="spread: workers round-robin over the cluster's nodes; pack: where Ray's scheduler puts them",
    )
    serve.add_argument(
        "--ray-worker-cpus", type=float, default=1.0, metavar="N", help="CPUs Ray reserves for each worker"
    )
    serve.add_argument(
        "--ray-runtime-env",
        type=_json_object,
        default=None,
        metavar="JSON",
        help='Ray runtime_env of the deployment, e.g. \'{"working_dir": "."}\' or \'{"py_modules": ["mymodule.py"]}\': '
        "how a module:Class environment reaches the other nodes",
    )
    serve.add_argument(
        "--log-level",
        default=Settings.log_level,
        choices=["critical", "error", "warning", "info", "debug"],
        help="log level (debug also shows the traceback behind an environment that fails to load)",
    )

    envs = commands.add_parser(
        "envs", help="list environments with their tools and splits", description="List environments."
    )
    envs.add_argument(
        "--env", action="append", default=[], metavar="NAME", help="this environment (default: all built-ins)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    environments = _load(args.env, getattr(args, "log_level", "info") == "debug")
    if args.command == "envs":
        for env_cls in environments:
            splits = ", ".join(Split.of(s).name for s in env_cls.list_splits())
            print(f"{env_cls.name}  (splits: {splits})")
            for spec in env_cls.tools.values():
                first_line = spec.description.splitlines()[0] if spec.description else ""
                print(f"    {spec.name}: {first_line}")
            for server in env_cls.mcp_servers:
                print(f"    {server.name}__*: the tools of MCP server '{server.name}' (listed when served)")
        return
    from ors_server.server import Server

    try:
        settings = Settings.from_env(
            host=args.host,
            port=args.port,
            api_key=args.api_key,
            allowed_hosts=tuple(args.allowed_host),
            log_level=args.log_level,
            codeact=args.codeact,
            **{name: getattr(args, name) for name, *_ in SETTING_FLAGS},
        )
    except ValueError as exc:
        raise SystemExit(f"ors-server: {exc}") from None
    if settings.codeact:
        _check_codeact(settings)
    if args.workers is not None and args.workers < 1:
        raise SystemExit("ors-server: --workers must be at least 1")
    if args.fronts < 1:
        raise SystemExit("ors-server: --fronts must be at least 1")
    if args.fronts > 1 and (args.workers is None or args.ray is not None):
        raise SystemExit("ors-server: --fronts needs --workers N (with --ray, start one front per node instead)")
    if args.fronts > 1 and not hasattr(socket, "SO_REUSEPORT"):
        raise SystemExit("ors-server: --fronts needs SO_REUSEPORT, which this platform lacks")
    if args.ray is not None:
        if args.workers is None:
            raise SystemExit("ors-server: --ray needs --workers N")
        try:
            from ors_server.scale import on_ray
        except ImportError:
            raise SystemExit("ors-server: --ray needs Ray: pip install 'ors-server[ray]'") from None
        with _listen_errors(), _load_errors(args.log_level == "debug", LoadError):
            on_ray.serve(
                args.env,
                settings,
                args.workers,
                args.ray or None,
                args.ray_placement,
                args.ray_worker_cpus,
                args.ray_runtime_env,
            )
        return
    if args.ray_runtime_env is not None:
        raise SystemExit("ors-server: --ray-runtime-env needs --ray")
    if args.workers is not None:
        from ors_server.scale import local

        with _listen_errors():
            local.serve(args.env, settings, args.workers, args.fronts)
        return
    Server(environments, settings).run()


def _load(specs: Sequence[str], debug: bool) -> list[type[Environment]]:
    """The environments `specs` name, checked as a server would check them."""
    with _load_errors(debug):
        environments = resolve_environments(specs)
        Registry(environments)
    return environments


@contextlib.contextmanager
def _load_errors(debug: bool, *kinds: type[Exception]) -> Iterator[None]:
    """An environment that cannot be loaded: one line and exit 2 (the traceback behind it at `--log-level debug`).
    `kinds`: the exceptions that mean that (default: a LoadError, or a registry's ValueError)."""
    caught = kinds or (LoadError, ValueError)
    try:
        yield
    except caught as exc:
        if debug:
            traceback.print_exception(exc)
        print(f"ors-server: {exc}", file=sys.stderr)
        raise SystemExit(LOAD_ERROR_EXIT) from None


@contextlib.contextmanager
def _listen_errors() -> Iterator[None]:
    """An address that cannot be listened on (in use, say), in any mode: one line, exit 1."""
    from ors_server.server import CannotListen

    try:
        yield
    except CannotListen as exc:
        raise SystemExit(f"ors-server: {exc}") from None


def _check_codeact(settings: Settings) -> None:
    from ors_server.codeact import SandboxUnavailable, check_sandbox, sandbox_mode

    try:
        check_sandbox(sandbox_mode(settings.codeact_sandbox))
    except SandboxUnavailable as exc:
        raise SystemExit(f"ors-server: --codeact: {exc}") from None
    if settings.codeact_sandbox == "none":
        print(
            "ors-server: WARNING: ORS_CODEACT_SANDBOX=none: execute_code runs agent code WITHOUT a sandbox, "
            "with this server's user's access to files and the network",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
