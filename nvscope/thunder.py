"""Executor adapter for Lightning Thunder's nvFuser executor.

Three patches, all undone exactly by `uninstall` (`nvscope._patches`):

1. ``FusionDefinitionWrapper.__call__`` (``thunder/executors/nvfuserex_impl.py``), Thunder's per-fusion entry point.
   With no scope active it calls Thunder's own ``__call__``: one ContextVar read and one test on top of Thunder.
   Inside a scope the fusion's effective options are Thunder's compile-time ``nv_enable_options`` /
   ``nv_disable_options`` | the scope; if the scope adds nothing, Thunder's own cache serves. Otherwise the call goes
   to the fusion's *partition* for that option set, which is a copy of the wrapper: its ``get_fd`` is an
   ``lru_cache`` of FusionDefinitions built by Thunder's own uncached ``get_fd.__wrapped__`` (nvFuser does not key
   compiled kernels on options, so each option set needs definitions of its own; salted on the legacy frontend),
   its option fields are the effective options, and its ``name`` carries them. Thunder's *original* ``__call__``
   runs on that copy, so ``use_cache``, ``last_used``/``last_inputs``, the NVTX range (``annotate_for_profile
   (self.name)``, here ``nvFusion0 [+fuse_matmul -matmul_expr_eval]: (matmul, ...)``) and the DTensor path stay
   Thunder's own code. Afterwards ``last_used``/``last_inputs`` are copied to the real wrapper, so
   ``thunder.examine.get_nvfuser_repro`` returns the definition that ran, whose repro script passes its options.
   One copy per partition, never a field swapped per call: threads running one fusion under different scopes
   cannot see each other's options. Partitions live on the fusion's ``get_fd`` and are LRU-bounded.
2. ``execute_with_dtensors`` as ``nvfuserex_impl`` calls it for DTensor inputs: nvFuser's function, handed a view
   of a partition's definition whose ``execute`` passes the options (`nvscope._frontends`).
3. ``ThunderFunction.forward``/``backward`` (``thunder/executors/torch_autograd.py``). Thunder's backward fusions
   run wherever PyTorch's autograd engine runs them: on the thread that called ``.backward()`` with ``thunder.jit``,
   on the autograd device thread with ``thunderfx``, where the caller's context is invisible. So the forward
   records the options active when it ran, and the backward runs under those | whatever scope is active on the
   thread executing it, as ``torch.amp.custom_bwd`` does for autocast state.

An exception out of a scoped fusion keeps its type and gains a note naming the fusion, the phase and the options,
with a repro script that runs with them (`nvscope._repro`). `install` checks the Thunder it finds first and refuses
one that lacks what these patches rely on, changing nothing. Installed lazily by the first non-empty scope once
``thunder`` is imported (`nvscope._autoinstall`); `install()` does it explicitly and is idempotent.
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys
import threading
from types import ModuleType
from typing import Any

from nvscope import _autoinstall, _events, _frontends, _patches, _repro
from nvscope._errors import NvscopeError, UnsupportedError
from nvscope._optionset import OptionSet
from nvscope._partitions import Partitions
from nvscope._scope import ACTIVE, Frame, pop, push

__all__ = ["install", "installed", "partitions", "uninstall", "unsupported"]

IMPL_MODULE = "thunder.executors.nvfuserex_impl"
AUTOGRAD_MODULE = "thunder.executors.torch_autograd"
VERSION_MODULE = "thunder.executors.nvfuserex"
PROVEN = "Thunder 0.2.6 and 0.2.7.dev20260201"  # tests/gpu ran with both on the H200
_OWNER = "thunder"
_TABLE = "_nvscope_partitions"  # attribute on each fusion's get_fd (an lru_cache wrapper, which has a __dict__)
# The wrapper fields the scoped path reads or sets on its copies (Thunder's __call__ reads the rest itself).
_FIELDS = ("get_fd", "to_descriptors", "name", "use_cache", "last_used", "last_inputs", "store_inputs",
           "enable_options", "disable_options")


def _nvfuser_version() -> str | None:
    try:
        raw = importlib.import_module(VERSION_MODULE).nvfuser_version()
    except (ImportError, AttributeError):
        return None
    return None if raw is None else str(raw)


def _thunder_version() -> str:
    version = getattr(sys.modules.get("thunder"), "__version__", None)
    return f"Thunder {version}" if version else "this Thunder (version unknown)"


def _refusal(impl: ModuleType, autograd: ModuleType) -> str | None:
    """Why the patches cannot work with this Thunder (what is missing or in the way), or None."""
    missing = []
    wrapper = getattr(impl, "FusionDefinitionWrapper", None)
    if not isinstance(wrapper, type):
        missing.append(f"{IMPL_MODULE}.FusionDefinitionWrapper")
    else:
        if not callable(vars(wrapper).get("__call__")):
            missing.append("FusionDefinitionWrapper.__call__")
        # Thunder's wrapper is a slots dataclass: its fields are known before any fusion exists.
        fields = set(getattr(wrapper, "__dataclass_fields__", ())) | set(getattr(wrapper, "__slots__", ()))
        missing += [f"FusionDefinitionWrapper.{name}" for name in _FIELDS if name not in fields]
    if getattr(impl, "FusionDefinition", None) is None:
        missing.append(f"{IMPL_MODULE}.FusionDefinition")
    function = getattr(autograd, "ThunderFunction", None)
    if not isinstance(function, type):
        missing.append(f"{AUTOGRAD_MODULE}.ThunderFunction")
    else:
        missing += [f"ThunderFunction.{name} (a staticmethod)" for name in ("forward", "backward")
                    if not isinstance(vars(function).get(name), staticmethod)]
    why = f"lacks {', '.join(missing)}" if missing else None
    if why is None and callable(getattr(getattr(impl, "create_fd", None), "num_fusions", None)):
        # Thunder PR 2806 (closed) shape: nvFuser's LruFusionCache around create_fd gives equal definitions one
        # compiled cache whatever their options, so a partition's definitions would run the default's kernels.
        why = ("builds its definitions through nvFuser's LruFusionCache, which shares compiled kernels between "
               "equal definitions whatever their options")
    if why is None:
        return None
    return (f"nvscope cannot drive {_thunder_version()}: its nvFuser executor {why}. Nothing was patched, so "
            f"scopes do not reach its fusions. nvscope is proven with {PROVEN} (docs/failures.md, \"Thunder "
            "versions\"): use one of those, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process "
            "(NVSCOPE_AUTOINSTALL=0 keeps scopes from trying this adapter).")


def unsupported() -> str | None:
    """Why `install` would refuse the Thunder installed here, or None (for ``nvscope doctor``).

    None also when Thunder's nvFuser executor does not import at all: `install` then returns False.
    """
    try:
        impl = importlib.import_module(IMPL_MODULE)
        autograd = importlib.import_module(AUTOGRAD_MODULE)
    except ImportError:
        return None
    return _refusal(impl, autograd)


def installed() -> bool:
    """Whether the Thunder patches are in place."""
    return bool(_patches.active(_OWNER))


def install() -> bool:
    """Patch Thunder's nvFuser executor so it honours the active scope. Idempotent.

    Returns whether the patches are in place: False, changing nothing, when Thunder's nvFuser executor cannot be
    imported (no Thunder, no nvFuser). Raises `UnsupportedError`, changing nothing, for a Thunder that lacks what the
    patches rely on (the message names what and the Thunder version).
    """
    _autoinstall.accept(_OWNER)
    if installed():
        return True
    try:
        impl = importlib.import_module(IMPL_MODULE)
        autograd = importlib.import_module(AUTOGRAD_MODULE)
    except ImportError:
        return False
    refusal = _refusal(impl, autograd)
    if refusal is not None:
        raise UnsupportedError(refusal)
    wrapper_class = impl.FusionDefinitionWrapper
    function_class = autograd.ThunderFunction
    frontend = _frontends.frontend_of(impl.FusionDefinition)
    if frontend == "legacy":
        _frontends.acquire_legacy(sys.modules[impl.FusionDefinition.__module__.partition(".")[0]], _OWNER)
    try:
        _frontends.check_version(_nvfuser_version())
        version_error: UnsupportedError | None = None
    except UnsupportedError as error:
        version_error = error  # raised when a scope reaches a fusion, not at install: unscoped Thunder still works

    original_forward = vars(function_class)["forward"]
    original_backward = vars(function_class)["backward"]
    _patches.apply(_OWNER, wrapper_class, "__call__", _make_call(wrapper_class.__call__, frontend, version_error))
    if callable(getattr(impl, "execute_with_dtensors", None)):  # nvFuser >= 0.2.28; Thunder calls it for DTensors
        _patches.apply(_OWNER, impl, "execute_with_dtensors",
                       _frontends.make_execute_with_dtensors(impl.execute_with_dtensors))
    _patches.apply(_OWNER, function_class, "forward", staticmethod(_make_forward(original_forward.__func__)))
    _patches.apply(_OWNER, function_class, "backward", staticmethod(_make_backward(original_backward.__func__)))
    return True


def uninstall() -> bool:
    """Restore Thunder's original executor exactly. Idempotent; returns whether anything was restored.

    Scopes entered afterwards do not install it again (that would undo an explicit choice); `install()` does.
    """
    _autoinstall.decline(_OWNER)  # an explicit choice: later scopes must not undo it
    restored = _patches.restore(_OWNER)
    _frontends.release_legacy(_OWNER)
    return restored


def partitions(fusion: Any) -> Partitions[_frontends.Partition] | None:
    """The partition table of one Thunder fusion (a ``FusionDefinitionWrapper``), or None if it never ran scoped.

    Each partition's ``runner`` is the wrapper copy that runs the fusion for that option set.
    """
    return getattr(fusion.get_fd, _TABLE, None)


def _table(fusion: Any, frontend: str) -> Partitions[_frontends.Partition]:
    """The fusion's partition table, created on its first scoped call (callers look without the lock first)."""
    get_fd = fusion.get_fd
    with _frontends.TABLE_LOCK:  # two threads' first scoped calls must not each build (and compile) a table
        table: Partitions[_frontends.Partition] | None = getattr(get_fd, _TABLE, None)
        if table is None:
            table = _new_table(fusion, frontend)
            setattr(get_fd, _TABLE, table)
        return table


