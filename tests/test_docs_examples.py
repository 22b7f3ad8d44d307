"""Every ```bash and ```python block of README.md and docs/*.md runs as it stands, against a real server.

The blocks are read from the Markdown itself, so the documentation and this test cannot drift apart. A block
not meant to run as it stands says so on its first line: a comment starting with `# excerpt`. The Quick start's
two commands are pinned by tests/test_readme.py (and run by CI) instead.

One `ors-server serve --codeact` (all built-ins, CodeAct for its own example, and the reasoning-gym datasets of
that section) serves every block; its address
replaces `http://127.0.0.1:8000` in each block, and bash blocks also get it as `$B`. Python blocks run with the
interpreter of the client they import: `openreward` in the openreward venv, `eval_protocol` and `openenv` in
theirs (tests/clients/client_venvs.py), anything else (the `mcp` SDK, `ors_server`) in the project's. A block
that serves (`Server(...).run(port=...)`, or the CLI's `main(["serve", ...])`) is started on a free port,
must answer `/health` and `/tools`, and is stopped.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

from ors_server.loading import builtin_environments
from tests.clients import client_venvs
from tests.clients.harness import Server, client_env, run_server
from tests.serving import free_port, wait_for_health

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTED_URL = "http://127.0.0.1:8000"
RUNNABLE = ("bash", "python")
NOT_CODE = ("text",)  # diagrams, sample output
DOCUMENTED_REASONING_GYM = "reasoning-gym:chain_sum,leg_counting"  # what "reasoning-gym datasets" drives
NOT_RUN_SECTIONS = {"Quick start"}  # pinned by tests/test_readme.py
BLOCK_TIMEOUT = 300.0  # a cold Eval Protocol import alone takes tens of seconds on a loaded machine
VENV_OF_IMPORT = {"openreward": "openreward", "ors_sdk": "openreward", "eval_protocol": "eval-protocol"}
VENV_OF_IMPORT["openenv"] = "openenv"

FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
HEADING = re.compile(r"^#{2,6} +(.+?) *$", re.M)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    code: str
    section: str

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def excerpt(self) -> bool:
        return self.code.lstrip().startswith("# excerpt")

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and not self.excerpt and self.section not in NOT_RUN_SECTIONS


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    headings = [(match.start(), match.group(1)) for match in HEADING.finditer(text)]
    found = []
    for match in FENCE.finditer(text):
        section = next((title for start, title in reversed(headings) if start < match.start()), "")
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(path, line, match.group(1), match.group(2), section))
    return found


ALL_BLOCKS = [block for path in DOCUMENTS for block in blocks(path)]
RUN_BLOCKS = [block for block in ALL_BLOCKS if block.runs]


def test_every_block_is_bash_python_or_text() -> None:
    """A block without a language would escape this test; `text` is for diagrams and sample output."""
    unmarked = [
        f"{b.name} ({b.language or 'no language'})" for b in ALL_BLOCKS if b.language not in RUNNABLE + NOT_CODE
    ]
    assert not unmarked, f"give these blocks a language, bash or python (runnable or # excerpt) or text: {unmarked}"


def test_the_extraction_finds_the_readme_examples() -> None:
    """The parser itself: the README's examples are found, in their sections, and the Quick start is left out."""
    sections = {block.section for block in RUN_BLOCKS}
    assert {
        "One episode with curl",
        "Which URL serves which era",
        "CodeAct: code as the action",
        "Eval Protocol",
    } <= sections
    assert {"OpenEnv clients", "Write your own environment", "Compose MCP tool servers"} <= sections
    assert "reasoning-gym datasets" in sections
    assert not any(block.section == "Quick start" for block in RUN_BLOCKS)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from ors_server.codeact import SandboxUnavailable, check_sandbox, sandbox_mode

    saved = os.environ.get("ORS_CODEACT_SANDBOX")
    try:
        check_sandbox(sandbox_mode("bwrap"))
    except SandboxUnavailable:
        os.environ["ORS_CODEACT_SANDBOX"] = "none"  # the CodeAct example is about the tool, not the sandbox
    try:
        builtins = [arg for env_cls in builtin_environments() for arg in ("--env", env_cls.name)]
        args = ["--codeact", *builtins, "--env", DOCUMENTED_REASONING_GYM]
        with run_server(tmp_path_factory.mktemp("docs-server"), *args) as running:
            yield running
    finally:
        if saved is None:
            os.environ.pop("ORS_CODEACT_SANDBOX", None)
        else:
            os.environ["ORS_CODEACT_SANDBOX"] = saved


