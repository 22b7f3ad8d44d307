"""One way to do each of these things, read from the source: a uvicorn server class, a front builder."""

from __future__ import annotations

import ast
from pathlib import Path

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
    assert found == ["ors_server/server.py:UvicornServer"]


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
