"""Adapter for direct nvFuser users (no Thunder): ``FusionDefinition.execute`` honours the active scope.

    import nvfuser_direct, nvscope.nvfuser
    nvscope.nvfuser.install()
    with nvscope.nv_options(enable=["fuse_matmul"]):
        fd.execute(inputs)      # runs a FusionDefinition rebuilt for this option set, with the options

Opt-in, so that Thunder, whose adapter already partitions, keeps a single hook on its hot path. Inside a scope the
effective options are those passed to ``execute`` laid under the scope (`nvscope._core._policy`); each option set gets a
FusionDefinition of its own, rebuilt from the definition nvFuser prints (salted on the legacy frontend). Each
definition is a fusion ``call/FusionDefinition@<module>:<digest>``: the module that executes it and a digest of the
definition nvFuser prints (`identify`), with the ops of its printed definition. The execution itself is nvscope's
one path (`nvscope._exec._execute`), as for Thunder.
"""

from __future__ import annotations

import sys
import threading
import weakref
from types import ModuleType
from typing import Any

from nvscope._core import _patches
from nvscope._core._errors import UnsupportedError
from nvscope._core._fusion import FusionInfo, claim, ops_of_definition, remember
from nvscope._core._optionset import OptionSet
from nvscope._core._scope import ACTIVE
from nvscope._core._site import definition_digest, file_of, program_module, site_of
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
_INFO = "_nvscope_info"  # its FusionInfo, beside the table; kept by uninstall (an id outlives nvscope.uninstall())
_OPTION_KWARGS = ("_enable_options", "_disable_options")
_option_sets: dict[tuple[tuple[str, ...], tuple[str, ...]], OptionSet] = {}
_fusions: weakref.WeakSet[Any] = weakref.WeakSet()  # the FusionDefinitions with a table: uninstall drops them


def _passed_options(kwargs: dict[str, Any]) -> OptionSet:
    """The options passed to ``execute``, as one interned OptionSet per distinct pair of lists (a memo key)."""
    key = (tuple(kwargs.get("_enable_options") or ()), tuple(kwargs.get("_disable_options") or ()))
    options = _option_sets.get(key)
    if options is None:
        if len(_option_sets) > 1024:
            _option_sets.clear()
        options = _option_sets[key] = OptionSet(*key)
    return options


def _device(device: Any) -> object:
    """``execute``'s device argument as a key: the GPU index where it names one (``1``, ``"cuda:1"`` and
    ``torch.device("cuda", 1)`` alike), else as given (None: the inputs' device)."""
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


def _site(fusion: Any) -> str:
    """Where a definition sits: its class for a subclass of a frontend's ``FusionDefinition`` (``<module>:<qualname>``),
    else the module that executes it (the first frame on this thread's stack that is neither nvscope's nor a
    frontend's): a module, not a function, so that one definition executed from two functions has one id."""
    cls = type(fusion)
    if cls.__module__.partition(".")[0] not in _SKIPPED:
        return site_of(cls.__module__, cls.__qualname__, file_of(cls))
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if module.partition(".")[0] not in _SKIPPED:
            return program_module(module, frame.f_code.co_filename)
        frame = frame.f_back  # type: ignore[assignment]
    return program_module(None)


_SKIPPED = frozenset(("nvscope", *_frontends.MODULES))


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
        try:
            _fusions.add(fusion)
        except TypeError:  # pragma: no cover - a definition without weak references keeps its table after uninstall
            pass

    def identify(self, fusion: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> FusionInfo:
        """Where the definition sits (`_site`) and a digest of what nvFuser prints for it: the same in every run of
        the program whatever else is scoped or runs first; ``#k`` only for equal definitions executed from one module
        (nothing else tells them apart)."""
        known = fusion.__dict__.get(_INFO)  # seen before nvscope.uninstall(): the same fusion keeps its id
        if known is not None:
            return remember(known)
        try:
            text = repr(fusion)
            ops: tuple[str, ...] | None = ops_of_definition(text)
            digest = f":{definition_digest(text)}"
        except Exception:
            ops, digest = None, ""
        info = claim(type(fusion).__name__, "call", ops, None, f"{_site(fusion)}{digest}")
        fusion.__dict__[_INFO] = info
        return info

    def static(self, fusion: Any, kwargs: dict[str, Any]) -> OptionSet:
        return _passed_options(kwargs)

    def build(self, fusion: Any, info: FusionInfo, options: OptionSet) -> _frontends.Partition:
        execute_with, original, frontend, module = self.frontend.execute, self.original, self.frontend, self.module
        definition = repr(fusion)
        share = _shared.enabled()
        # execute's device argument -> (the definition built for it, the call that runs it): a definition runs on the
        # GPU it was compiled for only, also when another fusion's is shared.
        by_device: dict[Any, tuple[Any, Any]] = {}
        lock = threading.Lock()

        def definition_for(device: Any) -> tuple[Any, Any]:
            with lock:
                found = by_device.get(device)
                if found is not None:
                    return found
                runner = frontend.rebuild(fusion, module, options, definition)
                entry = None
                if share:
                    # An equal definition another fusion compiled for these options and this device runs instead of
                    # a new copy (nvscope._exec._shared; raises SharedFailure if its compile failed). On the legacy
                    # frontend each partition runs its own salted copy, which shares nvFuser's global cache entry.
                    runner, entry = _shared.adopt(runner, options, info.id, definition, device=_device(device),
                                                  share=frontend is _frontends.DIRECT, watch=False)
                call = original if entry is None or entry.compiled else first(entry, device)
                found = by_device[device] = (runner, call)
                return found

        def first(entry: _shared.Entry, device: Any) -> Any:
            """nvFuser's execute, that marks the shared definition compiled once it completes, then steps aside."""

            def execute_first(fd: Any, *args: Any, **kwargs: Any) -> Any:
                outputs = original(fd, *args, **kwargs)
                _shared.ran(entry)
                by_device[device] = (fd, original)
                return outputs

            return execute_first

        def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            device = kwargs.get("device")
            runner, call = by_device.get(device) or definition_for(device)
            rest = {k: v for k, v in kwargs.items() if k not in _OPTION_KWARGS}
            return execute_with(call, partition, runner, *args, **rest)

        # The partition's runner gives the definition for a device argument, and the call that runs it.
        partition = _frontends.Partition(definition_for, options, run)
        return partition

    def definition(self, partition: _frontends.Partition, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return partition.runner(kwargs.get("device"))[0]

    def default(self, fusion: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.original(fusion, *args, **kwargs)

    def script(self, fusion: Any, partition: _frontends.Partition, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> str:
        try:
            runner = self.definition(partition, args, kwargs)
        except _shared.SharedFailure as known:  # its compile failed for another fusion: the same definition
            runner = known.fd
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
    for fusion in list(_fusions):  # their partitions (compiled kernels) and failures: seen again, each starts afresh
        vars(fusion).pop(_TABLE, None)
    _fusions.clear()
    _shared.clear()
    return restored


def installed() -> bool:
    """Whether any nvFuser frontend's ``execute`` is patched."""
    return bool(frontends())


def frontends() -> list[str]:
    """The names of the frontend modules whose ``execute`` is patched now, sorted."""
    return sorted(name for name in _frontends.MODULES if _patches.active(name))
