"""The `*** Begin Patch` format as `toolsets.patches` reads and applies it (the toolsets' own end-to-end runs are in
tests/clients/test_toolsets.py)."""

from __future__ import annotations

import re

import pytest

from ors_server.toolsets.patches import PatchError, parse, updated


def patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


def test_hunks_apply_in_order_each_after_the_previous_and_after_its_anchor() -> None:
    text = "a\nx\nb\nx\nc\nx\n"
    (change,) = parse(patch("*** Update File: f", "@@ b", "-x", "+y", "@@", " c", "-x", "+z"))
    assert updated(text, change) == "a\nx\nb\ny\nc\nz\n"


def test_a_hunk_matches_lines_that_differ_only_in_surrounding_white_space() -> None:
    (change,) = parse(patch("*** Update File: f", "-    return 1  ", "+    return 0"))
    assert updated("def f():\n  return 1\n", change) == "def f():\n    return 0\n"


def test_an_end_of_file_hunk_changes_the_last_lines_not_an_earlier_equal_one() -> None:
    (change,) = parse(patch("*** Update File: f", "-x", "+end", "*** End of File"))
    assert updated("x\nx\n", change) == "x\nend\n"


def test_lines_that_are_not_in_the_file_are_a_patch_error_naming_them() -> None:
    (change,) = parse(patch("*** Update File: f", " a", "-missing", "+b"))
    with pytest.raises(PatchError, match="not in the file:\na\nmissing"):
        updated("a\nb\n", change)


def test_add_move_and_delete_sections_are_read_with_their_paths() -> None:
    changes = parse(
        patch("*** Add File: n.txt", "+one", "+two", "*** Update File: o", "*** Move to: p", "*** Delete File: q")
    )
    assert [(c.kind, c.path, c.added, c.move_to) for c in changes] == [
        ("add", "n.txt", ["one", "two"], None),
        ("update", "o", [], "p"),
        ("delete", "q", [], None),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("--- a/f\n+++ b/f\n", "must start with"),
        ("*** Begin Patch\n*** Delete File: f\n", "must end with"),
        (patch("*** Add File: f", "no plus"), "starts with '+'"),
        (patch("*** Update File: f", "?odd"), "start with ' ', '-' or '+'"),
        (patch(), "changes no file"),
    ],
)
def test_a_malformed_patch_is_refused_saying_why(text: str, message: str) -> None:
    with pytest.raises(PatchError, match=re.escape(message)):
        parse(text)
