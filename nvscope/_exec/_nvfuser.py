"""Adapter for direct nvFuser users (no Thunder): ``FusionDefinition.execute`` honours the active scope, running a
FusionDefinition rebuilt per option set. Opt-in, so that Thunder's adapter keeps a single hook on its hot path.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from nvscope._core import (
    NVFUSER_MODULES,
    FusionInfo,
    OptionSet,
    UnsupportedError,
    _patches,
    _state,
    definition_digest,
    file_of,
    identify,
    ops_of_definition,
    program_module,
    site_of,
)
from nvscope._exec import _frontends, _shared
from nvscope._exec._adapter import INSTALLED, TABLE_ATTRIBUTE, Adapter
from nvscope._exec._execute import direct_call_wrapper

__all__ = ["UnsupportedError", "frontends", "install", "installed", "uninstall"]

def _device(device: Any) -> object:
    """``execute``'s device argument as a key: the GPU index where it names one, else as given."""
    if device is None or isinstance(device, int):
        return device
    index = getattr(device, "index", None)
    if isinstance(index, int):
        return index
    kind, _, number = str(device).partition(":")
    return int(number) if kind == "cuda" and number.isdigit() else str(device)


def _version(module: ModuleType) -> str | None:
    version = getattr(module, "version", None)
    try:
        raw = version() if callable(version) else getattr(module, "__version__", None)
    except Exception:
        return None
    return None if raw is None else str(raw)


def _site(fusion: Any) -> tuple[str | None, str]:
    """``(site, function)``: the site is a subclass's ``<module>:<qualname>``, else None (a plain definition's id is
    its digest alone); the function is the first caller outside nvscope and nvFuser, shown in listings only."""
    cls = type(fusion)
    site = None
    if cls.__module__.partition(".")[0] not in _SKIPPED:
        site = site_of(cls.__module__, cls.__qualname__, file_of(cls))
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if module.partition(".")[0] not in _SKIPPED:
            code = frame.f_code
            if code.co_name == "<module>":
                return site, program_module(module, code.co_filename)
            return site, site_of(module, getattr(code, "co_qualname", code.co_name), code.co_filename)
        frame = frame.f_back  # type: ignore[assignment]
    return site, program_module(None)


_SKIPPED = frozenset(("nvscope", *NVFUSER_MODULES))


Definition = Any  # a frontend's FusionDefinition (nvFuser is optional)


