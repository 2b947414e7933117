"""Recording doubles of Lightning Thunder's nvFuser executor and of nvFuser's Python frontends, for the CPU suite.

Thunder cannot be imported here, so these fakes mimic the interface nvscope patches, no more:

* ``thunder.executors.nvfuserex_impl``: ``FusionDefinition`` (the chosen frontend's), ``execute_with_dtensors`` (the
  frontend's), ``annotate_for_profile`` (records the NVTX range names in `ThunderDouble.ranges`) and
  ``FusionDefinitionWrapper``, a ``slots`` dataclass with Thunder's fields whose ``__call__`` does what Thunder's
  does: ``get_fd`` (an ``lru_cache`` closure) on ``to_descriptors(args)`` unless ``use_cache`` is off, the inputs
  stored, collectives waited on, then inside ``annotate_for_profile(self.name)`` either ``execute_with_dtensors``
  (DTensor inputs) or ``fd.execute`` with the compile-time options. Module globals are looked up at call time,
  as in Thunder.
* ``thunder.executors.torch_autograd.ThunderFunction``: with torch, a real ``torch.autograd.Function`` whose
  backward calls a "compiled backward" that executes a fusion wrapper; without torch, a class of the same shape.
* ``thunder.executors.nvfuserex.nvfuser_version()``: a LooseVersion-like object; ``thunder.__version__``.
* `ThunderDouble.get_nvfuser_repro`: what ``thunder.examine.get_nvfuser_repro`` does once it found the fusion.

``autograd=False`` makes ThunderFunction the torch-free class even where torch is installed: for the programs that
tests run as child processes and that need no backward, since importing torch is most of such a process's time.

Shapes of other Thunder versions, for the refusal tests: ``drop`` leaves out wrapper fields or ThunderFunction
methods; ``lru_cache=True`` is closed Thunder PR 2806's (create_fd through nvFuser's LruFusionCache, so new
definitions come with a shared compiled cache).

Only the autograd part needs torch: the rest (and `fake_nvfuser_frontend`) imports and runs without it. Every module
goes into ``sys.modules`` through ``monkeypatch.setitem``, so it is gone after the test; the classes are fresh per test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

FRONTEND_FILE = Path(__file__).with_name("fake_nvfuser_frontend.py")
IMPL = "thunder.executors.nvfuserex_impl"
AUTOGRAD = "thunder.executors.torch_autograd"
VERSION = "thunder.executors.nvfuserex"
FIELDS: list[tuple[str, Any, Any]] = [  # Thunder's FusionDefinitionWrapper, in order: (name, type, default)
    ("get_fd", Any, dataclasses.MISSING), ("to_descriptors", Any, dataclasses.MISSING),
    ("name", str, dataclasses.MISSING), ("use_cache", bool, dataclasses.MISSING),
    ("cache_info", Any, None), ("cache_clear", Any, None), ("last_used", Any, None), ("last_inputs", Any, None),
    ("store_inputs", bool, False), ("save_fake_inputs", bool, False), ("enable_options", Any, None),
    ("disable_options", Any, None),
]


def load_frontend(monkeypatch: pytest.MonkeyPatch, name: str) -> Any:
    """A fresh fake frontend module called ``name`` ("nvfuser_direct" or "nvfuser"), registered in sys.modules."""
    spec = importlib.util.spec_from_file_location(name, FRONTEND_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


class LooseVersionLike:
    """What Thunder's ``nvfuser_version()`` returns (``looseversion.LooseVersion``): only ``str()`` matters."""

    def __init__(self, vstring: str) -> None:
        self.vstring = vstring

    def __str__(self) -> str:
        return self.vstring

    def __repr__(self) -> str:
        return f"LooseVersion({self.vstring!r})"


