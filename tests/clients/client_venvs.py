"""Cached virtual environments for the official clients, which cannot share the project's environment.

`openreward` 0.1.167 pins sse-starlette 2.x, and `eval-protocol` 0.3.33 and `openenv` 0.10.0 pin `mcp<2`,
while the server needs sse-starlette 3 and mcp 2; so each client gets its own venv under `<repo>/.client-venvs/<name>`
(or `$ORS_CLIENT_VENVS/<name>`), built once and reused across runs.

A venv counts as built only when its marker file holds exactly the spec it was built from, and the
marker is written last (atomically), so an interrupted or failed install is redone on the next run and
changing a pin below rebuilds. Builds take an exclusive `flock` on `<root>/<name>.lock`, so concurrent
pytest processes build each venv once and the others wait, then reuse it.

Run `python tests/clients/client_venvs.py` to build every venv ahead of the tests (e.g. in CI).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

VENVS: dict[str, tuple[str, ...]] = {
    # Both ORS clients co-install (ors-sdk 0.1.0 has no pins that conflict with openreward's).
    "openreward": ("openreward==0.1.167", "ors-sdk==0.1.0"),
    "eval-protocol": ("eval-protocol==0.3.33",),
    # openenv 0.10 pins mcp 1.x and fastmcp 3.x; its CLI (`openenv validate`) ships in the same wheel.
    "openenv": ("openenv==0.10.0",),
    # fastmcp 4 speaks both MCP eras (mcp 2.x): its Client probes server/discover, as mcp's own does.
    "fastmcp": ("fastmcp==4.2.3",),
    # Our own client, installed from this checkout's client/ and nothing else: what a trainer's venv gets.
    "ors-client": (str(REPO / "client"),),
    # Trainers' own environment code (scripted actions, no model): TRL's `trl.experimental.openreward` over the
    # openreward client, and verifiers' OpenEnv taskset (its `openenv` extra brings openenv-core).
    "trl": ("trl==1.16.0", "openreward==0.1.167"),
    "verifiers": ("verifiers[openenv]==0.4.0",),
}
FIRST: dict[str, tuple[str, ...]] = {
    # TRL needs torch: the CPU build this machine keeps on disk (pip's find-links), installed before TRL so that
    # resolving TRL finds torch satisfied rather than fetching the CUDA build (~6 GB) from the index.
    "trl": ("torch==2.13.0",),
}
"""Requirements installed in a step of their own before the rest of a venv's."""
LOCAL = {"ors-client": REPO / "client"}
NODE: dict[str, tuple[str, ...]] = {
    # The TypeScript MCP SDK, an npm install of its own (needs node and npm on the machine): 1.32 speaks the 2025 era;
    # its successor, the client package 2.4, both eras (its auto mode probes server/discover, as mcp's Client does).
    "mcp-ts": ("@modelcontextprotocol/sdk@1.32.2", "@modelcontextprotocol/client@2.4.0"),
}
"""Client installs that are npm packages rather than venvs: `<root>/<name>/node_modules`."""
"""Venvs installed from a directory of this checkout: rebuilt whenever its files change."""

INSTALL_TIMEOUT = 900.0
"""Seconds one `pip install` may take (a cold eval-protocol install is about a minute, ~110 packages)."""
HEAVY_INSTALL_TIMEOUT = 2400.0
"""For the trainers' venvs (TRL: torch, transformers, datasets; verifiers: ~190 packages, gradio among them),
which took 10 and over 15 minutes on a loaded 2-core machine."""
HEAVY = {"trl", "verifiers"}

MARKER = ".ors-client-venv.json"


def venvs_root() -> Path:
    return Path(os.environ.get("ORS_CLIENT_VENVS") or REPO / ".client-venvs")


def _spec(name: str) -> dict[str, object]:
    # The base interpreter is part of the spec: a venv points at it and breaks if it changes.
    if name in NODE:
        return {"requirements": list(NODE[name]), "node": _node_version()}
    spec: dict[str, object] = {
        "requirements": [*FIRST.get(name, ()), *VENVS[name]],
        "base_python": sys.version.split()[0],
        "base_prefix": sys.base_prefix,
    }
    if name in LOCAL:
        # By content, not path: checkouts holding the same client/ share one venv.
        spec["requirements"] = [LOCAL[name].name]
        spec["source"] = _source_digest(LOCAL[name])
    return spec


