"""Harbor tasks as episodes over ORS: the oracle (each task's solve.sh through `bash`), the persistent shell, the
limits each task declares, the agent's time limit, and concurrent sessions."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.harbor.harbor_helpers import TASK_NAMES, Episode, containers, harbor_server, solution


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with harbor_server(harbor_pool=1) as http:
        yield http


def test_the_tasks_are_one_test_split_in_directory_order_with_name_instruction_and_limits(client):
    assert client.get("/tb/splits").json() == [{"name": "test", "type": "test"}]
    tasks = client.post("/tb/tasks", json={"split": "test"}).json()["tasks"]
    assert [task["name"] for task in tasks] == TASK_NAMES
    [answer] = [task for task in tasks if task["name"] == "answer-file"]
    assert answer["instruction"].startswith("Write the number 42")
    assert answer["metadata"]["tags"] == ["reward.txt"]
    assert (answer["agent_timeout_sec"], answer["verifier_timeout_sec"]) == (120.0, 30.0)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_each_tasks_solution_run_through_bash_earns_reward_one(client, task):
    episode = Episode(client, task)
    try:
        assert episode.bash(solution(task))["finished"] is False
        result = episode.submit()
    finally:
        episode.delete()
    assert (result["reward"], result["finished"]) == (1.0, True), result


@pytest.mark.parametrize("task", TASK_NAMES)
def test_each_task_without_its_solution_earns_reward_zero(client, task):
    episode = Episode(client, task)
    try:
        result = episode.submit()
    finally:
        episode.delete()
    assert (result["reward"], result["finished"]) == (0.0, True), result


def test_the_prompt_is_the_tasks_instruction(client):
    episode = Episode(client, "column-sum")
    try:
        [block] = client.get("/tb/prompt", headers=episode.headers).json()
    finally:
        episode.delete()
    assert (
        block["text"]
        == "/data/numbers.csv has a header line and a column `value`. Write the sum of that column to /app/sum.txt.\n"
    )


def test_reward_json_gives_the_reward_and_its_other_keys_go_into_metadata(client):
    episode = Episode(client, "column-sum")
    try:
        episode.bash(solution("column-sum"))
        result = episode.submit()
    finally:
        episode.delete()
    assert result["reward"] == 1.0
    assert result["metadata"]["reward_file"] == "reward.json"
    assert result["metadata"]["expected"] == 189  # 3 + 14 + 15 + 92 + 65, from the file the Dockerfile COPYed


def test_tests_that_fail_before_writing_a_reward_give_zero_and_say_why(client):
    episode = Episode(client, "needs-marker")
    try:
        result = episode.submit()
    finally:
        episode.delete()
    text = result["blocks"][0]["text"]
    assert result["reward"] == 0.0
    assert "tests exit code: 2" in text and "wrote no reward" in text, text  # grep: no such file


def test_a_reward_the_agent_wrote_itself_is_not_taken(client):
    episode = Episode(client, "needs-marker")
    try:
        episode.bash("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt")
        result = episode.submit()
    finally:
        episode.delete()
    assert result["reward"] == 0.0


def test_the_shell_keeps_its_directory_and_exported_variables_between_calls(client):
    episode = Episode(client, "answer-file")
    try:
        assert "/app" in episode.text("pwd")  # the image's WORKDIR
        episode.bash("mkdir -p /tmp/deep/er && cd /tmp/deep/er && export GREETING=hello && counter=7")
        text = episode.text('pwd; echo "$GREETING $counter"')
    finally:
        episode.delete()
    assert "/tmp/deep/er\nhello 7" in text, text


def test_a_command_past_its_timeout_is_stopped_and_the_shell_lives_on(client):
    episode = Episode(client, "answer-file")
    try:
        episode.bash("cd /tmp && export KEPT=yes")
        stopped = episode.bash("sleep 30; echo never", timeout=1)
        after = episode.text('pwd; echo "$KEPT"')
    finally:
        episode.delete()
    assert "timed out after 1 s" in stopped["blocks"][0]["text"] and "never" not in stopped["blocks"][0]["text"]
    assert stopped["finished"] is False
    assert "/tmp\nyes" in after, after


def test_output_and_exit_code_are_in_the_result(client):
    episode = Episode(client, "answer-file")
    try:
        result = episode.bash("echo out; echo err >&2; (exit 3)")
    finally:
        episode.delete()
    assert result["metadata"] == {"exit_code": 3}
    assert result["blocks"][0]["text"] == "exit code: 3\nstdout:\nout\n\nstderr:\nerr\n"


def test_the_network_is_off_and_the_memory_limit_is_the_tasks(client):
    episode = Episode(client, "memory-cap")
    try:
        interfaces = episode.text("ls /sys/class/net")
        limit = episode.text(
            "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"
        )
        hog = episode.bash("head -c 200M /dev/zero | tail > /dev/null")
    finally:
        episode.delete()
    assert "stdout:\nlo\n" in interfaces
    assert str(64 * 1024 * 1024) in limit
    assert hog["metadata"]["exit_code"] == 137  # killed by the cgroup's OOM killer


def test_the_agents_time_limit_ends_the_episode_truncated(client):
    episode = Episode(client, "short-clock")
    try:
        result = episode.bash("sleep 30")
        after = client.post("/tb/call", json={"name": "bash", "input": {"command": "true"}}, headers=episode.headers)
    finally:
        episode.delete()
    assert result["finished"] is True and result["reward"] == 0.0
    assert "time limit (5 s)" in result["blocks"][0]["text"]
    assert "finished" in after.text.lower()


def test_eight_concurrent_sessions_each_have_a_container_of_their_own(client):
    episodes = [Episode(client, "answer-file") for _ in range(8)]

    def play(index: int) -> tuple[str, float]:
        episode = episodes[index]
        episode.bash(f"echo {index} > /tmp/mine && echo 42 > /app/answer.txt")
        seen = episode.text("cat /tmp/mine; ls /tmp")
        return seen, episode.submit()["reward"]

    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(play, range(8)))
        assert len(containers(task="tb/answer-file")) >= 8
    finally:
        for episode in episodes:
            episode.delete()
    for index, (seen, reward) in enumerate(results):
        assert seen.split("stdout:\n")[1].split() == [str(index), "mine"]
        assert reward == 1.0
