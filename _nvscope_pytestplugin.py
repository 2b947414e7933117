"""nvscope's pytest plugin as pytest registers it (entry point ``pytest11: nvscope``): light until it is used.

It loads in every pytest run of the environment, so it imports only pytest until a hook meets an ``--nv-*`` flag or
an ``nv_options`` marker, then calls `nvscope.pytest_plugin`. A top-level module (as Hypothesis'
``_hypothesis_pytestplugin``), because importing any module of the package runs ``nvscope/__init__.py`` first.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import nvscope

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_call",
    "pytest_runtest_setup",
    "pytest_unconfigure",
]

MARKER = "nv_options"

_SESSION_SCOPE: pytest.StashKey[nvscope.nv_options] = pytest.StashKey()
_PREVIOUS_MODE: pytest.StashKey[bool | None] = pytest.StashKey()
_ITEM_SCOPES: pytest.StashKey[tuple[nvscope.nv_options, ...]] = pytest.StashKey()


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
    group.addoption("--nv-share-defaults", action="store_true", default=False, dest="nv_share_defaults",
                    help="run each test's call under nv_options(share=True): fusions at their own options share "
                         "compiled definitions (one compile per distinct definition); changes no option.")
    group.addoption("--nv-on-error", choices=("raise", "fallback", "torch"), default=None, dest="nv_on_error",
                    help="what a fusion that nvFuser fails does in each test's call (nv_options(on_error=...)): "
                         "raise, run its defaults (fallback), or run its Thunder region in PyTorch (torch)")


def pytest_configure(config: pytest.Config) -> None:
    # Registered here, as text, so that --strict-markers knows the marker in a run that never imports nvscope.
    config.addinivalue_line(
        "markers",
        f"{MARKER}(enable=[...], disable=[...], inherit=True): run the test's call under these nvFuser options "
        "(nvscope.nv_options; share=True: fusions at their own options share compiled definitions); on a function, "
        "class or module (pytestmark), merged from the module inwards",
    )
    enable: list[str] = config.getoption("nv_enable", None) or []
    disable: list[str] = config.getoption("nv_disable", None) or []
    share = bool(config.getoption("nv_share_defaults", False))
    on_error = config.getoption("nv_on_error", None)
    if not enable and not disable and not share and on_error is None:
        return
    from nvscope.pytest_plugin import session_scope  # each use of nvscope imports it here, in the hook that needs it

    session = session_scope(enable, disable, share, on_error)  # a pytest.UsageError for a bad name
    if session is not None:
        config.stash[_SESSION_SCOPE], previous = session
        if session[0].options:  # sharing alone changes no option: development mode was left alone
            config.stash[_PREVIOUS_MODE] = previous


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PREVIOUS_MODE in config.stash:  # only after session_scope, so nvscope is imported already
        import nvscope

        nvscope.set_development_mode(config.stash[_PREVIOUS_MODE])
        del config.stash[_PREVIOUS_MODE]


def pytest_report_header(config: pytest.Config) -> list[str]:
    scope = config.stash.get(_SESSION_SCOPE, None)
    if scope is None:
        return ["nvscope: no options"]  # markers may still give some
    from nvscope.pytest_plugin import header

    return header(scope)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Validate the item's markers before its fixtures are set up: a bad name errors the test here, in one line."""
    found = list(item.iter_markers_with_node(MARKER))  # nearest first: function, class(es), module
    if found:
        from nvscope.pytest_plugin import item_scopes

        item.stash[_ITEM_SCOPES] = item_scopes(item, found)


def _call(item: pytest.Item) -> Generator[None, object, object]:
    """The body of the ``pytest_runtest_call`` wrapper, new-style: the test's call runs at the ``yield``."""
    session = item.config.stash.get(_SESSION_SCOPE, None)
    scopes = item.stash.get(_ITEM_SCOPES, ())
    if session is None and not scopes:
        return (yield)
    from nvscope.pytest_plugin import scoped_call

    return (yield from scoped_call(item, session, scopes))


if _new_style_wrappers():
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
        return (yield from _call(item))
else:  # pluggy < 1.2 (pytest 7 with an old pluggy): the same body, driven as an old-style hookwrapper
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
        body = _call(item)
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
