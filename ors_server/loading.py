"""`--env` specs to environment classes: built-in names, `module:Class` imported from the working directory,
`FRAMEWORK:module:Class[@PYTHON]` served from host processes (`ors_server.hosting`), `harbor:DIR` (Harbor tasks in
containers, `ors_server.harbor`), or `reasoning-gym:...` (the library's datasets,
`ors_server/environments/reasoning_gym.py`).

As `uvicorn main:app` does, a `module:Class` spec imports from the directory the server was started in, with no
`PYTHONPATH` needed. Worker and front processes (and Ray actors on this host) are handed that directory, so they
import the same module. Every mistake in a spec is a `LoadError` whose message is one line naming the module,
the class and what is wrong; the CLI prints it and exits 2.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Sequence

from ors_server import harbor, hosting
from ors_server.environment import Environment
from ors_server.registry import Registry
from ors_server.sandboxes.confinement import Confinement


class LoadError(Exception):
    """An `--env` spec that names no usable environment (the message is one line, for the user)."""


def builtin_environments() -> list[type[Environment]]:
    from ors_server.environments import BUILTIN_ENVIRONMENTS

    return list(BUILTIN_ENVIRONMENTS)


def resolve_environments(
    specs: Sequence[str], app_dir: str | None = None, confined: Confinement | None = None
) -> list[type[Environment]]:
    """The environments `specs` name (all built-ins for none): built-in names, case-insensitive, or
    `package.module:Class`, imported from `app_dir` (default: the working directory) before `sys.path`. A hosted
    one is described by a host process confined as `confined` says (default: as the environment's settings say)."""
    builtins = {env_cls.name.lower(): env_cls for env_cls in builtin_environments()}
    if not specs:
        return list(builtins.values())
    resolved: list[type[Environment]] = []
    for spec in specs:
        prefix, _, rest = spec.partition(":")
        if spec.startswith(REASONING_GYM):
            resolved.extend(reasoning_gym_environments(spec, app_dir))
        elif prefix == harbor.PREFIX:
            try:
                resolved.append(harbor.load(rest, app_dir))
            except harbor.HarborLoadError as exc:
                raise LoadError(str(exc)) from None
        elif prefix in hosting.FRAMEWORKS:
            try:
                resolved.append(hosting.load(prefix, rest, app_dir, confined))
            except hosting.HostLoadError as exc:
                raise LoadError(str(exc)) from None
        elif ":" in spec:
            resolved.append(import_environment(spec, app_dir))
        elif spec.lower() in builtins:
            resolved.append(builtins[spec.lower()])
        else:
            raise LoadError(
                f"unknown environment '{spec}'; built-in ones: {', '.join(builtins)} (or give module:Class)"
            )
    return resolved


REASONING_GYM = "reasoning-gym:"


def spec_forms() -> str:
    """The forms an `--env` spec takes, as `serve --help` lists them (the hosted ones from `hosting.FRAMEWORKS`)."""
    hosted = ", ".join(f"{prefix}:module:Class[@PYTHON]" for prefix in hosting.FRAMEWORKS)
    return (
        "a built-in name; module:Class (imported from the working directory); "
        f"{REASONING_GYM}DATASETS[?OPTIONS] (reasoning-gym's datasets); "
        f"{hosted} (in host processes, with that interpreter)"
    )


def reasoning_gym_environments(spec: str, app_dir: str | None = None) -> list[type[Environment]]:
    """`reasoning-gym:...`: the library's datasets (ors_server/environments/reasoning_gym.py has the grammar), imported
    only here, so a server without the extra starts as fast as ever."""
    from ors_server.environments.reasoning_gym import environments_for

    try:
        return list(environments_for(spec.removeprefix(REASONING_GYM), os.getcwd() if app_dir is None else app_dir))
    except ValueError as exc:
        raise LoadError(f"--env '{spec}': {exc}") from None


def import_environment(spec: str, app_dir: str | None = None) -> type[Environment]:
    """The class `module:Class` names, checked to be an `Environment` subclass."""
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name or ":" in class_name:
        raise LoadError(f"--env '{spec}': expected a built-in name or module:Class, e.g. mymodule:MyEnv")
    _put_on_path(os.getcwd() if app_dir is None else app_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise LoadError(
                f"--env '{spec}': no module '{exc.name}' in {os.getcwd()} or on the Python path "
                "(start the server from the directory that holds it, or install it)"
            ) from exc
        raise LoadError(f"--env '{spec}': importing module '{module_name}' failed: {_one_line(exc)}") from exc
    except BaseException as exc:  # a module may raise anything at import, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise LoadError(f"--env '{spec}': importing module '{module_name}' failed: {_one_line(exc)}") from exc
    try:
        found = getattr(module, class_name)
    except AttributeError:
        classes = [name for name, value in vars(module).items() if isinstance(value, type)]
        close = difflib.get_close_matches(class_name, classes, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise LoadError(f"--env '{spec}': module '{module_name}' has no class '{class_name}'{hint}") from None
    if not (isinstance(found, type) and issubclass(found, Environment)):
        what = f"the class {found.__name__}" if isinstance(found, type) else f"an object of type {type(found).__name__}"
        raise LoadError(
            f"--env '{spec}': '{class_name}' in module '{module_name}' is {what}, not an Environment subclass"
        )
    try:
        Registry([found])  # what a server checks of each environment: tools, a prompt
    except ValueError as exc:
        raise LoadError(f"--env '{spec}': {exc}") from None
    return found


def _put_on_path(directory: str) -> None:
    """Import from `directory` first, as a script's own directory is (and as uvicorn's app dir is)."""
    directory = os.path.abspath(directory)
    if os.path.isdir(directory) and directory not in sys.path:
        sys.path.insert(0, directory)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"SyntaxError: {exc.msg} ({os.path.basename(exc.filename)}, line {exc.lineno})"
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
