"""The /ui page in a real headless chromium against a real server: the key, play mode, the episodes list and a
live episode followed as it runs, untrusted output shown as text.

One server and one browser for the module; each test has its own browser context (its own cookies)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ors_server.environments.math import TASKS, Math
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.serving import serve
from tests.ui.browser import WAIT_MS, chromium, logged_in_page
from tests.ui.ui_envs import Echo

KEY = "ui-test-key-3f9a"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    records = tmp_path_factory.mktemp("ui-records") / "episodes.db"
    with serve(create_app([Math, Echo], Settings(api_key=KEY, records=str(records)))) as url:
        yield url


@pytest.fixture(scope="module")
def api(base: str) -> Iterator[httpx.Client]:
    """A client of the server's REST API, with the key: what drives the episodes the page watches."""
    with httpx.Client(base_url=base, headers={"X-API-Key": KEY}, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with logged_in_page(browser, base, KEY) as page:
        yield page


def test_without_the_key_the_page_shows_the_login_form_and_reads_nothing(browser: Any, base: str) -> None:
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    answer = page.goto(base + "/ui/play")
    assert answer is not None and answer.status == 401
    assert page.locator("input[name=key]").is_visible()
    assert page.evaluate("fetch('/list_environments').then(r => r.status)") == 401
    assert page.evaluate("fetch('/episodes').then(r => r.status)") == 401

    page.fill("input[name=key]", "wrong")
    page.click("#login button[type=submit]")
    page.wait_for_selector("text=Wrong key.")
    assert context.cookies() == []

    page.fill("input[name=key]", KEY)
    page.click("#login button[type=submit]")
    page.wait_for_url(base + "/ui/play")  # back where it was asked for
    page.wait_for_selector("#env option[value=math]", state="attached")
    (cookie,) = context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert KEY not in cookie["value"]
    assert page.evaluate("document.cookie") == ""  # out of reach of the page's scripts
    assert KEY not in page.content()
    context.close()


def test_play_mode_completes_a_math_episode_to_reward_1(page: Any) -> None:
    page.select_option("#env", "math")
    page.wait_for_selector("#split option[value=train]", state="attached")
    page.select_option("#split", "train")
    page.fill("#index", "0")
    page.click("#start-button")
    page.wait_for_selector("#prompt .block-text")
    assert TASKS["train"][0]["question"] in page.text_content("#prompt")
    assert page.input_value("#tool") == "submit"

    page.fill("#field-answer", str(TASKS["train"][0]["answer"]))
    page.click("#call-button")
    page.wait_for_selector("#results .call")
    assert "Correct!" in page.text_content("#results")
    assert "reward 1" in page.text_content("#results .call-result")
    assert page.text_content("#total") == "1"
    assert page.text_content("#state") == "finished"
    assert page.is_disabled("#call-button")

    page.click("#end")
    page.wait_for_selector("#notice:has-text('ended')")
    assert page.is_hidden("#session")


def test_a_tool_form_follows_the_schema_and_markup_in_output_is_shown_as_text(page: Any) -> None:
    payload = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
    page.select_option("#env", "echo")
    page.wait_for_selector("#split option[value=test]", state="attached")
    page.fill("#index", "1")  # the task whose prompt holds markup too
    page.click("#start-button")
    page.wait_for_selector("#prompt .block-text")
    assert page.text_content("#prompt .block-text") == "Say something about <b>bold</b>."
    assert page.locator("#prompt b").count() == 0

    # One input of the right kind per property: text, checkbox, integer, an enum's list, JSON for an object.
    assert page.get_attribute("#field-text", "type") == "text"
    assert page.get_attribute("#field-loud", "type") == "checkbox"
    assert page.get_attribute("#field-times", "type") == "number"
    assert page.eval_on_selector("#field-mood", "e => [...e.options].map(o => o.textContent)") == [
        "(none)",
        "calm",
        "glad",
    ]
    assert page.eval_on_selector("#field-extra", "e => e.tagName") == "TEXTAREA"

    page.fill("#field-text", payload)
    page.fill("#field-times", "2")
    page.select_option("#field-mood", label="glad")
    page.fill("#field-extra", '{"a": [1, 2]}')
    page.click("#call-button")
    page.wait_for_selector("#results .call")
    assert page.text_content("#results .block-text") == f"{payload} {payload}"
    assert page.evaluate("window.pwned") is None
    assert page.locator("#results script").count() == 0
    (image,) = page.locator("#results img").all()
    assert image.get_attribute("src", timeout=WAIT_MS).startswith("data:image/png;base64,")
    assert page.evaluate("document.querySelector('#results img').naturalWidth") == 2
    assert "reward 0.500" in page.text_content("#results .call-result")

    page.fill("#field-extra", "{not json")
    page.click("#call-button")
    page.wait_for_selector("#notice:has-text('extra is not valid JSON')")
    page.click("#end")


def ors_episode(client: httpx.Client, env: str, labels: str, task: dict[str, Any]) -> str:
    """A session of `env` created over ORS with `labels`; its id."""
    sid = client.post("/create_session").json()["sid"]
    answer = client.post(
        "/create", headers={"X-Session-ID": sid, "X-Episode-Labels": labels}, json={"env_name": env, **task}
    )
    assert answer.status_code == 200, answer.text
    return sid


def ors_call(client: httpx.Client, env: str, sid: str, name: str, arguments: dict[str, Any]) -> str:
    answer = client.post(f"/{env}/call", headers={"X-Session-ID": sid}, json={"name": name, "input": arguments})
    assert answer.status_code == 200, answer.text
    return answer.text


def test_the_list_shows_a_finished_and_a_live_episode_and_new_ones_without_reload(
    page: Any, base: str, api: httpx.Client
) -> None:
    run = f"run={uuid.uuid4().hex[:8]}"
    finished = ors_episode(api, "math", run, {"split": "train", "index": 0})
    ors_call(api, "math", finished, "submit", {"answer": str(TASKS["train"][0]["answer"])})
    api.post("/delete", headers={"X-Session-ID": finished})
    live = ors_episode(api, "echo", run, {"split": "test", "index": 0})
    ors_call(api, "echo", live, "say", {"text": "hello"})

    page.goto(f"{base}/ui?labels={run}")
    page.wait_for_selector(f'#episodes tr[data-id="{finished}"][data-status="ended"]')
    page.wait_for_selector(f'#episodes tr[data-id="{live}"][data-status="live"]')
    row = page.locator(f'#episodes tr[data-id="{finished}"]')
    assert row.locator("td").nth(1).text_content() == "math"
    assert row.locator("td").nth(8).text_content() == "1"  # the reward, after the task column
    assert row.locator("td").nth(10).text_content() == "deleted"

    another = ors_episode(api, "echo", run, {"split": "test", "index": 0})
    page.wait_for_selector(f'#episodes tr[data-id="{another}"]')  # the list follows without a reload
    page.select_option("#filters select[name=status]", "ended")
    page.click("#filters button[type=submit]")
    page.wait_for_selector(f'#episodes tr[data-id="{live}"]', state="detached")
    assert page.locator("#episodes tbody tr").count() == 1
    api.post("/delete", headers={"X-Session-ID": live})
    api.post("/delete", headers={"X-Session-ID": another})


def test_a_live_episode_page_follows_its_calls_and_its_end_without_reload(
    page: Any, base: str, api: httpx.Client
) -> None:
    payload = '<img src=x onerror="window.pwned=1">'
    sid = ors_episode(api, "echo", "run=follow", {"split": "test", "index": 1})
    ors_call(api, "echo", sid, "say", {"text": "first"})
    page.goto(f"{base}/ui/episode?id={sid}")
    page.wait_for_selector("#calls .call")
    assert page.text_content("#live") == "live"
    assert page.text_content("#prompt .block-text") == "Say something about <b>bold</b>."

    ors_call(api, "echo", sid, "say", {"text": payload})
    page.wait_for_selector("#calls .call >> nth=1")
    second = page.locator("#calls .call").nth(1)
    assert second.locator(".block-text").text_content() == payload
    assert page.evaluate("window.pwned") is None
    assert second.locator("img").get_attribute("src").startswith("data:image/png;base64,")
    assert page.locator("#plot circle").count() == 2
    assert "reward 0.500" in second.text_content()

    api.post("/delete", headers={"X-Session-ID": sid})
    page.wait_for_selector("#live:has-text('ended')")
    assert "deleted" in page.text_content("#summary")
