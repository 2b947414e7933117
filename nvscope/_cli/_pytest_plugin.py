"""The pytest plugin's body: run each test's call under the options of the command line (``--nv-enable``,
``--nv-disable``, ``--nv-share-defaults``, ``--nv-on-error``) and of its ``nv_options`` markers, in development mode.
``_nvscope_pytestplugin`` calls into it only when a run uses a flag or a marker (docs/pytest-plugin.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Generator
from typing import TYPE_CHECKING

import pytest

from nvscope._core import (
    ACTIVE,
    NoFusionWarning,
    UnclosedScopeWarning,
    _env,
    catalog,
    cut,
    dev_mode,
    nv_options,
    set_development_mode,
    split,
    unwind,
)

if TYPE_CHECKING:
    from _pytest.nodes import Node

__all__ = ["header", "item_scopes", "scoped_call", "session_scope"]


def session_scope(enable: list[str], disable: list[str], share: bool = False,
                  on_error: str | None = None) -> tuple[nv_options, bool | None] | None:
    """The command line's scope and the development mode it replaced (now on; None when ``share`` and ``on_error``
    alone leave it as it is), or None when the flags ask nothing. A bad flag is a `pytest.UsageError`."""
    enable, disable = split(enable), split(disable)
    if not enable and not disable and not share and on_error is None:
        return None
    if share and not _env.flag("NVSCOPE_SHARE"):
        raise pytest.UsageError("--nv-share-defaults needs compile sharing, which NVSCOPE_SHARE=0 in the environment "
                                "turns off: unset NVSCOPE_SHARE, or drop --nv-share-defaults")
    if not enable and not disable:
        return nv_options(share=True if share else None, on_error=on_error), None
    try:
        known = catalog()
        for kind, names in (("enable", enable), ("disable", disable)):
            for name in names:  # first, so that a hint speaks the flags' syntax, not nv_options'
                known.check(kind, name, spelling="--nv-{kind} {name}")  # type: ignore[arg-type]
        scope = nv_options(enable, disable, share=True if share else None, on_error=on_error)
    except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
        raise pytest.UsageError(f"--nv-enable/--nv-disable: {error}") from None
    return scope, set_development_mode(True)


def header(scope: nv_options) -> list[str]:
    """The session header's lines for the command line's scope: the options and the catalog that validated them,
    and whether the defaults are shared."""
    lines = []
    if scope.options:
        lines.append(f"nvscope: options {scope.options.as_shell()} (scoped around each test)")
        try:
            lines.append(f"nvscope: {catalog().source}")
        except Exception as error:  # never break an unrelated test run over the header
            lines.append(f"nvscope: the option catalog cannot load: {error!r} (run `nvscope doctor`)")
    if scope.share:
        lines.append("nvscope: fusions at their own options share compiled definitions (--nv-share-defaults, around "
                     "each test)")
    if scope.on_error is not None:
        lines.append(f"nvscope: on_error={scope.on_error!r} around each test (--nv-on-error)")
    return lines


def item_scopes(item: pytest.Item, found: list[tuple[Node, pytest.Mark]]) -> tuple[nv_options, ...]:
    """The scopes of the item's ``nv_options`` markers (``found`` nearest first), outermost first; a bad marker
    fails the test at setup, in one line naming the test, the marker and the fix."""
    scopes = []
    for node, mark in reversed(found):
        try:
            scopes.append(nv_options(*mark.args, **mark.kwargs))
        except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
            where = "" if node is item else f" (on {node.nodeid or node.name})"
            arguments = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
            problem = f"{item.nodeid}: @pytest.mark.{mark.name}({cut(', '.join(arguments), 100)}){where}: {error}"
            break
    else:
        return tuple(scopes)
    # outside the except block: no "during handling" traceback buries the message
    pytest.fail(problem, pytrace=False)


def scoped_call(item: pytest.Item, session: nv_options | None,
                scopes: tuple[nv_options, ...]) -> Generator[None, object, object]:
    """The ``pytest_runtest_call`` wrapper's body when the test has options (the command line's, its markers' or
    both), new-style: the test's call runs at the ``yield``, inside the scopes."""
    # the session's options already set the process-wide mode; markers set it for this call's context only
    call_mode = dev_mode(True) if scopes and (session is None or not session.options) else None
    if call_mode is not None:
        call_mode.__enter__()
    base = top = ACTIVE.get()
    entered: list[nv_options] = []
    unclosed: list[object] = []
    failed = True
    try:
        for scope in (session, *scopes) if session is not None else scopes:
            scope.__enter__()
            entered.append(scope)
            top = ACTIVE.get()
        result = yield
        failed = False
    finally:
        try:
            unclosed = unwind(top)  # the scopes the test left open above the plugin's, innermost first
            _exit(item, entered, session, failed)
        except BaseException:
            unwind(base)  # whatever went wrong, the next test starts clean
            raise
        finally:
            if call_mode is not None:
                call_mode.__exit__(None, None, None)
        if unclosed and failed:
            path, lineno, _ = item.reportinfo()
            warnings.warn_explicit(_unclosed_message(unclosed), UnclosedScopeWarning, str(path), (lineno or 0) + 1)
    if unclosed:
        pytest.fail(f"{item.nodeid}: {_unclosed_message(unclosed)}", pytrace=False)
    return result


def _unclosed_message(unclosed: list[object]) -> str:
    names = ", ".join(repr(owner) for owner in unclosed)
    return (f"the test left {len(unclosed)} nvscope scope(s) open (innermost first): {names}; use `with "
            "nv_options(...):` so that every scope it enters exits (nvscope dropped them: the next test starts clean)")


def _exit(item: pytest.Item, entered: list[nv_options], session: nv_options | None,
          failed: bool) -> None:
    """Exit the scopes, innermost first; a marker's NoFusionWarning is re-issued at the test's line (the core would
    name pluggy's). The command-line scope's is dropped (it covers tests that never use nvFuser), and so is any after
    a failed call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while entered and entered[-1] is not session:
            entered.pop().__exit__(None, None, None)
    if entered:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NoFusionWarning)
            entered.pop().__exit__(None, None, None)
    path, lineno, _ = item.reportinfo()
    for warning in caught:
        if failed and issubclass(warning.category, NoFusionWarning):
            continue
        warnings.warn_explicit(warning.message, warning.category, str(path), (lineno or 0) + 1)
