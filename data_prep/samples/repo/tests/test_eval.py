import pytest

from minicalc import CalcError, evaluate


def test_add():
    assert evaluate("1 + 2") == 3.0


def test_div_zero():
    with pytest.raises(CalcError):
        evaluate("1 / 0")
