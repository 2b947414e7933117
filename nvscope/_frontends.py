"""What both adapters need from nvFuser's two Python frontends, ``nvfuser_direct`` and the legacy ``nvfuser``.

* Partitions that really are separate compiled caches. ``nvfuser_direct``: every FusionDefinition owns its
  FusionExecutorCache, so a separate FD per option set is enough (measured on the H200). Legacy ``nvfuser``: one
  process-wide FusionCache deduplicates identical definitions, so a partition's definition is *salted* with one
  unused ``define_scalar(<salt>)`` that differs per option set (measured: it gets an entry of its own). nvscope never
  calls ``FusionCache.reset()``: that would drop every user's kernels, and it made the default reuse a scoped kernel.
* The legacy frontend warns "Reset the FusionCache manually..." on every execute with options. For executions
  nvscope partitioned that advice is already followed, so the warning is dropped for them only: the module's
  ``warnings`` name is replaced by a proxy that consults a thread-local flag (``warnings.catch_warnings`` mutates
  process-global state and is not thread-safe). Both adapters may rely on these hooks at once, so they are
  reference-counted by user (`acquire_legacy` / `release_legacy`) instead of either adapter asking about the other.
* No lock around executions: nvFuser applies per-call options by changing its process-global option state for the
  duration of the call (snapshot/restore), which is safe between threads only because its execute binding holds
  the GIL for the whole call (no ``gil_scoped_release`` in ``python/python_direct/runtime.cpp``; tested with two
  threads on the H200). `TABLE_LOCK` only makes the creation of a fusion's partition table happen once.
* A partition's FusionDefinition carries its options (`carry`), for the two callers that execute it without them:
  nvFuser's ``execute_with_dtensors(fd, dtensors)``, which Thunder calls for DTensor inputs and which calls
  ``fd.execute(local_tensors)`` with no options (`make_execute_with_dtensors` hands it a view whose ``execute``
  passes them), and the repro scripts nvFuser writes for it (`nvscope._repro.attach`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any

from nvscope import _patches, _repro
from nvscope._errors import UnsupportedError
from nvscope._optionset import OptionSet

__all__ = [
    "MIN_VERSION",
    "TABLE_LOCK",
    "Partition",
    "acquire_legacy",
    "carry",
    "check_version",
    "execute",
    "frontend_of",
    "make_execute_with_dtensors",
    "quiet",
    "rebuild",
    "release_legacy",
    "salt_for",
    "salted",
]

# The first nvFuser whose execute() takes _enable_options/_disable_options.
MIN_VERSION = "0.2.23"

# Reentrant: table creation may run while a partition of another fusion is being built.
TABLE_LOCK = threading.RLock()

_local = threading.local()


def check_version(version: str | None) -> None:
    """Raise `UnsupportedError` unless nvFuser ``version`` takes per-call options (None: unknown, assumed fine)."""
    if version is None:
        return
    from packaging.version import InvalidVersion, Version  # here: `import nvscope` must not pay for packaging

    try:
        release = Version(Version(version).base_version)
    except InvalidVersion:
        return
    if release < Version(MIN_VERSION):
        raise UnsupportedError(
            f"the installed nvFuser {version} takes no per-call options, so nv_options cannot apply; "
            f"nvscope needs nvFuser >= {MIN_VERSION} (or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process)"
        )


def frontend_of(fd_type: type) -> str:
    """``"direct"`` for ``nvfuser_direct`` FusionDefinitions, ``"legacy"`` for the ``nvfuser`` module's."""
    return "direct" if fd_type.__module__.partition(".")[0] == "nvfuser_direct" else "legacy"


class Partition:
    """One option set's compiled cache for one fusion, with the option lists nvFuser takes (built once).

    ``runner`` is what the adapter executes: for Thunder a copy of the fusion's ``FusionDefinitionWrapper`` whose
    ``get_fd`` is an ``lru_cache`` of FusionDefinitions for this option set (see `nvscope.thunder`); for direct users
    a fresh FusionDefinition.
    """

    __slots__ = ("disable", "enable", "options", "runner")

    def __init__(self, runner: Any, options: OptionSet) -> None:
        self.runner = runner
        self.options = options
        self.enable = options.enable_list()
        self.disable = options.disable_list()


