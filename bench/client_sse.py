"""`ors-client`'s SSE parser on one long line against the same bytes as ordinary lines, in the same run:

    python bench/client_sse.py [MIB]

The baseline is MIB MiB of `data:` lines of 4 KiB each (how a server chunks a large result); the measured case is
the same bytes as a single line that ends only at the end, fed in the 64 KiB pieces a socket gives. A parser that
re-joins the unfinished line per piece is quadratic (a 40 MiB line did not finish in 20 s); a linear one costs
about what the baseline costs. Prints both times and their ratio.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from ors_client.sse import Parser  # noqa: E402

PIECE = 64 * 1024


def feed(stream: bytes, limit: int) -> tuple[float, int]:
    """Seconds to parse `stream` fed in PIECE-byte pieces, and the characters of data it gave."""
    parser = Parser(max_event_bytes=limit)
    started = time.perf_counter()
    size = 0
    for start in range(0, len(stream), PIECE):
        for event in parser.feed(stream[start : start + PIECE]):
            size += len(event.data)
    return time.perf_counter() - started, size


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    payload = mib * 1024 * 1024
    line = 4096
    ordinary = b"".join(b"event: chunk\ndata: " + b"a" * line + b"\n\n" for _ in range(payload // line))
    long_line = b"event: chunk\ndata: " + b"a" * payload + b"\n\n"
    limit = 2 * payload
    baseline, got = feed(ordinary, limit)
    measured, got_long = feed(long_line, limit)
    assert got == got_long == payload, (got, got_long)
    print(f"{mib} MiB of data in {line}-byte lines: {baseline:.3f} s")
    print(f"{mib} MiB of data in one line:        {measured:.3f} s")
    print(f"ratio (one line / ordinary lines):    {measured / baseline:.2f}x")


if __name__ == "__main__":
    main()
