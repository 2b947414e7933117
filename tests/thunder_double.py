"""Recording doubles of Lightning Thunder's nvFuser executor and of nvFuser's Python frontends, for the CPU suite.

Thunder cannot be imported here, so these fakes mimic the interface nvscope patches, no more:

* ``thunder.executors.nvfuserex_impl``: ``FusionDefinition`` (the chosen frontend's) and ``FusionDefinitionWrapper``,
  a ``slots`` dataclass with Thunder's fields whose ``__call__`` does what Thunder's does: ``get_fd`` (an
  ``lru_cache`` closure) on ``to_descriptors(args)``, then ``fd.execute`` with the compile-time options.
* ``thunder.executors.torch_autograd.ThunderFunction``: a real ``torch.autograd.Function`` whose backward calls a
  "compiled backward" that executes a fusion wrapper, so backward fusions run under whatever scope is active.
* ``thunder.executors.nvfuserex.nvfuser_version()``: a LooseVersion-like object.

The frontend is `fake_nvfuser_frontend`, loaded as ``nvfuser_direct`` or ``nvfuser`` (legacy). Every module goes into
``sys.modules`` through ``monkeypatch.setitem``, so it is gone after the test; the classes are fresh per test.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import nvscope._autoinstall
import nvscope.nvfuser
import nvscope.thunder

FRONTEND_FILE = Path(__file__).with_name("fake_nvfuser_frontend.py")
IMPL = "thunder.executors.nvfuserex_impl"
AUTOGRAD = "thunder.executors.torch_autograd"
VERSION = "thunder.executors.nvfuserex"


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


def _wrapper_class() -> type:
    @dataclass(slots=True)
    class FusionDefinitionWrapper:
        get_fd: Callable[..., Any]
        to_descriptors: Callable[..., Any]
        name: str
        use_cache: bool
        cache_info: Callable[..., Any] | None = None
        cache_clear: Callable[..., Any] | None = None
        last_used: Any = None
        last_inputs: Any = None
        store_inputs: bool = False
        save_fake_inputs: bool = False
        enable_options: list[str] | None = None
        disable_options: list[str] | None = None

        def __call__(self, *args: Any) -> Any:
            if self.use_cache or self.last_used is None:
                self.last_used = self.get_fd(self.to_descriptors(args))
            fd = self.last_used
            if self.store_inputs:
                self.last_inputs = args
            return fd.execute(args, device=fd._selected_device, save_repro_inputs=self.save_fake_inputs,
                              _enable_options=self.enable_options, _disable_options=self.disable_options)

        def __repr__(self) -> str:
            return f"FusionDefinitionWrapper({self.name})"

    FusionDefinitionWrapper.__module__ = IMPL
    return FusionDefinitionWrapper


def _thunder_function_class() -> type:
    class ThunderFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, compiled_backward: Any, flat_output: tuple[torch.Tensor, ...],
                    *flat_args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            ctx.compiled_backward = compiled_backward
            return flat_output

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
            return (None, None, *ctx.compiled_backward(list(grads)))

    ThunderFunction.__module__ = AUTOGRAD
    return ThunderFunction


class ThunderDouble:
    """Fake Thunder (+ frontend) in sys.modules for one test. ``fe`` is the frontend module (records executions)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, frontend: str = "direct", version: str | None = "0.2.35"):
        self.fe = load_frontend(monkeypatch, "nvfuser_direct" if frontend == "direct" else "nvfuser")
        self.descriptor_calls: list[tuple[Any, ...]] = []
        self.built: list[Any] = []  # every FusionDefinition built by a get_fd (Thunder's cached or nvscope's uncached)
        modules = {name: ModuleType(name) for name in ("thunder", "thunder.executors", IMPL, AUTOGRAD, VERSION)}
        for name, module in modules.items():
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(modules[parent], child, module)
            monkeypatch.setitem(sys.modules, name, module)
        self.impl, self.autograd, self.nvfuserex = modules[IMPL], modules[AUTOGRAD], modules[VERSION]
        self.impl.FusionDefinition = self.fe.FusionDefinition  # type: ignore[attr-defined]
        self.impl.FusionDefinitionWrapper = _wrapper_class()  # type: ignore[attr-defined]
        self.autograd.ThunderFunction = _thunder_function_class()  # type: ignore[attr-defined]
        self.nvfuserex.nvfuser_version = (  # type: ignore[attr-defined]
            lambda: None if version is None else LooseVersionLike(version)
        )

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
        return tuple((tuple(a.shape), str(a.dtype)) if isinstance(a, torch.Tensor) else None for a in args)

    def make_wrapper(self, name: str = "nvFusion0", enable: list[str] | None = None,
                     disable: list[str] | None = None, **fields: Any) -> Any:
        """A fusion as Thunder's create_fusion_definition_wrapper makes it (options default to [] as in Thunder)."""
        fe = self.fe

        def create_fd(descriptors: tuple[Any, ...]) -> Any:
            with fe.FusionDefinition() as fd:
                for descriptor in descriptors:
                    fd.define_tensor(shape=list(descriptor[0]), dtype=fe.DataType.Float)
            fd.descriptors = descriptors
            self.built.append(fd)
            return fd

        @functools.lru_cache(maxsize=2048)
        def get_fd(input_descriptors: tuple[Any, ...]) -> Any:
            return create_fd(input_descriptors)

        return self.Wrapper(get_fd, self.to_descriptors, name, True, get_fd.cache_info, get_fd.cache_clear,
                            enable_options=[] if enable is None else enable,
                            disable_options=[] if disable is None else disable, **fields)

    def make_model(self, enable: list[str] | None = None, disable: list[str] | None = None
                   ) -> tuple[Callable[[torch.Tensor], torch.Tensor], Any, Any]:
        """``model(x) = 2 * x`` as Thunder runs it: a forward fusion, then ThunderFunction; backward is a fusion."""
        forward_fusion = self.make_wrapper("nvFusion0", enable, disable)
        backward_fusion = self.make_wrapper("nvFusion1", enable, disable)

        def compiled_backward(grads: list[torch.Tensor]) -> list[torch.Tensor]:
            return backward_fusion(*grads)  # type: ignore[no-any-return]

        def model(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                flat_output = tuple(forward_fusion(x))
            return self.Function.apply(compiled_backward, flat_output, x)[0]  # type: ignore[no-any-return]

        return model, forward_fusion, backward_fusion


def reset_nvscope() -> None:
    """Undo every patch and the autoinstall state a test may have left (before monkeypatch drops the fakes)."""
    nvscope.uninstall()
