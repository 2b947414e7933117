"""The tools' argument checks, shared with the command line's types (`arg`): each returns the value or raises a
`ValueError` (out of range) or `TypeError` (wrong kind) naming the parameter and the value. A misspelt tool keyword
fails before anything runs (`step_keywords`); it is refused only where the step's signature takes no such keyword."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from nvscope._core import close_matches as _close_matches
from nvscope._core import cut, shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    import inspect
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = ["arg", "count", "fraction", "integer", "number", "only_own", "rounds", "step_callable", "step_keywords"]


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

    return count(name, value, MIN_ROUNDS, "fewer rounds give no confidence interval")


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


def step_keywords(tool: Callable[..., Any], step: Callable[..., Any], kwargs: Mapping[str, object],
                  measuring: Iterable[str] = ()) -> None:
    """Refuse the first of ``kwargs`` that ``step`` cannot take: a `TypeError` naming ``tool``'s keywords
    (its parameters, then its `Measure` keywords ``measuring``) and the closest."""
    if not kwargs:
        return
    signature = _signature(step)
    if signature is None or any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return
    step_names = [p.name for p in signature.parameters.values() if _by_keyword(p)]
    unknown = next((k for k in kwargs if k not in step_names), None)
    if unknown is None:
        return
    own = _own(tool, measuring)
    message = _unexpected(tool, unknown, own)
    if "did you mean" not in message and (close := _close_matches(unknown, step_names, n=1, cutoff=0.6)):
        message += f"; did you mean the step's {close[0]!r}?"
    step_name = cut(getattr(step, "__name__", None) or type(step).__name__, 60)
    takes = cut(", ".join(step_names), 120) if step_names else "no keyword arguments"
    raise TypeError(f"{message} ({tool.__name__}() takes {', '.join(own)}; other keywords go to the step, and "
                    f"{step_name}() takes {takes})")


def only_own(tool: Callable[..., Any], kwargs: Mapping[str, object], measuring: Iterable[str] = ()) -> None:
    """Refuse the first of ``kwargs`` as Python would, naming ``tool``'s keywords and the closest."""
    if kwargs:
        own = _own(tool, measuring)
        raise TypeError(f"{_unexpected(tool, next(iter(kwargs)), own)} ({tool.__name__}() takes {', '.join(own)})")


def _own(tool: Callable[..., Any], measuring: Iterable[str]) -> list[str]:
    signature = _signature(tool)
    names = [] if signature is None else [p.name for p in list(signature.parameters.values())[1:] if _by_keyword(p)]
    return [*names, *measuring]


def _unexpected(tool: Callable[..., Any], unknown: str, own: list[str]) -> str:
    message = f"{tool.__name__}() got an unexpected keyword argument {shown(unknown)}"
    if close := _close_matches(unknown, own, n=1, cutoff=0.6):
        message += f"; did you mean {close[0]!r}?"
    return message


def _signature(step: Callable[..., Any]) -> inspect.Signature | None:
    import inspect

    try:
        return inspect.signature(step)
    except (TypeError, ValueError):  # no signature Python can tell
        return None


def _by_keyword(parameter: inspect.Parameter) -> bool:
    return parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