def _wrapper_class(impl: ModuleType, drop: tuple[str, ...]) -> type:
    def __call__(self: Any, *args: Any) -> Any:
        if self.use_cache or self.last_used is None:
            self.last_used = self.get_fd(self.to_descriptors(args))
        fd = self.last_used
        if self.store_inputs:
            self.last_inputs = args
        collectives = sys.modules.get("torch.distributed._functional_collectives")
        if collectives is not None:
            args = tuple(a.wait() if isinstance(a, collectives.AsyncCollectiveTensor) else a for a in args)
        tensors = sys.modules.get("torch.distributed.tensor")
        if tensors is not None and any(isinstance(a, tensors.DTensor) for a in args):
            with impl.annotate_for_profile(self.name):
                return impl.execute_with_dtensors(fd, args)
        with impl.annotate_for_profile(self.name):
            return fd.execute(args, device=fd._selected_device, save_repro_inputs=self.save_fake_inputs,
                              _enable_options=self.enable_options, _disable_options=self.disable_options)

    def __repr__(self: Any) -> str:
        return f"FusionDefinitionWrapper({self.name})"

    fields = [(name, kind, dataclasses.field(default=default)) for name, kind, default in FIELDS if name not in drop]
    cls = dataclasses.make_dataclass("FusionDefinitionWrapper", fields, slots=True, repr=False,
                                     namespace={"__call__": __call__, "__repr__": __repr__})
    cls.__module__ = IMPL
    return cls


def _thunder_function_class(drop: tuple[str, ...], autograd: bool) -> type:
    def forward(ctx: Any, compiled_backward: Any, flat_output: tuple[Any, ...], *flat_args: Any) -> tuple[Any, ...]:
        ctx.compiled_backward = compiled_backward
        return flat_output

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        return (None, None, *ctx.compiled_backward(list(grads)))

    try:
        if not autograd:
            raise ImportError
        import torch
    except ImportError:
        base: type = object
    else:
        base = torch.autograd.Function
        backward = torch.autograd.function.once_differentiable(backward)
    namespace = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    for name in drop:
        if name.startswith("ThunderFunction."):
            del namespace[name.partition(".")[2]]
    cls = type("ThunderFunction", (base,), namespace)
    cls.__module__ = AUTOGRAD
    return cls


