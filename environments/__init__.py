"""The built-in environments, written only against the public authoring API (`from ors_server import ...`)."""

from environments.math import Math

BUILTIN_ENVIRONMENTS = [Math]