def execute(call: Any, partition: Partition, frontend: str, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` (an nvFuser ``execute``) with the partition's options.

    On the legacy frontend its "Reset the FusionCache manually" warning is dropped: its advice is already followed.
    """
    if frontend == "legacy":
        with quiet():
            return call(*args, _enable_options=partition.enable, _disable_options=partition.disable, **kwargs)
    return call(*args, _enable_options=partition.enable, _disable_options=partition.disable, **kwargs)


def quiet() -> AbstractContextManager[None]:
    """Executions on this thread inside are partitioned: the legacy frontend's "Reset the FusionCache" is dropped."""
    return _thread_flag("quiet", True)


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


# --- legacy frontend: salted definitions and the reset warning ---------------------------------------------------

_salts: dict[OptionSet, int] = {}
_salt_lock = threading.Lock()
_SALT_BASE = 0x6E7673_0000  # "nvs": far from any scalar a real definition would use


def salt_for(options: OptionSet) -> int:
    """A process-stable integer per option set: the unused scalar that gives a legacy partition its own entry.

    Under a lock: reading ``len(_salts)`` and inserting are two steps, and ``OptionSet.__hash__`` runs Python code
    between them, so two threads could otherwise hand two option sets one salt, i.e. one shared nvFuser cache entry.
    """
    salt = _salts.get(options)
    if salt is None:
        with _salt_lock:
            salt = _salts.get(options)
            if salt is None:
                salt = _salts[options] = _SALT_BASE + len(_salts)
    return salt


@contextmanager
def _thread_flag(name: str, value: object) -> Iterator[None]:
    previous = getattr(_local, name, None)
    setattr(_local, name, value)
    try:
        yield
    finally:
        setattr(_local, name, previous)


def salted(salt: int) -> AbstractContextManager[None]:
    """Definitions finished on this thread inside get one unused ``define_scalar(salt)`` (legacy frontend)."""
    return _thread_flag("salt", salt)


class _QuietWarnings:
    """Stands in for ``warnings`` inside the legacy ``nvfuser`` module; see the module docstring."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def warn(self, message: Any, category: Any = None, stacklevel: int = 1, source: Any = None) -> None:
        if getattr(_local, "quiet", False) and str(message).startswith("Reset the FusionCache manually"):
            return
        self._real.warn(message, category, stacklevel + 1, source)


_LEGACY_OWNER = "legacy-frontend"
_legacy_users: set[str] = set()


def acquire_legacy(module: ModuleType, user: str) -> None:
    """Teach the legacy frontend to salt definitions and to stay quiet for partitioned executions, for ``user``."""
    if not _patches.active(_LEGACY_OWNER):
        fd_class = module.FusionDefinition
        original_exit = fd_class.__exit__
        int_type = module.DataType.Int

        def __exit__(self: Any, exc_type: Any, exc: Any, tb: Any) -> Any:
            salt = getattr(_local, "salt", None)
            if salt is not None and exc_type is None:
                self.define_scalar(salt, dtype=int_type)
            return original_exit(self, exc_type, exc, tb)

        __exit__.__wrapped__ = original_exit  # type: ignore[attr-defined]
        _patches.apply(_LEGACY_OWNER, fd_class, "__exit__", __exit__)
        _patches.apply(_LEGACY_OWNER, module, "warnings", _QuietWarnings(module.warnings))
    _legacy_users.add(user)


def release_legacy(user: str) -> None:
    """``user`` no longer needs the legacy hooks; the last user's release removes them."""
    _legacy_users.discard(user)
    if not _legacy_users:
        _patches.restore(_LEGACY_OWNER)


def rebuild(fd: Any, module: ModuleType, salt: int | None = None) -> Any:
    """A fresh FusionDefinition with ``fd``'s definition, built from the Python that nvFuser prints for it.

    Both frontends print an exact definition (``repr(fd)``, the body of their own repro scripts). A fresh FD has a
    compiled cache of its own on ``nvfuser_direct``; on the legacy frontend, ``salt`` makes it a separate entry of
    the global FusionCache.
    """
    namespace: dict[str, Any] = {}
    definition = repr(fd)
    prelude = "import torch\n" if "torch." in definition else ""  # as in nvFuser's repro scripts, when it is used
    exec(f"{prelude}from {module.__name__} import FusionDefinition, DataType\n{definition}", namespace)
    define = next((v for k, v in namespace.items() if k.startswith("nvfuser_fusion") and callable(v)), None)
    if define is None:
        raise UnsupportedError(
            f"nvscope cannot give this {module.__name__} FusionDefinition a compiled cache per option set: its printed "
            "definition has no `nvfuser_fusion...` function to rebuild it from (an nvFuser version nvscope does not "
            "know?). Run it outside the scope, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process."
        )
    if salt is None:
        with module.FusionDefinition() as copy:
            define(copy)
        return copy
    with salted(salt), module.FusionDefinition() as copy:
        define(copy)
    return copy