class ThunderDouble:
    """Fake Thunder (+ frontend) in sys.modules for one test. ``fe`` is the frontend module (records executions)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, frontend: str = "direct", version: str | None = "0.2.35",
                 *, thunder_version: str = "0.2.6", drop: tuple[str, ...] = (), lru_cache: bool = False,
                 autograd: bool = True) -> None:
        self.fe = load_frontend(monkeypatch, "nvfuser_direct" if frontend == "direct" else "nvfuser")
        self.descriptor_calls: list[tuple[Any, ...]] = []
        self.built: list[Any] = []  # every FusionDefinition built by a get_fd (Thunder's cached or nvscope's uncached)
        self.ranges: list[str] = []  # the names given to annotate_for_profile (Thunder's NVTX ranges), in order
        self.region_runs: list[tuple[Any, ...]] = []  # the inputs of each run of a region's PyTorch form
        self.monkeypatch = monkeypatch
        self.lru_cache = lru_cache
        modules = {name: ModuleType(name) for name in ("thunder", "thunder.executors", IMPL, AUTOGRAD, VERSION)}
        for name, module in modules.items():
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(modules[parent], child, module)
            monkeypatch.setitem(sys.modules, name, module)
        modules["thunder"].__version__ = thunder_version  # type: ignore[attr-defined]
        self.impl, self.autograd, self.nvfuserex = modules[IMPL], modules[AUTOGRAD], modules[VERSION]
        self.impl.FusionDefinition = self.fe.FusionDefinition  # type: ignore[attr-defined]
        self.impl.FusionDefinitionWrapper = _wrapper_class(self.impl, drop)  # type: ignore[attr-defined]
        self.impl.execute_with_dtensors = self.fe.execute_with_dtensors  # type: ignore[attr-defined]
        self.impl.annotate_for_profile = self._annotate  # type: ignore[attr-defined]
        self.impl.create_fusion_definition_wrapper = (  # type: ignore[attr-defined]
            self._create_without_region if "region" in drop else self._create_fusion_definition_wrapper)
        self.install_region_modules()
        if lru_cache:
            def create_fd(*args: Any) -> Any:
                raise AssertionError("not called by the double")

            create_fd.num_fusions = lambda: 0  # type: ignore[attr-defined]  # as LruFusionCache's wrapper has
            self.impl.create_fd = create_fd  # type: ignore[attr-defined]
        self.autograd.ThunderFunction = _thunder_function_class(drop, autograd)  # type: ignore[attr-defined]
        self.nvfuserex.nvfuser_version = (  # type: ignore[attr-defined]
            lambda: None if version is None else LooseVersionLike(version)
        )

    @contextlib.contextmanager
    def _annotate(self, name: str) -> Iterator[None]:
        self.ranges.append(name)
        yield

    @property
    def Wrapper(self) -> Any:
        return self.impl.FusionDefinitionWrapper

    @property
    def Function(self) -> Any:
        return self.autograd.ThunderFunction

    @property
    def executions(self) -> list[Any]:
        return self.fe.EXECUTIONS  # type: ignore[no-any-return]

    def to_descriptors(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        self.descriptor_calls.append(args)
        return tuple((tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else None for a in args)

    def make_wrapper(self, name: str = "nvFusion0", enable: list[str] | None = None,
                     disable: list[str] | None = None, breaks_with: str | None = None,
                     ops: tuple[str, ...] = ("linear",), fails: str | None = None, *, inputs: int = 1,
                     eager: str = "double", **fields: Any) -> Any:
        """A fusion as Thunder's create_fusion_definition_wrapper makes it (options default to [] as in Thunder).

        ``breaks_with``: an option under which the fusion's definition fails in nvFuser's execute. ``ops``: the
        nvFuser ops its definition calls (``fd.ops.<name>(...)``, as nvFuser prints them); a linear by default, which
        every option can affect (the catalog gates ``fuse_matmul`` and ``matmul_expr_eval`` to matmul/linear).
        ``fails``: ``"<how>:<causes>:<cures>"``, how its definition goes wrong under its defaults and what cures it
        (the frontend double's ``FAILS``). Its region (what ``get_fd`` closes over, as in Thunder): ``inputs``
        inputs, each doubled by a bound symbol of the kind ``eager`` (`RegionSymbol`).
        """
        fe = self.fe
        sorted_unique_inputs = [Proxy(f"{name}_in{i}") for i in range(inputs)]
        sorted_unique_outputs = [Proxy(f"{name}_out{i}") for i in range(inputs)]
        bsyms = [BoundSymbol(RegionSymbol(eager), (a,), b) for a, b in zip(sorted_unique_inputs,
                                                                             sorted_unique_outputs, strict=True)]

        def create_fd(descriptors: tuple[Any, ...]) -> Any:
            with fe.FusionDefinition() as fd:
                for descriptor in descriptors:
                    fd.define_tensor(shape=list(descriptor[0]) if descriptor else [], dtype=fe.DataType.Float)
                for op in ops:
                    getattr(fd.ops, op)(0)
                if breaks_with is not None:
                    fd.define_scalar(fe.BREAKS_WITH + breaks_with)
                if fails is not None:
                    fd.define_scalar(fe.FAILS + fails)
            fd.descriptors = descriptors
            if self.lru_cache:  # LruFusionCache compiles (or finds) the definition's cache when it is created
                fd.fec = fe.ExecutorCache()
            self.built.append(fd)
            return fd

        options = {"enable_options": [] if enable is None else enable,
                   "disable_options": [] if disable is None else disable, **fields}
        return self.impl.create_fusion_definition_wrapper(  # type: ignore[attr-defined]
            bsyms, name, sorted_unique_inputs, sorted_unique_outputs, create_fd=create_fd, **options)

    def _create_fusion_definition_wrapper(self, bsyms: list[Any], name: str, sorted_unique_inputs: list[Any],
                                          sorted_unique_outputs: list[Any], *, create_fd: Callable[[Any], Any],
                                          **fields: Any) -> Any:
        """Thunder's ``create_fusion_definition_wrapper``: ``get_fd`` an ``lru_cache`` closure over the region."""
        @functools.lru_cache(maxsize=2048)
        def get_fd(input_descriptors: tuple[Any, ...]) -> Any:
            assert bsyms and sorted_unique_inputs and sorted_unique_outputs  # the region, in the closure as in Thunder
            return create_fd(input_descriptors)

        fields = {"use_cache": True, "cache_info": get_fd.cache_info, "cache_clear": get_fd.cache_clear, **fields}
        return self.Wrapper(get_fd, self.to_descriptors, name, **fields)

    def _create_without_region(self, bsyms: list[Any], name: str, sorted_unique_inputs: list[Any],
                               sorted_unique_outputs: list[Any], *, create_fd: Callable[[Any], Any],
                               **fields: Any) -> Any:
        """A Thunder whose ``get_fd`` keeps no region (``drop=("region",)``)."""
        @functools.lru_cache(maxsize=2048)
        def get_fd(input_descriptors: tuple[Any, ...]) -> Any:
            return create_fd(input_descriptors)

        fields = {"use_cache": True, "cache_info": get_fd.cache_info, "cache_clear": get_fd.cache_clear, **fields}
        return self.Wrapper(get_fd, self.to_descriptors, name, **fields)

    def install_region_modules(self) -> None:
        """What nvscope's PyTorch form of a region uses of Thunder: traces, two prims, SigInfo, the PyTorch
        executor and ``transform_for_execution`` (which refuses a bound symbol of the kind "unsupported")."""
        names = ("thunder.core", "thunder.core.prims", "thunder.core.trace", "thunder.core.codeutils",
                 "thunder.executors.passes", "thunder.executors.torchex")
        modules = {name: ModuleType(name) for name in names}
        for name, module in modules.items():
            self.monkeypatch.setitem(sys.modules, name, module)
        thunder, executors = sys.modules["thunder"], sys.modules["thunder.executors"]
        thunder.core = modules["thunder.core"]  # type: ignore[attr-defined]
        modules["thunder.core"]._double = self  # type: ignore[attr-defined]
        for name in ("prims", "trace", "codeutils"):
            setattr(modules["thunder.core"], name, modules[f"thunder.core.{name}"])
        executors.passes = modules["thunder.executors.passes"]  # type: ignore[attr-defined]
        executors.torchex = modules["thunder.executors.torchex"]  # type: ignore[attr-defined]
        prims = modules["thunder.core.prims"]
        prims.unpack_trivial = UNPACK_TRIVIAL  # type: ignore[attr-defined]
        prims.python_return = PYTHON_RETURN  # type: ignore[attr-defined]
        modules["thunder.core.trace"].TraceCtx = TraceCtx  # type: ignore[attr-defined]
        modules["thunder.core.trace"].tracectx = tracectx  # type: ignore[attr-defined]
        modules["thunder.core.codeutils"].SigInfo = SigInfo  # type: ignore[attr-defined]
        modules["thunder.executors.passes"].transform_for_execution = transform_for_execution  # type: ignore[attr-defined]
        torchex = modules["thunder.executors.torchex"]
        torchex.ex = TORCH_EXECUTOR  # type: ignore[attr-defined]
        torchex.no_autocast = self._no_autocast  # type: ignore[attr-defined]

    def _no_autocast(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            self.region_runs.append(args)
            return fn(*args)

        return run

    def get_nvfuser_repro(self, fusion: Any) -> str:
        """``thunder.examine.get_nvfuser_repro(trace, name)`` once it has found ``fusion`` in the trace."""
        if fusion.last_used is None:
            raise RuntimeError("Fusion definition needs to be executed to record the inputs.")
        if fusion.last_inputs is None:
            raise RuntimeError("Fusion definition inputs need to be recorded (nv_store_fusion_inputs=True).")
        return fusion.last_used.repro_script_for(fusion.last_inputs)  # type: ignore[no-any-return]

    def make_model(self, enable: list[str] | None = None, disable: list[str] | None = None,
                   breaks_with: str | None = None) -> tuple[Callable[[Any], Any], Any, Any]:
        """``model(x) = 2 * x`` as Thunder runs it: a forward fusion, then ThunderFunction; backward is a fusion.

        Needs torch. ``breaks_with`` goes to the backward fusion.
        """
        import torch

        forward_fusion = self.make_wrapper("nvFusion0", enable, disable)
        backward_fusion = self.make_wrapper("nvFusion1", enable, disable, breaks_with)

        def compiled_backward(grads: list[torch.Tensor]) -> list[torch.Tensor]:
            return backward_fusion(*grads)  # type: ignore[no-any-return]

        def model(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                flat_output = tuple(forward_fusion(x))
            return self.Function.apply(compiled_backward, flat_output, x)[0]  # type: ignore[no-any-return]

        return model, forward_fusion, backward_fusion


# --- A fusion's region, as far as nvscope's PyTorch form of it reads Thunder ----------------------------------------


class Proxy:
    """A Thunder proxy: a name in a trace."""

    def __init__(self, name: str) -> None:
        self.name = name


class RegionSymbol:
    """A region's op: "double" computes ``2 * x`` (what the frontend double's fusions compute); "wrong" ``3 * x``;
    "unsupported" is one Thunder's PyTorch executor has no implementation for; "nvfuser_only" one it leaves in the
    trace, which fails when run (as the nvFuser executor's own sdpa symbol does)."""

    def __init__(self, kind: str, name: str | None = None) -> None:
        self.kind = kind
        self.name = name or f"region_{kind}"

    def __call__(self, x: Any) -> Any:
        if self.kind == "double":
            return 2 * x
        if self.kind == "wrong":
            return 3 * x
        if self.kind == "nvfuser_only":
            raise TypeError("_scaled_dot_product_flash_attention_forward() missing 2 required keyword-only "
                            "arguments: 'fd' and 'lc_to_nv_map'")
        raise AssertionError(f"a {self.kind} symbol does not run")

    def bind(self, *args: Any, output: Any) -> BoundSymbol:
        return BoundSymbol(self, args, output)


class BoundSymbol:
    def __init__(self, sym: Any, args: tuple[Any, ...], output: Any) -> None:
        self.sym, self.args, self.output = sym, args, output
        self.subsymbols: list[BoundSymbol] = []

    @property
    def flat_outs(self) -> list[Any]:
        return list(self.output) if isinstance(self.output, (list, tuple)) else [self.output]


class _Prim:
    """``prims.unpack_trivial``/``prims.python_return``: callable inside a trace (`tracectx`), and ``bind``-able."""

    def __init__(self, name: str) -> None:
        self.name = name

    def bind(self, *args: Any, output: Any) -> BoundSymbol:
        return BoundSymbol(self, args, output)

    def __call__(self, proxy: Any, *, name: str) -> Any:
        _TRACES[-1].bound_symbols.append(BoundSymbol(self, (proxy,), proxy))
        return proxy


UNPACK_TRIVIAL = _Prim("unpack_trivial")
PYTHON_RETURN = _Prim("python_return")
TORCH_EXECUTOR = object()
_TRACES: list[TraceCtx] = []


class SigInfo:
    def __init__(self, name: str) -> None:
        self.name = name
        self.args: list[Any] = []


class TraceCtx:
    def __init__(self, fn: Any = None) -> None:
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}
        self.names: set[str] = set()
        self.bound_symbols: list[BoundSymbol] = []
        self._siginfo: SigInfo | None = None

    def add_name(self, name: str) -> None:
        assert name not in self.names, f"{name} named twice"
        self.names.add(name)

    def python_callable(self, include_decorators: bool = True) -> Callable[..., Any]:
        assert self._siginfo is not None and [a for a, _ in self._siginfo.args] == [p.name for p in self.args]
        bsyms = list(self.bound_symbols)

        def run(*args: Any) -> Any:
            values = {p.name: a for p, a in zip(self.args, args, strict=True)}
            for bsym in bsyms:
                if bsym.sym is UNPACK_TRIVIAL:
                    continue
                if bsym.sym is PYTHON_RETURN:
                    return [values[p.name] for p in bsym.args[0]]
                values[bsym.output.name] = bsym.sym(*(values[a.name] for a in bsym.args))
            raise AssertionError("a trace without a return")

        return run


@contextlib.contextmanager
def tracectx(trace: TraceCtx) -> Iterator[None]:
    _TRACES.append(trace)
    try:
        yield
    finally:
        _TRACES.pop()


def transform_for_execution(trace: TraceCtx, executors_list: tuple[Any, ...]) -> TraceCtx:
    assert executors_list == (TORCH_EXECUTOR,)
    for bsym in trace.bound_symbols:
        if isinstance(bsym.sym, RegionSymbol) and bsym.sym.kind == "unsupported":
            raise RuntimeError(f"Could not find an executor for bound symbol {bsym.sym.name}")
    return trace


def chain_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int) -> Path:
    """`chain_script` written as ``train.py`` in ``tmp_path``, the checkout put on the children's ``PYTHONPATH``."""
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FRONTEND_FILE.parents[1]), os.environ.get("PYTHONPATH", "")]))
    path = tmp_path / "train.py"
    path.write_text(chain_script(n))
    return path


