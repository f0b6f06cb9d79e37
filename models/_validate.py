"""Argument checks shared by every model: one way to reject nonsense.

Every check raises ``ValueError`` whose message starts with the argument's name,
e.g. ``"tp=3 does not divide heads=32"`` or ``"params must be > 0, got -1"``,
so a figure or the planner can show it next to the offending field.
"""
import math

GB = 1e9  # decimal gigabyte, as in the ZeRO paper's tables
GiB = 2**30


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(name, value):
    """A real, finite number (bools and strings are rejected)."""
    if not _is_number(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def positive(name, value):
    finite(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def non_negative(name, value):
    finite(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def _whole(name, value):
    """An int, or a float with no fractional part; bools and text are rejected."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return value


def positive_int(name, value):
    value = _whole(name, value)
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return value


def non_negative_int(name, value):
    value = _whole(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def at_most(name, value, limit):
    if value > limit:
        raise ValueError(f"{name} must be <= {limit}, got {value!r}")
    return value


def fraction(name, value):
    """A number in [0, 1]."""
    finite(name, value)
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
    return value


def choice(name, value, options):
    if value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def divides(divisor_name, divisor, dividend_name, dividend):
    """``divisor`` must divide ``dividend`` exactly: "tp=3 does not divide heads=32"."""
    if dividend % divisor:
        raise ValueError(f"{divisor_name}={divisor} does not divide {dividend_name}={dividend}")
    return divisor


def finite_result(name, value):
    """A computed result: valid but extreme inputs can overflow a float, so say which
    result is too large instead of returning inf or NaN."""
    if not math.isfinite(value):
        raise ValueError(f"inputs are too large: {name} overflows the float range")
    return value
