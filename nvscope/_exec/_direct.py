"""nvFuser's ``nvfuser_direct`` frontend, and `Frontend`, the base the legacy frontend builds on."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

from nvscope._core import OptionSet, UnsupportedError

__all__ = ["DIRECT", "Frontend"]

_OPTION_KWARGS = ("_enable_options", "_disable_options")


class Frontend:
    """``nvfuser_direct``: a fresh FusionDefinition is a compiled cache of its own."""

    __slots__ = ("module",)

    def __init__(self, module: str) -> None:
        self.module = module

    def __repr__(self) -> str:
        return f"<nvscope frontend {self.module}>"

    def own_definitions(self, options: OptionSet) -> AbstractContextManager[None]:
        """Definitions built on this thread inside get a compiled cache of their own for ``options``."""
        return nullcontext()

    def quiet(self) -> AbstractContextManager[None]:
        """Executions on this thread inside are partitioned."""
        return nullcontext()

    def acquire(self, module: ModuleType | None, user: str) -> None:
        """``user`` starts driving this frontend."""

    def release(self, user: str) -> None:
        """``user`` stopped: the last release undoes `acquire`."""

    def execute(self, call: Any, fd: Any, args: tuple[Any, ...], kwargs: dict[str, Any], enable: list[str],
                disable: list[str]) -> Any:
        """``call(fd, *args, **kwargs)`` with these option lists in place of passed ones."""
        rest = {k: v for k, v in kwargs.items() if k not in _OPTION_KWARGS}
        with self.quiet():
            return call(fd, *args, _enable_options=enable, _disable_options=disable, **rest)

    def rebuild(self, fd: Any, module: ModuleType, options: OptionSet, definition: str | None = None) -> Any:
        """A fresh FusionDefinition, a compiled cache of its own, built from ``fd``'s exact printed definition."""
        namespace: dict[str, Any] = {}
        if definition is None:
            definition = repr(fd)
        prelude = "import torch\n" if "torch." in definition else ""
        exec(f"{prelude}from {module.__name__} import FusionDefinition, DataType\n{definition}", namespace)
        define = next((v for k, v in namespace.items() if k.startswith("nvfuser_fusion") and callable(v)), None)
        if define is None:
            raise UnsupportedError(
                f"nvscope cannot give this {module.__name__} FusionDefinition a compiled cache per option set: its "
                "printed definition has no `nvfuser_fusion...` function to rebuild it from (an nvFuser version nvscope "
                "does not know?). Run it outside the scope, or set NVFUSER_ENABLE/NVFUSER_DISABLE for the whole "
                "process."
            )
        with self.own_definitions(options), module.FusionDefinition() as copy:
            define(copy)
        return copy


DIRECT = Frontend("nvfuser_direct")
