"""`ors-server serve`, `ors-server envs` and `ors-server episodes`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import socket
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ors_server.environment import Environment
from ors_server.loading import LoadError, resolve_environments, spec_forms
from ors_server.records.db import resolve as resolve_records
from ors_server.registry import Registry
from ors_server.sandboxes.confinement import Confinement
from ors_server.settings import Flag, Settings, serve_flags
from ors_server.types import Split

LOAD_ERROR_EXIT = 2  # as argparse exits for a usage error: the command line names something that is not there


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

    def _split_lines(self, text: str, width: int) -> list[str]:
        # Not at hyphens: `reasoning-gym:` and `--tool-timeout` stay whole, as a reader would search for them.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _argument(parser: Any, flag: Flag) -> None:
    """Add one row of the flags table to `parser`, its help ending in the default as the flags table says it (a
    default of None means something: `--tool-timeout`'s is no limit, `--records`' a file in the directory)."""
    text = flag.help if flag.field is not None else f"serve this environment: {spec_forms()}; repeat for more"
    if "default" not in text:
        text += f" (default: {flag.shown_default.replace('`', '')})"
    options: dict[str, Any] = {"default": flag.default, "help": text.replace("%", "%%"), "dest": flag.field or "env"}
    if flag.type is None:
        options["action"] = "store_true"
    else:
        options["type"] = flag.type if flag.type in (int, float, str) else _reading(flag.type)
        if flag.choices is None:
            options["metavar"] = flag.metavar
        else:
            options["choices"] = list(flag.choices)
        if flag.repeat:
            options["action"] = "append"
            options["default"] = []
        if flag.optional_value:
            options["nargs"], options["const"] = "?", ""
    parser.add_argument(flag.flag, **options)


def _reading(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse` with its ValueError's message in argparse's error line (argparse drops it otherwise)."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    read.__name__ = parse.__name__.strip("_")
    return read


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ors-server", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser(
        "serve",
        help="serve environments over ORS, MCP, Eval Protocol's control plane and OpenEnv",
        description="Serve environments over ORS, MCP, Eval Protocol's control plane and OpenEnv, on one port.",
    )
    groups: dict[str, Any] = {}
    for flag in serve_flags():
        if flag.group not in groups:
            groups[flag.group] = serve.add_argument_group(flag.group)
        _argument(groups[flag.group], flag)

    envs = commands.add_parser(
        "envs", help="list environments with their tools and splits", description="List environments."
    )
    envs.add_argument(
        "--env", action="append", default=[], metavar="NAME", help="this environment (default: all built-ins)"
    )

    episodes = commands.add_parser(
        "episodes",
        help="read episode records without a server: list, show ID, export, stats",
        description="Read episode records (what `serve` recorded) from their database, without a server.",
    )
    actions = episodes.add_subparsers(dest="action", required=True, parser_class=_Parser)
    listing = actions.add_parser("list", help="episodes, newest first, one line each")
    show = actions.add_parser("show", help="one episode with its task, prompt and calls, as JSON")
    show.add_argument("id", help="the episode's id")
    exporting = actions.add_parser("export", help="episodes as JSON Lines on standard output")
    exporting.add_argument("--format", choices=["jsonl", "evaluation_row"], default="jsonl")
    stats = actions.add_parser("stats", help="episodes, finished, mean reward and mean steps by group, as JSON")
    stats.add_argument(
        "--group-by", default=None, metavar="env|task|label.KEY", help="one group per value (default: all in one)"
    )
    stats.add_argument("--bucket", type=float, default=None, metavar="SECONDS", help="and per bucket of start time")
    for action in (listing, show, exporting, stats):
        action.add_argument(
            "--records",
            metavar="PATH|URL",
            default=None,
            help="the records (default: $ORS_RECORDS, else ./ors-episodes.db)",
        )
    for action in (listing, exporting, stats):
        action.add_argument("--env", default=None, metavar="NAME", help="of this environment only")
        action.add_argument("--status", choices=["live", "ended"], default=None)
        action.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="with this label")
        action.add_argument("--since", default=None, metavar="TIME", help="started at or after (ISO 8601)")
        action.add_argument("--until", default=None, metavar="TIME", help="started before (ISO 8601)")
    listing.add_argument("--limit", type=int, default=50, metavar="N", help="at most N episodes")
    return parser


def _episodes(args: argparse.Namespace) -> None:
    """`ors-server episodes list|show|export|stats`: read the records database directly."""
    import json
    import os

    from ors_server.records import db as records_db
    from ors_server.records import reading

    target = records_db.resolve(args.records)
    if target is None:
        raise SystemExit("ors-server: --records off: there are no records to read")
    if not records_db.is_postgres(target) and not os.path.exists(target):
        raise SystemExit(f"ors-server: no episode records at {target} (give --records PATH)")
    try:
        database = records_db.Database(target)
    except records_db.RecordsError as exc:
        raise SystemExit(f"ors-server: {exc}") from None
    try:
        if args.action == "show":
            row = database.episode(args.id)
            if row is None:
                raise SystemExit(f"ors-server: no episode {args.id!r} in {records_db.shown(target)}")
            for piece in reading.episode_text(database, row, "show"):
                sys.stdout.write(piece)
            return
        labels = dict(label.partition("=")[::2] for label in args.label)
        try:
            times = {name: value for name, value in (("since", args.since), ("until", args.until)) if value}
            filters = reading.Filters.parse(times, labels)
        except ValueError as exc:
            raise SystemExit(f"ors-server: {exc}") from None
        filters.env, filters.status = args.env, args.status
        if args.action == "export":
            for line in reading.export_lines(database, filters, args.format):
                sys.stdout.write(line)
            return
        if args.action == "stats":
            try:
                groups = database.stats(args.group_by, **filters.query(), bucket=args.bucket)
            except ValueError as exc:
                raise SystemExit(f"ors-server: {exc}") from None
            print(json.dumps(reading.stats_answer(groups, args.bucket), indent=2))
            return
        page = database.episodes(**filters.query(), limit=args.limit)
        for row in page.rows:
            episode = reading.summary(row)
            labels_text = ",".join(f"{k}={v}" for k, v in episode["labels"].items()) or "-"
            print(
                f"{episode['id']}  {episode['env']}  {episode['status']}"
                f"{' (' + episode['end_reason'] + ')' if episode['end_reason'] else ''}  steps={episode['steps']}"
                f"  reward={episode['reward']:g}  {episode['started_at']}  {labels_text}"
            )
    finally:
        database.close()


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command in ("episodes", "envs"):
        try:
            if args.command == "episodes":
                _episodes(args)
            else:
                _envs(args)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`ors-server episodes list | head`): as a Unix tool, stop quietly. Standard
            # output is pointed at /dev/null so the interpreter's own flush at exit does not raise again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(1) from None
        return
    _serve(args)


def _envs(args: argparse.Namespace) -> None:
    """`ors-server envs`: each environment with its splits and tools."""
    environments = _load(args.env, debug=False)
    for env_cls in environments:
        splits = ", ".join(Split.of(s).name for s in env_cls.list_splits())
        print(f"{env_cls.name}  (splits: {splits})")
        doc = (env_cls.__dict__.get("__doc__") or "").strip()  # its own, not a base class's
        if doc:
            print(f"  {doc.splitlines()[0]}")
        for spec in env_cls.tools.values():
            first_line = spec.description.splitlines()[0] if spec.description else ""
            print(f"    {spec.name}: {first_line}")
        for server in env_cls.mcp_servers:
            print(f"    {server.name}__*: the tools of MCP server '{server.name}' (listed when served)")


def _serve(args: argparse.Namespace) -> None:
    """`ors-server serve`."""
    confined = None
    with contextlib.suppress(ValueError):  # a bad setting is reported below, where the settings are built
        confined = Confinement.of(Settings.from_env(**_settings_of(args)))
    environments = _load(args.env, args.log_level == "debug", confined)
    from ors_server import internals
    from ors_server.http.server import Server

    try:
        internals.check()
    except internals.UnsupportedDependency as exc:
        raise SystemExit(f"ors-server: {exc}") from None
    if args.workers is not None and args.workers < 1:
        raise SystemExit("ors-server: --workers must be at least 1")
    if args.fronts < 1:
        raise SystemExit("ors-server: --fronts must be at least 1")
    try:
        settings = Settings.from_env(**_settings_of(args))
    except ValueError as exc:
        raise SystemExit(f"ors-server: {exc}") from None
    with _load_errors(debug=False):  # an --env-port naming no environment served
        Registry(environments).by_port(settings.port_envs)
    if args.api_key is not None:
        print(
            "ors-server: WARNING: --api-key puts the key on the command line, visible to every local process "
            "(ps, /proc): give it in $ORS_API_KEY or --api-key-file instead",
            file=sys.stderr,
        )
    if settings.codeact:
        _check_codeact(settings)
    # Every process of a deployment records to the same place: a file named once, as an absolute path.
    settings = dataclasses.replace(settings, records=resolve_records(settings.records) or "off")
    if settings.fronts > 1 and (settings.workers is None or settings.ray is not None):
        raise SystemExit("ors-server: --fronts needs --workers N (with --ray, start one front per node instead)")
    if settings.fronts > 1 and not hasattr(socket, "SO_REUSEPORT"):
        raise SystemExit("ors-server: --fronts needs SO_REUSEPORT, which this platform lacks")
    if settings.ray is not None:
        if settings.workers is None:
            raise SystemExit("ors-server: --ray needs --workers N")
        try:
            from ors_server.scale import on_ray
        except ImportError:
            raise SystemExit("ors-server: --ray needs Ray: pip install 'ors-server[ray]'") from None
        with _listen_errors(), _load_errors(args.log_level == "debug", LoadError):
            on_ray.serve(
                args.env,
                settings,
                settings.workers,
                settings.ray or None,
                settings.ray_placement,
                settings.ray_worker_cpus,
                settings.ray_runtime_env,
            )
        return
    if settings.ray_runtime_env is not None:
        raise SystemExit("ors-server: --ray-runtime-env needs --ray")
    if settings.workers is not None:
        with _listen_errors():
            if settings.fronts > 1:
                from ors_server.scale import fronts

                fronts.serve(args.env, settings, settings.workers, settings.fronts)
            else:
                from ors_server.scale import local

                local.serve(args.env, settings, settings.workers)
        return
    Server(environments, settings).run()


def _settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The Settings fields the `serve` flags set (a repeatable flag's values as a tuple)."""
    values: dict[str, Any] = {}
    for flag in serve_flags():
        if flag.field is not None:
            value = getattr(args, flag.field)
            values[flag.field] = tuple(value) if flag.repeat else value
    return values


def _load(specs: Sequence[str], debug: bool, confined: Confinement | None = None) -> list[type[Environment]]:
    """The environments `specs` name, checked as a server would check them."""
    with _load_errors(debug):
        environments = resolve_environments(specs, confined=confined)
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
    from ors_server.http.server import CannotListen

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
