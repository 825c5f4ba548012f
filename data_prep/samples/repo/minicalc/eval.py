from minicalc.errors import CalcError
from minicalc.ops import OPS
from minicalc.parse import parse


def evaluate(expr):
    left, op, right = parse(expr)
    if op == "/" and right == 0:
        raise CalcError("division by zero")
    return OPS[op](left, right)
