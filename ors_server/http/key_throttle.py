"""Failed API key checks, counted per client address: past a budget the address must wait (429, `Retry-After`).

Each address has a budget of `per_minute` failed checks that comes back at `per_minute` a minute. A wrong key,
bearer token or cookie, or a wrong key typed into `/ui/login`, takes one; an address with nothing left is refused
on every path but `/health`, whatever it sends, until one has come back: answering a right key then would let a
guesser go on at full speed and read the answers. A request offering no key at all costs nothing (it guesses
nothing; a browser's first visit is one).

Where it runs: in the process that sees the client's address, the single server or each front of a deployment (a
worker sees only its front, so it counts nothing; the front counts a worker's 401, a wrong login, as a failure).
Behind a reverse proxy every client has the proxy's address and shares one budget. The table keeps at most
`MAX_ADDRESSES` addresses (the least recently failing forgotten first), so it is bounded whatever the addresses.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from starlette.types import Scope

MAX_ADDRESSES = 65536


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else ""


class KeyThrottle:
    """The budgets of failed key checks, per client address (see the module docstring)."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self._budgets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        """address -> (failures it may still make, when that was counted)."""

    def _left(self, address: str, now: float) -> float:
        budget = self._budgets.get(address)
        if budget is None:
            return self.capacity
        left, at = budget
        return min(self.capacity, left + (now - at) * self.rate)

    def retry_after(self, address: str) -> int:
        """Whole seconds until `address` may be checked again; 0 when it may be now."""
        if address not in self._budgets:
            return 0
        now = self.clock()
        left = self._left(address, now)
        if left >= self.capacity:
            del self._budgets[address]  # whole again: nothing to remember
        if left >= 1:
            return 0
        return max(1, math.ceil((1 - left) / self.rate))

    def failed(self, address: str) -> None:
        """Count one failed key check of `address`."""
        now = self.clock()
        self._budgets[address] = (max(0.0, self._left(address, now) - 1), now)
        self._budgets.move_to_end(address)
        while len(self._budgets) > MAX_ADDRESSES:
            self._budgets.popitem(last=False)
