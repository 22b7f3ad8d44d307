"""JSON from the wire: what every face parses a request body (or a JSON header) with.

`json.loads` accepts two kinds of input that are not JSON text a face can use, and both used to reach the
session core: nesting deeper than Python's recursion limit (a RecursionError, not a ValueError), and a string
holding a lone surrogate escape (`"\\ud800"`): valid JSON syntax, but no Unicode text, so encoding it later
(a tool name in a log line, a task spec in a prompt) failed with a 500, in a task spec on every request after.
Both are malformed input here, as the MCP SDK's parser (jiter) has them.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
"""Where a surrogate can come from: JSON text is UTF-8, so only a `\\uD800`-`\\uDFFF` escape makes one."""


class MalformedJson(ValueError):
    pass


def loads(raw: bytes | str) -> Any:
    """The JSON value of `raw`; MalformedJson (a ValueError) if it is not JSON text free of lone surrogates."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise MalformedJson("JSON nested too deeply") from None
    except ValueError as exc:
        raise MalformedJson(str(exc)) from None
    # Pairs decode to one character: a surrogate left in the value was alone. Only bodies with such an escape
    # are walked, so the common case costs one regex scan.
    escape = _SURROGATE_ESCAPE_TEXT.search(raw) if isinstance(raw, str) else _SURROGATE_ESCAPE.search(raw)
    if escape and _has_surrogate(value):
        raise MalformedJson("a string holds a lone surrogate escape (\\ud800-\\udfff), which is not Unicode text")
    return value


def _has_surrogate(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False
