"""Thunder's ``FusionDefinitionWrapper`` (Thunder 0.2.6 and 0.2.7.dev) as an `Adapter` of the one execution path.

A partition is a copy of the wrapper whose ``get_fd`` builds definitions for its options, run by Thunder's own
``__call__``: one copy per partition, never a field swapped per call, so threads under different scopes cannot see
each other's options (docs/how-it-works.md).
"""

from __future__ import annotations

import copy
import functools
import operator
import sys
from types import ModuleType
from typing import Any

from nvscope._core import (
    FusionInfo,
    OptionSet,
    UnsupportedError,
    _patches,
    identify,
    inputs_digest,
    ops_of_definition,
)
from nvscope._exec import _events, _frontends, _shared, _thunder_region
from nvscope._exec._adapter import TABLE_ATTRIBUTE, Adapter
from nvscope._exec._execute import call_wrapper
from nvscope._exec._fusion_table import EscapeRefused
from nvscope._exec._thunder_autograd import jitted_function, make_backward, make_forward

__all__ = ["ThunderAdapter"]

OWNER = "thunder"  # its patches' owner, and its name in `INSTALLED`
PROVEN = "Thunder 0.2.6 and 0.2.7.dev20260201"
IMPL_MODULE = "thunder.executors.nvfuserex_impl"


def thunder_version() -> str:
    version = getattr(sys.modules.get("thunder"), "__version__", None)
    return f"Thunder {version}" if version else "this Thunder (version unknown)"


Wrapper = Any  # Thunder's FusionDefinitionWrapper (Thunder is optional)


