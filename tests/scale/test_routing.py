"""The routing parts in isolation: tagged ids, key extraction, the worker table, the directory, merged metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ors_server.faces import Naming, control, ors
from ors_server.faces import openenv as openenv_face
from ors_server.faces.mcp.naming import names_session as mcp_names_session
from ors_server.faces.mcp.naming import read_initialize
from ors_server.ids import WorkerTag, mint, split
from ors_server.scale import metrics
from ors_server.scale.directory import Directory
from ors_server.scale.table import Address, State, Unavailable, Worker, WorkerTable
from ors_server.settings import Settings


def http(headers: dict[str, str], kind: str = "http", query: bytes = b"") -> dict:
    raw = [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    return {"type": kind, "headers": raw, "query_string": query, "method": "POST", "path": "/mcp"}


def test_a_minted_id_names_its_worker_and_a_look_alike_without_the_check_does_not():
    tag = WorkerTag(3, 17)
    sid = tag.mint()
    assert split(sid) == (tag, sid.split(":", 1)[1])
    assert mint("w3-17").startswith("w3-17-") and mint(None).count("-") == 4  # a plain uuid4 off a front
    forged = "w3-17-" + ("00" if sid[6:8] != "00" else "01") + sid[8:]
    assert split(forged) is None
    assert split("w1-2-zz:abc") is None and split("rollout-7") is None
    assert Settings(worker_tag="w0-1").worker_tag == "w0-1"
    with pytest.raises(ValueError, match="worker tag"):
        Settings(worker_tag="worker one")


def test_mcp_names_the_episode_url_then_x_session_id_then_the_transport_id():
    assert mcp_names_session(http({"mcp-session-id": "m", "X-Session-ID": " x "}), None) == Naming("x")
    assert mcp_names_session(http({"mcp-session-id": "m"}), None) == Naming("m")
    assert mcp_names_session(http({"X-Session-ID": "  "}), None) == Naming(None)
    episode = {**http({"X-Session-ID": "x"}), "path": "/frozen_lake/mcp/episodes/e-1"}
    assert mcp_names_session(episode, None) == Naming("e-1")


def test_an_mcp_initialize_creates_its_session_and_the_reply_names_it_by_its_transport_id_too():
    body = json.dumps({"method": "initialize", "params": {"clientInfo": {"_extra": {"session_id": "row-9"}}}})
    assert mcp_names_session(http({}), body.encode()) == Naming("row-9", True, b"mcp-session-id")
    # With a transport id it is no initialize: the body is not read.
    assert mcp_names_session(http({"mcp-session-id": "m"}), body.encode()) == Naming("m")


def test_each_face_names_sessions_its_own_way():
    assert ors.names_session({**http({"X-Session-ID": "s", "mcp-session-id": "m"}), "path": "/create"}, b"") == (
        Naming("s", creates=True)
    )
    assert ors.names_session({**http({"mcp-session-id": "m"}), "path": "/math/call"}, b"") == Naming(None)
    initial_state = {**http({"mcp-session-id": "row"}), "method": "GET", "path": "/control/initial_state"}
    assert control.names_session(initial_state, None) == Naming("row", creates=True)
    assert control.names_session({**initial_state, "path": "/control/reward"}, None) == Naming("row")
    socket = {**http({}, "websocket", b"a=1&session_id=s"), "path": "/openenv/ws"}
    assert openenv_face.names_session(socket, None) == Naming("s")
    assert openenv_face.names_session({**socket, "query_string": b""}, None) == Naming(None, creates=True)
    rpc = {**http({}), "path": "/openenv/frozen_lake/mcp"}
    close = json.dumps({"method": "openenv/session/close", "params": {"session_id": "s"}}).encode()
    assert openenv_face.names_session(rpc, close) == Naming("s")
    create = json.dumps({"method": "openenv/session/create", "params": {}}).encode()
    assert openenv_face.names_session(rpc, create) == Naming(None, creates=True)
    assert openenv_face.names_session({**rpc, "path": "/openenv/step"}, close) == Naming(None)  # stateless


def test_nothing_under_scale_spells_a_face_protocol():
    # The front asks each request's face how it names its session (`Face.names_session`).
    # Nor the web page's: a logout's revocation reaches the front as the face's `Face.revokes`.
    words = ["mcp-session-id", "x-session-id", "initialize", "_extra", "initial_state", "/create", "session_id"]
    words += ["/ui", "logout", "ors_ui", "ors_server.ui"]
    scale = Path(__file__).resolve().parents[2] / "ors_server" / "scale"
    spelled = [
        f"{path.name}: {word}"
        for path in sorted(scale.glob("*.py"))
        for word in words
        if word in path.read_text(encoding="utf-8").lower()
    ]
    assert spelled == []


def test_only_an_initialize_is_read_for_its_eval_protocol_session_id():
    extra = {"params": {"clientInfo": {"name": "ep", "_extra": {"session_id": "row-9"}}}}
    assert read_initialize(json.dumps({"method": "initialize", **extra}).encode()) == (True, "row-9")
    assert read_initialize(json.dumps({"method": "initialize", "params": {}}).encode()) == (True, None)
    assert read_initialize(json.dumps({"method": "tools/call", **extra}).encode()) == (False, None)
    assert read_initialize(b"[" * 100_000) == (False, None)
    assert read_initialize(b"not json") == (False, None)


def test_the_table_names_current_incarnations_only_and_places_by_room():
    table = WorkerTable(2)
    first = [Worker(WorkerTag(i, 1), Address(uds=f"/w{i}")) for i in range(2)]
    for worker in first:
        table.put(worker)
    assert table.current(first[1].tag) is first[1]
    first[0].report(sessions=3, calls=1, capacity=4)
    assert {table.place() for _ in range(4)} == {first[1]}  # the one with the most room
    first[1].report(sessions=2, calls=2, capacity=4)
    assert {table.place() for _ in range(4)} == {first[0], first[1]}  # equals take turns
    first[1].placing = 2  # creates on their way count as sessions: worker 1 is full
    assert {table.place() for _ in range(4)} == {first[0]}

    assert table.mark(first[1].tag, State.DEAD)
    assert table.current(first[1].tag) is None
    assert {table.place() for _ in range(4)} == {first[0]}  # new sessions only on live workers
    with pytest.raises(Unavailable):
        table.place(exclude=[first[0]])

    reborn = Worker(WorkerTag(1, 2), Address(uds="/w1b"))
    table.put(reborn)
    assert table.current(first[1].tag) is None  # the old incarnation's sessions never reach the new worker
    assert table.place() is reborn  # it is empty: it takes the next new session
    assert not table.mark(first[1].tag, State.LIVE)  # a stale incarnation cannot be revived


def test_the_directory_is_bounded_and_forgets_the_least_recently_used_first():
    directory = Directory(3)
    tag = WorkerTag(0, 1)
    for key in ("a", "b", "c"):
        directory.put(key, tag)
    assert directory.get("a") == tag  # used: now the most recent
    directory.put("d", tag)
    assert len(directory) == 3 and directory.get("b") is None and directory.get("a") == tag
    directory.drop("a")
    assert directory.get("a") is None
    with pytest.raises(ValueError):
        Directory(0)


def test_merged_metrics_label_every_sample_with_its_worker_and_stay_valid_prometheus_text():
    scrape = (
        "# HELP ors_live_sessions Sessions alive now\n# TYPE ors_live_sessions gauge\n"
        'ors_live_sessions{env="math"} 3.0\n'
        "# HELP ors_up Up\n# TYPE ors_up gauge\nors_up 1.0\n"
    )
    text = metrics.merge({"0": scrape, "1": scrape.replace("3.0", "5.0")})
    families = {family.name: family for family in text_string_to_metric_families(text)}
    live = {(s.labels["worker"], s.labels["env"]): s.value for s in families["ors_live_sessions"].samples}
    assert live == {("0", "math"): 3.0, ("1", "math"): 5.0}
    assert [s.labels for s in families["ors_up"].samples] == [{"worker": "0"}, {"worker": "1"}]
    assert text.count("# TYPE ors_live_sessions gauge") == 1


def test_a_front_follows_a_published_table_and_its_own_verdict_of_death_stands():
    supervisor, front = WorkerTable(2), WorkerTable(2)
    changes: list[int] = []
    supervisor.listener = lambda: changes.append(supervisor.version)
    first, second = WorkerTag(0, 1), WorkerTag(1, 1)
    supervisor.put(Worker(first, Address(uds="/tmp/w0-1.sock"), State.LIVE))
    supervisor.put(Worker(second, Address(uds="/tmp/w1-1.sock"), State.LIVE))
    assert changes == [1, 2]
    front.apply(json.loads(json.dumps(supervisor.rows())))  # as sent on the control socket
    assert [(w.tag, w.address, w.state) for w in front.workers()] == [
        (first, Address(uds="/tmp/w0-1.sock"), State.LIVE),
        (second, Address(uds="/tmp/w1-1.sock"), State.LIVE),
    ]
    front.current(second).in_flight = 3  # type: ignore[union-attr]
    # The front finds worker 0 unreachable before the supervisor sees it exit: a stale row does not revive it.
    front.mark(first, State.DEAD)
    front.apply(supervisor.rows())
    assert front.current(first) is None
    assert front.current(second).in_flight == 3  # type: ignore[union-attr]  # a known incarnation keeps its counts
    # Its next incarnation replaces it; the old one's ids stay lost.
    supervisor.mark(first, State.DEAD)
    supervisor.put(Worker(WorkerTag(0, 2), Address(uds="/tmp/w0-2.sock"), State.STARTING))
    supervisor.mark(WorkerTag(0, 2), State.LIVE)
    front.apply(supervisor.rows())
    assert front.current(WorkerTag(0, 2)).address == Address(uds="/tmp/w0-2.sock")  # type: ignore[union-attr]
    assert front.current(first) is None
    assert changes == [1, 2, 3, 4, 5]


def test_the_front_closes_its_pool_to_a_worker_once_the_table_says_it_is_dead_or_replaced():
    from ors_server.http.guards import HeaderChecks
    from ors_server.http.hosts import AllowedHosts
    from ors_server.scale.front import Front
    from ors_server.scale.refusals import Refusals

    table = WorkerTable(2)
    first, other = WorkerTag(0, 1), WorkerTag(1, 1)
    table.put(Worker(first, Address(uds="/tmp/w0-1.sock")))
    table.put(Worker(other, Address(uds="/tmp/w1-1.sock")))
    checks = HeaderChecks(AllowedHosts(Settings()), None)
    front = Front(table, Refusals(), checks=checks, max_body_bytes=1024)
    old, kept = front._upstream(table.slots[0]), front._upstream(table.slots[1])  # type: ignore[arg-type]
    table.mark(first, State.DEAD)  # learnt from the supervisor's table, not from this front's own request
    table.put(Worker(WorkerTag(0, 2), Address(uds="/tmp/w0-2.sock")))
    new = front._upstream(table.slots[0])  # type: ignore[arg-type]
    assert old.closed and first not in front.upstreams
    assert new is not old and not new.closed
    assert front._upstream(table.slots[1]) is kept and not kept.closed  # type: ignore[arg-type]


def test_the_web_page_declares_the_cookie_its_logout_revoked_and_other_faces_none():
    from ors_server.ui import shape as ui_shape

    page = ui_shape()
    logout = {**http({"Cookie": "theme=dark; ors_ui=123.abc"}), "path": "/ui/logout"}
    assert page.revokes(logout, 303) == b"123.abc"
    assert page.revokes(logout, 401) is None  # refused: nothing was revoked
    assert page.revokes({**logout, "path": "/ui/login"}, 303) is None
    assert page.revokes({**http({}), "path": "/ui/logout"}, 303) is None  # no cookie to revoke
    assert ors.shape().revokes(logout, 200) is None
