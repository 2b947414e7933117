"""The tools' argument checks, shared with the command line's types (`arg`): each returns the value or raises a
`ValueError` (out of range) or `TypeError` (wrong kind) naming the parameter and the value."""

from __future__ import annotations

import math
from collections.abc import Callable

from nvscope._core import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = ["ROUNDS_WHY", "arg", "count", "fraction", "integer", "number", "rounds", "step_callable"]

ROUNDS_WHY = "fewer rounds give no confidence interval"


def integer(name: str, value: object) -> int:
    """Any int (not a bool): a seed."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got {shown(value)}")
    return value


def count(name: str, value: object, minimum: int = 0, why: str = "") -> int:
    """An int (not a bool) >= ``minimum``; ``why`` says the reason for the minimum."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {shown(value)}" + (f" ({why})" if why else ""))
    return value


def rounds(name: str, value: object) -> int:
    """A number of timing rounds: at least `MIN_ROUNDS`, below which no interval can be given."""
    from nvscope._measure._stats import MIN_ROUNDS

    return count(name, value, MIN_ROUNDS, ROUNDS_WHY)


def number(name: str, value: object, minimum: float = 0.0, *, above: bool = False, none: bool = False,
           finite: bool = True) -> Any:
    """A finite number (not a bool; infinite too with ``finite=False``) >= ``minimum`` (> with ``above``);
    None too with ``none``."""
    if value is None and none:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value) and (
        math.isfinite(value) or not finite) and (value > minimum if above else value >= minimum)
    if not ok:
        what = "a finite number" if finite else "a number"
        bound = f"{'>' if above else '>='} {minimum:g}"
        raise ValueError(f"{name} must be {what} {bound}{' or None' if none else ''}, got {shown(value)}")
    return value


def fraction(name: str, value: object) -> float:
    """A number in [0, 1): a least relative gain."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1):
        raise ValueError(f"{name} must be a number in [0, 1) (a fraction: 0.03 is 3 %), got {shown(value)}")
    return float(value)


def step_callable(tool: str, fn: object) -> Callable[..., Any]:
    """What a tool times or judges: a callable (the step), else a `TypeError` saying what to pass."""
    if not callable(fn):
        raise TypeError(f"{tool}() needs the step to run as its first argument, a callable (a function, a jitted "
                        f"module), not {type(fn).__name__}: {shown(fn)}")
    return fn


def arg(check: Callable[[str, Any], T], convert: Callable[[str], Any] = int) -> Callable[[str], T]:
    """An ``argparse`` type: the word converted, then checked by ``check(name, value)``."""

    def parse(text: str) -> T:
        import argparse

        try:
            value = convert(text)
        except ValueError:
            kind = "an integer" if convert is int else "a number"
            raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
        try:
            return check("the value", value)
        except (ValueError, TypeError) as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix("the value ")) from None

    parse.__name__ = getattr(check, "__name__", "value")
    return parse
