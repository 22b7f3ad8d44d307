"""The built-in environments, written only against the public authoring API (`from ors_server import ...`)."""

from environments.blackjack import Blackjack
from environments.calculator import Calculator
from environments.cliff_walking import CliffWalking
from environments.frozen_lake import FrozenLake
from environments.math import Math
from environments.shell import Shell

BUILTIN_ENVIRONMENTS = [Math, FrozenLake, CliffWalking, Blackjack, Shell, Calculator]
