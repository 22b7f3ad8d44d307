"""Episode labels: what a client says of the episodes it creates (`X-Episode-Labels: run=r1,group=g7`, or
`labels` in Eval Protocol's `clientInfo._extra`), kept in their records and filtered on (`label.run=r1`)."""

from __future__ import annotations

import re
from typing import Any

from ors_server.errors import BadRequest

HEADER = "x-episode-labels"
MAX_LABELS = 32
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 256
MAX_HEADER_CHARS = 4096
_KEY = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_KEY_CHARS}}}")


def parse_header(text: str | None) -> dict[str, str]:
    """The labels of an `X-Episode-Labels` header (`key=value` pairs separated by commas); BadRequest if it is
    not that, or past the bounds (`MAX_LABELS` labels, keys of letters, digits, `_.-`)."""
    if text is None or not text.strip():
        return {}
    if len(text) > MAX_HEADER_CHARS:
        raise BadRequest(f"X-Episode-Labels is longer than {MAX_HEADER_CHARS} characters")
    labels: dict[str, str] = {}
    for number, pair in enumerate(text.split(","), 1):
        key, sep, value = pair.partition("=")
        labels[key.strip()] = value.strip()
        if not sep:
            # Neither here nor below is the offending text repeated: a client may have put a secret there.
            raise BadRequest(f"X-Episode-Labels must be key=value pairs separated by commas; pair {number} has no '='")
    return checked(labels, "X-Episode-Labels")


def checked(labels: Any, where: str) -> dict[str, str]:
    """`labels` as a dict of strings, within the bounds; BadRequest naming `where` otherwise."""
    if not isinstance(labels, dict):
        raise BadRequest(f"{where} must be an object of label names to strings")
    if len(labels) > MAX_LABELS:
        raise BadRequest(f"{where}: at most {MAX_LABELS} labels, got {len(labels)}")
    for number, (key, value) in enumerate(labels.items(), 1):
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise BadRequest(
                f"{where}: a label name is 1-{MAX_KEY_CHARS} letters, digits, '_', '.' or '-'; label {number}'s is not"
            )
        if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS or not value.isprintable():
            raise BadRequest(f"{where}: label {key!r} must be printable text of at most {MAX_VALUE_CHARS} characters")
    return dict(labels)


def merged(*sources: dict[str, str]) -> dict[str, str]:
    """Labels from several places, later ones winning, still within the bounds."""
    labels: dict[str, str] = {}
    for source in sources:
        labels.update(source)
    return checked(labels, "labels")
