"""The built-in environments, written only against the public authoring API (`from ors_server import ...`)."""

from ors_server.environments.blackjack import Blackjack
from ors_server.environments.calculator import Calculator
from ors_server.environments.cliff_walking import CliffWalking
from ors_server.environments.frozen_lake import FrozenLake
from ors_server.environments.math import Math
from ors_server.environments.shell import Shell

BUILTIN_ENVIRONMENTS = [Math, FrozenLake, CliffWalking, Blackjack, Shell, Calculator]
