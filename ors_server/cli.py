"""`ors-server serve` and `ors-server envs`."""

from __future__ import annotations

import argparse
import importlib
import socket
import sys
from collections.abc import Sequence

from ors_server.environment import Environment
from ors_server.settings import Settings
from ors_server.types import Split


def builtin_environments() -> list[type[Environment]]:
    from environments import BUILTIN_ENVIRONMENTS

    return list(BUILTIN_ENVIRONMENTS)


def resolve_environments(names: Sequence[str]) -> list[type[Environment]]:
    """Built-in environments by name, or any environment by import path (`package.module:Class`)."""
    builtins = {env_cls.name.lower(): env_cls for env_cls in builtin_environments()}
    if not names:
        return list(builtins.values())
    resolved = []
    for name in names:
        if ":" in name:
            module, _, attr = name.partition(":")
            env_cls = getattr(importlib.import_module(module), attr)
            if not (isinstance(env_cls, type) and issubclass(env_cls, Environment)):
                raise SystemExit(f"{name} is not an Environment subclass")
        elif name.lower() in builtins:
            env_cls = builtins[name.lower()]
        else:
            raise SystemExit(f"unknown environment '{name}'; built-in ones: {', '.join(builtins)}")
        resolved.append(env_cls)
    return resolved


# The `serve` flags that set one Settings field each: (field, type, metavar, help). The flag is the field's
# name with dashes; its default is the field's.
SETTING_FLAGS: list[tuple[str, type, str, str]] = [
    ("session_timeout", float, "S", "idle seconds before reaping"),
    ("max_sessions", int, "N", "live sessions at most; more get 503 with Retry-After"),
    ("tool_timeout", float, "S", "seconds a tool call may run"),
    ("tool_server_timeout", float, "S", "seconds a call to a composed MCP tool server may take"),
    ("tool_server_start_timeout", float, "S", "seconds a composed MCP tool server may take to start and list tools"),
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
    ("max_output_chars", int, "N", "largest tool result"),
    ("codeact_timeout", float, "S", "wall-clock seconds one execute_code step may run"),
]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ors-server", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve environments over ORS, MCP and the control plane")
    serve.add_argument("--host", default=Settings.host)
    serve.add_argument("--port", type=int, default=Settings.port)
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
    serve.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT]")
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
        "--log-level", default=Settings.log_level, choices=["critical", "error", "warning", "info", "debug"]
    )

    envs = commands.add_parser("envs", help="list environments with their tools and splits")
    envs.add_argument("--env", action="append", default=[], metavar="NAME")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    environments = resolve_environments(args.env)
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
        on_ray.serve(args.env, settings, args.workers, args.ray or None, args.ray_placement, args.ray_worker_cpus)
        return
    if args.workers is not None:
        from ors_server.scale import local

        local.serve(args.env, settings, args.workers, args.fronts)
        return
    Server(environments, settings).run()


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
