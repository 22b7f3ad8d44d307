"""The README's Quick start commands are the ones CI runs, and the serve command starts a working server."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.serving import free_port

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    """The bash code blocks of the README's Quick start section, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_quick_start_has_an_install_and_serve_command_and_an_install_and_test_command() -> None:
    serve, test = quick_start_commands()
    assert serve.startswith('pip install -e ".[reasoning-gym]" && ors-server serve')
    assert test == 'pip install -e ".[test]" && pytest'


def test_ci_runs_the_readme_commands_exactly_as_written() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    serve, test = quick_start_commands()
    assert f"README_SERVE={shlex.quote(serve)}\n" in ci
    assert f"README_TEST={shlex.quote(test)}\n" in ci
    assert 'bash -c "$README_SERVE"' in ci
    assert ci.rstrip().endswith('bash -c "$README_TEST"')


def test_the_readme_serve_command_starts_a_server_that_answers_health() -> None:
    serve, _ = quick_start_commands()
    argv = shlex.split(serve.split("&&", 1)[1])
    assert argv[:2] == ["ors-server", "serve"]
    script = shutil.which("ors-server", path=str(Path(sys.executable).parent)) or shutil.which("ors-server")
    assert script, "the ors-server console script is not installed"
    port = free_port()
    argv = [script, *argv[1:]]
    argv[argv.index("--port") + 1] = str(port)
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):  # a cold start imports gymnasium and every environment
            assert process.poll() is None, "ors-server serve exited at start"
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert response.status_code == 200
        names = httpx.get(f"http://127.0.0.1:{port}/list_environments", timeout=5).json()
        assert set(names) >= {"math", "frozen_lake", "cliff_walking", "blackjack", "shell", "calculator"}
    finally:
        process.terminate()
        process.wait(timeout=30)