def _source_files(root: Path) -> list[Path]:
    """What a build reads: not caches (`.ruff_cache`, `__pycache__`) nor build output, which change without it."""

    def kept(part: str) -> bool:
        return not part.startswith(".") and part not in {"__pycache__", "build", "dist"} and ".egg-info" not in part

    return sorted(p for p in root.rglob("*") if p.is_file() and all(map(kept, p.relative_to(root).parts)))


def _source_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in _source_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def venv_python(name: str) -> Path:
    return venvs_root() / name / "bin" / "python"


@functools.cache
def _node_version() -> str | None:
    node = shutil.which("node")
    return subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip() if node else None


def node_missing() -> str | None:
    """Why the npm clients cannot be installed here, or None when they can."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not installed" if missing else None


def _installed(name: str) -> Path:
    """What proves a build finished: a venv's python, or an npm install's node_modules."""
    return venvs_root() / name / "node_modules" if name in NODE else venv_python(name)


def is_ready(name: str) -> bool:
    """True when the venv `name` is built from the current spec (no lock taken, so only a hint)."""
    marker = venvs_root() / name / MARKER
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return recorded.get("spec") == _spec(name) and _installed(name).exists()


def ensure_venv(name: str) -> Path:
    """Build the venv (or npm install) `name` unless it is already built from the current spec; return its python
    (or its node_modules)."""
    if is_ready(name):
        return _installed(name)
    root = venvs_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not is_ready(name):  # another process may have built it while we waited for the lock
                _build(name)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return _installed(name)


def _build(name: str) -> None:
    venv = venvs_root() / name
    shutil.rmtree(venv, ignore_errors=True)
    log_path = venvs_root() / f"{name}.install.log"
    started = time.monotonic()
    requirements = list(NODE.get(name) or VENVS[name])
    if name in LOCAL:
        # Installed from a copy, so that building leaves no build/ or .egg-info in the checkout.
        copy = venvs_root() / f"{name}.source"
        shutil.rmtree(copy, ignore_errors=True)
        for path in _source_files(LOCAL[name]):
            target = copy / path.relative_to(LOCAL[name])
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        requirements = [str(copy)]
    with open(log_path, "w") as log:
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
        steps = [[sys.executable, "-m", "venv", str(venv)]]
        if name in FIRST:
            steps.append([*pip, *FIRST[name]])
        steps.append([*pip, *requirements])
        if name in NODE:
            venv.mkdir(parents=True)
            steps = [["npm", "install", "--no-audit", "--no-fund", "--prefix", str(venv), *requirements]]
        for cmd in steps:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            timeout = HEAVY_INSTALL_TIMEOUT if name in HEAVY else INSTALL_TIMEOUT
            result = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, env=clean_env())
            if result.returncode != 0:
                raise RuntimeError(f"building client venv {name!r} failed (exit {result.returncode}); see {log_path}")
    seconds = round(time.monotonic() - started, 1)
    marker = venv / MARKER
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"spec": _spec(name), "install_seconds": seconds}, indent=2))
    os.replace(tmp, marker)


def install_seconds(name: str) -> float | None:
    """How long the cached venv took to build, as recorded in its marker."""
    try:
        return json.loads((venvs_root() / name / MARKER).read_text()).get("install_seconds")
    except (OSError, ValueError):
        return None


def clean_env() -> dict[str, str]:
    """The caller's environment without anything that would point pip or python at the project's venv."""
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV", "PYTHONSTARTUP"):
        env.pop(key, None)
    return env


if __name__ == "__main__":
    for venv_name in sys.argv[1:] or [*VENVS, *NODE]:
        if venv_name in NODE and node_missing():
            print(f"{venv_name}: skipped ({node_missing()}); its tests will say so")
            continue
        python = ensure_venv(venv_name)
        print(f"{venv_name}: {python} (built in {install_seconds(venv_name)} s)")
