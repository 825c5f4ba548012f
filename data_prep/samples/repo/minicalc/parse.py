from .errors import CalcError
from .ops import OPS


def parse(expr):
    parts = expr.split()
    if len(parts) != 3 or parts[1] not in OPS:
        raise CalcError(f"cannot parse {expr!r}")
    return float(parts[0]), parts[1], float(parts[2])
