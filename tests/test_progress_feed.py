"""`ProgressFeed`, the hand-off of a call's progress reports to the face that sends them: past `PROGRESS_KEPT`
waiting reports, the oldest are dropped (README: "past that, the oldest are dropped")."""

from __future__ import annotations

import threading

import pytest

from ors_server.calls import Progress
from ors_server.faces.progress import PROGRESS_KEPT, ProgressFeed

pytestmark = pytest.mark.anyio


async def test_a_feed_keeps_the_latest_reports_in_order_and_hands_each_over_once() -> None:
    feed = ProgressFeed()
    reporter = threading.Thread(target=lambda: [feed(Progress(float(n), None, None)) for n in range(1, 71)])
    reporter.start()  # reports come from the tool's thread
    reporter.join(10)
    assert [report.done for report in feed.take()] == [float(n) for n in range(71 - PROGRESS_KEPT, 71)]
    assert feed.take() == []
