"""reasoning-gym's datasets served as environments (`--env reasoning-gym:...`), over ORS and MCP on a real server.

The right answers come from reasoning-gym itself in this test process, so every reward-1 test is also a check
that the server (another thread, or another process) made the same item from the same split, index and seed.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

# Found, not imported: collection runs in every xdist worker, and reasoning-gym's import (sympy, matplotlib) costs
# seconds of CPU each; the tests import it when they run.
if importlib.util.find_spec("reasoning_gym") is None:
    pytest.skip("the reasoning-gym extra: pip install -e '.[reasoning-gym]'", allow_module_level=True)

from mcp import Client  # noqa: E402

from ors_server.cli import main  # noqa: E402
from ors_server.http.app import create_app  # noqa: E402
from ors_server.loading import LoadError, resolve_environments  # noqa: E402
from ors_server.settings import Settings  # noqa: E402
from tests.clients.harness import run_server  # noqa: E402
from tests.environments.test_over_http import Episode  # noqa: E402
from tests.faces.mcp_helpers import raw_initialize  # noqa: E402
from tests.serving import serve  # noqa: E402

DATASETS = ["chain_sum", "leg_counting", "basic_arithmetic"]
SIZE, TEST_SIZE, SEED, TEST_SEED = 40, 10, 7, 5000
OPTIONS = f"size={SIZE}&test_size={TEST_SIZE}&seed={SEED}&test_seed={TEST_SEED}"
SPECS = [f"reasoning-gym:{','.join(DATASETS)}?{OPTIONS}", "reasoning-gym:mix=chain_sum:3,leg_counting:1?size=30"]
SPLIT_SEEDS = {"train": SEED, "test": TEST_SEED}


def item(dataset: str, size: int, seed: int, index: int, **config: Any) -> dict[str, Any]:
    import reasoning_gym

    return reasoning_gym.create_dataset(dataset, size=size, seed=seed, **config)[index]


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serve(create_app(resolve_environments(SPECS), Settings())) as url:
        yield url


@pytest.fixture(scope="module")
def client(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=30) as http:
        yield http


def test_each_dataset_is_an_environment_with_train_and_test_splits_of_the_configured_sizes(
    client: httpx.Client,
) -> None:
    assert client.get("/list_environments").json() == [*DATASETS, "mix"]
    for name in DATASETS:
        assert [s["name"] for s in client.get(f"/{name}/splits").json()] == ["train", "test"]
        sizes = {split: client.post(f"/{name}/num_tasks", json={"split": split}).json() for split in SPLIT_SEEDS}
        assert sizes == {"train": {"num_tasks": SIZE}, "test": {"num_tasks": TEST_SIZE}}
        assert client.post(f"/{name}/task", json={"split": "test", "index": 3}).json()["task"] == {
            "split": "test",
            "index": 3,
        }
        assert client.post(f"/{name}/task", json={"split": "test", "index": TEST_SIZE}).status_code == 400
        tasks = client.post(f"/{name}/tasks", json={"split": "train"}).json()["tasks"]
        assert tasks == [{"split": "train", "index": i} for i in range(SIZE)]
    assert [t["name"] for t in client.get("/chain_sum/tools").json()["tools"]] == ["submit"]


@pytest.mark.parametrize("dataset", DATASETS)
@pytest.mark.parametrize("split", ["train", "test"])
def test_the_right_answer_earns_1_and_a_wrong_one_0_over_ors(client: httpx.Client, dataset: str, split: str) -> None:
    expected = item(dataset, SIZE if split == "train" else TEST_SIZE, SPLIT_SEEDS[split], 5)
    right = Episode(client, dataset, {"split": split, "index": 5})
    assert right.prompt().startswith(expected["question"])
    output = right.output("submit", {"answer": expected["answer"]})
    assert (output["reward"], output["finished"], output["blocks"][0]["text"]) == (1.0, True, "Correct!")
    wrong = Episode(client, dataset, {"split": split, "index": 5})
    output = wrong.output("submit", {"answer": "no idea"})
    assert (output["reward"], output["finished"], output["blocks"][0]["text"]) == (0.0, True, "Wrong")


@pytest.mark.anyio
@pytest.mark.parametrize("dataset", DATASETS)
async def test_the_right_answer_earns_1_and_a_wrong_one_0_over_mcp(base: str, dataset: str) -> None:
    expected = item(dataset, SIZE, SEED, 11)
    results = []
    for answer in (expected["answer"], "no idea"):
        session_id = uuid.uuid4().hex
        body = {"env_name": dataset, "task_spec": {"split": "train", "index": 11}}
        async with httpx.AsyncClient(timeout=30) as http:
            created = await http.post(f"{base}/create", json=body, headers={"X-Session-ID": session_id})
        assert created.status_code == 200, created.text
        async with Client(f"{base}/{dataset}/mcp/episodes/{session_id}") as mcp:
            prompt = await mcp.get_prompt("task")
            results.append(await mcp.call_tool("submit", {"answer": answer}))
        assert prompt.messages[0].content.text.startswith(expected["question"])
    assert [r.structured_content for r in results] == [
        {"reward": 1.0, "finished": True},
        {"reward": 0.0, "finished": True},
    ]
    assert [r.content[0].text for r in results] == ["Correct!", "Wrong"]


@pytest.mark.anyio
async def test_an_eval_protocol_seed_names_the_item_that_seed_makes(base: str) -> None:
    expected = item("leg_counting", 1, 123456, 0)
    async with httpx.AsyncClient(timeout=30) as http:
        await raw_initialize(http, f"{base}/leg_counting/mcp", {"session_id": "rg-seeded", "seed": 123456})
        state = await http.get(f"{base}/leg_counting/control/initial_state", headers={"mcp-session-id": "rg-seeded"})
    assert state.json()["observation"].startswith(expected["question"])


def test_a_mixture_is_one_environment_that_draws_from_its_datasets_by_weight(client: httpx.Client) -> None:
    import reasoning_gym
    from reasoning_gym.composite import DatasetSpec

    specs = [DatasetSpec("chain_sum", 3, {}), DatasetSpec("leg_counting", 1, {})]
    mixture = reasoning_gym.create_dataset("composite", size=30, seed=0, datasets=specs)
    sources = [mixture[i]["metadata"]["source_dataset"] for i in range(30)]
    assert sources.count("chain_sum") > sources.count("leg_counting") > 0
    index = sources.index("leg_counting")
    episode = Episode(client, "mix", {"split": "train", "index": index})
    assert episode.prompt().startswith(mixture[index]["question"])
    assert episode.output("submit", {"answer": mixture[index]["answer"]})["reward"] == 1.0
    assert client.post("/mix/num_tasks", json={"split": "train"}).json() == {"num_tasks": 30}


def test_a_mixture_file_in_reasoning_gyms_composite_format_names_its_environment(tmp_path: Path) -> None:
    (tmp_path / "arith.yaml").write_text(
        "name: arith\nsize: 20\nseed: 3\ndatasets:\n"
        "  - {name: chain_sum, weight: 1, config: {min_terms: 4, max_terms: 4}}\n"
        "  - {name: products, weight: 1}\n"
    )
    [env_cls] = resolve_environments(["reasoning-gym:arith.yaml?test_size=5"], app_dir=str(tmp_path))
    assert (env_cls.name, env_cls.num_tasks("train"), env_cls.num_tasks("test")) == ("arith", 20, 5)
    questions = []
    for index in range(6):
        env = env_cls({"split": "train", "index": index})
        questions.append(env.get_prompt()[0].text)
    chains = [q.split("problem: ")[1].split(" =")[0] for q in questions if "arithmetic problem: " in q]
    assert chains and all(len(chain.split()) == 7 for chain in chains)  # four terms, as the file configures


def test_tasks_by_index_and_by_seed_are_the_same_in_another_server_process(
    client: httpx.Client, base: str, tmp_path: Path
) -> None:
    def prompts(url: str) -> list[str]:
        with httpx.Client(base_url=url, timeout=30) as http:
            found = []
            for spec in [{"split": "train", "index": 2}, {"split": "test", "index": 9}, {"seed": 99}]:
                found.append(Episode(http, "basic_arithmetic", spec).prompt())
            return found

    args = [arg for spec in SPECS for arg in ("--env", spec)]
    with run_server(tmp_path, *args) as other:
        assert prompts(other.url) == prompts(base)


def test_envs_lists_every_dataset_with_its_description(capsys: pytest.CaptureFixture[str]) -> None:
    main(["envs", "--env", SPECS[0], "--env", SPECS[1]])
    out = capsys.readouterr().out
    assert "chain_sum  (splits: train, test)\n  reasoning-gym arithmetic: Generates simple arithmetic" in out
    assert "mix  (splits: train, test)\n  reasoning-gym mixture: chain_sum 75%, leg_counting 25%" in out
    assert out.count("    submit: Submit your final answer.") == 4


def test_all_serves_every_dataset_of_the_library() -> None:
    from reasoning_gym.factory import DATASETS as LIBRARY

    names = [env_cls.name for env_cls in resolve_environments(["reasoning-gym:all"])]
    assert sorted(names) == sorted(set(LIBRARY) - {"composite"}) and len(names) > 90


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("reasoning-gym:chain_sums", "reasoning-gym has no dataset 'chain_sums'; did you mean 'chain_sum'?"),
        ("reasoning-gym:chain_sum?size=0", "option size must be an integer of at least 1, not 0"),
        ("reasoning-gym:chain_sum?seed=0&test_seed=500", "the train split (seeds 0..999) and the test split"),
        ("reasoning-gym:chain_sum?min_term=2", "dataset 'chain_sum' has no config field ['min_term']"),
        ("reasoning-gym:chain_sum?min_terms=9&max_terms=2", "dataset 'chain_sum': invalid config"),
        ("reasoning-gym:m=chain_sum:0", "'chain_sum:0': a weight must be a positive number"),
        ("reasoning-gym:m=chain_sum?min_terms=2", "a mixture takes only size, test_size, seed, test_seed"),
        ("reasoning-gym:nosuch.yaml", "cannot read the mixture file"),
    ],
)
def test_a_bad_spec_is_one_line_naming_the_mistake(spec: str, words: str) -> None:
    with pytest.raises(LoadError) as raised:
        resolve_environments([spec])
    message = str(raised.value)
    assert message.startswith(f"--env '{spec}': ") and words in message and "\n" not in message


def test_a_config_field_reaches_the_dataset() -> None:
    [env_cls] = resolve_environments(["reasoning-gym:chain_sum?min_terms=5&max_terms=5"])
    env = env_cls({"split": "test", "index": 0})
    assert env.get_prompt()[0].text.startswith(item("chain_sum", 100, 10**9, 0, min_terms=5, max_terms=5)["question"])


def test_without_the_extra_serve_says_how_to_install_it_in_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # what an import finds when it is not installed
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--port", "0", "--env", "math", "--env", "reasoning-gym:chain_sum"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "ors-server: --env 'reasoning-gym:chain_sum': reasoning-gym is not installed: "
        "pip install 'ors-server[reasoning-gym]'\n"
    )


def test_a_task_spec_outside_the_splits_fails_that_session_only(client: httpx.Client) -> None:
    episode = Episode(client, "chain_sum", {"split": "train", "index": SIZE})
    response = client.get("/chain_sum/prompt", headers=episode.headers)
    assert response.status_code == 400 and "outside split 'train'" in response.json()["detail"]
    bad = client.get("/chain_sum/prompt", headers=Episode(client, "chain_sum", {"question": "x"}).headers)
    assert bad.status_code == 400 and 'is {"split": ' in bad.json()["detail"]
    assert Episode(client, "chain_sum", {"seed": 1}).prompt()


def test_a_scorer_that_raises_scores_the_answer_0(client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from reasoning_gym.arithmetic.chain_sum import ChainSumDataset

    def broken(self: Any, answer: Any, entry: Any) -> float:
        raise ValueError("unreadable")

    monkeypatch.setattr(ChainSumDataset, "score_answer", broken)
    output = Episode(client, "chain_sum", {"split": "train", "index": 0}).output("submit", {"answer": 12})
    assert (output["reward"], output["finished"]) == (0.0, True)
    assert output["blocks"][0]["text"] == "Wrong (the answer could not be read: ValueError)"
