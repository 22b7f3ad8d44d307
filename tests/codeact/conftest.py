from __future__ import annotations

from collections.abc import Iterator

import pytest

from ors_server.codeact import bwrap_problem


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A PATH without bwrap, and the sandbox probe (remembered per process) asked again before and after."""
    monkeypatch.setenv("PATH", "/nonexistent")
    bwrap_problem.cache_clear()
    yield
    bwrap_problem.cache_clear()
