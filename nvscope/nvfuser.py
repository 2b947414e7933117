"""Executor adapter for nvFuser's two Python frontends: ``nvfuser_direct`` and the legacy ``nvfuser``.

What every adapter needs from here:

* `EXEC_LOCK`. nvFuser applies per-call options by changing its process-global option state for the duration of
  the call (snapshot/restore). That is safe between threads only because its execute binding holds the GIL for
  the whole call (no ``gil_scoped_release`` in ``python/python_direct/runtime.cpp``; tested with two threads on the
  H200), so executions never overlap and nvscope adds no lock around them. This lock only makes the creation of a
  fusion's partition table happen once; each table has its own lock for building partitions.
* Partitions that really are separate compiled caches. ``nvfuser_direct``: every FusionDefinition owns its
  FusionExecutorCache, so a separate FD (or FEC) per option set is enough (measured). Legacy ``nvfuser``: one
  process-wide FusionCache deduplicates identical definitions, so a partition's definition is *salted* with one
  unused ``define_scalar(<salt>)`` that differs per option set (measured: it gets an entry of its own). nvscope never
  calls ``FusionCache.reset()``: that would drop every user's kernels, and it made the default reuse a scoped kernel.
* The legacy frontend warns "Reset the FusionCache manually..." on every execute with options. For executions
  nvscope partitioned that advice is already followed, so the warning is dropped for them only: the module's
  ``warnings`` name is replaced by a proxy that consults a thread-local flag (``warnings.catch_warnings`` mutates
  process-global state and is not thread-safe).

Direct users (no Thunder) opt in with `install()`: ``FusionDefinition.execute`` then honours the active scope with
the same per-set partitioning. It is opt-in so that Thunder, whose adapter already partitions, keeps a single hook
on its hot path.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any

from packaging.version import Version

from nvscope import events
from nvscope.optionset import OptionSet
from nvscope.partitions import Partitions
from nvscope.scope import ACTIVE

__all__ = [
    "EXEC_LOCK",
    "MIN_VERSION",
    "UnsupportedError",
    "check_version",
    "frontend_of",
    "install",
    "installed",
    "salt_for",
    "uninstall",
]

# The first nvFuser whose execute() takes _enable_options/_disable_options.
MIN_VERSION = Version("0.2.23")

# Reentrant, to be safe: table creation may run while a partition of another fusion is being built.
EXEC_LOCK = threading.RLock()

_local = threading.local()


class UnsupportedError(RuntimeError):
    """Scoped options cannot be honoured here (nvFuser too old, or a code path nvscope does not partition)."""


def check_version(version: Version | None) -> None:
    """Raise `UnsupportedError` unless ``version`` takes per-call options."""
    if version is not None and Version(version.base_version) < MIN_VERSION:
        raise UnsupportedError(
            f"the installed nvFuser {version} takes no per-call options, so nv_options cannot apply; "
            f"nvscope needs nvFuser >= {MIN_VERSION} (or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process)"
        )


def frontend_of(fd_type: type) -> str:
    """``"direct"`` for ``nvfuser_direct`` FusionDefinitions, ``"legacy"`` for the ``nvfuser`` module's."""
    return "direct" if fd_type.__module__.partition(".")[0] == "nvfuser_direct" else "legacy"


# --- legacy frontend: salted definitions and the reset warning ---------------------------------------------------

_salts: dict[OptionSet, int] = {}
_SALT_BASE = 0x6E7673_0000  # "nvs": far from any scalar a real definition would use


def salt_for(options: OptionSet) -> int:
    """A process-stable integer per option set: the unused scalar that gives a legacy partition its own entry."""
    salt = _salts.get(options)
    if salt is None:
        salt = _salts.setdefault(options, _SALT_BASE + len(_salts))
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


def quiet_reset_warning() -> AbstractContextManager[None]:
    """Drop the legacy "Reset the FusionCache manually" warning for executions on this thread inside."""
    return _thread_flag("quiet", True)


