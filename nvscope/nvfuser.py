"""Adapter for direct nvFuser users (no Thunder): ``FusionDefinition.execute`` honours the active scope.

    import nvfuser_direct, nvscope.nvfuser
    nvscope.nvfuser.install()
    with nvscope.nv_options(enable=["fuse_matmul"]):
        fd.execute(inputs)      # runs a FusionDefinition rebuilt for this option set, with the options

Opt-in, so that Thunder, whose adapter already partitions, keeps a single hook on its hot path. Inside a scope the
effective options are those passed to ``execute`` | the scope; each option set gets a FusionDefinition of its own,
rebuilt from the definition nvFuser prints (salted on the legacy frontend; see `nvscope._frontends`).
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any

from nvscope import _events, _frontends, _patches, _repro
from nvscope._errors import NvscopeError, UnsupportedError
from nvscope._optionset import OptionSet
from nvscope._partitions import Partitions
from nvscope._scope import ACTIVE

__all__ = ["UnsupportedError", "frontends", "install", "installed", "uninstall"]

_FRONTENDS = ("nvfuser_direct", "nvfuser")
_TABLE = "_nvscope_partitions"  # in each FusionDefinition's __dict__

_option_sets: dict[tuple[tuple[str, ...], tuple[str, ...]], OptionSet] = {}


def _passed_options(kwargs: dict[str, Any]) -> OptionSet:
    key = (tuple(kwargs.get("_enable_options") or ()), tuple(kwargs.get("_disable_options") or ()))
    options = _option_sets.get(key)
    if options is None:
        if len(_option_sets) > 1024:
            _option_sets.clear()
        options = _option_sets[key] = OptionSet(*key)
    return options


def _make_execute(module: ModuleType, original: Any) -> Any:
    frontend = _frontends.frontend_of(module.FusionDefinition)

    def build(fd: Any) -> Any:
        def make(options: OptionSet) -> _frontends.Partition:
            salt = _frontends.salt_for(options) if frontend == "legacy" else None
            return _frontends.Partition(_frontends.rebuild(fd, module, salt), options)
        return make

    def execute(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        frame = ACTIVE.get()
        if frame is None or frame.options is None:  # no lock needed: execute holds the GIL (see _frontends)
            return original(self, inputs, *args, **kwargs)
        frame.ran = True
        passed = _passed_options(kwargs)
        effective = passed.union(frame.options)
        if effective is passed:
            return original(self, inputs, *args, **kwargs)
        table = self.__dict__.get(_TABLE)
        if table is None:
            with _frontends.TABLE_LOCK:  # two threads' first scoped calls must share one table
                table = self.__dict__.get(_TABLE)
                if table is None:
                    table = self.__dict__[_TABLE] = Partitions(passed, build(self))
        partition, new = table.get(effective)
        if _events.SINKS:
            _events.emit(_events.FusionRecord(type(self).__name__, effective, "new" if new else "reused",
                                              threading.current_thread().name, _events.PHASE.get(), frontend))
        rest = {k: v for k, v in kwargs.items() if k not in ("_enable_options", "_disable_options")}
        runner = partition.runner
        try:
            return _frontends.execute(original, partition, frontend, runner, inputs, *args, **rest)
        except NvscopeError:
            raise
        except Exception as error:  # the same note as a Thunder fusion's: the options, and a repro that has them
            def script() -> str:
                return _repro.with_options(type(runner).repro_script_for(runner, list(inputs)), effective)

            _repro.annotate(error, f"nvFuser {type(self).__name__}", _events.PHASE.get(), passed, frame.options,
                            effective, script, given_as="passed to execute")
            raise

    execute.__wrapped__ = original  # type: ignore[attr-defined]
    return execute


def install() -> bool:
    """Make ``FusionDefinition.execute`` of every imported nvFuser frontend honour the active scope. Idempotent.

    Returns whether at least one frontend is patched now (`frontends` says which). Import nvFuser first: this imports
    nothing.
    """
    for name in _FRONTENDS:
        module = sys.modules.get(name)
        if module is None or not hasattr(module, "FusionDefinition") or _patches.active(name):
            continue
        fd_class = module.FusionDefinition
        if _frontends.frontend_of(fd_class) == "legacy":
            _frontends.acquire_legacy(module, name)
        _patches.apply(name, fd_class, "execute", _make_execute(module, fd_class.execute))
    return installed()


def uninstall() -> bool:
    """Restore every patched ``FusionDefinition.execute`` exactly. Idempotent; returns whether anything was restored."""
    restored = False
    for name in _FRONTENDS:
        restored = _patches.restore(name) or restored
        _frontends.release_legacy(name)
    return restored


def installed() -> bool:
    """Whether any nvFuser frontend's ``execute`` is patched."""
    return bool(frontends())


def frontends() -> list[str]:
    """The names of the frontend modules whose ``execute`` is patched now, sorted."""
    return sorted(name for name in _FRONTENDS if _patches.active(name))
