"""The Dockerfile: checked statically everywhere; built and run where a container engine works.

No image registry is reachable from the machine this project is developed on, so the image is built there on the
Debian base made locally with mmdebstrap (the one Harbor tasks use, cached with their test storage), through the
Dockerfile's `BASE` build argument; with docker, on its default base.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
import uuid
from pathlib import Path

import httpx
import pytest

from tests.serving import free_port, wait_for_health

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def of(kind: str) -> list[str]:
    return [rest for word, rest in instructions() if word == kind]


def test_the_image_runs_the_server_as_a_user_that_is_not_root() -> None:
    users = of("USER")
    assert users, "no USER: the server would run as root"
    assert users[-1] not in ("root", "0") and not users[-1].startswith(("root:", "0:"))
    # The user is made before it is used.
    created = [rest for rest in of("RUN") if "useradd" in rest]
    assert created and users[-1] in shlex.split(created[-1])


def test_the_image_installs_bubblewrap() -> None:
    assert any(re.search(r"apt-get install\b.*\bbubblewrap\b", rest) for rest in of("RUN"))


def test_the_image_installs_this_project_from_what_it_copies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {source for rest in of("COPY") for source in shlex.split(rest)[:-1]}
    # What building the distribution reads: its metadata, its readme, and every package it ships.
    assert {"pyproject.toml", project["project"]["readme"]} <= copied
    packages = {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied
    installs = [rest for rest in of("RUN") if re.search(r"\bpip install\b", rest)]
    assert len(installs) == 1 and re.search(r"pip install (--no-cache-dir )?\.(\s|$)", installs[0])
    # The default base image's Python satisfies requires-python (">=3.11"); a Debian 12 base gets Debian's 3.11.
    [base_arg] = [rest for rest in of("ARG") if rest.startswith("BASE=")]
    assert of("FROM")[0] == "${BASE}"
    version = re.search(r"python:(\d+)\.(\d+)", base_arg)
    minimum = re.search(r">=(\d+)\.(\d+)", project["project"]["requires-python"])
    assert version and minimum
    assert tuple(map(int, version.groups())) >= tuple(map(int, minimum.groups()))


def test_the_image_serves_on_every_interface_with_the_console_script() -> None:
    [command] = of("CMD")
    argv = json.loads(command)  # the exec form: a JSON array of strings
    assert argv[:2] == ["ors-server", "serve"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert f"EXPOSE {argv[argv.index('--port') + 1]}" in DOCKERFILE.read_text()


def _engine() -> tuple[list[str], dict[str, str], list[str]]:
    """The engine's command, its environment, and the build arguments: podman with the Harbor tests' storage and
    the locally made Debian base (no registry needed), else docker on the default base."""
    if shutil.which("podman"):
        from tests.harbor.harbor_helpers import base_image_ready, harbor_dir, podman_problem

        if podman_problem() is None:
            from ors_server.harbor.images import DEBIAN_BASE
            from ors_server.sandboxes.podman import Podman

            base_image_ready()
            podman = Podman(harbor_dir())
            build_args = ["--build-arg", f"BASE={DEBIAN_BASE}"]
            cert = os.environ.get("PIP_CERT")
            if cert and os.path.isfile(cert):  # a machine whose egress proxy re-signs TLS: pip needs its CA
                build_args += ["--volume", f"{cert}:/host-ca.pem:ro", "--build-arg", "PIP_CERT=/host-ca.pem"]
            return [podman.executable], podman.environment, build_args
    if shutil.which("docker"):
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False)
        if done.returncode == 0:
            return ["docker"], dict(os.environ), []
    pytest.skip("no working container engine (podman or docker) on this machine: the image is checked statically")


def test_the_image_builds_and_a_shell_session_runs_sandboxed_in_it(tmp_path: Path) -> None:
    command, environment, build_args = _engine()
    engine = command[0]
    tag = f"localhost/ors-server-test:{uuid.uuid4().hex[:8]}"
    subprocess.run([*command, "build", *build_args, "-t", tag, str(ROOT)], check=True, timeout=1800, env=environment)
    port = free_port()
    name = f"ors-server-test-{uuid.uuid4().hex[:8]}"
    run = [*command, "run", "-d", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:8000"]
    sandbox = ["seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"]  # as the README says
    if engine != "docker":
        sandbox = ["seccomp=unconfined", "unmask=ALL"]
    options = [part for option in sandbox for part in ("--security-opt", option)]
    # Output to a file: `run --detach` leaves conmon holding what it inherited (a pipe would never end).
    with (tmp_path / "run.out").open("wb") as out:
        subprocess.run([*run, *options, tag], check=True, timeout=120, env=environment, stdout=out)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, what="the container's server")
        with httpx.Client(base_url=url, timeout=60) as client:
            headers = {"X-Session-ID": "container-shell"}
            body = {"env_name": "shell", "split": "train", "index": 0}
            assert client.post("/create", json=body, headers=headers).status_code == 200
            call = {"name": "bash", "input": {"command": "id -u"}}
            answer = client.post("/shell/call", json=call, headers=headers)
            assert '"ok":true' in answer.text and "65534" in answer.text, answer.text
    finally:
        for cleanup in (["rm", "-f", name], ["rmi", "-f", tag]):
            subprocess.run(
                [*command, *cleanup],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
                check=False,
                env=environment,
            )
