"""Bisect: which options, on which fusions, make a step go wrong, in few runs of it. Each probe runs the step under
``nv_options(<options>, fusions=[<fusion ids>])``: the default run gives the reference and the fusion list, then a
1-minimal set of options, then of fusions (`minimize`), then the rest is probed for further culprits."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Any

from nvscope._bisect._drive import drive, items_of
from nvscope._bisect._report import BisectResult
from nvscope._core import NoEffectWarning, NoFusionWarning, dev_mode, enter_frame, nv_options, reset, shown
from nvscope._measure import TIMED, Measure, _checks, begin

__all__ = ["CHECKS", "bisect", "check_arg"]

CHECKS = ("raises", "numerics", "slower")
BISECT = tuple(k for k in TIMED if k != "warmup")  # its Measure keywords


def check_arg(check: object, flag: str | None = None) -> tuple[str, ...] | Callable[[Any], bool]:
    """``check=`` validated: the names of `CHECKS`, or the callable wrapped so that a verdict that is not a bool is
    refused (as a selector's is) rather than read by truthiness. ``flag``: the command line's name for it (the
    names, split from ``--check a,b``), for its message. Raises ValueError."""
    if callable(check):
        return _verdict(check)
    names = (check,) if isinstance(check, str) else tuple(check) if isinstance(check, Iterable) else ()
    bad = [c for c in names if c not in CHECKS]
    if not (bad or not names):
        return tuple(str(c) for c in names)
    if flag is not None:
        near = difflib.get_close_matches(str(bad[0]), CHECKS, n=1) if bad else []
        given = shown(",".join(map(str, names))) if names else "(nothing)"
        raise ValueError(f"{flag} {given}: not a check ({', '.join(CHECKS)}; several: comma-separated)"
                         + (f"; did you mean {near[0]}?" if near else ""))
    raise ValueError(f"check= takes {', '.join(map(repr, CHECKS))} (or several in a list), or a callable that "
                     f"returns True for a bad result; got {shown(check)}")


def _verdict(check: Callable[[Any], object]) -> Callable[[Any], bool]:
    """``check`` (the user's), refusing a verdict that is not a bool, as selectors do (nvscope._core._fusion)."""
    name = getattr(check, "__qualname__", None) or repr(check)

    def judged(result: Any) -> bool:
        verdict = check(result)
        if verdict is True or verdict is False:
            return verdict
        raise TypeError(f"check={name} returned {type(verdict).__name__} {shown(verdict)} for the step's result: a "
                        "check must return True or False (True: bad), e.g. bool(...) of what it computes")

    return judged


def bisect(step: Callable[..., Any], /, *args: Any, enable: Iterable[str] | str = (), disable: Iterable[str] | str = (),
           check: object = ("raises", "numerics"), slower_by: float = 0.05, measure: Measure | None = None,
           **kwargs: Any) -> BisectResult:
    """Find the options and fusions that make ``step(*args, **kwargs)`` go wrong under ``enable``/``disable``.

    ``check``: ``"raises"``, ``"numerics"``, ``"slower"``, a list of them, or a callable given the step's result that
    returns True when it is bad (docs/bisect.md). ``slower_by``: the time ratio over 1 that ``"slower"`` needs.
    ``measure`` and its keywords: as for `nvscope.search` (default: 10 rounds of at least 3 calls). Runs in development
    mode, outside the caller's scopes; no probe leaves a scope, warning filter or patch behind.
    """
    from nvscope._bisect._in_process import InProcess

    m, say = begin(bisect, step, measure, kwargs, Measure(rounds=10, steps=3), BISECT)
    checks = check_arg(check)
    given = nv_options(enable, disable).options  # validated against the catalog before anything runs
    if not given:
        raise ValueError("bisect() needs the options under which the step goes wrong: enable=[...] and/or "
                         "disable=[...]")
    slower_by = _checks.number("slower_by", slower_by)

    outside = enter_frame(None)  # the caller's scopes do not apply: the default is the defaults, a probe is its options
    try:
        with dev_mode(True), warnings.catch_warnings(), ExitStack() as stack:
            for quiet in (NoFusionWarning, NoEffectWarning):  # probes that change nothing: expected
                warnings.simplefilter("ignore", quiet)
            oracle = InProcess(step, args, kwargs, checks, slower_by, m)
            stack.enter_context(oracle.runner.sharing())
            fusions = oracle.baseline()
            say(f"the default ran {len(fusions)} fusions ({oracle.default.compiles}); bisecting "
                f"{len(items_of(given))} options over them")
            description = ("a callable's verdict on the result, or an exception" if callable(checks) else
                           " or ".join({"raises": "it raises", "numerics": "outputs/gradients over tolerance",
                                        "slower": f"slower than the default by more than {slower_by:.0%}"}[c]
                                       for c in checks))
            result = drive(given, fusions, oracle.run, say, description, default=oracle.default.compiles)
    finally:
        reset(outside)
    say(f"done: {result.line() if result.reproduced else 'not reproduced'} ({result.probes} probes)")
    return result

