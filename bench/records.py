"""What recording costs per call, in CPU time, apart from HTTP: the observer on the call path, and the writer's
work off it (rows built, masked and written to SQLite in batches).

    python bench/records.py [-n 20000]

CPU time (`time.process_time`) rather than wall time, so other processes on a shared machine weigh less; the
end-to-end figures (calls/s and episodes/s with records on and off, in one run) are `bench/run.py --workloads kl`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ors_server.calls import ToolCall  # noqa: E402
from ors_server.environments.math import Math  # noqa: E402
from ors_server.records.bounds import Budget  # noqa: E402
from ors_server.records.db import Database  # noqa: E402
from ors_server.records.recorder import _batch, _Open  # noqa: E402
from ors_server.sessions import Session  # noqa: E402
from ors_server.types import TextBlock, ToolOutput  # noqa: E402

BATCH = 200  # about what one 0.2 s flush holds at 1,000 calls/s


def one_round(n: int, directory: str) -> tuple[float, float]:
    """(observer µs per call, writer µs per call) for `n` calls of one episode."""
    session = Session("bench", Math, {"question": "q", "answer": "1"}, {"token": "secret-value"})
    episode = session.episode
    opened = _Open("key-bench", session.secrets)
    database = Database(str(Path(directory) / f"bench-{time.monotonic_ns()}.db"))
    output = ToolOutput(blocks=[TextBlock(text='{"count": 1}')], reward=0.5)
    queue: list[tuple] = [("start", opened, "bench", session, 0, time.time(), session.task_spec)]

    # The call path: what `Recorder.call_ended` does (read counters, append a tuple).
    calls = [ToolCall(str(i), "tick", session, episode, "ors", {"by": 1}) for i in range(n)]
    for call in calls:
        call.end(output)
    started = time.process_time()
    for i, call in enumerate(calls):
        opened.calls += 1
        counters = (episode.step_count, episode.total_reward, episode.finished, opened.calls)
        queue.append(("call", opened, i, call, call.arguments, call.result, counters))
    observer = (time.process_time() - started) / n * 1e6

    # Off the call path: rows built (JSON, masking) and written, a batch at a time.
    started = time.process_time()
    for first in range(0, len(queue), BATCH):
        database.write(_batch(queue[first : first + BATCH], "owner", Budget(4 * 1024 * 1024)))
    writer = (time.process_time() - started) / n * 1e6
    database.close()
    return observer, writer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    observed, written = [], []
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.rounds):
            observer, writer = one_round(args.n, directory)
            observed.append(observer)
            written.append(writer)
    low, high = min(observed), max(observed)
    print(f"observer (on the call path): {statistics.median(observed):6.2f} µs/call  (range {low:.2f}-{high:.2f})")
    low, high = min(written), max(written)
    print(f"writer (off the call path):  {statistics.median(written):6.1f} µs/call  (range {low:.1f}-{high:.1f})")


if __name__ == "__main__":
    main()
