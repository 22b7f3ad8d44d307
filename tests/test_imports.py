"""The package's floors, read from the source with `ast`: every import runs down a floor or stays on its own,
and no two modules import each other, however indirectly.

    top      scale/, cli: the command line, the front, workers, Ray
    app      the app, `Server`, the middleware around them (which may know the faces, to answer in their shape)
    faces    one module per protocol, over the core, and the web page (`ui/`)
    core     types, errors, settings, ids, environments, sessions, the call pipeline, CodeAct, composition

Every import counts, also one inside a function (a lazy import is still an arrow), except under
`if TYPE_CHECKING:`, which never runs. `ors_server/__init__.py` is the public authoring API: it sits above
every floor and imports lazily (tests/test_public_api.py, tests/test_lazy_import.py), and no module imports it
but the built-in environments (`ors_server/environments/`): they stand beside the floors, written as a user's
environment is, against the public API (and the sandbox builder, for the shell), and only `loading.py` imports
them, by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ors_server"

FLOORS = {
    "core": 0,
    "faces": 1,
    "app": 2,
    "top": 3,
}
FACES = {"ors_server.faces", "ors_server.ui", "ors_server.internals"}
APP = {"ors_server.http"}
TOP = {"ors_server.scale", "ors_server.cli", "ors_server.__main__"}
BUILTINS = "ors_server.environments"
BUILTINS_MAY_IMPORT = {"ors_server", "ors_server.sandboxes"}
BUILTINS_IMPORTED_BY = {"ors_server.loading"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def floor_of(module: str) -> int:
    def within(groups: set[str]) -> bool:
        return any(module == group or module.startswith(group + ".") for group in groups)

    if within(TOP):
        return FLOORS["top"]
    if within(APP):
        return FLOORS["app"]
    if within(FACES):
        return FLOORS["faces"]
    return FLOORS["core"]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str) -> set[str]:
    """The package's modules `module` imports (at any depth of its code, outside `if TYPE_CHECKING:`)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                # `from ors_server.faces import ors` imports the module ors_server.faces.ors.
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: imports_of(module) for module in MODULES}


def test_the_import_reader_sees_imports_inside_functions_and_skips_type_checking_blocks() -> None:
    assert "ors_server.sessions" in GRAPH["ors_server.calls"]
    assert "ors_server.faces.ors" in GRAPH["ors_server.http.app"]  # `from ors_server.faces import ors`
    tree = ast.parse("if TYPE_CHECKING:\n    import a\nelse:\n    import b\ndef f():\n    import c\n")
    seen = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert seen == ["a", "b", "c"]  # what ast sees; `imports_of` drops only the first


def is_builtin(module: str) -> bool:
    return module == BUILTINS or module.startswith(BUILTINS + ".")


@pytest.mark.parametrize("module", sorted(module for module in MODULES if not is_builtin(module)))
def test_every_import_runs_down_a_floor_or_stays_on_its_own(module: str) -> None:
    if module == "ors_server":
        return  # the public API, above every floor (lazily)
    upward = sorted(
        imported
        for imported in GRAPH[module]
        if imported == "ors_server"
        or (is_builtin(imported) and module not in BUILTINS_IMPORTED_BY)
        or (not is_builtin(imported) and floor_of(imported) > floor_of(module))
    )
    assert upward == [], f"{module} (floor {floor_of(module)}) imports a higher floor: {upward}"


@pytest.mark.parametrize("module", sorted(module for module in MODULES if is_builtin(module)))
def test_builtin_environments_import_only_the_public_api(module: str) -> None:
    allowed = {*BUILTINS_MAY_IMPORT, BUILTINS}
    internal = sorted(
        imported
        for imported in GRAPH[module]
        if not any(imported == name or imported.startswith(name + ".") for name in allowed)
    )
    assert internal == [], f"{module} reaches into the server's internals: {internal}"


def test_no_two_modules_import_each_other() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(GRAPH[module]):
            if state.get(imported) == 1:
                cycles.append(path[path.index(imported) :] + [imported])
            elif imported not in state:
                walk(imported)
        path.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            walk(module)
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


TOOL_SOURCES = {"ors_server.hosting", "ors_server.codeact", "ors_server.compose.catalogue", "ors_server.toolsets"}
"""The packages that make tools of one kind or another; each kind implements `ors_server.runtime.tool.Tool`."""
TOOL_KINDS = {"ServerTool", "HostedTool", "HostedEnvironment", "ExecuteCode", "EXECUTE_CODE", "EXECUTE_CODE_TOOL"}


def test_the_call_pipeline_imports_no_source_of_tools_and_names_no_kind_of_tool() -> None:
    # The pipeline runs every tool through one protocol, never asking which kind it is: a new source of tools
    # (container tasks, toolsets) is a new implementation, not an edit of `calls.py`.
    sources = sorted(
        imported
        for imported in GRAPH["ors_server.calls"]
        if any(imported == source or imported.startswith(source + ".") for source in TOOL_SOURCES)
    )
    assert sources == [], f"ors_server.calls imports {sources}"
    tree = ast.parse(MODULES["ors_server.calls"].read_text(encoding="utf-8"))
    named = sorted(
        {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        | {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    )
    assert sorted(TOOL_KINDS & set(named)) == [], "ors_server.calls names a kind of tool"
