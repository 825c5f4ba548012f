class CalcError(ValueError):
    """An expression minicalc cannot evaluate."""
