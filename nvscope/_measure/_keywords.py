"""Which of a tool's keywords are the step's: a misspelt tool keyword fails before anything runs. A keyword is
refused only when the step's signature is known and takes no such keyword."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from nvscope._core import close_matches as _close_matches
from nvscope._core import cut, shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    import inspect
    from typing import Any

__all__ = ["only_own", "step_keywords"]


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