def chain_script(n: int = 4, ops: tuple[str, ...] = ("slice",)) -> str:
    """A script whose ``step()`` runs ``n`` Thunder-double fusions one after the other (``x = 1.0`` doubled by each)
    and whose ``eager()`` is the step's reference (``2 ** n``). ``FAILS="1=raise::-resize_scheduler;3=..."`` in the
    environment marks fusions that go wrong under their defaults (`make_wrapper`'s ``fails``), ``EAGER="1=wrong"``
    their regions' kind (``eager``: the PyTorch route's numbers, or "unsupported": no route); run as a program it
    calls ``step()``. For tests that run it in child processes (its directory goes on ``sys.path``)."""
    return f'''\
import os, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import pytest
from thunder_double import ThunderDouble
import nvscope.thunder

MONKEYPATCH = pytest.MonkeyPatch()
double = ThunderDouble(MONKEYPATCH, autograd=False)  # no backward here: its children run without importing torch
nvscope.thunder.install()
FAILS = {{int(k): v for k, v in (p.split("=", 1) for p in os.environ.get("FAILS", "").split(";") if p)}}
EAGER = {{int(k): v for k, v in (p.split("=", 1) for p in os.environ.get("EAGER", "").split(";") if p)}}
wrappers = [double.make_wrapper(f"nvFusion{{i}}", fails=FAILS.get(i), ops={ops!r}, eager=EAGER.get(i, "double"))
            for i in range({n})]

def step():
    x = 1.0
    for w in wrappers:
        (x,) = w(x)
    return x

def eager():
    return {2.0 ** n!r}

if __name__ == "__main__":
    step()
'''


