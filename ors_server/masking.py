"""Masking a session's secret values in text that leaves the session: errors, logs, episode records.

Replacing one value after another misses overlaps: with the secrets `abc` and `abc-def`, replacing `abc` first
leaves `***-def`, a piece of the longer secret in the clear. So every occurrence of every value is found in the
text as it was, overlapping and touching spans are merged, and each merged span becomes one `***`.
"""

from __future__ import annotations

from collections.abc import Iterable

MASK = "***"


class Masker:
    """Masks every occurrence of any of `values` (empty values are ignored) in the texts it is given."""

    __slots__ = ("values",)

    def __init__(self, values: Iterable[str]) -> None:
        self.values = tuple(sorted({value for value in values if value}, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        spans: list[tuple[int, int]] = []
        for value in self.values:
            start = text.find(value)
            while start != -1:
                spans.append((start, start + len(value)))
                start = text.find(value, start + 1)
        if not spans:
            return text
        spans.sort()
        pieces: list[str] = []
        kept = 0  # the end of the text copied so far
        start, end = spans[0]
        for next_start, next_end in spans[1:]:
            if next_start <= end:
                end = max(end, next_end)
                continue
            pieces += (text[kept:start], MASK)
            kept, start, end = end, next_start, next_end
        pieces += (text[kept:start], MASK, text[end:])
        return "".join(pieces)