class ThunderAdapter(Adapter[Wrapper]):
    """Thunder 0.2.6 / 0.2.7.dev's ``FusionDefinitionWrapper`` (a slots dataclass)."""

    owner = OWNER
    FIELDS = ("get_fd", "to_descriptors", "name", "use_cache", "last_used", "last_inputs", "store_inputs",
              "enable_options", "disable_options")

    def __init__(self, impl: ModuleType, autograd: ModuleType, version_error: UnsupportedError | None) -> None:
        super().__init__()
        self.impl, self.autograd = impl, autograd
        self.wrapper_class = impl.FusionDefinitionWrapper
        self.original = self.wrapper_class.__call__
        self.frontend = _frontends.frontend_of(impl.FusionDefinition)
        self.version_error = version_error
        self.escape_refusal = _thunder_region.escape_refusal(impl)
        self.table_of = operator.attrgetter(f"get_fd.{TABLE_ATTRIBUTE}")
        original, quiet = self.original, self.frontend.quiet
        if self.frontend is _frontends.DIRECT:
            self._run_runner = original  # no context manager on the hot path
        else:
            def run_quietly(runner: Any, *args: Any) -> Any:
                with quiet():
                    return original(runner, *args)
            self._run_runner = run_quietly

    @classmethod
    def refusal(cls, impl: ModuleType) -> list[str]:
        """What this shape needs and ``impl`` lacks (empty: it fits)."""
        missing = []
        wrapper = getattr(impl, "FusionDefinitionWrapper", None)
        if not isinstance(wrapper, type):
            return [f"{IMPL_MODULE}.FusionDefinitionWrapper"]
        if not callable(vars(wrapper).get("__call__")):
            missing.append("FusionDefinitionWrapper.__call__")
        fields = set(getattr(wrapper, "__dataclass_fields__", ())) | set(getattr(wrapper, "__slots__", ()))
        missing += [f"FusionDefinitionWrapper.{name}" for name in cls.FIELDS if name not in fields]
        if getattr(impl, "FusionDefinition", None) is None:
            missing.append(f"{IMPL_MODULE}.FusionDefinition")
        return missing

    def install(self) -> None:
        """Patch the wrapper's ``__call__``, ``execute_with_dtensors`` and ``ThunderFunction.forward``/``backward``."""
        impl, function_class = self.impl, self.autograd.ThunderFunction
        self.frontend.acquire(sys.modules.get(impl.FusionDefinition.__module__.partition(".")[0]), OWNER)
        original_forward = vars(function_class)["forward"]
        original_backward = vars(function_class)["backward"]
        _patches.apply(OWNER, self.wrapper_class, "__call__", call_wrapper(self, self.original), on_demand=True)
        if callable(getattr(impl, "execute_with_dtensors", None)):  # nvFuser >= 0.2.28
            _patches.apply(OWNER, impl, "execute_with_dtensors",
                           _frontends.make_execute_with_dtensors(impl.execute_with_dtensors))
        # Not on demand: a backward fusion's id names its forward's jitted function, seen by the forward only.
        _patches.apply(OWNER, function_class, "forward", staticmethod(make_forward(original_forward.__func__)))
        _patches.apply(OWNER, function_class, "backward", staticmethod(make_backward(original_backward.__func__)),
                       on_demand=True)
        # Beside the direct adapter, the definitions Thunder's own call executes run as they are.
        _frontends.THUNDER_CALLERS.add(self.original.__code__)
        code = getattr(getattr(getattr(impl, "execute_with_dtensors", None), "__wrapped__", None), "__code__", None)
        if code is not None:
            _frontends.THUNDER_CALLERS.add(code)

    def uninstall(self) -> bool:
        _frontends.THUNDER_CALLERS.clear()
        return super().uninstall()

    def holder(self, fusion: Wrapper) -> Any:
        return fusion.get_fd  # the wrapper is a slots dataclass

    def new_identity(self, fusion: Wrapper, args: tuple[Any, ...]) -> FusionInfo:
        get_fd = fusion.get_fd
        # The ops of the definition Thunder last ran, else of one built (not compiled) by its uncached builder.
        try:
            fd = fusion.last_used
            if fd is None:
                fd = getattr(get_fd, "__wrapped__", get_fd)(fusion.to_descriptors(args))
            ops: tuple[str, ...] | None = ops_of_definition(repr(fd))
        except Exception:
            ops = None  # the catalog's gates then drop nothing
        jitted = jitted_function()
        function, site = jitted if jitted is not None else (None, None)
        # The name as the trace calls it (the wrapper's is "nvFusion0: (op, ...)"). Its inputs tell one function's
        # traces apart (Thunder's names restart per trace); without a function the id is the short, numbered form.
        return identify(fusion.name.partition(": ")[0], _events.PHASE.get(), ops, function, site,
                        key=None if site is None else inputs_digest(args))

    def own_options(self, fusion: Wrapper, kwargs: dict[str, Any]) -> OptionSet:
        return OptionSet(fusion.enable_options or (), fusion.disable_options or ())

    def build(self, fusion: Wrapper, info: FusionInfo, options: OptionSet) -> _frontends.Partition:
        get_fd = fusion.get_fd
        uncached = getattr(get_fd, "__wrapped__", None)
        if uncached is None:
            raise UnsupportedError(
                f"{thunder_version()}, fusion {info.id}: get_fd is not an lru_cache wrapper, so nvscope cannot build "
                f"a separate FusionDefinition per option set (proven with {PROVEN}); run it outside the scope, or "
                "set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process"
            )
        cache_info = getattr(get_fd, "cache_info", None)
        maxsize = cache_info().maxsize if cache_info is not None else 2048
        frontend = self.frontend
        # The legacy frontend's global cache shares by itself: its definitions join for the failure only.
        share = _shared.enabled()
        direct = frontend is _frontends.DIRECT
        own = options == self.own_options(fusion, {})  # its defaults, run shared

        @functools.lru_cache(maxsize=maxsize)
        def partition_get_fd(descriptors: Any) -> Any:
            with frontend.own_definitions(options):
                fd = uncached(descriptors)
            if direct and "fec" in getattr(fd, "__dict__", ()):
                # Compiled before it ever ran: its cache is a shared one (an LruFusionCache).
                raise UnsupportedError(
                    f"{thunder_version()}, fusion {info.id}: a new FusionDefinition came with a compiled cache "
                    "already, so it may share kernels compiled for other options; nvscope cannot give this option "
                    "set kernels of its own. Set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process instead"
                )
            if share:
                adopted = _shared.SHARED.adopt(fd, options, info.id, inputs=descriptors, share=direct, own=own)[0]
                if adopted is not fd:
                    return adopted  # it carries its options already
            _frontends.carry(fd, options)
            return fd

        runner = copy.copy(fusion)
        runner.get_fd = partition_get_fd
        # "nvFusion0 [+fast_math]: (add, mul)": the options visible in a narrow timeline row. A fusion run shared at
        # its own options keeps Thunder's name, so a profile of the defaults reads as Thunder's own.
        if not own:
            name, colon, ops = fusion.name.partition(": ")
            runner.name = f"{name} [{options.label()}]{colon}{ops}"
        runner.enable_options = options.enable_list()
        runner.disable_options = options.disable_list()
        runner.last_used = None
        runner.last_inputs = None
        for field, value in (("cache_info", partition_get_fd.cache_info),
                             ("cache_clear", partition_get_fd.cache_clear)):
            if hasattr(runner, field):
                setattr(runner, field, value)
        call = functools.partial(self._run_runner, runner)  # a partial spares the call wrapper a frame
        # get_nvfuser_repro sees what ran; with use_cache off, last_used *is* Thunder's cache, so it stays.
        copy_used, copy_inputs = bool(runner.use_cache), bool(runner.store_inputs)

        def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            try:
                return call(*args)
            finally:
                if copy_used:
                    fusion.last_used = runner.last_used
                if copy_inputs:
                    fusion.last_inputs = runner.last_inputs

        if own and options:
            # DTensor inputs: Thunder's path passes no compile-time options, so a definition shared (compiled for
            # them) cannot serve it; it runs as it is.
            shared_run = run
            original = self.original

            def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                if _has_dtensor(args):
                    return original(fusion, *args)
                return shared_run(args, kwargs)

        return _frontends.Partition(runner, options, run)

    def default(self, fusion: Wrapper, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.original(fusion, *args)

    def own_partition(self, fusion: Wrapper, own_options: OptionSet) -> _frontends.Partition:
        call = functools.partial(self._run_runner, fusion)

        def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return call(*args)

        return _frontends.Partition(fusion, own_options, run)

    def escape(self, fusion: Wrapper, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        if _has_dtensor(args):
            raise EscapeRefused("its inputs are DTensors, which the region's PyTorch form does not take")
        return fusion.to_descriptors(args), functools.partial(self.region, fusion)

    def region(self, fusion: Wrapper) -> Any:
        if self.escape_refusal is not None:
            raise EscapeRefused(f"{thunder_version()}: {self.escape_refusal}")
        region = _thunder_region.region_of(fusion.get_fd)
        if region is None:
            raise EscapeRefused(f"{thunder_version()} keeps no region (bound symbols, inputs, outputs) in the "
                                "closure of the fusion's get_fd")
        return _thunder_region.compile(*region)

    def repro_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
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

    def definition(self, partition: _frontends.Partition, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        runner = partition.runner
        if runner.use_cache or runner.last_used is None:
            # Exactly these inputs' definition, not another thread's last_used.
            return runner.get_fd(runner.to_descriptors(args))
        return runner.last_used

    describe = "Thunder fusion"


def _has_dtensor(args: tuple[Any, ...]) -> bool:
    """Whether a DTensor is among ``args``."""
    tensors = sys.modules.get("torch.distributed.tensor")
    return tensors is not None and any(isinstance(arg, tensors.DTensor) for arg in args)

