"""Fixtures of the hosted-environment tests: the openreward venv (built once, cached; see tests/clients)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients import client_venvs


@pytest.fixture(scope="session")
def openreward_python() -> Path:
    """The python of a venv with `openreward` 0.1.167 (and ors-sdk)."""
    return client_venvs.ensure_venv("openreward")