def _venv(block: Block) -> str | None:
    for module, venv in VENV_OF_IMPORT.items():
        if re.search(rf"^\s*(from|import) {module}\b", block.code, re.M):
            return venv
    return None


def _marks(block: Block) -> list[pytest.MarkDecorator]:
    venv = _venv(block) if block.language == "python" else None
    if venv is None:
        return []
    # As tests/clients/conftest.py does: a test that happens to build its client's venv gets room for that.
    room = [] if client_venvs.is_ready(venv) else [pytest.mark.timeout(int(client_venvs.INSTALL_TIMEOUT) + 300)]
    return [pytest.mark.clients, *room]


def _serves(block: Block) -> bool:
    return bool(re.search(r"\.run\(.*port=\d+", block.code) or re.search(r"main\(\[\s*\"serve\"", block.code))


def _report(block: Block, done: subprocess.CompletedProcess[str] | None, server: Server, why: str) -> str:
    out = "" if done is None else f"\n--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
    return f"{block.name} ({block.section}) {why}{out}\n--- server log ---\n{server.log_tail(2000)}"


def _installed_by(distribution: str, extra: str) -> set[str]:
    """The import names of `distribution` with `extra` and everything it requires, as pip would install it."""
    names: set[str] = set()
    todo, seen = [(distribution, extra)], set()
    while todo:
        name, wanted = todo.pop()
        key = (re.sub(r"[-_.]+", "-", name).lower(), wanted)
        if key in seen:
            continue
        seen.add(key)
        names.add(key[0])
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": wanted}):
                todo.extend((requirement.name, nested) for nested in requirement.extras or [""])
    modules = importlib.metadata.packages_distributions()
    return {
        module for module, dists in modules.items() if any(re.sub(r"[-_.]+", "-", d).lower() in names for d in dists)
    }


def test_the_reasoning_gym_example_imports_only_what_its_install_brings() -> None:
    """A reader who ran `pip install "ors-server[reasoning-gym]"` can run the section's example as it stands."""
    [block] = [
        block for block in RUN_BLOCKS if block.section == "reasoning-gym datasets" and block.language == "python"
    ]
    imported = {match[1] for match in re.finditer(r"^(?:from|import) (\w+)", block.code, re.M)}
    brought = _installed_by("ors-server", "reasoning-gym") | set(sys.stdlib_module_names)
    assert imported - brought == set()


@pytest.mark.parametrize("block", [pytest.param(b, marks=_marks(b), id=b.name) for b in RUN_BLOCKS])
def test_the_block_runs_as_it_stands(block: Block, server: Server, tmp_path: Path) -> None:
    code = block.code.replace(DOCUMENTED_URL, server.url)
    if block.language == "bash":
        command, env = ["bash", "-e", "-o", "pipefail", "-c", code], {**os.environ, "B": server.url}
    else:
        venv = _venv(block)
        python = str(client_venvs.ensure_venv(venv)) if venv else sys.executable
        env = {**client_env(tmp_path / "home"), **({} if venv else dict(os.environ))}
        script = tmp_path / "example.py"
        if _serves(block):
            return _serve_and_check(block, code, python, env, tmp_path, server)
        script.write_text(code)
        command = [python, str(script)]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT, check=False
    )
    assert done.returncode == 0, _report(block, done, server, f"exited {done.returncode}")
    assert "Traceback" not in done.stderr, _report(block, done, server, "printed a traceback")


def _serve_and_check(block: Block, code: str, python: str, env: dict[str, str], cwd: Path, server: Server) -> None:
    """A block that starts a server: on a free port, it must answer /health and /tools; then SIGTERM."""
    port = free_port()
    script = cwd / "serve_example.py"
    script.write_text(re.sub(r"port=\d+", f"port={port}", code))
    command = [python, str(script)]
    if "--port" not in code and not re.search(r"port=\d+", code):
        command += ["--port", str(port)]  # a script that passes its arguments to `ors-server serve`
    log = cwd / "serve_example.log"
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, process, what=block.name, log=log)
        tools = httpx.get(f"{url}/tools", timeout=60)
        assert tools.status_code == 200, f"{block.name}: /tools answered {tools.status_code}: {tools.text}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert "Traceback" not in log.read_text(), _report(block, None, server, log.read_text()[-4000:])
