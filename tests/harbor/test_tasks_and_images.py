"""Harbor task directories read as Harbor reads them, and base images resolved without a registry."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import anyio
import pytest

from ors_server import harbor
from ors_server.harbor.images import DEBIAN_BASE, ImageError, Images, bare_name, from_lines, workdir_made
from ors_server.harbor.tasks import read_task, read_tasks
from ors_server.loading import LoadError, resolve_environments
from ors_server.sandboxes.podman import Podman
from tests.harbor.harbor_helpers import (
    TASKS,
    Episode,
    base_image_ready,
    harbor_dir,
    harbor_server,
    needs_podman,
    sse_end,
)


def make_task(root: Path, name: str, toml: str = "", dockerfile: str | None = "FROM debian:bookworm\n") -> Path:
    path = root / name
    (path / "tests").mkdir(parents=True)
    (path / "task.toml").write_text(toml)
    (path / "instruction.md").write_text(f"do {name}\n")
    (path / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    if dockerfile is not None:
        (path / "environment").mkdir()
        (path / "environment" / "Dockerfile").write_text(dockerfile)
    return path


def test_task_toml_is_read_as_harbors_task_config(tmp_path):
    toml = """
version = "1.0"
[metadata]
difficulty = "hard"
[verifier]
timeout_sec = 45.0
env = { TOKEN = "x" }
[agent]
timeout_sec = 300
[environment]
build_timeout_sec = 100.0
cpus = 2
memory = "1G"
storage = "512M"
allow_internet = true
workdir = "/srv"
env = { MODE = "test" }
"""
    task = read_task(make_task(tmp_path, "full", toml))
    assert (task.verifier_timeout, task.agent_timeout, task.build_timeout) == (45.0, 300.0, 100.0)
    assert (task.cpus, task.memory_mb, task.storage_mb) == (2.0, 1024, 512)
    assert (task.allow_internet, task.workdir, task.env, task.verifier_env) == (
        True,
        "/srv",
        {"MODE": "test"},
        {"TOKEN": "x"},
    )
    assert task.spec()["metadata"] == {"difficulty": "hard"}


def test_defaults_are_harbors_and_the_network_is_off(tmp_path):
    task = read_task(make_task(tmp_path, "bare"))
    assert (task.verifier_timeout, task.agent_timeout, task.build_timeout) == (600.0, 600.0, 600.0)
    assert (task.cpus, task.memory_mb, task.allow_internet) == (None, None, False)


def test_unknown_keys_are_ignored_with_one_warning_naming_them(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ors_server.harbor"):
        read_task(make_task(tmp_path, "odd", "surprise = 1\n[environment]\ncolour = 'red'\n"))
    [record] = [r for r in caplog.records if "odd" in r.getMessage()]
    assert "surprise" in record.getMessage() and "environment.colour" in record.getMessage()


def test_tasks_are_in_directory_order_and_unusable_ones_are_named_in_one_line_and_skipped(tmp_path):
    make_task(tmp_path, "b-second")
    make_task(tmp_path, "a-first")
    make_task(tmp_path, "c-no-dockerfile", dockerfile=None)
    broken = make_task(tmp_path, "d-broken", "[agent]\ntimeout_sec = 'soon'\n")
    (tmp_path / "not-a-task").mkdir()
    tasks, problems = read_tasks(tmp_path)
    assert [task.name for task in tasks] == ["a-first", "b-second"]
    assert len(problems) == 2 and all("\n" not in problem for problem in problems)
    assert "c-no-dockerfile" in problems[0] and "no environment/Dockerfile" in problems[0]
    assert str(broken) in problems[1] and "timeout_sec" in problems[1]


def test_a_directory_that_is_one_task_is_served_as_one_task_named_by_its_directory(tmp_path):
    env = resolve_environments([f"harbor:{make_task(tmp_path, 'Solo-Task')}"])[0]
    assert env.name == "solo-task"
    assert [task["name"] for task in env.list_tasks("test")] == ["Solo-Task"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [("harbor:/no/such/dir", "is not a directory"), ("harbor:DIR?colour=red", "expected harbor:DIR[?name=NAME]")],
)
def test_bad_specs_are_one_line(spec, message, tmp_path):
    with pytest.raises(LoadError, match=message.replace("[", r"\[").replace("?", r"\?")):
        resolve_environments([spec.replace("DIR", str(tmp_path))])


def test_a_directory_without_tasks_is_a_load_error(tmp_path):
    with pytest.raises(LoadError, match="no usable Harbor task"):
        harbor_load(tmp_path)


def harbor_load(path: Path) -> type:
    try:
        return harbor.load(str(path))
    except harbor.HarborLoadError as exc:
        raise LoadError(str(exc)) from None


@pytest.mark.parametrize(
    ("reference", "bare"),
    [
        ("public.ecr.aws/docker/library/debian:bookworm-slim@sha256:" + "0" * 64, "debian:bookworm-slim"),
        ("docker.io/library/debian:12", "debian:12"),
        ("debian", "debian:latest"),
        ("ghcr.io/org/tool:1.2", "ghcr.io/org/tool:1.2"),
    ],
)
def test_references_are_compared_without_registry_and_digest(reference, bare):
    assert bare_name(reference) == bare


def test_from_lines_skip_earlier_stages_and_a_last_workdir_gets_a_step_that_makes_it():
    lines = ["FROM debian:12 AS build", "RUN make", "FROM --platform=linux/amd64 build", "FROM debian:bookworm-slim"]
    dockerfile = "\n".join([*lines, "WORKDIR /app", ""])
    assert [(line.number, line.image) for line in from_lines(dockerfile)] == [
        (1, "debian:12"),
        (4, "debian:bookworm-slim"),
    ]
    assert workdir_made(dockerfile) == "RUN true\n"
    assert workdir_made("FROM x\nWORKDIR /app\nCOPY a b\n") == ""


def test_an_image_that_cannot_be_had_fails_its_task_with_one_line_naming_the_from_line_and_the_setting(tmp_path):
    needs_podman()
    task = read_task(make_task(tmp_path, "needs-python", dockerfile="# a comment\nFROM python:3.11-slim\nRUN true\n"))
    with pytest.raises(ImageError) as failed:
        anyio.run(Images(Podman(harbor_dir()), {}).for_task, task)
    message = str(failed.value)
    assert "\n" not in message
    assert "'FROM python:3.11-slim' (environment/Dockerfile line 2)" in message
    assert "--harbor-image python:3.11-slim=LOCAL" in message


def test_a_mapped_image_builds_and_an_episode_of_the_unmappable_task_fails_setup_with_that_line(tmp_path):
    needs_podman()
    base_image_ready()
    shutil.copytree(TASKS / "answer-file", tmp_path / "mapped")
    (tmp_path / "mapped" / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    make_task(tmp_path, "unmapped", dockerfile="FROM registry.invalid/nothing:1\n")
    env_cls = harbor.load(f"{tmp_path}?name=tb")
    with harbor_server(env_cls, harbor_pool=0, harbor_image=(f"python:3.11-slim={DEBIAN_BASE}",)) as client:
        mapped = Episode(client, "mapped")
        mapped.bash("echo 42 > /app/answer.txt")
        assert mapped.submit()["reward"] == 1.0
        unmapped = Episode(client, "unmapped")
        answer = client.post("/tb/call", json={"name": "bash", "input": {"command": "true"}}, headers=unmapped.headers)
    text = answer.text if answer.status_code != 200 else str(sse_end(answer.text))
    assert "FROM registry.invalid/nothing:1" in text and "--harbor-image" in text, text
