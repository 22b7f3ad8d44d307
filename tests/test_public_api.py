"""The authoring API is what `ors_server` exports: growing it must be a visible change to this list."""

import ors_server


def test_the_public_api_is_exactly_these_names() -> None:
    assert ors_server.__all__ == [
        "Blocks",
        "CommandResult",
        "Environment",
        "GymEnvironment",
        "HttpServer",
        "ImageBlock",
        "InvalidTaskSpec",
        "Sandbox",
        "Server",
        "Split",
        "StdioServer",
        "TextBlock",
        "ToolOutput",
        "tool",
    ]


def test_every_public_name_is_importable_and_documented() -> None:
    for name in ors_server.__all__:
        member = getattr(ors_server, name)
        if name != "Blocks":  # a type alias
            assert member.__doc__, f"{name} has no docstring"
