"""Schemathesis against the ORS face's own `/openapi.json`, on a real server of every built-in environment.

Whatever the generated requests hold (headers, bodies, paths built from the schema and beyond it), the
server must answer without a 5xx.

Cases come from schemathesis' Hypothesis strategies driven by a plain `@given`, not from its pytest plugin's
`parametrize`: the plugin reaches into pytest internals and broke with pytest 9.2, while the strategy API is
schemathesis' own public surface.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

from ors_server.environments import BUILTIN_ENVIRONMENTS
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.serving import serve


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    # ready_wait is short so a session the fuzzer creates never holds a request for long.
    with serve(create_app(BUILTIN_ENVIRONMENTS, Settings(ready_wait=1.0))) as url:
        yield url


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_generated_request_gets_a_server_error(base_url: str, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", timeout=10)
    operations = len(list(schema.get_all_operations()))
    assert operations >= 15, "the OpenAPI document lost its endpoints"

    @given(data=st.data())
    @settings(max_examples=8 * operations, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(data: st.DataObject) -> None:
        case = data.draw(schema.as_strategy(generation_mode=mode))
        case.call_and_validate(base_url=base_url, checks=[not_a_server_error], timeout=10)

    check()
