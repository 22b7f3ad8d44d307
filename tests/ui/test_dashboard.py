"""/ui as a run dashboard, in a real headless chromium against a real server: the figures of the listed episodes
(the URL's filters too), sortable columns and the task, the runs view (groups side by side, their mean reward over
time, live), a CodeAct episode shown as the model played it (two steps, their code, their moves nested), a
FrozenLake grid drawn as lines, a finished episode not "live", a missing one as one message, play mode numbered.

The figures the page shows are checked against what the test works out from `/episodes` itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ors_server.codeact import bwrap_problem
from ors_server.environments.frozen_lake import FrozenLake
from ors_server.environments.math import TASKS, Math
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.records.helpers import episode, until
from tests.serving import serve
from tests.ui.browser import chromium, logged_in_page

KEY = "dashboard-key-82d1"
SUITE = f"suite={uuid.uuid4().hex[:8]}"  # every episode of this module carries it: the filters select only these
SANDBOX = "bwrap" if bwrap_problem() is None else "none"
LAKE_STEPS = [
    "for move in ['RIGHT'] * 3:\n    print(lake_move(action=move))",
    "for move in ['DOWN'] * 3:\n    print(lake_move(action=move))",
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    records = tmp_path_factory.mktemp("dashboard") / "episodes.db"
    settings = Settings(api_key=KEY, records=str(records), codeact=True, codeact_sandbox=SANDBOX, codeact_timeout=10)
    with serve(create_app([Math, FrozenLake], settings)) as url:
        yield url


@pytest.fixture(scope="module")
def api(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, headers={"X-API-Key": KEY}, timeout=60) as client:
        yield client


def start(api: httpx.Client, env: str, labels: str, task: dict[str, Any]) -> str:
    sid = api.post("/create_session").json()["sid"]
    headers = {"X-Session-ID": sid, "X-Episode-Labels": f"{SUITE},{labels}"}
    answer = api.post("/create", headers=headers, json={"env_name": env, **task})
    assert answer.status_code == 200, answer.text
    return sid


def call(api: httpx.Client, env: str, sid: str, name: str, arguments: dict[str, Any]) -> None:
    answer = api.post(f"/{env}/call", headers={"X-Session-ID": sid}, json={"name": name, "input": arguments})
    assert answer.status_code == 200 and "event: end" in answer.text, answer.text


def math_episode(api: httpx.Client, run: str, index: int, right: bool, delete: bool = True) -> str:
    sid = start(api, "math", f"run={run}", {"split": "train", "index": index})
    answer = TASKS["train"][index]["answer"]
    call(api, "math", sid, "submit", {"answer": str(answer) if right else "not it"})
    if delete:
        api.post("/delete", headers={"X-Session-ID": sid})
    return sid


@pytest.fixture(scope="module")
def played(api: httpx.Client) -> dict[str, str]:
    """The module's episodes: math runs A (one right, one wrong) and B (one right), a CodeAct FrozenLake episode
    of two steps, a FrozenLake episode of one move (live), and a finished math episode whose session is open."""
    ids = {
        "a-right": math_episode(api, "A", 0, True),
        "a-wrong": math_episode(api, "A", 1, False),
        "b-right": math_episode(api, "B", 2, True),
        "finished-open": math_episode(api, "C", 3, True, delete=False),
    }
    lake = start(api, "frozen_lake", "run=lake", {"task_spec": {"seed": 0}})
    for code in LAKE_STEPS:
        call(api, "frozen_lake", lake, "execute_code", {"code": code})
    api.post("/delete", headers={"X-Session-ID": lake})
    ids["codeact"] = lake
    moved = start(api, "frozen_lake", "run=lake", {"task_spec": {"seed": 0}})
    call(api, "frozen_lake", moved, "lake_move", {"action": "RIGHT"})
    ids["moved"] = moved
    for name, sid in ids.items():
        calls = 8 if name == "codeact" else 1
        episode(api, sid, lambda e, calls=calls: len(e["calls"]) == calls)
    until(lambda: api.get("/episodes", params={"status": "ended"}).json()["episodes"], lambda e: len(e) >= 4, "ends")
    return ids


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with logged_in_page(browser, base, KEY) as page:
        yield page


def figure(page: Any, name: str) -> str:
    return page.text_content(f'#overview dd[data-figure="{name}"]')


def test_the_list_shows_the_figures_of_the_episodes_its_url_selects(
    page: Any, base: str, api: httpx.Client, played: dict[str, str]
) -> None:
    listed = api.get("/episodes", params={"env": "math", "label.run": "A", f"label.{SUITE[:5]}": SUITE[6:]}).json()
    mine = listed["episodes"]
    assert len(mine) == 2
    mean_reward = sum(e["reward"] for e in mine) / len(mine)
    mean_steps = sum(e["steps"] for e in mine) / len(mine)

    page.goto(f"{base}/ui?env=math&labels=run=A,{SUITE}")
    page.wait_for_selector('#overview dd[data-figure="episodes"]:has-text("2")')
    assert figure(page, "mean-reward") == f"{mean_reward:.3f}" == "0.500"
    assert figure(page, "mean-steps") == f"{mean_steps:.3f}" == "1.000"
    assert figure(page, "finished") == "2" and figure(page, "live") == "0"
    assert page.input_value("#filters input[name=labels]") == f"run=A,{SUITE}"

    rows = page.locator("#episodes tbody tr")
    assert rows.count() == 2
    assert page.locator("#episodes thead th").nth(2).text_content() == "Task"
    task = TASKS["train"][0]["question"]
    assert task[:20] in page.locator(f'#episodes tr[data-id="{played["a-right"]}"] td.task').text_content()

    reward_header = page.locator('#episodes th[data-sort="reward"]')
    reward_header.click()  # ascending: the wrong answer (0) first
    page.wait_for_selector(f'#episodes tbody tr:first-child[data-id="{played["a-wrong"]}"]')
    reward_header.click()  # descending
    page.wait_for_selector(f'#episodes tbody tr:first-child[data-id="{played["a-right"]}"]')
    assert reward_header.get_attribute("aria-sort") == "descending"


def test_the_runs_view_compares_runs_and_charts_their_mean_reward_live(
    page: Any, base: str, api: httpx.Client, played: dict[str, str]
) -> None:
    page.goto(f"{base}/ui/runs?by=run&env=math&labels={SUITE}")
    page.wait_for_selector('#groups tr[data-key="A"]')
    row_a = page.locator('#groups tr[data-key="A"] td')
    row_b = page.locator('#groups tr[data-key="B"] td')
    assert [row_a.nth(i).text_content() for i in (1, 4)] == ["2", "0.500"]
    assert [row_b.nth(i).text_content() for i in (1, 4)] == ["1", "1.000"]
    assert page.locator("#groups tbody tr").count() == 3  # A, B and C (the finished, open one)
    for run in ("A", "B", "C"):
        line = page.locator(f'#chart g.series[data-key="{run}"] polyline')
        assert line.count() == 1 and line.get_attribute("points")
    assert page.locator('#chart g.series[data-key="A"] circle').count() >= 1

    math_episode(api, "B", 4, False)  # the view follows new episodes without a reload
    page.wait_for_selector('#groups tr[data-key="B"] td:nth-child(2):has-text("2")')
    assert page.locator('#groups tr[data-key="B"] td').nth(4).text_content() == "0.500"


def test_a_codeact_episode_shows_the_models_two_steps_with_their_code_and_their_moves_nested(
    page: Any, base: str, played: dict[str, str]
) -> None:
    page.goto(f"{base}/ui/episode?id={played['codeact']}")
    page.wait_for_selector("#calls > li.call >> nth=1")
    steps = page.locator("#calls > li.call")
    assert steps.count() == 2
    assert page.locator("#summary dd").nth(6).text_content() == "2"  # Steps
    assert page.locator("#plot circle").count() == 2
    for n, code in enumerate(LAKE_STEPS):
        step = steps.nth(n)
        assert step.locator(".call-head strong").first.text_content() == f"#{n + 1} execute_code"
        assert step.locator("pre.code").first.text_content() == code
        moves = step.locator(".inner-calls > li.call")
        assert moves.count() == 3
        assert moves.nth(0).locator(".call-head strong").text_content() == f"#{n + 1}.1 lake_move"
    labels = steps.nth(0).locator(":scope > .part > .part-label").all_text_contents()
    assert labels == ["code", "output"]

    # The last move reached the goal: its grid drawn as four lines, the agent's x on G's cell.
    last = steps.nth(1).locator(".inner-calls > li.call").nth(2)
    grid = last.locator("pre.drawn")
    assert grid.inner_text().split("\n") == ["SFFF", "HHFF", "FHHF", "HFFx"]
    one_line = last.locator(".block-fields dd").first.bounding_box()
    assert grid.bounding_box()["height"] > 3 * one_line["height"]


def test_a_live_episode_draws_its_grid_and_a_finished_one_is_not_live(
    page: Any, base: str, played: dict[str, str]
) -> None:
    page.goto(f"{base}/ui/episode?id={played['moved']}")
    page.wait_for_selector("#calls pre.drawn")
    assert page.inner_text("#calls pre.drawn").split("\n") == ["SxFF", "HHFF", "FHHF", "HFFG"]
    assert page.text_content("#live") == "live"

    page.goto(f"{base}/ui/episode?id={played['finished-open']}")
    page.wait_for_selector("#calls .call")
    assert page.text_content("#live") == "finished"


def test_a_missing_episode_is_one_message(page: Any, base: str) -> None:
    page.goto(f"{base}/ui/episode?id=no-such-episode")
    page.wait_for_selector("#notice:has-text('No episode no-such-episode is recorded here.')", timeout=30_000)
    assert page.is_hidden("main h1") and page.is_hidden("#content")
    assert page.locator("h2:visible").count() == 0


def test_play_mode_numbers_its_calls_oldest_first_and_labels_their_parts(page: Any, played: dict[str, str]) -> None:
    page.select_option("#env", "frozen_lake")
    page.wait_for_selector("#split option[value=train]", state="attached")
    page.click("#start-button")
    page.wait_for_selector("#tool option[value=lake_move]", state="attached")
    page.select_option("#tool", "lake_move")
    for action, count in (("RIGHT", 1), ("DOWN", 2)):
        page.select_option("#field-action", label=action)
        page.click("#call-button")
        page.wait_for_selector(f"#results > li.call >> nth={count - 1}")
    heads = page.locator("#results > li.call .call-head strong").all_text_contents()
    assert heads == ["#1 lake_move", "#2 lake_move"]
    assert page.locator("#results > li.call").nth(0).locator(".part-label").all_text_contents() == [
        "arguments",
        "output",
    ]
    assert len(page.locator("#results > li.call").nth(1).locator("pre.drawn").inner_text().split("\n")) == 4
    page.click("#end")
