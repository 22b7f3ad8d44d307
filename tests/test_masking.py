"""`Masker`: every occurrence of any secret value becomes `***`, whatever the order or overlap of the values."""

from __future__ import annotations

from ors_server.masking import Masker


def test_a_secret_inside_a_longer_one_masks_the_longer_one_whole() -> None:
    assert Masker(["abc", "abc-def"])("x abc-def y abc z") == "x *** y *** z"


def test_overlapping_and_touching_secrets_become_one_mask() -> None:
    assert Masker(["abcd", "cdef"])("[abcdef]") == "[***]"
    assert Masker(["ab", "cd"])("abcd ab") == "*** ***"


def test_repeated_and_self_overlapping_occurrences_are_all_masked() -> None:
    assert Masker(["aa"])("aaa b aa") == "*** b ***"


def test_empty_values_and_texts_without_secrets_are_left_alone() -> None:
    masker = Masker(["", "s3cret"])
    assert masker("nothing here") == "nothing here"
    assert Masker([])("s3cret") == "s3cret"
