"""minicalc: evaluate simple binary expressions."""
from minicalc.eval import evaluate
from minicalc.errors import CalcError

__all__ = ["evaluate", "CalcError"]
