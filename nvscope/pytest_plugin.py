"""pytest plugin: run tests under nvFuser options. Loaded automatically once nvscope is installed (entry point
``pytest11: nvscope``); ``-p nvscope.pytest_plugin`` loads it where nvscope is only on ``sys.path``.

Per test, class or module, with a marker (arguments as for `nvscope.nv_options`)::

    pytestmark = pytest.mark.nv_options(disable=["matmul_expr_eval"])   # the whole module

    @pytest.mark.nv_options(enable=["fuse_matmul"])
    def test_matmul_codegen(): ...      # runs with fuse_matmul enabled and matmul_expr_eval disabled

For the whole run, from the command line (repeat the flag, or separate names with commas)::

    pytest --nv-enable fuse_matmul --nv-disable matmul_expr_eval

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

The session header says which options apply (``nvscope: options NVFUSER_ENABLE=... (scoped around each test)`` or
``nvscope: no options``) and which catalog validates them. Without markers and command-line options the plugin
does nothing else. Importing it imports neither torch nor Thunder nor nvFuser.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator, Sequence
from typing import Any

import pytest

import nvscope
from nvscope._errors import NoFusionWarning, UnclosedScopeWarning
from nvscope._scope import ACTIVE, Frame, unwind

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_call",
    "pytest_runtest_setup",
    "pytest_unconfigure",
]

MARKER = "nv_options"

_SESSION_SCOPE = pytest.StashKey[nvscope.nv_options]()
_PREVIOUS_MODE = pytest.StashKey["bool | None"]()
_ITEM_SCOPES = pytest.StashKey["tuple[nvscope.nv_options, ...]"]()


def _names(values: Sequence[str] | None) -> list[str]:
    """``["a,b", "c d"]`` -> ``["a", "b", "c", "d"]``: commas or spaces separate names (empty items dropped)."""
    return [name for value in values or () for name in value.replace(",", " ").split()]


def _new_style_wrappers() -> bool:
    """Whether this pluggy takes ``hookimpl(wrapper=True)`` (pluggy >= 1.2, so every pytest >= 8)."""
    try:
        pytest.hookimpl(wrapper=True)
    except TypeError:
        return False
    return True


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nvscope", "nvscope: scoped nvFuser developer options")
    group.addoption("--nv-enable", action="append", default=[], dest="nv_enable", metavar="NAME[,NAME...]",
                    help="run each test's call with this nvFuser enable option (repeatable; comma-separated names). "
                         "`nvscope options --enable` lists them.")
    group.addoption("--nv-disable", action="append", default=[], dest="nv_disable", metavar="NAME[,NAME...]",
                    help="run each test's call with this nvFuser disable option (repeatable; comma-separated names). "
                         "`nvscope options --disable` lists them.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(enable=[...], disable=[...], inherit=True): run the test's call under these nvFuser options "
        "(nvscope.nv_options); on a function, class or module (pytestmark), merged from the module inwards",
    )
    enable = _names(config.getoption("nv_enable", None))
    disable = _names(config.getoption("nv_disable", None))
    if not enable and not disable:
        return
    try:
        known = nvscope.catalog()
        for kind, names in (("enable", enable), ("disable", disable)):
            for name in names:  # first, so that a hint speaks the flags' syntax, not nv_options'
                known.check(kind, name, spelling="--nv-{kind} {name}")  # type: ignore[arg-type]
        scope = nvscope.nv_options(enable, disable)
    except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
        raise pytest.UsageError(f"--nv-enable/--nv-disable: {error}") from None
    config.stash[_SESSION_SCOPE] = scope
    config.stash[_PREVIOUS_MODE] = nvscope.set_development_mode(True)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PREVIOUS_MODE in config.stash:
        nvscope.set_development_mode(config.stash[_PREVIOUS_MODE])
        del config.stash[_PREVIOUS_MODE]


def pytest_report_header(config: pytest.Config) -> list[str]:
    scope = config.stash.get(_SESSION_SCOPE, None)
    if scope is None:
        lines = ["nvscope: no options"]
    else:
        lines = [f"nvscope: options {scope.options.as_shell()} (scoped around each test)"]
    try:
        lines.append(f"nvscope: {nvscope.catalog().source}")
    except Exception as error:  # never break an unrelated test run over the header
        lines.append(f"nvscope: the option catalog cannot load: {error!r} (run `nvscope doctor`)")
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Validate the item's markers before its fixtures are set up: a bad name errors the test here, in one line."""
    found = list(item.iter_markers_with_node(MARKER))  # nearest first: function, class(es), module
    if not found:
        return
    scopes = []
    for node, mark in reversed(found):
        try:
            scopes.append(_scope(mark))
        except (ValueError, TypeError) as error:  # UnknownOptionError is a ValueError
            where = "" if node is item else f" (on {node.nodeid or node.name})"
            problem = f"{item.nodeid}: @pytest.mark.{_describe(mark)}{where}: {error}"
            break
    else:
        item.stash[_ITEM_SCOPES] = tuple(scopes)
        return
    # Outside the except block, so that no "during handling" traceback through nvscope's code buries the message.
    pytest.fail(problem, pytrace=False)


def _scope(mark: pytest.Mark) -> nvscope.nv_options:
    args: tuple[Any, ...] = mark.args
    kwargs: dict[str, Any] = dict(mark.kwargs)
    return nvscope.nv_options(*args, **kwargs)


def _describe(mark: pytest.Mark) -> str:
    """The marker as written, e.g. ``nv_options(enable=['fuse_matmu'])``, cut to a readable length."""
    arguments = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
    text = ", ".join(arguments)
    return f"{mark.name}({text if len(text) <= 100 else text[:97] + '...'})"


def _scoped_call(item: pytest.Item) -> Generator[None, object, object]:
    """The body of the ``pytest_runtest_call`` wrapper, new-style: the test's call runs at the ``yield``."""
    session = item.config.stash.get(_SESSION_SCOPE, None)
    scopes = item.stash.get(_ITEM_SCOPES, ())
    if session is None and not scopes:
        return (yield)
    previous_mode = nvscope.set_development_mode(True) if session is None else None  # markers only: for this call
    base = top = ACTIVE.get()
    entered: list[nvscope.nv_options] = []
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
            if session is None:
                nvscope.set_development_mode(previous_mode)
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


if _new_style_wrappers():
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
        return (yield from _scoped_call(item))
else:  # pluggy < 1.2 (pytest 7 with an old pluggy): the same body, driven as an old-style hookwrapper
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
        body = _scoped_call(item)
        next(body)
        outcome = yield
        try:
            if outcome.excinfo is None:
                body.send(None)
            else:
                body.throw(outcome.excinfo[1])
        except StopIteration:
            return
        except BaseException as error:
            if outcome.excinfo is not None and error is outcome.excinfo[1]:
                return  # the test's own failure, already its outcome
            raise


def _exit(item: pytest.Item, entered: list[nvscope.nv_options], session: nvscope.nv_options | None,
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
