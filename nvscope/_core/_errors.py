"""Every exception and warning nvscope raises, the line a warning names (`user_stacklevel`), and `once`.

Each error derives from `NvscopeError` and from the builtin a caller would expect (``ValueError`` for a bad name)."""

from __future__ import annotations

import os
import sys
import threading

from nvscope._core import _state

__all__ = [
    "ConfigWarning",
    "DevelopmentModeError",
    "DevelopmentModeWarning",
    "FallbackWarning",
    "NoEffectWarning",
    "NoFusionWarning",
    "NvscopeError",
    "NvscopeWarning",
    "SelectorError",
    "UnclosedScopeWarning",
    "UnknownOptionError",
    "UnsupportedError",
    "forget",
    "once",
    "user_stacklevel",
]


class NvscopeError(Exception):
    """Base class of nvscope's errors."""


class UnknownOptionError(NvscopeError, ValueError):
    """An option name nvFuser does not accept in that list (or not per call, or not in the installed version)."""


class UnsupportedError(NvscopeError, RuntimeError):
    """Scoped options cannot be honoured here (nvFuser too old, a Thunder nvscope does not know, ...)."""


class SelectorError(NvscopeError, TypeError):
    """A ``fusions=`` callable returned something other than True or False for a fusion."""


class DevelopmentModeError(NvscopeError, RuntimeError):
    """nvFuser developer options were activated outside development mode under ``NVSCOPE_STRICT=1``."""


class NvscopeWarning(UserWarning):
    """Base class of nvscope's warnings."""


class DevelopmentModeWarning(NvscopeWarning):
    """nvFuser developer options were activated outside development mode."""


class NoFusionWarning(NvscopeWarning):
    """A non-empty scope exited without any nvFuser fusion executing under it (development mode only)."""


class NoEffectWarning(NvscopeWarning):
    """Fusions ran under a non-empty scope, but its options could change none of them (selector, catalog gates)."""


class FallbackWarning(NvscopeWarning):
    """A fusion failed under its options and ran again with its defaults (``on_error="fallback"``)."""


class EscapeWarning(FallbackWarning):
    """nvFuser failed a Thunder fusion and nvscope ran its region in PyTorch instead (``on_error="torch"``)."""


class ConfigWarning(NvscopeWarning):
    """An ``NVSCOPE_*`` environment variable has a value nvscope does not accept; its default applies."""


class UnclosedScopeWarning(NvscopeWarning):
    """A program (or test) ended with an ``nv_options`` scope it entered still open."""


# A warning names the first frame outside these files: nvscope's, contextlib's and asyncio's.
_STDLIB = os.path.dirname(os.path.abspath(os.__file__))
_INTERNAL_FILES = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # the nvscope package
    os.path.join(_STDLIB, "contextlib.py"),
    os.path.join(_STDLIB, "asyncio") + os.sep,
)


def user_stacklevel() -> int:
    """The ``stacklevel`` that points ``warnings.warn`` (called by our caller) at the first non-nvscope frame."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL_FILES):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


_said: set[tuple[str, ...]] = set()
_said_lock = threading.Lock()
_state.keep(__name__, "_said", "what is said once per process, not once per install")
_state.keep(__name__, "_said_lock", "a lock")


def once(topic: str, *key: str) -> bool:
    """True the first time ``(topic, *key)`` comes in this process, False after: for a warning said once."""
    with _said_lock:
        if (topic, *key) in _said:
            return False
        _said.add((topic, *key))
        return True


def forget(topic: str) -> None:
    """Let ``topic``'s warnings be said again (for tests that fake an installation)."""
    with _said_lock:
        _said.difference_update([key for key in _said if key[0] == topic])
