"""nvFuser's Python frontends as nvscope needs them: one `Frontend` object each, found by `frontend_of`.

* ``nvfuser_direct`` (`DIRECT`, this module): every FusionDefinition owns its FusionExecutorCache, so a separate
  definition per option set is a compiled cache of its own (measured on the H200).
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
  passes them), and the repro scripts nvFuser writes for it (`nvscope._exec._repro.attach`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

from nvscope._core._catalog import NVFUSER_MODULES
from nvscope._core._errors import UnsupportedError
from nvscope._core._optionset import OptionSet
from nvscope._exec import _repro

__all__ = [
    "DIRECT",
    "MIN_VERSION",
    "MODULES",
    "TABLE_LOCK",
    "Frontend",
    "Partition",
    "carry",
    "check_version",
    "frontend_of",
    "make_execute_with_dtensors",
]

# The first nvFuser whose execute() takes _enable_options/_disable_options: both adapters check it.
MIN_VERSION = "0.2.23"

# The frontend module names, newest first: what nvscope looks for in sys.modules (install, doctor, catalog probe).
MODULES = NVFUSER_MODULES

# Reentrant: table creation may run while a partition of another fusion is being built.
TABLE_LOCK = threading.RLock()


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


class Partition:
    """One option set's compiled cache for one fusion, with the option lists nvFuser takes (built once).

    ``runner`` is what the adapter executes: for Thunder a copy of the fusion's ``FusionDefinitionWrapper`` whose
    ``get_fd`` is an ``lru_cache`` of FusionDefinitions for this option set (see `nvscope._exec._thunder_adapter`); for
    direct users a function of ``execute``'s device argument that gives the FusionDefinition rebuilt for that device
    (and the call that runs it; `nvscope._exec._nvfuser`). ``run(args, kwargs)`` executes the fusion in this
    partition (the adapter builds it, bound to the fusion: one call on the hot path). ``error`` is set when it failed
    under ``on_error="fallback"``: the text of the failure (with nvscope's note), and later executions under a
    fallback policy go to the default directly.
    """

    __slots__ = ("disable", "enable", "error", "options", "run", "runner", "steady")

    def __init__(self, runner: Any, options: OptionSet, run: Callable[[tuple[Any, ...], dict[str, Any]], Any],
                 steady: tuple[Any, ...] | None = None) -> None:
        self.runner = runner
        self.options = options
        self.enable = options.enable_list()
        self.disable = options.disable_list()
        self.error: str | None = None
        self.run = run
        # What the adapter's inlined steady path needs to run this partition (its layout is the adapter's), or None:
        # the fusion table's steady memo holds it (`nvscope._exec._fusion_table.FusionTable.steady`). It must not
        # refer to the partition itself: a cycle would keep an evicted partition's kernels until the collector runs.
        self.steady = steady


class Frontend:
    """``nvfuser_direct``: a fresh FusionDefinition is a compiled cache of its own; no hooks needed."""

    __slots__ = ("module",)

    def __init__(self, module: str) -> None:
        self.module = module  # the Python module's name

    def __repr__(self) -> str:
        return f"<nvscope frontend {self.module}>"

    def own_definitions(self, options: OptionSet) -> AbstractContextManager[None]:
        """Definitions built on this thread inside get a compiled cache of their own for ``options``."""
        return nullcontext()

    def quiet(self) -> AbstractContextManager[None]:
        """Executions on this thread inside are partitioned (the legacy frontend drops its reset warning)."""
        return nullcontext()

    def acquire(self, module: ModuleType | None, user: str) -> None:
        """``user`` (an adapter) starts driving this frontend (``module``, if imported): install what it needs."""

    def release(self, user: str) -> None:
        """``user`` stopped: the last release removes what `acquire` installed."""

    def execute(self, call: Any, partition: Partition, *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` (an nvFuser ``execute``) with the partition's options."""
        with self.quiet():
            return call(*args, _enable_options=partition.enable, _disable_options=partition.disable, **kwargs)

    def rebuild(self, fd: Any, module: ModuleType, options: OptionSet, definition: str | None = None) -> Any:
        """A fresh FusionDefinition with ``fd``'s definition, a compiled cache of its own for ``options``.

        Built from the Python that nvFuser prints for it: both frontends print an exact definition (``repr(fd)``, the
        body of their own repro scripts). ``definition`` is ``repr(fd)`` if the caller has it.
        """
        namespace: dict[str, Any] = {}
        if definition is None:
            definition = repr(fd)
        prelude = "import torch\n" if "torch." in definition else ""  # as in nvFuser's repro scripts, when it is used
        exec(f"{prelude}from {module.__name__} import FusionDefinition, DataType\n{definition}", namespace)
        define = next((v for k, v in namespace.items() if k.startswith("nvfuser_fusion") and callable(v)), None)
        if define is None:
            raise UnsupportedError(
                f"nvscope cannot give this {module.__name__} FusionDefinition a compiled cache per option set: its "
                "printed definition has no `nvfuser_fusion...` function to rebuild it from (an nvFuser version nvscope "
                "does not know?). Run it outside the scope, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole "
                "process."
            )
        with self.own_definitions(options), module.FusionDefinition() as copy:
            define(copy)
        return copy


DIRECT = Frontend("nvfuser_direct")
# The frontends by top-level module. The legacy one adds itself when `nvscope._exec._legacy` is imported (the
# adapters import it), so that its code lives in that one module and this one does not import it back.
BY_MODULE: dict[str, Frontend] = {"nvfuser_direct": DIRECT}


def frontend_of(fd_type: type) -> Frontend:
    """The frontend whose FusionDefinition class ``fd_type`` is."""
    return BY_MODULE[fd_type.__module__.partition(".")[0]]


# --- a partition's FusionDefinition carries its options ----------------------------------------------------------

_OPTIONS = "_nvscope_options"  # in the __dict__ of each FusionDefinition nvscope built for an option set


def carry(fd: Any, options: OptionSet) -> None:
    """Mark ``fd`` (built by nvscope for ``options``) so that executions and repro scripts that omit them get them."""
    try:
        setattr(fd, _OPTIONS, options)
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
        options = getattr(fd, _OPTIONS, None)
        if options is None:
            return original(fd, in_dtensors)
        return original(_WithOptions(fd, options), in_dtensors)

    execute_with_dtensors.__wrapped__ = original  # type: ignore[attr-defined]
    return execute_with_dtensors
