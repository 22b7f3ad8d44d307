"""The authoring API is what `ors_server` exports: growing it must be a visible change to this list."""

import ors_server


def test_the_public_api_is_exactly_these_names() -> None:
    assert ors_server.__all__ == [
        "Blocks",
        "CommandResult",
        "Environment",
        "GroupCandidate",
        "GroupScore",
        "GymEnvironment",
        "HttpServer",
        "ImageBlock",
        "InvalidTaskSpec",
        "Message",
        "ReasoningBlock",
        "Sandbox",
        "Server",
        "Split",
        "StdioServer",
        "TextBlock",
        "ToolCallBlock",
        "ToolOutput",
        "ToolResultBlock",
        "terminal",
        "tool",
    ]


def test_every_public_name_is_importable_and_documented() -> None:
    for name in ors_server.__all__:
        member = getattr(ors_server, name)
        if name != "Blocks":  # a type alias
            assert member.__doc__, f"{name} has no docstring"
