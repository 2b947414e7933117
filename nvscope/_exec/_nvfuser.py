"""Adapter for direct nvFuser users (no Thunder): ``FusionDefinition.execute`` honours the active scope.

    import nvfuser_direct, nvscope.nvfuser
    nvscope.nvfuser.install()
    with nvscope.nv_options(enable=["fuse_matmul"]):
        fd.execute(inputs)      # runs a FusionDefinition rebuilt for this option set, with the options

Opt-in, so that Thunder, whose adapter already partitions, keeps a single hook on its hot path. Inside a scope the
effective options are those passed to ``execute`` laid under the scope (`nvscope._core._policy`); each option set gets a
FusionDefinition of its own, rebuilt from the definition nvFuser prints (salted on the legacy frontend). Each
definition is a fusion ``call/FusionDefinition#<n>`` (numbered in the order nvscope first sees them), with the ops of
its printed definition. The execution itself is nvscope's one path (`nvscope._exec._execute`), as for Thunder.
"""

from __future__ import annotations

import itertools
import sys
from types import ModuleType
from typing import Any

from nvscope._core import _patches
from nvscope._core._errors import UnsupportedError
from nvscope._core._fusion import FusionInfo, claim, ops_of_definition
from nvscope._core._optionset import OptionSet
from nvscope._core._scope import ACTIVE
from nvscope._exec import (
    _events,
    _frontends,
    _legacy,  # noqa: F401  (adds the legacy frontend to _frontends.BY_MODULE)
    _repro,
    _shared,
)
from nvscope._exec._execute import Adapter, execute
from nvscope._exec._fusion_table import FusionTable

__all__ = ["UnsupportedError", "frontends", "install", "installed", "uninstall"]

_TABLE = "_nvscope_partitions"  # in each FusionDefinition's __dict__
_OPTION_KWARGS = ("_enable_options", "_disable_options")
_option_sets: dict[tuple[tuple[str, ...], tuple[str, ...]], OptionSet] = {}
_numbers = itertools.count()


def _passed_options(kwargs: dict[str, Any]) -> OptionSet:
    """The options passed to ``execute``, as one interned OptionSet per distinct pair of lists (a memo key)."""
    key = (tuple(kwargs.get("_enable_options") or ()), tuple(kwargs.get("_disable_options") or ()))
    options = _option_sets.get(key)
    if options is None:
        if len(_option_sets) > 1024:
            _option_sets.clear()
        options = _option_sets[key] = OptionSet(*key)
    return options


def _version(module: ModuleType) -> str | None:
    version = getattr(module, "version", None)
    try:
        raw = version() if callable(version) else getattr(module, "__version__", None)
    except Exception:
        return None
    return None if raw is None else str(raw)


class FrontendAdapter(Adapter):
    """One frontend module's ``FusionDefinition.execute``."""

    given_as = "passed to execute"

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.original = module.FusionDefinition.execute
        self.frontend = _frontends.frontend_of(module.FusionDefinition)
        self.version_error = _frontends.check_version(_version(module))

    def patched_execute(self) -> Any:
        original = self.original
        sinks = _events.SINKS
        get_active = ACTIVE.get

        def execute_(fd: Any, *args: Any, **kwargs: Any) -> Any:
            frame = get_active()
            if (frame is None or frame.policy is None) and not sinks:  # no lock: execute holds the GIL
                return original(fd, *args, **kwargs)
            return execute(self, fd, frame, args, kwargs)

        execute_.__wrapped__ = original  # type: ignore[attr-defined]
        execute_.__name__ = "execute"
        return execute_

    def lookup(self, fusion: Any) -> FusionTable[_frontends.Partition] | None:
        return fusion.__dict__.get(_TABLE)  # type: ignore[no-any-return]

    def attach(self, fusion: Any, table: FusionTable[_frontends.Partition]) -> None:
        fusion.__dict__[_TABLE] = table

    def identify(self, fusion: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> FusionInfo:
        try:
            ops: tuple[str, ...] | None = ops_of_definition(repr(fusion))
        except Exception:
            ops = None
        return claim(f"{type(fusion).__name__}#{next(_numbers)}", "call", ops, None)

    def static(self, fusion: Any, kwargs: dict[str, Any]) -> OptionSet:
        return _passed_options(kwargs)

    def build(self, fusion: Any, info: FusionInfo, options: OptionSet) -> _frontends.Partition:
        execute_with, original = self.frontend.execute, self.original
        if self.frontend is _frontends.DIRECT and _shared.enabled():
            # An equal definition another fusion compiled for these options runs instead of a new copy
            # (nvscope._exec._shared); the legacy frontend's salted copies share nvFuser's global cache entry by
            # themselves.
            definition = repr(fusion)
            runner = self.frontend.rebuild(fusion, self.module, options, definition)
            try:
                runner = _shared.adopt(runner, options, info.id, definition)[0]
            except _shared.SharedFailure as known:
                entry = known.entry
                runner = entry.fd

                def fail(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                    raise _shared.SharedFailure(entry)  # a fresh one each time: notes and tracebacks accumulate

                return _frontends.Partition(runner, options, fail)
        else:
            runner = self.frontend.rebuild(fusion, self.module, options)

        def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            rest = {k: v for k, v in kwargs.items() if k not in _OPTION_KWARGS}
            return execute_with(original, partition, runner, *args, **rest)

        partition = _frontends.Partition(runner, options, run)
        return partition

    def default(self, fusion: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.original(fusion, *args, **kwargs)

    def script(self, fusion: Any, partition: _frontends.Partition, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> str:
        runner = partition.runner
        inputs = list(args[0]) if args else list(kwargs.get("inputs", ()))
        return _repro.with_options(type(runner).repro_script_for(runner, inputs), partition.options)

    describe = "nvFuser"


_adapters: dict[str, FrontendAdapter] = {}


def install() -> bool:
    """Make ``FusionDefinition.execute`` of every imported nvFuser frontend honour the active scope. Idempotent.

    Returns whether at least one frontend is patched now (`frontends` says which). Import nvFuser first: this imports
    nothing.
    """
    for name in _frontends.MODULES:
        module = sys.modules.get(name)
        if module is None or not hasattr(module, "FusionDefinition") or _patches.active(name):
            continue
        adapter = FrontendAdapter(module)
        adapter.frontend.acquire(module, name)
        _patches.apply(name, module.FusionDefinition, "execute", adapter.patched_execute(), on_demand=True)
        _adapters[name] = adapter
    return installed()


def uninstall() -> bool:
    """Restore every patched ``FusionDefinition.execute`` exactly. Idempotent; returns whether anything was restored."""
    restored = False
    for name in _frontends.MODULES:
        restored = _patches.restore(name) or restored
        adapter = _adapters.pop(name, None)
        if adapter is not None:
            adapter.frontend.release(name)
    _shared.clear()
    return restored


def installed() -> bool:
    """Whether any nvFuser frontend's ``execute`` is patched."""
    return bool(frontends())


def frontends() -> list[str]:
    """The names of the frontend modules whose ``execute`` is patched now, sorted."""
    return sorted(name for name in _frontends.MODULES if _patches.active(name))
