"""The repository's layout: the test tree can never shadow the packages it tests, whichever way pytest is started,
and the package shows its architecture in its folders."""

from __future__ import annotations

import sys
from pathlib import Path

import ors_server
import ors_server.environments

ROOT = Path(__file__).resolve().parents[1]


def test_top_level_packages_are_the_repository_ones() -> None:
    assert Path(ors_server.__file__).resolve().parent == ROOT / "ors_server"
    # The built-ins ship inside the package: a top-level `environments` would shadow a user's own.
    assert Path(ors_server.environments.__file__).resolve().parent == ROOT / "ors_server" / "environments"
    assert not (ROOT / "environments").exists()


def test_the_package_root_holds_at_most_16_modules() -> None:
    # The rest live in subpackages named by concern (http/, faces/, sandboxes/, runtime/, ...), so the folder
    # shows the architecture (docs/architecture.md).
    modules = sorted(path.name for path in (ROOT / "ors_server").glob("*.py"))
    assert len(modules) <= 16, modules


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_session_store_keeps_to_ids_admission_and_lifecycle_within_650_lines() -> None:
    # What sessions run on and how an episode's environment is built, read and torn down live in runtime/
    # (issue 33, item 2): a store that grows past this is gathering other concerns again.
    assert _lines(ROOT / "ors_server" / "sessions.py") <= 650


def test_each_module_of_the_mcp_face_stays_within_400_lines() -> None:
    # The face is split as the SDK is layered (transport, session binding, handlers; docs/architecture.md), one
    # concept a module (issue 33, item 8): a module past this is mixing layers again.
    sizes = {path.name: _lines(path) for path in sorted((ROOT / "ors_server" / "faces" / "mcp").glob("*.py"))}
    assert {name: size for name, size in sizes.items() if size > 400} == {}, sizes


def test_no_folder_inside_tests_is_on_sys_path() -> None:
    tests = ROOT / "tests"
    on_path = [entry for entry in sys.path if entry and Path(entry).resolve().is_relative_to(tests)]
    assert on_path == []


def test_every_test_folder_is_a_package() -> None:
    # Without an __init__.py pytest's default import mode puts the folder itself on sys.path.
    folders = {path.parent for path in (ROOT / "tests").rglob("test_*.py")}
    assert sorted(str(f) for f in folders if not (f / "__init__.py").exists()) == []
