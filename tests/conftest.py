"""Shared fixtures.

`tests` is a package (every folder has an `__init__.py`), so pytest puts the repository root on `sys.path`,
never a folder inside `tests/`: a test folder named like a top-level package (`tests/environments/`) cannot
shadow it. Helpers are imported by their full name (`from tests.serving import serve`).
"""

from __future__ import annotations

import os

import pytest

from ors_server.records.db import ENV_VARIABLE


@pytest.fixture(autouse=True, scope="session")
def _records_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every server the tests start, in process or as a subprocess (which inherits the environment), records its
    episodes in a temporary file rather than `ors-episodes.db` in the working directory (the checkout)."""
    if not os.environ.get(ENV_VARIABLE):
        os.environ[ENV_VARIABLE] = str(tmp_path_factory.mktemp("records") / "episodes.db")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadscope` hands out the longest modules first (tests/scheduling.py); other modes are xdist's."""
    if config.getoption("dist") != "loadscope":
        return None
    from tests.scheduling import LongestFirst

    return LongestFirst(config, log)
