"""nvFuser's Python frontends as nvscope needs them: one `Frontend` object each (`DIRECT`, `LEGACY`), found by
`frontend_of`. A partition's definition carries its options (`carry`) for callers that execute it without them.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from nvscope._core import OptionSet, UnsupportedError, _state
from nvscope._exec import _repro
from nvscope._exec._direct import DIRECT, Frontend
from nvscope._exec._fusion_table import Partition
from nvscope._exec._legacy import LEGACY

__all__ = ["CARRIED", "DIRECT", "MIN_VERSION", "TABLE_LOCK", "THUNDER_CALLERS", "Frontend", "Partition",
           "carry", "check_version", "frontend_of", "make_execute_with_dtensors"]

# The first nvFuser whose execute() takes _enable_options/_disable_options.
MIN_VERSION = "0.2.23"

# Reentrant: table creation may run while a partition of another fusion is being built.
TABLE_LOCK = threading.RLock()
_state.keep(__name__, "TABLE_LOCK", "a lock")


def check_version(version: str | None) -> UnsupportedError | None:
    """The error to raise when a scope reaches a fusion if nvFuser ``version`` takes no per-call options, else None."""
    if version is None:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(Version(version).base_version)
    except InvalidVersion:
        return None
    if release < Version(MIN_VERSION):
        return UnsupportedError(
            f"the installed nvFuser {version} takes no per-call options, so nv_options cannot apply; "
            f"nvscope needs nvFuser >= {MIN_VERSION} (or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process)"
        )
    return None


def frontend_of(fd_type: type) -> Frontend:
    """The frontend whose FusionDefinition class ``fd_type`` is."""
    return {"nvfuser_direct": DIRECT, "nvfuser": LEGACY}[fd_type.__module__.partition(".")[0]]


# --- a partition's FusionDefinition carries its options ----------------------------------------------------------

# The code of the functions whose ``fd.execute`` runs a Thunder fusion: the direct adapter leaves those to Thunder's.
THUNDER_CALLERS: set[Any] = set()
_state.register(__name__, "THUNDER_CALLERS", THUNDER_CALLERS.clear, step="adapters")

# The attribute holding a partition definition's options; the direct adapter runs such a definition as it is.
CARRIED = "_nvscope_options"


def carry(fd: Any, options: OptionSet) -> None:
    """Mark ``fd`` (built by nvscope for ``options``) so that executions and repro scripts that omit them get them."""
    try:
        setattr(fd, CARRIED, options)
    except AttributeError as error:
        raise UnsupportedError(
            f"nvscope cannot mark this {type(fd).__module__} FusionDefinition with its options ({error}); run it "
            "outside the scope, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process"
        ) from None
    _repro.attach(fd, options)


class _WithOptions:
    """A partition's FusionDefinition whose ``execute`` passes its options, for ``execute_with_dtensors``."""

    __slots__ = ("_disable", "_enable", "_fd")

    def __init__(self, fd: Any, options: OptionSet) -> None:
        self._fd = fd
        self._enable = options.enable_list()
        self._disable = options.disable_list()

    def execute(self, inputs: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_enable_options", self._enable)
        kwargs.setdefault("_disable_options", self._disable)
        return self._fd.execute(inputs, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fd, name)


def make_execute_with_dtensors(original: Any) -> Any:
    """nvFuser's ``execute_with_dtensors``, kept whole, handed a view that passes a partition's options."""

    def execute_with_dtensors(fd: Any, in_dtensors: Any) -> Any:
        options = getattr(fd, CARRIED, None)
        if options is None:
            return original(fd, in_dtensors)
        return original(_WithOptions(fd, options), in_dtensors)

    return functools.update_wrapper(execute_with_dtensors, original, assigned=(), updated=())
