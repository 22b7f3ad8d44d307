"""A WebSocket client that floods and never reads: what it may make a server process hold, and whether everyone
else is still served meanwhile. Before, a ping flood grew the server by ~27 MB/s (every ping's pong queued to a
client that never read them) and its keepalive's close then waited forever on that buffer."""

from __future__ import annotations

from tests.flooding import flood_while_serving, quiet_latencies, report, server_process
from tests.raw_http import frame

PING = frame(0x9, b"p" * 125)
RSS_BOUND = 64 * 1024 * 1024
"""What a server may grow by over the flood: the buffer limit plus the kernel's and the allocator's slack."""


def test_a_ping_flood_that_never_reads_stays_bounded_is_closed_and_others_are_served():
    with server_process("--env", "frozen_lake", "--ws-write-timeout", "2") as (url, pid):
        quiet = quiet_latencies(url)
        flooded, growth, latencies = flood_while_serving(url, [pid], PING * 1000)
    print(report("ping flood, one server", flooded, growth, latencies, quiet))
    assert flooded.cut, f"the server never closed a client that read nothing ({flooded.sent} bytes sent)"
    assert growth[0] < RSS_BOUND, f"the server grew by {growth[0]} bytes"
    assert latencies  # the other client was answered while the flood ran