class _QuietWarnings:
    """Stands in for ``warnings`` inside the legacy ``nvfuser`` module; see `quiet_reset_warning`."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def warn(self, message: Any, category: Any = None, stacklevel: int = 1, source: Any = None) -> None:
        if getattr(_local, "quiet", False) and str(message).startswith("Reset the FusionCache manually"):
            return
        self._real.warn(message, category, stacklevel + 1, source)


_legacy_state: dict[str, Any] = {}


def install_legacy_hooks(module: ModuleType) -> None:
    """Teach the legacy frontend to salt definitions and to stay quiet for partitioned executions. Idempotent."""
    if _legacy_state.get("module") is module:
        return
    fd_class = module.FusionDefinition
    original_exit = fd_class.__exit__
    int_type = module.DataType.Int

    def __exit__(self: Any, exc_type: Any, exc: Any, tb: Any) -> Any:
        salt = getattr(_local, "salt", None)
        if salt is not None and exc_type is None:
            self.define_scalar(salt, dtype=int_type)
        return original_exit(self, exc_type, exc, tb)

    fd_class.__exit__ = __exit__
    real_warnings = module.warnings
    module.warnings = _QuietWarnings(real_warnings)  # type: ignore[attr-defined]
    _legacy_state.update(module=module, exit=original_exit, warnings=real_warnings)


def uninstall_legacy_hooks() -> None:
    module = _legacy_state.pop("module", None)
    if module is not None:
        module.FusionDefinition.__exit__ = _legacy_state.pop("exit")
        module.warnings = _legacy_state.pop("warnings")


def rebuild(fd: Any, module: ModuleType, salt: int | None = None) -> Any:
    """A fresh FusionDefinition with ``fd``'s definition, built from the Python that nvFuser prints for it.

    Both frontends print an exact definition (``repr(fd)``, the body of their own repro scripts). A fresh FD has a
    compiled cache of its own on ``nvfuser_direct``; on the legacy frontend, ``salt`` makes it a separate entry of
    the global FusionCache.
    """
    namespace: dict[str, Any] = {}
    source = f"import torch\nfrom {module.__name__} import FusionDefinition, DataType\n{fd!r}"
    exec(source, namespace)
    define = next(v for k, v in namespace.items() if k.startswith("nvfuser_fusion") and callable(v))
    if salt is None:
        with module.FusionDefinition() as copy:
            define(copy)
        return copy
    with salted(salt), module.FusionDefinition() as copy:
        define(copy)
    return copy


# --- direct users: an opt-in patch of FusionDefinition.execute ----------------------------------------------------

class _Partition:
    __slots__ = ("disable", "enable", "runner")

    def __init__(self, runner: Any, options: OptionSet) -> None:
        self.runner = runner  # a fresh FusionDefinition (salted on the legacy frontend)
        self.enable = options.enable_list()
        self.disable = options.disable_list()


_option_sets: dict[tuple[tuple[str, ...], tuple[str, ...]], OptionSet] = {}


def _passed_options(kwargs: dict[str, Any]) -> OptionSet:
    key = (tuple(kwargs.get("_enable_options") or ()), tuple(kwargs.get("_disable_options") or ()))
    options = _option_sets.get(key)
    if options is None:
        if len(_option_sets) > 1024:
            _option_sets.clear()
        options = _option_sets[key] = OptionSet(*key)
    return options


_patched: dict[ModuleType, Any] = {}


def _patch(module: ModuleType) -> None:
    fd_class = module.FusionDefinition
    original = fd_class.execute
    frontend = frontend_of(fd_class)
    if frontend == "legacy":
        install_legacy_hooks(module)

    def build(fd: Any) -> Any:
        def make(options: OptionSet) -> _Partition:
            salt = salt_for(options) if frontend == "legacy" else None
            return _Partition(rebuild(fd, module, salt), options)
        return make

    def execute(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        frame = ACTIVE.get()
        if frame is None or frame.options is None:  # no lock needed: execute holds the GIL (see EXEC_LOCK)
            return original(self, inputs, *args, **kwargs)
        frame.ran = True
        passed = _passed_options(kwargs)
        effective = passed.union(frame.options)
        if effective is passed:
            return original(self, inputs, *args, **kwargs)
        table = self.__dict__.get("_nvscope_partitions")
        if table is None:
            with EXEC_LOCK:  # two threads' first scoped calls must share one table
                table = self.__dict__.get("_nvscope_partitions")
                if table is None:
                    table = self.__dict__["_nvscope_partitions"] = Partitions(passed, build(self))
        partition, new = table.get(effective)
        if events.SINKS:
            events.emit(events.FusionRecord(type(self).__name__, effective, "new" if new else "reused",
                                            threading.current_thread().name, events.PHASE.get(), frontend))
        rest = {k: v for k, v in kwargs.items() if k not in ("_enable_options", "_disable_options")}
        with quiet_reset_warning():
            return original(partition.runner, inputs, *args, _enable_options=partition.enable,
                            _disable_options=partition.disable, **rest)

    execute.__wrapped__ = original  # type: ignore[attr-defined]
    fd_class.execute = execute
    _patched[module] = original
    events.ADAPTERS.add(module.__name__)


def install() -> list[str]:
    """Make ``FusionDefinition.execute`` of every imported nvFuser frontend honour the active scope. Idempotent.

    Returns the names of the frontends patched now or before. Import nvFuser first: this imports nothing.
    """
    for name in ("nvfuser_direct", "nvfuser"):
        module = sys.modules.get(name)
        if module is not None and module not in _patched and hasattr(module, "FusionDefinition"):
            _patch(module)
    return sorted(m.__name__ for m in _patched)


def uninstall() -> None:
    """Restore every patched ``FusionDefinition.execute`` exactly. Idempotent."""
    for module, original in list(_patched.items()):
        module.FusionDefinition.execute = original
        del _patched[module]
        events.ADAPTERS.discard(module.__name__)
        if module is _legacy_state.get("module") and not _thunder_uses_legacy():
            uninstall_legacy_hooks()


def installed() -> list[str]:
    return sorted(m.__name__ for m in _patched)


def _thunder_uses_legacy() -> bool:
    thunder_adapter = sys.modules.get("nvscope.thunder")
    # Thunder on nvfuser_direct does not use the legacy hooks: it must not keep them alive.
    return bool(thunder_adapter and thunder_adapter.installed() and thunder_adapter._state.get("frontend") == "legacy")
