"""One way to do each of these things: a uvicorn server class, a front builder (both read from the source), the
faces as the front knows them."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path
from unittest.mock import patch

from starlette.routing import BaseRoute, Mount

from ors_server.http.app import SHAPES, create_app
from ors_server.sessions import SessionStore

PACKAGE = Path(__file__).resolve().parents[1] / "ors_server"


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text())) for path in PACKAGE.rglob("*.py")]


def test_there_is_one_uvicorn_server_class() -> None:
    found = [
        f"{name}:{node.name}"
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base) == "uvicorn.Server" for base in node.bases)
    ]
    assert found == ["ors_server/http/server.py:UvicornServer"]


def test_servers_are_started_only_through_that_class() -> None:
    found = [
        name
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "uvicorn.Server"
    ]
    assert found == []


def test_the_front_is_built_in_one_place() -> None:
    found = [
        name
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("Front", "Refusals")
    ]
    assert found == ["ors_server/scale/assembly.py", "ors_server/scale/assembly.py"]


def _paths(routes: Sequence[BaseRoute]) -> list[str]:
    return [
        f"{route.path}[{','.join(_paths(route.routes))}]" if isinstance(route, Mount) else getattr(route, "path", "")
        for route in routes
    ]


def test_the_front_knows_each_face_by_the_same_routes_the_server_serves() -> None:
    from ors_server.environments.math import Math

    served = create_app([Math]).state.faces.faces
    shapes = [shape() for shape in SHAPES]
    assert [(f.name, _paths(f.routes), f.render_error, f.names_session, f.revokes) for f in served] == [
        (f.name, _paths(f.routes), f.render_error, f.names_session, f.revokes) for f in shapes
    ]


def test_refusals_build_no_session_store() -> None:
    from ors_server.scale.refusals import Refusals

    with patch.object(SessionStore, "__init__", side_effect=AssertionError("a store was built")):
        refusals = Refusals()
    assert refusals.faces.names == [shape().name for shape in SHAPES]


def _state_reads(tree: ast.Module) -> list[str]:
    """The names read from `app.state`, as attributes or through getattr."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value).endswith("app.state"):
            names.append(node.attr)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr" and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            if ast.unparse(target).endswith("app.state") and isinstance(name, ast.Constant):
                names.append(str(name.value))
    return names


def test_faces_reach_one_another_only_through_the_core() -> None:
    # A face's own objects on app.state (the MCP face's "mcp", the OpenEnv face's "openenv") are its own to read.
    owners = {"mcp": "ors_server/faces/mcp/", "openenv": "ors_server/faces/openenv/"}
    found = [
        f"{name} reads app.state.{attr}"
        for name, tree in _modules()
        for attr in _state_reads(tree)
        if attr in owners and not name.startswith(owners[attr])
    ]
    assert found == []
