"""The toolsets of `openreward`'s harnesses act on a Harbor task's container: `/create` with `toolset_name` gives
the session that harness's tools (its `bash` in place of the task's own), they act inside the episode's container,
and the task's `submit` grades what they did."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harbor.harbor_helpers import ENV, START_WAIT, harbor_server, sse_end


@pytest.fixture(scope="module")
def live() -> Iterator[httpx.Client]:
    with harbor_server(harbor_pool=1, ready_wait=60.0) as client:
        yield client


class ToolsetEpisode:
    def __init__(self, client: httpx.Client, task: str, toolset: str) -> None:
        self.client = client
        self.headers = {"X-Session-ID": f"harbor-toolset-{uuid.uuid4().hex}"}
        body = {"env_name": ENV, "task_spec": {"name": task}, "toolset_name": toolset}
        response = client.post("/create", json=body, headers=self.headers)
        assert response.status_code == 200, response.text

    def tools(self) -> list[str]:
        response = self.client.get(f"/{ENV}/task_tools", headers=self.headers, timeout=START_WAIT)
        assert response.status_code == 200, response.text
        return sorted(tool["name"] for tool in response.json()["tools"])

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        body = {"name": name, "input": arguments}
        response = self.client.post(f"/{ENV}/call", json=body, headers=self.headers, timeout=START_WAIT)
        assert response.status_code == 200, response.text
        event, data = sse_end(response.text)
        assert event == "end" and data["ok"], data
        return data["output"]

    def delete(self) -> None:
        assert self.client.post("/delete", headers=self.headers).status_code == 200


def test_codex_bash_solves_a_task_in_its_container_and_submit_grades_it(live):
    episode = ToolsetEpisode(live, "answer-file", "codex")
    try:
        assert episode.tools() == ["bash", "submit"]
        shell = episode.call("bash", {"command": "echo 42 > /app/answer.txt && id -u && cat /etc/os-release"})
        graded = episode.call("submit", {})
    finally:
        episode.delete()
    text = shell["blocks"][0]["text"]
    assert "Debian" in text  # the task's image, not the host
    assert (graded["reward"], graded["finished"]) == (1.0, True)


def test_claude_code_writes_and_reads_files_inside_the_container(live):
    episode = ToolsetEpisode(live, "answer-file", "claude-code")
    try:
        assert {"bash", "read", "write", "edit", "glob", "grep", "submit"} <= set(episode.tools())
        episode.call("write", {"file_path": "/app/answer.txt", "content": "41\n"})
        episode.call("edit", {"file_path": "/app/answer.txt", "old_string": "41", "new_string": "42"})
        read = episode.call("read", {"file_path": "/app/answer.txt"})
        host = episode.call("read", {"file_path": __file__})  # a host path is not the container's
        graded = episode.call("submit", {})
    finally:
        episode.delete()
    assert "42" in read["blocks"][0]["text"]
    assert "does not exist" in host["blocks"][0]["text"]
    assert (graded["reward"], graded["finished"]) == (1.0, True)


def test_openclaw_apply_patch_adds_the_answer_inside_the_container(live):
    episode = ToolsetEpisode(live, "answer-file", "openclaw")
    try:
        assert {"exec", "apply_patch", "read", "submit"} <= set(episode.tools())
        patched = episode.call(
            "apply_patch", {"input": "*** Begin Patch\n*** Add File: /app/answer.txt\n+42\n*** End Patch"}
        )
        shell = episode.call("exec", {"command": "cat /app/answer.txt /etc/os-release"})
        graded = episode.call("submit", {})
    finally:
        episode.delete()
    assert patched["blocks"][0]["text"] == "Success. Updated the following files:\nA /app/answer.txt"
    assert shell["blocks"][0]["text"].startswith("42\n") and "Debian" in shell["blocks"][0]["text"]
    assert (graded["reward"], graded["finished"]) == (1.0, True)