class FrontendAdapter(Adapter[Definition]):
    """One frontend module's ``FusionDefinition.execute``."""

    given_as = "passed to execute"

    def __init__(self, module: ModuleType) -> None:
        super().__init__()
        self.module = module
        self.owner = module.__name__
        self._option_sets: dict[tuple[tuple[str, ...], tuple[str, ...]], OptionSet] = {}
        self.original = module.FusionDefinition.execute
        self.watched()  # sets `calls`: nvFuser's execute, or a watch's wrapper
        self.frontend = _frontends.frontend_of(module.FusionDefinition)
        self.version_error = _frontends.check_version(_version(module))
        self.table_of = operator.attrgetter(TABLE_ATTRIBUTE)

    def watched(self) -> None:
        """Take up the innermost watch of `watch_execute`, or nvFuser's execute when none is left."""
        watches = INSTALLED.watches
        self.calls = watches[-1](self.original) if watches else self.original

    def install(self) -> None:
        self.frontend.acquire(self.module, self.owner)
        # Beside Thunder's adapter, a Thunder partition's definition is that adapter's: run as it asks.
        _patches.apply(self.owner, self.module.FusionDefinition, "execute",
                       direct_call_wrapper(self, self.original, _frontends.CARRIED), on_demand=True)

    def passed_options(self, kwargs: dict[str, Any]) -> OptionSet:
        """The options passed to ``execute``, interned."""
        key = (tuple(kwargs.get("_enable_options") or ()), tuple(kwargs.get("_disable_options") or ()))
        options = self._option_sets.get(key)
        if options is None:
            if len(self._option_sets) > 1024:
                self._option_sets.clear()
            options = self._option_sets[key] = OptionSet(*key)
        return options

    def new_identity(self, fusion: Definition, args: tuple[Any, ...]) -> FusionInfo:
        """A digest of what nvFuser prints for the definition: stable across runs whatever else runs first."""
        try:
            text = repr(fusion)
            ops: tuple[str, ...] | None = ops_of_definition(text)
            digest: str | None = definition_digest(text)
        except Exception:
            ops, digest = None, None
        site, function = _site(fusion)
        return identify(type(fusion).__name__, "call", ops, function, site, key=digest)

    def own_options(self, fusion: Definition, kwargs: dict[str, Any]) -> OptionSet:
        return self.passed_options(kwargs)

    def build(self, fusion: Definition, info: FusionInfo, options: OptionSet) -> _frontends.Partition:
        adapter, frontend, module = self, self.frontend, self.module
        definition = repr(fusion)
        share = _shared.enabled()
        # device -> (definition, call): a definition runs only on the GPU it was compiled for.
        by_device: dict[Any, tuple[Any, Any]] = {}
        lock = threading.Lock()

        def definitions(device: Any, own: bool = False) -> tuple[Any, Any]:
            with lock:
                built = by_device.get(device)
                if built is not None:
                    return built
                fd = frontend.rebuild(fusion, module, options, definition)
                entry = None
                if share:
                    # A refused build is not kept, so a later own-options call still compiles.
                    fd, entry = _shared.SHARED.adopt(fd, options, info.id, definition, device=_device(device),
                                                     share=frontend is _frontends.DIRECT, watch=False, own=own)
                # None: the adapter's `calls`, read at each run (a watch may wrap it).
                call = None if entry is None or entry.compiled else run_uncompiled(entry, device)
                built = by_device[device] = (fd, call)
                return built

        def run_uncompiled(entry: _shared.Entry, device: Any) -> Any:
            def execute(fd: Any, *args: Any, **kwargs: Any) -> Any:
                outputs = _shared.SHARED.run_uncompiled(entry, adapter.calls, fd, args, kwargs)
                by_device[device] = (fd, None)
                return outputs

            return execute

        enable, disable = options.enable_list(), options.disable_list()
        execute_with = None if frontend is _frontends.DIRECT else frontend.execute

        def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            device = kwargs.get("device")
            fd, call = by_device.get(device) or definitions(device, options == adapter.passed_options(kwargs))
            if kwargs or execute_with is not None:
                return (execute_with or frontend.execute)(call or adapter.calls, fd, args, kwargs, enable, disable)
            return (call or adapter.calls)(fd, *args, _enable_options=enable, _disable_options=disable)

        return _frontends.Partition(None, options, run, definitions)

    def definition(self, partition: _frontends.Partition, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        assert partition.definitions is not None, "`build` sets it"
        return partition.definitions(kwargs.get("device"), partition.options == self.passed_options(kwargs))[0]

    def default(self, fusion: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.calls(fusion, *args, **kwargs)

    def repro_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        return list(args[0]) if args else list(kwargs.get("inputs", ()))

    describe = "nvFuser"


def watch_execute(wrap: Callable[[Any], Any]) -> Callable[[], None]:
    """Every nvFuser execute the direct adapters call goes through ``wrap(execute)`` until the returned undo."""
    watches = INSTALLED.watches
    watches.append(wrap)
    _rewatch()

    def undo() -> None:
        if wrap in watches:
            watches.remove(wrap)
        _rewatch()

    return undo


def _rewatch() -> None:
    for name in NVFUSER_MODULES:
        adapter = INSTALLED.get(name)
        if isinstance(adapter, FrontendAdapter):
            adapter.watched()


def install() -> bool:
    """Make ``FusionDefinition.execute`` of every imported nvFuser frontend honour the active scope. Idempotent.

    Returns whether at least one frontend is patched now (`frontends` says which). Import nvFuser first: this imports
    nothing.
    """
    for name in NVFUSER_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "FusionDefinition") and INSTALLED.get(name) is None:
            INSTALLED.add(name, FrontendAdapter(module))
    return installed()


def uninstall() -> bool:
    """Restore every patched ``FusionDefinition.execute`` exactly, and drop every definition's partitions. Idempotent;
    returns whether anything was restored."""
    restored = False
    for name in NVFUSER_MODULES:
        restored = INSTALLED.remove(name) or restored
    _state.reset("shared")
    return restored


def installed() -> bool:
    """Whether any nvFuser frontend's ``execute`` is patched."""
    return bool(frontends())


def frontends() -> list[str]:
    """The names of the frontend modules whose ``execute`` is patched now, sorted."""
    return sorted(name for name in NVFUSER_MODULES if _patches.active(name))