def reset_nvscope() -> None:
    """Undo what a test left, before monkeypatch drops the fakes: ``nvscope.uninstall()``, the one reset of the state
    registered with `nvscope._core._state` (patches, fusion tables, shared definitions, id numbering, memos)."""
    import nvscope  # here, not at the top: a process may load the doubles before nvscope (NVSCOPE_SHARE=all's test)

    nvscope.uninstall()


class CompileStats:
    """Thunder's ``cs`` of a jitted function, as far as nvscope reads it: ``interpreter_cache``, its traces."""

    def __init__(self) -> None:
        self.interpreter_cache: list[tuple[Any, ...]] = []


def _input_metadata(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What Thunder's cache tells inputs apart by (its prologue checks): type, shape, dtype, requires_grad."""
    def one(value: Any) -> Any:
        if hasattr(value, "shape"):
            return (type(value).__name__, tuple(value.shape), str(getattr(value, "dtype", None)),
                    bool(getattr(value, "requires_grad", False)))
        return type(value).__name__
    return tuple(one(a) for a in args) + tuple((k, one(v)) for k, v in sorted(kwargs.items()))


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``thunder.jit``'s calling shape: the compiled function runs inside a frame called ``fn_`` (in a file under
    "thunder") whose local ``fn`` is the user's function; nvscope names a fusion's jitted function from it. As in
    Thunder, ``fn_`` has ``cs`` (`CompileStats`, also ``fn_._lc_cs``) and the ``cache_entry`` it runs, a tuple appended
    to ``cs.interpreter_cache`` the first time the function meets inputs with new metadata (a new trace: its fusions
    are other fusions, which the caller's ``fn`` picks by the inputs)."""
    cs = CompileStats()

    def fn_(*args: Any, **kwargs: Any) -> Any:
        key = _input_metadata(args, kwargs)
        cache_entry = next((entry for entry in cs.interpreter_cache if entry[0] == key), None)
        if cache_entry is None:
            cache_entry = (key,)  # Thunder's CacheEntry starts with its prologue, here the metadata it checks
            cs.interpreter_cache.append(cache_entry)
        return fn(*args, **kwargs)

    fn_._lc_cs = cs  # type: ignore[attr-defined]
    return fn_
