"""Shared fixtures. Test helpers live in plain modules (`serving.py`), importable from every test directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
