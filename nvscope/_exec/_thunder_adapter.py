"""The shape of Thunder's per-fusion callable that nvscope drives: ``FusionDefinitionWrapper`` as Thunder 0.2.6 and
0.2.7.dev define it (``thunder/executors/nvfuserex_impl.py``), as an `Adapter` of the one execution path.

A partition of a fusion is a copy of its wrapper: its ``get_fd`` is an ``lru_cache`` of FusionDefinitions built by
Thunder's own uncached ``get_fd.__wrapped__`` (nvFuser does not key compiled kernels on options, so each option set
needs definitions of its own; salted on the legacy frontend), its option fields are the effective options, and its
``name`` carries them. Thunder's *original* ``__call__`` runs on that copy, so ``use_cache``,
``last_used``/``last_inputs``, the NVTX range (``annotate_for_profile(self.name)``, here ``nvFusion0
[+fuse_matmul -matmul_expr_eval]: (matmul, ...)``) and the DTensor path stay Thunder's own code. Afterwards
``last_used``/``last_inputs`` are copied to the real wrapper, so ``thunder.examine.get_nvfuser_repro`` returns the
definition that ran, whose repro script passes its options. One copy per partition, never a field swapped per
call: threads running one fusion under different scopes cannot see each other's options.

Another wrapper shape (upstream Thunder after PR 2813, or with PR 2652's ``use_dtensor_execute`` field) is another
`Adapter` subclass listed in `SHAPES`, which `nvscope.thunder.install` picks from; not ``if``s in this one.
"""

from __future__ import annotations

import copy
import functools
import operator
import sys
import weakref
from types import ModuleType
from typing import Any

from nvscope._core import (
    FusionInfo,
    OptionSet,
    UnsupportedError,
    _patches,
    claim,
    inputs_digest,
    ops_of_definition,
    remember,
)
from nvscope._exec import _events, _frontends, _shared, _thunder_region
from nvscope._exec._adapter import Adapter
from nvscope._exec._execute import patch
from nvscope._exec._fusion_table import TABLE_ATTRIBUTE as _TABLE
from nvscope._exec._fusion_table import EscapeRefused, FusionTable
from nvscope._exec._thunder_autograd import jitted_function, make_backward, make_forward

__all__ = ["SHAPES", "ThunderAdapter"]

OWNER = "thunder"  # its patches' owner in `nvscope._core._patches`, and its name in `INSTALLED`
PROVEN = "Thunder 0.2.6 and 0.2.7.dev20260201"  # tests/gpu ran with both on the H200
IMPL_MODULE = "thunder.executors.nvfuserex_impl"
_INFO = "_nvscope_info"  # its FusionInfo, beside the table: kept by `forget`, then claimed again from it (`remember`)


def thunder_version() -> str:
    version = getattr(sys.modules.get("thunder"), "__version__", None)
    return f"Thunder {version}" if version else "this Thunder (version unknown)"


def short(name: str) -> str:
    """The fusion's name as the trace calls it: Thunder (0.2.6, 0.2.7.dev) names the wrapper "nvFusion0: (op, ...)"."""
    return name.partition(": ")[0]


# Thunder's ``FusionDefinitionWrapper``, the adapter's fusion type (no annotation of Thunder's to name: it is optional).
Wrapper = Any


