"""Which of a tool's keyword arguments are the step's: ``nvscope.search(step, x, candiates=[...])`` must fail as the
tool's misspelt keyword, before anything runs, not minutes later as ``step() got an unexpected keyword argument``.

The tools (search, search_fusions, profile, bisect, compare) take their own keywords and pass every other one to the
step. A keyword is refused only when the step's signature is known and takes no such keyword (no parameter of that
name, no ``**kwargs``): every call that worked before, where the step accepted what it got, still works.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nvscope._core import close_matches as _close_matches  # the did-you-mean of option names, for keywords too
from nvscope._core import cut, shown

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (nvscope/_core/_record.py)
    import inspect
    from typing import Any, ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")

__all__ = ["own_keywords", "step_keywords"]


def step_keywords(tool: Callable[..., Any], step: Callable[..., Any], kwargs: Mapping[str, object]) -> None:
    """Refuse, with a `TypeError` that names ``tool``'s parameters (and the closest of them or of the step's), the
    first keyword in ``kwargs`` that ``step`` cannot take. A step whose signature Python cannot tell (a builtin, a
    C extension) takes anything: it is called as before."""
    if not kwargs:
        return
    signature = _signature(step)
    if signature is None or _takes_any_keyword(signature):
        return
    step_names = [p.name for p in signature.parameters.values() if _by_keyword(p)]
    unknown = next((k for k in kwargs if k not in step_names), None)
    if unknown is None:
        return
    import inspect

    own = [p.name for p in list(inspect.signature(tool).parameters.values())[1:] if _by_keyword(p)]
    name = tool.__name__
    message = f"{name}() got an unexpected keyword argument {shown(unknown)}"
    if close := _close_matches(unknown, own, n=1, cutoff=0.6):
        message += f"; did you mean {close[0]!r}?"
    elif close := _close_matches(unknown, step_names, n=1, cutoff=0.6):
        message += f"; did you mean the step's {close[0]!r}?"
    step_name = cut(getattr(step, "__name__", None) or type(step).__name__, 60)
    takes = cut(", ".join(step_names), 120) if step_names else "no keyword arguments"
    raise TypeError(f"{message} ({name}() takes {', '.join(own)}; other keywords go to the step, and "
                    f"{step_name}() takes {takes})")


def own_keywords(tool: Callable[P, R]) -> Callable[P, R]:
    """``tool``, whose unknown keywords fail as the other tools' do, naming its parameters and the closest: for a
    tool that passes no keyword on to a step (``nvscope.rescue``), so that ``rescue(step, sanitze=True)`` says "did you
    mean 'sanitize'?" where Python says only "unexpected keyword argument". Its signature is unchanged, for type
    checkers and `inspect` alike."""
    import functools

    @functools.wraps(tool)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        signature = _signature(tool)
        if kwargs and signature is not None and not _takes_any_keyword(signature):
            own = [p.name for p in signature.parameters.values() if _by_keyword(p)]
            unknown = next((k for k in kwargs if k not in own), None)
            if unknown is not None:
                name = tool.__name__
                message = f"{name}() got an unexpected keyword argument {shown(unknown)}"
                if close := _close_matches(unknown, own, n=1, cutoff=0.6):
                    message += f"; did you mean {close[0]!r}?"
                raise TypeError(f"{message} ({name}() takes {', '.join(own)})")
        return tool(*args, **kwargs)

    return checked


def _signature(step: Callable[..., Any]) -> inspect.Signature | None:
    import inspect

    try:
        return inspect.signature(step)
    except (TypeError, ValueError):  # no signature Python can tell
        return None


def _by_keyword(parameter: inspect.Parameter) -> bool:
    return parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)


def _takes_any_keyword(signature: inspect.Signature) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
