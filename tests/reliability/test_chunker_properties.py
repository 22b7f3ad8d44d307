"""Properties of the SSE result chunker: what the `openreward` client rebuilds is always the value sent."""

from __future__ import annotations

import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from ors_server.faces.sse import CHUNK_SIZE, chunk_json, to_json

WHITESPACE = "".join(chr(c) for c in range(0x3000 + 1) if chr(c).isspace())
"""Every character `str.isspace` accepts (the highest is U+3000)."""

whitespace_runs = st.builds(lambda char, n: char * n, st.sampled_from(WHITESPACE), st.integers(0, 3 * CHUNK_SIZE))
strings = st.one_of(
    st.text(),
    st.text(alphabet=WHITESPACE + 'ab"\\é€😀', max_size=200),
    whitespace_runs,
    st.lists(st.one_of(whitespace_runs, st.text(max_size=20)), max_size=4).map("".join),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | strings,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(strings, children, max_size=4),
    max_leaves=8,
)
sizes = st.sampled_from([CHUNK_SIZE]) | st.integers(min_value=8, max_value=64)


def has_whitespace_window(text: str, size: int) -> bool:
    """True if some `size` consecutive characters are all whitespace (only then may the chunker escape one)."""
    run = 0
    for char in text:
        run = run + 1 if char.isspace() else 0
        if run >= size:
            return True
    return False


def check(value: object, size: int) -> None:
    text = to_json(value)
    pieces = chunk_json(text, size)
    assert pieces, "at least the end piece"
    assert all(len(piece) <= size for piece in pieces), [len(p) for p in pieces]
    assert not any(piece[:1].isspace() for piece in pieces)
    assert json.loads("".join(piece.lstrip() for piece in pieces)) == value
    if not has_whitespace_window(text, size):
        assert "".join(pieces) == text


@settings(max_examples=150, deadline=None)
@given(json_values, sizes)
def test_pieces_are_bounded_never_start_with_whitespace_and_rebuild_the_value(value, size):
    check(value, size)


@settings(max_examples=30, deadline=None)
@given(whitespace_runs, st.text(max_size=5), st.text(max_size=5))
def test_whitespace_runs_longer_than_a_chunk_still_rebuild_the_value(run, before, after):
    check({"stdout": before + run + after}, CHUNK_SIZE)
    check([before, run, after], 16)


def test_a_string_of_whitespace_only_survives_the_client_lstrip():
    for char in WHITESPACE:
        check(char * (2 * CHUNK_SIZE + 7), CHUNK_SIZE)


def test_an_8_mib_whitespace_result_is_chunked_in_linear_time():
    # Results up to 16 MiB are allowed; a quadratic chunker held the event loop ~8 s on this one. Linear work
    # takes a few tens of milliseconds, so one CPU-second is a bound no loaded machine should reach by chance.
    text = to_json({"stdout": " " * (8 * 1024 * 1024)})
    started = time.process_time()
    pieces = chunk_json(text)
    cpu_seconds = time.process_time() - started
    assert cpu_seconds < 1.0, f"chunking took {cpu_seconds:.2f} CPU seconds"
    assert all(len(piece) <= CHUNK_SIZE and not piece[:1].isspace() for piece in pieces)
    assert json.loads("".join(pieces)) == {"stdout": " " * (8 * 1024 * 1024)}
