"""Schemathesis against the ORS face's own `/openapi.json`, on a real server of every built-in environment.

Whatever the generated requests hold (headers, bodies, paths built from the schema and beyond it), the
server must answer without a 5xx.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from serving import serve

from environments import BUILTIN_ENVIRONMENTS
from ors_server.app import create_app
from ors_server.settings import Settings


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    # ready_wait is short so a session the fuzzer creates never holds a request for long.
    with serve(create_app(BUILTIN_ENVIRONMENTS, Settings(ready_wait=1.0))) as url:
        yield url


@pytest.fixture(scope="module")
def ors_schema(base_url: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json", timeout=10)


schema = schemathesis.pytest.from_fixture("ors_schema")


@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_server_error(case: schemathesis.Case, base_url: str) -> None:
    case.call_and_validate(base_url=base_url, checks=[not_a_server_error], timeout=10)
