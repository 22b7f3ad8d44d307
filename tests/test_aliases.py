"""Aliases: the names faces give sessions besides their store keys, resolved through the core."""

from ors_server.faces.aliases import Aliases


def test_a_name_no_face_gave_resolves_to_nothing() -> None:
    assert Aliases().key_for("abc") is None


def test_each_faces_resolver_is_asked_in_turn() -> None:
    aliases = Aliases()
    aliases.add({"t1": "key-1"}.get)
    assert aliases.key_for("t1") == "key-1" and aliases.key_for("t2") is None
    aliases.add({"t2": "key-2"}.get)
    assert [aliases.key_for(name) for name in ("t1", "t2", "t3")] == ["key-1", "key-2", None]
