"""Tests the demo runs with pytest to produce a real failing test log."""


def divide(a, b):
    return a / b


def test_divide():
    assert divide(6, 3) == 2


def test_divide_by_zero_is_handled():
    assert divide(1, 0) == 0