def _new_table(fusion: Any, frontend: str) -> Partitions[_frontends.Partition]:
    get_fd = fusion.get_fd
    uncached = getattr(get_fd, "__wrapped__", None)
    if uncached is None:
        raise UnsupportedError(
            f"{_thunder_version()}, fusion {_short(fusion.name)}: get_fd is not an lru_cache wrapper, so nvscope "
            f"cannot build a separate FusionDefinition per option set (proven with {PROVEN}); run it outside the "
            "scope, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process"
        )
    cache_info = getattr(get_fd, "cache_info", None)
    maxsize = cache_info().maxsize if cache_info is not None else 2048

    def build(options: OptionSet) -> _frontends.Partition:
        salt = _frontends.salt_for(options) if frontend == "legacy" else None

        @functools.lru_cache(maxsize=maxsize)
        def partition_get_fd(descriptors: Any) -> Any:
            if salt is None:
                fd = uncached(descriptors)
            else:
                with _frontends.salted(salt):
                    fd = uncached(descriptors)
            if frontend == "direct" and "fec" in getattr(fd, "__dict__", ()):
                # Compiled before it ever ran: its cache came from a shared one (an LruFusionCache), not its own.
                raise UnsupportedError(
                    f"{_thunder_version()}, fusion {_short(fusion.name)}: a new FusionDefinition came with a "
                    "compiled cache already, so it may share kernels compiled for other options; nvscope cannot give "
                    "this option set kernels of its own. Set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process "
                    "instead"
                )
            _frontends.carry(fd, options)
            return fd

        runner = copy.copy(fusion)
        runner.get_fd = partition_get_fd
        # The options go right after the fusion's own name, before the ops Thunder appends
        # ("nvFusion0: (add, mul)" becomes "nvFusion0 [+fast_math]: (add, mul)"): visible in a narrow timeline row.
        short, colon, ops = fusion.name.partition(": ")
        runner.name = f"{short} [{_repro.label(options)}]{colon}{ops}"
        runner.enable_options = options.enable_list()
        runner.disable_options = options.disable_list()
        runner.last_used = None
        runner.last_inputs = None
        for name, value in (("cache_info", partition_get_fd.cache_info), ("cache_clear", partition_get_fd.cache_clear)):
            if hasattr(runner, name):  # Thunder's fields, pointing at this option set's cache
                setattr(runner, name, value)
        return _frontends.Partition(runner, options)

    static = OptionSet(fusion.enable_options or (), fusion.disable_options or ())
    return Partitions(static, build)


