"""The protocol faces: thin translators from a wire protocol to the session core."""
