"""Capacity: hung tool calls cannot starve discovery, lifecycle work or the control plane, timed-out sync tools
keep their thread slot until they really end, and a reset never waits behind a running call."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.faces.mcp_helpers import ACCEPT, INIT_PARAMS
from tests.ors_envs import count, create, gate, live_server, new_tag, post_sse, sid_header
from tests.waiting import wait_until

FILL = 40
"""Sync tool calls that fill the default tool pool (and, before pools were split, every worker thread)."""


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in metrics"
    return float(match.group(1))


def test_discovery_lifecycle_and_control_answer_while_hung_tool_calls_fill_the_tool_pool():
    tag = new_tag()
    with live_server(ready_wait=5.0) as live, ThreadPoolExecutor(FILL) as pool:
        try:
            sids = [create(live.client, {"question": "q", "answer": "a", "tag": tag}) for _ in range(FILL)]
            spare = create(live.client)
            wait_until(lambda: all(s.ready.is_set() for s in live.store.sessions()), 10.0)
            hung = [
                pool.submit(post_sse, live.client, "/mathlike/call", {"name": "wait", "input": {}}, s) for s in sids
            ]
            wait_until(lambda: count(tag, "wait-start") == FILL, 10.0)

            with httpx.Client(base_url=live.url, timeout=5) as quick:
                tasks = quick.post("/mathlike/tasks", json={"split": "train"})
                assert tasks.status_code == 200 and tasks.json()["tasks"]
                assert quick.get("/splits").status_code == 200
                prompt = quick.get("/mathlike/prompt", headers=sid_header(spare))
                assert prompt.status_code == 200, prompt.text
                state = quick.get("/control/initial_state", headers={"mcp-session-id": "fresh-row"})
                assert state.status_code == 200, state.text
                init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {**INIT_PARAMS}}
                init["params"]["clientInfo"] = {"name": "t", "version": "1", "_extra": {"session_id": "mcp-row"}}
                initialized = quick.post("/mcp/", json=init, headers=ACCEPT)
                assert initialized.status_code == 200, initialized.text
                # Eval Protocol's reset_session does not wait behind the call running in that session.
                reset = quick.post("/control/reset_session", json={"seed": None}, headers={"mcp-session-id": sids[0]})
                assert reset.status_code == 200, reset.text
                status = quick.get("/control/status", headers={"mcp-session-id": sids[0]}).json()
                assert status["step_count"] == 0
                metrics = quick.get("/metrics").text
                assert _metric(metrics, 'ors_threads_in_use{pool="tools"}') == FILL
                assert _metric(metrics, 'ors_threads_capacity{pool="tools"}') == FILL
        finally:
            gate(tag).set()
        for future in hung:
            response, _ = future.result(timeout=20)
            assert response.status_code == 200


def test_timed_out_sync_tools_keep_their_thread_slot_until_they_end():
    tag = new_tag()
    with live_server(tool_timeout=0.5, tool_threads=2) as live:
        try:
            sids = [create(live.client, {"question": "q", "answer": "a", "tag": tag}) for _ in range(3)]
            wait_until(lambda: all(s.ready.is_set() for s in live.store.sessions()), 10.0)
            for sid in sids:
                response, raw = post_sse(live.client, "/mathlike/call", {"name": "wait", "input": {}}, sid)
                assert response.status_code == 200 and b"did not finish" in raw
            # Two threads hold the two slots; the third call never started a thread.
            assert count(tag, "wait-start") == 2
            metrics = live.client.get("/metrics").text
            assert _metric(metrics, 'ors_threads_in_use{pool="tools"}') == 2
            assert _metric(metrics, "ors_overdue_calls") == 2
        finally:
            gate(tag).set()
        wait_until(lambda: _metric(live.client.get("/metrics").text, "ors_overdue_calls") == 0, 10.0)
        assert _metric(live.client.get("/metrics").text, 'ors_threads_in_use{pool="tools"}') == 0
        assert count(tag, "wait-end") == 2