def _make_call(original: Any, frontend: str, version_error: UnsupportedError | None) -> Any:
    sinks = _events.SINKS  # the list itself: audit() appends to it in place
    get_active = ACTIVE.get
    if frontend == "legacy":
        def run(runner: Any, *args: Any) -> Any:
            with _frontends.quiet():  # a partition follows nvFuser's "Reset the FusionCache" advice already
                return original(runner, *args)
    else:
        run = original

    # The unscoped path is Thunder's call plus one ContextVar read and one test. No lock anywhere: nvFuser's execute
    # binding holds the GIL for the whole call (no gil_scoped_release in python/python_direct/runtime.cpp), so a
    # scoped execution, which changes nvFuser's process-global options for its duration, never overlaps another.
    def __call__(self: Any, *args: Any) -> Any:
        frame = get_active()
        if frame is None or frame.options is None:  # no scope, or an empty one (inherit=False): Thunder's own call
            if sinks:  # audited like any other execution (an empty scope's fusions used to go unrecorded)
                _emit(self, OptionSet(self.enable_options or (), self.disable_options or ()), "default", frontend)
            return original(self, *args)
        return _scoped_call(self, args, frame)

    def _scoped_call(self: Any, args: tuple[Any, ...], frame: Frame) -> Any:
        scope = frame.options
        assert scope is not None  # __call__ runs empty scopes itself
        frame.ran = True
        table = getattr(self.get_fd, _TABLE, None)
        if table is None:
            table = _table(self, frontend)
        new = False
        last_scope, partition = table.hot
        if last_scope is not scope:  # steady state skips the merge and the LRU: same scope object, same answer
            effective = table.static.union(scope)
            if effective is table.static:  # the scope adds nothing to Thunder's compile-time options
                partition = None
            else:
                if version_error is not None:
                    raise version_error
                partition, new = table.get(effective)
            table.hot = (scope, partition)
        if partition is None:
            if sinks:
                _emit(self, table.static, "default", frontend)
            return original(self, *args)
        if sinks:
            _emit(self, partition.options, "new" if new else "reused", frontend)
        runner = partition.runner
        try:
            return run(runner, *args)
        except NvscopeError:
            raise
        except Exception as error:
            _annotate(error, self, runner, partition.options, table.static, scope, args)
            raise
        finally:
            # What ran is what Thunder's tools should see. With use_cache off, last_used *is* Thunder's cache (the
            # one definition it runs), so the real wrapper's own stays; get_nvfuser_repro then shows the default.
            if runner.use_cache:
                self.last_used = runner.last_used
            if runner.store_inputs:
                self.last_inputs = runner.last_inputs

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    return __call__


