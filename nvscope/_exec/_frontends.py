"""nvFuser's Python frontends as nvscope needs them: one `Frontend` object each, found by `frontend_of`.

* ``nvfuser_direct`` (`DIRECT`, `nvscope._exec._direct`, with the `Frontend` base): every FusionDefinition owns its
  FusionExecutorCache, so a separate definition per option set is a compiled cache of its own (measured on the H200).
* the legacy ``nvfuser`` (`nvscope._exec._legacy`, all of its code in that one module): identical definitions share a
  global cache entry, so a partition's definitions are salted.

A frontend says how a partition gets definitions of its own (`Frontend.own_definitions`), how one runs with options
(`Frontend.execute`), and which hooks it needs while an adapter uses it (`Frontend.acquire` / `release`).

* No lock around executions: nvFuser applies per-call options by changing its process-global option state for the
  duration of the call (snapshot/restore), which is safe between threads only because its execute binding holds
  the GIL for the whole call (no ``gil_scoped_release`` in ``python/python_direct/runtime.cpp``; tested with two
  threads on the H200). `TABLE_LOCK` only makes the creation of a fusion's table happen once.
* A partition's FusionDefinition carries its options (`carry`), for the two callers that execute it without them:
  nvFuser's ``execute_with_dtensors(fd, dtensors)``, which Thunder calls for DTensor inputs and which calls
  ``fd.execute(local_tensors)`` with no options (`make_execute_with_dtensors` hands it a view whose ``execute``
  passes them), and the repro scripts nvFuser writes for it (`nvscope._exec._repro.attach`). The mark (`CARRIED`) also
  tells the direct adapter, where it is installed beside Thunder's, that the definition is scoped already.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from nvscope._core import OptionSet, UnsupportedError, _state
from nvscope._exec import _repro
from nvscope._exec._direct import DIRECT, Frontend
from nvscope._exec._fusion_table import Partition
from nvscope._exec._legacy import LEGACY

__all__ = [
    "CARRIED",
    "DIRECT",
    "FRONTENDS",
    "MIN_VERSION",
    "TABLE_LOCK",
    "THUNDER_CALLERS",
    "Frontend",
    "Partition",
    "carry",
    "check_version",
    "frontend_of",
    "make_execute_with_dtensors",
]

# The first nvFuser whose execute() takes _enable_options/_disable_options: both adapters check it.
MIN_VERSION = "0.2.23"

# Reentrant: table creation may run while a partition of another fusion is being built.
TABLE_LOCK = threading.RLock()
_state.keep(__name__, "TABLE_LOCK", "a lock")


def check_version(version: str | None) -> UnsupportedError | None:
    """The error to raise when a scope reaches a fusion, if nvFuser ``version`` takes no per-call options, else None.

    None also for an unknown or unparsable version (assumed fine).
    """
    if version is None:
        return None
    from packaging.version import InvalidVersion, Version  # here: `import nvscope` must not pay for packaging

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


# The frontend of each nvFuser Python module, by its top-level name.
FRONTENDS: Mapping[str, Frontend] = MappingProxyType({"nvfuser_direct": DIRECT, "nvfuser": LEGACY})


def frontend_of(fd_type: type) -> Frontend:
    """The frontend whose FusionDefinition class ``fd_type`` is."""
    return FRONTENDS[fd_type.__module__.partition(".")[0]]


# --- a partition's FusionDefinition carries its options ----------------------------------------------------------

# The code of the functions whose ``fd.execute`` calls run a Thunder fusion (Thunder's wrapper ``__call__``, nvFuser's
# ``execute_with_dtensors`` as Thunder calls it) while Thunder's adapter drives Thunder: those executions are Thunder's
# adapter's to scope, and the direct adapter, installed beside it, runs them as they are.
THUNDER_CALLERS: set[Any] = set()
_state.register(__name__, "THUNDER_CALLERS", THUNDER_CALLERS.clear, step="adapters")

# In the __dict__ of each FusionDefinition a Thunder partition built for an option set: its options. The direct
# adapter runs such a definition as it is (`nvscope._exec._execute.patch`): Thunder's adapter scoped it already.
CARRIED = "_nvscope_options"


def carry(fd: Any, options: OptionSet) -> None:
    """Mark ``fd`` (built by nvscope for ``options``) so that executions and repro scripts that omit them get them."""
    try:
        setattr(fd, CARRIED, options)
    except AttributeError as error:  # a frontend whose definitions take no attributes: DTensor runs would lose them
        raise UnsupportedError(
            f"nvscope cannot mark this {type(fd).__module__} FusionDefinition with its options ({error}); run it "
            "outside the scope, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process"
        ) from None
    _repro.attach(fd, options)


class _WithOptions:
    """A partition's FusionDefinition as nvFuser's ``execute_with_dtensors`` sees it: ``execute`` passes the options.

    Everything else (``fec``, which that function reads after executing) is the definition's own.
    """

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
    """nvFuser's ``execute_with_dtensors``, run with a partition's options when given a partition's definition.

    nvFuser's function is kept whole (it unwraps the DTensors, executes, and wraps the outputs by their shardings);
    only the definition it is handed changes. Thunder's own definitions carry no options and go through unchanged.
    """

    def execute_with_dtensors(fd: Any, in_dtensors: Any) -> Any:
        options = getattr(fd, CARRIED, None)
        if options is None:
            return original(fd, in_dtensors)
        return original(_WithOptions(fd, options), in_dtensors)

    return functools.update_wrapper(execute_with_dtensors, original, assigned=(), updated=())  # __wrapped__ only
