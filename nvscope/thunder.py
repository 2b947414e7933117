"""Executor adapter for Lightning Thunder's nvFuser executor.

Two patches, both undone exactly by `uninstall`:

1. ``FusionDefinitionWrapper.__call__`` (``thunder/executors/nvfuserex_impl.py``), Thunder's per-fusion entry point.
   With no scope active it calls Thunder's own ``__call__`` under the execution lock: one ContextVar read and one
   test on top of Thunder. Inside a scope the fusion's effective options are Thunder's compile-time
   ``nv_enable_options``/``nv_disable_options`` | the scope; if the scope adds nothing, Thunder's own cache serves;
   otherwise the call goes to a partition for that option set: an ``lru_cache`` of FusionDefinitions built by
   Thunder's own uncached ``get_fd.__wrapped__`` (salted on the legacy frontend), executed with the options.
   Partitions live on the fusion's ``get_fd`` (Thunder's wrapper class has ``__slots__``) and are LRU-bounded.
2. ``ThunderFunction.forward``/``backward`` (``thunder/executors/torch_autograd.py``). Thunder's backward fusions
   run wherever PyTorch's autograd engine runs them: on the thread that called ``.backward()`` with ``thunder.jit``,
   on the autograd device thread with ``thunderfx``, where the caller's context is invisible. So the forward
   records the options active when it ran, and the backward runs under those | whatever scope is active on the
   thread executing it, as ``torch.amp.custom_bwd`` does for autocast state.

Installed lazily by the first non-empty scope once ``thunder`` is imported (`nvscope._autoinstall`); `install()`
does it explicitly and is idempotent.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from typing import Any

from nvscope import _autoinstall, _events, _frontends, _patches
from nvscope._errors import UnsupportedError
from nvscope._optionset import OptionSet
from nvscope._partitions import Partitions
from nvscope._scope import ACTIVE, Frame, pop, push

__all__ = ["install", "installed", "partitions", "uninstall"]

IMPL_MODULE = "thunder.executors.nvfuserex_impl"
AUTOGRAD_MODULE = "thunder.executors.torch_autograd"
VERSION_MODULE = "thunder.executors.nvfuserex"
_OWNER = "thunder"
_TABLE = "_nvscope_partitions"  # attribute on each fusion's get_fd (an lru_cache wrapper, which has a __dict__)


def _nvfuser_version() -> str | None:
    try:
        raw = importlib.import_module(VERSION_MODULE).nvfuser_version()
    except (ImportError, AttributeError):
        return None
    return None if raw is None else str(raw)


def installed() -> bool:
    """Whether the Thunder patches are in place."""
    return bool(_patches.active(_OWNER))


def install() -> bool:
    """Patch Thunder's nvFuser executor so it honours the active scope. Idempotent.

    Returns whether the patches are in place: False, changing nothing, when Thunder's nvFuser executor cannot be
    imported (no Thunder, no nvFuser).
    """
    _autoinstall.accept(_OWNER)
    if installed():
        return True
    try:
        impl = importlib.import_module(IMPL_MODULE)
        autograd = importlib.import_module(AUTOGRAD_MODULE)
    except ImportError:
        return False
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

    original_forward = function_class.__dict__["forward"]
    original_backward = function_class.__dict__["backward"]
    _patches.apply(_OWNER, wrapper_class, "__call__", _make_call(wrapper_class.__call__, frontend, version_error))
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
    """The partition table of one Thunder fusion (a ``FusionDefinitionWrapper``), or None if it never ran scoped."""
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
            f"Thunder fusion {fusion.name}: get_fd is not an lru_cache wrapper, so nvscope cannot build a separate "
            "FusionDefinition per option set for this Thunder version"
        )
    cache_info = getattr(get_fd, "cache_info", None)
    maxsize = cache_info().maxsize if cache_info is not None else 2048

    def build(options: OptionSet) -> _frontends.Partition:
        salt = _frontends.salt_for(options) if frontend == "legacy" else None

        @functools.lru_cache(maxsize=maxsize)
        def partition_get_fd(descriptors: Any) -> Any:
            if salt is None:
                return uncached(descriptors)
            with _frontends.salted(salt):
                return uncached(descriptors)
        return _frontends.Partition(partition_get_fd, options)

    static = OptionSet(fusion.enable_options or (), fusion.disable_options or ())
    return Partitions(static, build)


def _unwrap_distributed(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What Thunder does before executing: wait on AsyncCollectiveTensors; DTensors are not partitioned (yet).

    Both types can only occur once their modules are imported, so two dict lookups skip the scan otherwise.
    """
    collectives = sys.modules.get("torch.distributed._functional_collectives")
    if collectives is not None:
        waiting = collectives.AsyncCollectiveTensor
        args = tuple(a.wait() if isinstance(a, waiting) else a for a in args)
    tensor_module = sys.modules.get("torch.distributed.tensor")
    if tensor_module is not None and any(isinstance(a, tensor_module.DTensor) for a in args):
        raise UnsupportedError(
            "nv_options cannot apply to a fusion with DTensor inputs: Thunder runs those through nvFuser's "
            "execute_with_dtensors, which takes no options. Run it outside the scope, or set "
            "NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process."
        )
    return args


def _make_call(original: Any, frontend: str, version_error: UnsupportedError | None) -> Any:
    sinks = _events.SINKS  # the list itself: audit() appends to it in place
    get_active = ACTIVE.get

    # The unscoped path is Thunder's call plus one ContextVar read and one test. It takes no lock: nvFuser's execute
    # binding holds the GIL for the whole call (no gil_scoped_release in python/python_direct/runtime.cpp), so a
    # scoped execution, which changes nvFuser's process-global options for its duration, never overlaps another.
    def __call__(self: Any, *args: Any) -> Any:
        frame = get_active()
        if frame is None:
            if sinks:
                _emit(self, OptionSet(self.enable_options or (), self.disable_options or ()), "default", frontend)
            return original(self, *args)
        return _scoped_call(self, args, frame)

    def _scoped_call(self: Any, args: tuple[Any, ...], frame: Frame) -> Any:
        scope = frame.options
        if scope is None:  # an empty scope (inherit=False): Thunder's own behaviour
            return original(self, *args)
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
        args = _unwrap_distributed(args)
        fd = partition.runner(self.to_descriptors(args))
        if self.store_inputs:
            self.last_inputs = args
        if sinks:
            _emit(self, partition.options, "new" if new else "reused", frontend)
        return _frontends.execute(fd.execute, partition, frontend, args, device=fd._selected_device,
                                  save_repro_inputs=self.save_fake_inputs)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    return __call__


def _emit(fusion: Any, options: OptionSet, partition: _events.Partition, frontend: str) -> None:
    _events.emit(_events.FusionRecord(fusion.name, options, partition, threading.current_thread().name,
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
