"""`--env module:Class` from the directory the server starts in, in every local mode, and one clear line (exit 2,
no traceback) for every way an environment spec can be wrong."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import httpx
import pytest

from ors_server.loading import LoadError, resolve_environments
from tests.clients.harness import run_server, server_command

GUESS = textwrap.dedent(
    '''
    from pydantic import BaseModel

    from ors_server import Environment, TextBlock, ToolOutput, tool


    class GuessInput(BaseModel):
        guess: int


    class Guess(Environment):
        name = "guess"

        @classmethod
        def list_splits(cls):
            return ["train"]

        @classmethod
        def list_tasks(cls, split):
            return [{"secret": 3}]

        def get_prompt(self):
            return [TextBlock(text="Guess my number.")]

        @tool
        def guess(self, params: GuessInput) -> ToolOutput:
            """Guess the number."""
            right = params.guess == self.task_spec["secret"]
            return ToolOutput(blocks=[TextBlock(text="yes" if right else "no")], reward=float(right), finished=True)


    NOT_A_CLASS = 3


    class NoTools(Environment):
        def get_prompt(self):
            return []
    '''
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A directory as a user's: the environment module, a broken one, one whose import fails."""
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "guessing.py").write_text(GUESS)
    (directory / "broken.py").write_text("def oops(:\n")
    (directory / "needs_dep.py").write_text("import no_such_dependency_here\n")
    (directory / "raising.py").write_text("raise RuntimeError('no database configured')\n")
    return directory


def _environment_without_the_directory() -> dict[str, str]:
    """The test's environment, minus any PYTHONPATH entry that is the working directory (`.` or empty)."""
    env = dict(os.environ)
    entries = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry not in ("", ".")]
    env["PYTHONPATH"] = os.pathsep.join(entries)
    return env


@pytest.mark.parametrize(
    "mode", [[], ["--workers", "1"], ["--workers", "1", "--fronts", "2"]], ids=["single", "workers", "fronts"]
)
def test_an_environment_module_in_the_working_directory_is_served_without_pythonpath(
    app_dir: Path, tmp_path: Path, mode: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", _environment_without_the_directory()["PYTHONPATH"])
    with run_server(tmp_path / "logs", "--env", "guessing:Guess", "--env", "math", *mode, cwd=app_dir) as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.get("/list_environments").json() == ["guess", "math"]
            sid = client.post("/create_session").json()["sid"]
            headers = {"X-Session-ID": sid}
            client.post("/create", headers=headers, json={"env_name": "guess", "split": "train", "index": 0})
            reply = client.post("/guess/call", headers=headers, json={"name": "guess", "input": {"guess": 3}})
            assert '"reward":1.0' in reply.text


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*server_command(), *args],
        cwd=cwd,
        env=_environment_without_the_directory(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no_such_module:Env", ["no module 'no_such_module'"]),
        ("guessing:Gues", ["module 'guessing' has no class 'Gues'", "did you mean 'Guess'?"]),
        ("guessing:NOT_A_CLASS", ["'NOT_A_CLASS' in module 'guessing'", "not an Environment subclass"]),
        ("guessing:GuessInput", ["'GuessInput' in module 'guessing' is the class GuessInput", "not an Environment"]),
        ("broken:Env", ["importing module 'broken' failed: SyntaxError", "broken.py, line 1"]),
        ("needs_dep:Env", ["importing module 'needs_dep' failed", "No module named 'no_such_dependency_here'"]),
        ("raising:Env", ["importing module 'raising' failed: RuntimeError: no database configured"]),
        ("guessing:NoTools", ["environment 'notools' has no @tool methods"]),
        ("guessing:", ["expected a built-in name or module:Class"]),
        ("nosuch", ["unknown environment 'nosuch'"]),
    ],
)
def test_an_environment_that_cannot_be_loaded_is_one_line_naming_it_and_exit_2(
    app_dir: Path, spec: str, words: list[str]
) -> None:
    done = _run(["serve", "--env", "math", "--env", spec], app_dir)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"ors-server: --env '{spec}': " if ":" in spec else "ors-server: ")
    for word in words:
        assert word in line


def test_envs_reports_a_bad_spec_as_serve_does(app_dir: Path) -> None:
    done = _run(["envs", "--env", "guessing:Gues"], app_dir)
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "ors-server: --env 'guessing:Gues': module 'guessing' has no class 'Gues'; did you mean 'Guess'?",
    )


def test_log_level_debug_shows_the_traceback_behind_a_failed_import(app_dir: Path) -> None:
    done = _run(["serve", "--env", "raising:Env", "--log-level", "debug"], app_dir)
    assert done.returncode == 2
    assert "Traceback" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ors-server: --env 'raising:Env': importing module")


def test_the_loader_imports_from_the_directory_it_is_given(app_dir: Path) -> None:
    [env_cls] = resolve_environments(["guessing:Guess"], str(app_dir))
    assert env_cls.name == "guess"
    with pytest.raises(LoadError, match="has no class 'Nope'"):
        resolve_environments(["guessing:Nope"], str(app_dir))


def test_a_package_of_the_users_named_environments_is_served_beside_the_builtins(app_dir: Path) -> None:
    # The built-ins live inside `ors_server`, so a user's own top-level `environments` package is theirs to import.
    package = app_dir / "environments"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "guessing.py").write_text(GUESS)
    done = _run(["envs", "--env", "environments.guessing:Guess", "--env", "math"], app_dir)
    assert done.returncode == 0, done.stderr
    assert "guess" in done.stdout and "math" in done.stdout