class ThunderAdapter(Adapter[Wrapper]):
    """Thunder 0.2.6 / 0.2.7.dev's ``FusionDefinitionWrapper`` (a slots dataclass)."""

    FIELDS = ("get_fd", "to_descriptors", "name", "use_cache", "last_used", "last_inputs", "store_inputs",
              "enable_options", "disable_options")

    def __init__(self, impl: ModuleType, autograd: ModuleType, version_error: UnsupportedError | None) -> None:
        self.impl, self.autograd = impl, autograd
        self.wrapper_class = impl.FusionDefinitionWrapper
        self.original = self.wrapper_class.__call__
        self.frontend = _frontends.frontend_of(impl.FusionDefinition)
        self.version_error = version_error
        self.escape_refusal = _thunder_region.escape_refusal(impl)  # why on_error="torch" cannot run regions, or None
        self.table_of = operator.attrgetter(f"get_fd.{_TABLE}")
        self._tables: weakref.WeakSet[Any] = weakref.WeakSet()  # every get_fd holding a table, for `forget`
        original, quiet = self.original, self.frontend.quiet
        if self.frontend is _frontends.DIRECT:
            self._run_runner = original  # nothing to wrap: no context manager on the hot path
        else:
            def run_quietly(runner: Any, *args: Any) -> Any:
                with quiet():  # a partition follows the legacy "Reset the FusionCache" advice already
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
        # Thunder's wrapper is a slots dataclass: its fields are known before any fusion exists.
        fields = set(getattr(wrapper, "__dataclass_fields__", ())) | set(getattr(wrapper, "__slots__", ()))
        missing += [f"FusionDefinitionWrapper.{name}" for name in cls.FIELDS if name not in fields]
        if getattr(impl, "FusionDefinition", None) is None:
            missing.append(f"{IMPL_MODULE}.FusionDefinition")
        return missing

    def install(self) -> None:
        """Patch the wrapper's ``__call__`` and ``execute_with_dtensors`` (on demand: with no scope or audit anywhere
        Thunder's own run), and ``ThunderFunction.forward``/``backward`` (`nvscope._exec._thunder_autograd`)."""
        impl, function_class = self.impl, self.autograd.ThunderFunction
        self.frontend.acquire(sys.modules.get(impl.FusionDefinition.__module__.partition(".")[0]), OWNER)
        original_forward = vars(function_class)["forward"]
        original_backward = vars(function_class)["backward"]
        _patches.apply(OWNER, self.wrapper_class, "__call__", patch(self, self.original), on_demand=True)
        if callable(getattr(impl, "execute_with_dtensors", None)):  # nvFuser >= 0.2.28; Thunder calls it for DTensors
            _patches.apply(OWNER, impl, "execute_with_dtensors",
                           _frontends.make_execute_with_dtensors(impl.execute_with_dtensors))
        # Not on demand: a backward fusion's id names its forward's jitted function, which only the forward can see.
        _patches.apply(OWNER, function_class, "forward", staticmethod(make_forward(original_forward.__func__)))
        _patches.apply(OWNER, function_class, "backward", staticmethod(make_backward(original_backward.__func__)),
                       on_demand=True)
        # With the direct adapter beside it, the definitions Thunder's own call executes are Thunder's: run as they are.
        _frontends.THUNDER_CALLERS.add(self.original.__code__)
        code = getattr(getattr(getattr(impl, "execute_with_dtensors", None), "__wrapped__", None), "__code__", None)
        if code is not None:
            _frontends.THUNDER_CALLERS.add(code)

    def uninstall(self) -> bool:
        restored = _patches.restore(OWNER)
        _frontends.THUNDER_CALLERS.clear()
        self.forget()
        self.frontend.release(OWNER)
        return restored

    def forget(self) -> None:
        """Drop every fusion's table (its partitions and their compiled kernels)."""
        for get_fd in list(self._tables):
            vars(get_fd).pop(_TABLE, None)
        self._tables.clear()

    # --- Adapter -------------------------------------------------------------------------------------------------

    def attach(self, fusion: Wrapper, table: FusionTable[_frontends.Partition]) -> None:
        setattr(fusion.get_fd, _TABLE, table)
        try:
            self._tables.add(fusion.get_fd)
        except TypeError:  # pragma: no cover - a get_fd without weak references keeps its table after uninstall
            pass

    def identify(self, fusion: Wrapper, args: tuple[Any, ...], kwargs: dict[str, Any]) -> FusionInfo:
        get_fd = fusion.get_fd
        known = getattr(get_fd, _INFO, None)  # seen before nvscope.uninstall(): its site and key, claimed again
        if known is not None:
            return remember(known)
        # The ops of its definition: the one Thunder last ran if any (a warm fusion costs nothing more), else one
        # from Thunder's uncached builder for these inputs (built, not compiled; Thunder's cache stays as it was).
        try:
            fd = fusion.last_used
            if fd is None:
                fd = getattr(get_fd, "__wrapped__", get_fd)(fusion.to_descriptors(args))
            ops: tuple[str, ...] | None = ops_of_definition(repr(fd))
        except Exception:
            ops = None  # unknown: the catalog's gates then drop nothing
        jitted = jitted_function()
        function, site = jitted if jitted is not None else (None, None)
        # Its inputs tell the traces of one function apart (Thunder's name restarts per trace), whatever order the
        # function met them in; always there with a function, so that an id does not depend on how many traces the
        # function has. Without one, the id is the short form (numbered), as nvscope cannot tell where it sits.
        info = claim(short(fusion.name), _events.PHASE.get(), ops, function, site,
                     key=None if site is None else inputs_digest(args))
        try:
            setattr(get_fd, _INFO, info)
        except (AttributeError, TypeError):  # pragma: no cover - a get_fd without a __dict__: numbered anew
            pass
        return info

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
        # nvfuser_direct: a definition equal to one another fusion compiled for these options runs that one
        # (nvscope._exec._shared). The legacy frontend's global cache does that itself (its salt depends on the
        # options only): its definitions join the entry for its compile's failure only (share=False).
        share = _shared.enabled()
        direct = frontend is _frontends.DIRECT
        own = options == self.own_options(fusion, {})  # the fusion's defaults, run shared (`nv_options(share=True)`)

        @functools.lru_cache(maxsize=maxsize)
        def partition_get_fd(descriptors: Any) -> Any:
            with frontend.own_definitions(options):
                fd = uncached(descriptors)
            if direct and "fec" in getattr(fd, "__dict__", ()):
                # Compiled before it ever ran: its cache came from a shared one (an LruFusionCache), not its own.
                raise UnsupportedError(
                    f"{thunder_version()}, fusion {info.id}: a new FusionDefinition came with a compiled cache "
                    "already, so it may share kernels compiled for other options; nvscope cannot give this option "
                    "set kernels of its own. Set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole process instead"
                )
            if share:
                adopted = _shared.SHARED.adopt(fd, options, info.id, inputs=descriptors, share=direct, own=own)[0]
                if adopted is not fd:
                    return adopted  # compiled (or compiling) for another partition; it carries its options already
            _frontends.carry(fd, options)
            return fd

        runner = copy.copy(fusion)
        runner.get_fd = partition_get_fd
        # The options go right after the fusion's own name, before the ops Thunder appends
        # ("nvFusion0: (add, mul)" becomes "nvFusion0 [+fast_math]: (add, mul)"): visible in a narrow timeline row.
        # A fusion run shared at its own options (`nv_options(share=True)`) keeps Thunder's name: its ranges and
        # kernels are the defaults', and a profile of the defaults should read as Thunder's own.
        if not own:
            name, colon, ops = fusion.name.partition(": ")
            runner.name = f"{name} [{options.label()}]{colon}{ops}"
        runner.enable_options = options.enable_list()
        runner.disable_options = options.disable_list()
        runner.last_used = None
        runner.last_inputs = None
        for field, value in (("cache_info", partition_get_fd.cache_info),
                             ("cache_clear", partition_get_fd.cache_clear)):
            if hasattr(runner, field):  # Thunder's fields, pointing at this option set's cache
                setattr(runner, field, value)
        # Thunder's own __call__ (wrapped in the legacy frontend's quiet flag) on the runner; a partial, not a
        # closure: it spares the lane a Python frame and a tuple.
        call = functools.partial(self._run_runner, runner)
        # What ran is what Thunder's tools (``get_nvfuser_repro``) should see: the partition's definition and inputs
        # on the real wrapper. With use_cache off, last_used *is* Thunder's cache (the one definition it runs), so
        # the real wrapper's own stays; get_nvfuser_repro then shows the default. Thunder sets both flags when it
        # makes the wrapper, and the runner is nvscope's own copy of it.
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
            # DTensor inputs: Thunder's own path runs nvFuser's ``execute_with_dtensors(fd, args)``, which passes no
            # compile-time options (Thunder 0.2.6 and 0.2.7.dev alike). Sharing changes no option, so such a call runs
            # Thunder's own path as it is; a shared definition cannot serve it, as it is keyed on, and compiled
            # for, these options, also for the scoped fusions that run it with them.
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
        call = functools.partial(self._run_runner, fusion)  # Thunder's own __call__ on the fusion itself

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
        return _local_inputs(args)

    def definition(self, partition: _frontends.Partition, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        runner = partition.runner
        if runner.use_cache or runner.last_used is None:
            # The partition's cache gives the definition for exactly these inputs (no other thread's last_used).
            return runner.get_fd(runner.to_descriptors(args))
        return runner.last_used

    describe = "Thunder fusion"


def _has_dtensor(args: tuple[Any, ...]) -> bool:
    """Whether Thunder's wrapper would run ``args`` through ``execute_with_dtensors`` (a DTensor among them)."""
    tensors = sys.modules.get("torch.distributed.tensor")
    return tensors is not None and any(isinstance(arg, tensors.DTensor) for arg in args)


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


# The wrapper shapes nvscope knows, tried in order by nvscope.thunder.install.
SHAPES: tuple[type[ThunderAdapter], ...] = (ThunderAdapter,)
