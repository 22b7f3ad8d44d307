"""Bounded polling, for what gives no event to wait on (a server thread's session store, a journal written by
environment code in another thread)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Return once `predicate()` is true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
