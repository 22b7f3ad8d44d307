"""`calc`: an MCP server over stdio with exact arithmetic tools (`evaluate`, `factorize`).

Run it as `python -m ors_server.environments.tool_servers.calc`; the `calculator` environment composes it.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer(
    "calc", instructions="Exact arithmetic: evaluate expressions, factorize integers.", log_level="ERROR"
)

_OPERATORS: dict[type[ast.AST], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
MAX_EXPONENT = 1000
MAX_FACTOR = 10**15


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _value(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > MAX_EXPONENT):
            raise ValueError("exponents must be integers of at most 1000")
        result: Fraction = _OPERATORS[type(node.op)](left, right)
        return result
    raise ValueError(f"unsupported syntax: {ast.dump(node)[:60]}")


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value} (= {float(value):.12g})"


@server.tool()
def evaluate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly: integers and decimals with + - * / // % ** and parentheses.
    Returns an integer, or a fraction with its decimal value."""
    try:
        return _show(_value(ast.parse(expression, mode="eval")))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except SyntaxError as exc:
        raise ToolError(f"not an expression: {exc.msg}") from None
    except ValueError as exc:
        raise ToolError(str(exc)) from None


@server.tool()
def factorize(n: int) -> str:
    """The prime factors of an integer 2 <= n <= 10**15, smallest first, with repetition: "2 * 2 * 3" for 12."""
    if not 2 <= n <= MAX_FACTOR:
        raise ToolError("n must be between 2 and 10**15")
    factors, d = [], 2
    while d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 1 if d == 2 else 2
    if n > 1:
        factors.append(n)
    return " * ".join(str(f) for f in factors)


if __name__ == "__main__":
    server.run()
