"""Shared fixtures.

`tests` is a package (every folder has an `__init__.py`), so pytest puts the repository root on `sys.path`,
never a folder inside `tests/`: a test folder named like a top-level package (`tests/environments/`) cannot
shadow it. Helpers are imported by their full name (`from tests.serving import serve`).
"""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