def _annotate(error: Exception, fusion: Any, runner: Any, effective: OptionSet, static: OptionSet,
              scope: OptionSet, args: tuple[Any, ...]) -> None:
    """Name the options on a failing scoped fusion's exception, with a repro script of the definition that failed."""

    def script() -> str:
        if runner.use_cache or runner.last_used is None:
            # The partition's cache gives the definition for exactly these inputs (no other thread's last_used).
            fd = runner.get_fd(runner.to_descriptors(args))
        else:
            fd = runner.last_used
        return _repro.with_options(type(fd).repro_script_for(fd, _local_inputs(args)), effective)

    _repro.annotate(error, f"Thunder fusion {_short(fusion.name)}", _events.PHASE.get(), static, scope, effective,
                    script)


def _local_inputs(args: tuple[Any, ...]) -> list[Any]:
    """The inputs as nvFuser's execute got them: collectives waited on, DTensors as their local tensors."""
    collectives = sys.modules.get("torch.distributed._functional_collectives")
    tensors = sys.modules.get("torch.distributed.tensor")
    inputs = []
    for arg in args:
        if collectives is not None and isinstance(arg, collectives.AsyncCollectiveTensor):
            arg = arg.wait()
        if tensors is not None and isinstance(arg, tensors.DTensor):
            arg = arg.to_local()
        inputs.append(arg)
    return inputs


def _short(name: str) -> str:
    """The fusion's name as the trace calls it: Thunder (0.2.6, 0.2.7.dev) names the wrapper "nvFusion0: (op, ...)"."""
    return name.partition(": ")[0]


def _emit(fusion: Any, options: OptionSet, partition: _events.Partition, frontend: str) -> None:
    _events.emit(_events.FusionRecord(_short(fusion.name), options, partition, threading.current_thread().name,
                                    _events.PHASE.get(), frontend))


def _make_forward(original: Any) -> Any:
    def forward(ctx: Any, *args: Any) -> Any:
        frame = ACTIVE.get()
        ctx._nvscope_options = None if frame is None else frame.options
        return original(ctx, *args)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def _make_backward(original: Any) -> Any:
    def backward(ctx: Any, *grads: Any) -> Any:
        captured: OptionSet | None = getattr(ctx, "_nvscope_options", None)
        phase = _events.PHASE.set("backward")
        try:
            if captured is None:
                return original(ctx, *grads)
            token = push(captured)
            try:
                return original(ctx, *grads)
            finally:
                pop(token)
        finally:
            _events.PHASE.reset(phase)

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    return backward
