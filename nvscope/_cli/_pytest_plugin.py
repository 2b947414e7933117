"""pytest plugin: run tests under nvFuser options. Loaded automatically once nvscope is installed (entry point
``pytest11: nvscope``); ``-p _nvscope_pytestplugin`` loads it where nvscope is only on ``sys.path``.

What pytest registers is the top-level module ``_nvscope_pytestplugin``, which imports only pytest: its hooks call
this module's functions, and so import nvscope, only when a run uses a flag or a marker. This module holds what they
do. (``-p nvscope.pytest_plugin``, the older spelling, still works: it registers ``_nvscope_pytestplugin``.)

Per test, class or module, with a marker (arguments as for `nvscope.nv_options`)::

    pytestmark = pytest.mark.nv_options(disable=["matmul_expr_eval"])   # the whole module

    @pytest.mark.nv_options(enable=["fuse_matmul"])
    def test_matmul_codegen(): ...      # runs with fuse_matmul enabled and matmul_expr_eval disabled

For the whole run, from the command line (repeat the flag, or separate names with commas)::

    pytest --nv-enable fuse_matmul --nv-disable matmul_expr_eval
    pytest --nv-share-defaults       # every test's call under nv_options(share=True): the defaults compile once

``share=True`` in a marker shares for that test, class or module (``share=False`` ends it there).

What is scoped, and when:

* The options are active around the test function's call only (``pytest_runtest_call``), not while its fixtures
  are set up or torn down: a fixture that compiles or warms up a model does so without them. For a
  ``unittest.TestCase``, the call includes ``setUp`` and ``tearDown``.
* Markers merge: the command-line options are the outermost scope, then the module's markers, the class's (base
  classes included), the function's, each a nested `nv_options` scope. ``inherit=False`` on a marker starts from
  no options at that level (dropping the command-line options and the outer markers too).
* Names are validated early: an unknown name on the command line is a usage error before any test runs; an
  unknown name in a marker makes that test error at setup, with one line naming the test, the marker and the fix.
* A test that leaves a scope of its own open fails, naming the scope, and the next test starts clean (a test
  that failed anyway gets an `UnclosedScopeWarning` instead: its failure is the news).
* Options given on the command line turn development mode on for the whole session; a test with markers runs its
  call in development mode (restored afterwards). Either is an explicit request for developer flags, so no
  `DevelopmentModeWarning` (and no `DevelopmentModeError` under ``NVSCOPE_STRICT=1``) is raised for them.
* Scopes follow Python's contextvars: threads a test starts begin with no options (use `nvscope.bind`).

The session header says which options apply: ``nvscope: options NVFUSER_ENABLE=... (scoped around each test)`` and
the catalog that validates them, or ``nvscope: no options``. Without markers and command-line options the plugin
does nothing else and imports nothing of nvscope. Importing this module imports neither torch nor Thunder nor
nvFuser.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from nvscope._core import (
    ACTIVE,
    Frame,
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
    """The command line's scope and the development mode it replaced (now on), or None when the flags ask nothing.

    ``share`` (``--nv-share-defaults``): the scope shares the compiled definitions of the fusions it leaves at their
    own options (``nv_options(share=True)``). Alone it changes no option, so development mode is left as it is (the
    second item is then None, and not to be restored). An unknown name is a `pytest.UsageError`, with the hint in the
    flags' syntax; so is sharing asked for under ``NVSCOPE_SHARE=0``. ``on_error`` (``--nv-on-error``): the
    scope's ``on_error=``; alone it changes no option either.
    """
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
            scopes.append(_scope(mark))
        except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
            where = "" if node is item else f" (on {node.nodeid or node.name})"
            problem = f"{item.nodeid}: @pytest.mark.{_describe(mark)}{where}: {error}"
            break
    else:
        return tuple(scopes)
    # Outside the except block, so that no "during handling" traceback through nvscope's code buries the message.
    pytest.fail(problem, pytrace=False)


def _scope(mark: pytest.Mark) -> nv_options:
    args: tuple[Any, ...] = mark.args
    kwargs: dict[str, Any] = dict(mark.kwargs)
    return nv_options(*args, **kwargs)


def _describe(mark: pytest.Mark) -> str:
    """The marker as written, e.g. ``nv_options(enable=['fuse_matmu'])``, cut to a readable length."""
    arguments = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
    text = ", ".join(arguments)
    return f"{mark.name}({cut(text, 100)})"


def scoped_call(item: pytest.Item, session: nv_options | None,
                scopes: tuple[nv_options, ...]) -> Generator[None, object, object]:
    """The ``pytest_runtest_call`` wrapper's body when the test has options (the command line's, its markers' or
    both), new-style: the test's call runs at the ``yield``, inside the scopes."""
    # Markers: development mode for this call, in its context (the session's options set the process default;
    # --nv-share-defaults alone sets none).
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
            unclosed = _drop_unclosed(top)
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


def _drop_unclosed(top: Frame | None) -> list[object]:
    """The scopes the test entered above the plugin's and left open (innermost first), which are then dropped, so
    that the plugin's own scopes exit cleanly."""
    return unwind(top)


def _unclosed_message(unclosed: list[object]) -> str:
    names = ", ".join(repr(owner) for owner in unclosed)
    return (f"the test left {len(unclosed)} nvscope scope(s) open (innermost first): {names}; use `with "
            "nv_options(...):` so that every scope it enters exits (nvscope dropped them: the next test starts clean)")


def _exit(item: pytest.Item, entered: list[nv_options], session: nv_options | None,
          failed: bool) -> None:
    """Exit the scopes, innermost first; a marker's NoFusionWarning is re-issued at the test's own line.

    The core attributes the warning to the first frame outside nvscope, which here would be pluggy's. The
    command-line scope's warning is dropped: it applies to every test, including those that never use nvFuser.
    After a failed call it is dropped too: the failure is the news.
    """
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
