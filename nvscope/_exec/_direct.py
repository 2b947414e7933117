"""nvFuser's ``nvfuser_direct`` frontend, and `Frontend`, the base every frontend builds on: ``nvfuser_direct``
needs nothing more (every FusionDefinition owns its FusionExecutorCache, so a fresh definition per option set is a
compiled cache of its own). The legacy ``nvfuser`` frontend builds on it in `nvscope._exec._legacy`; the table of
both is `nvscope._exec._frontends.FRONTENDS`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

from nvscope._core import OptionSet, UnsupportedError

__all__ = ["DIRECT", "Frontend"]

_OPTION_KWARGS = ("_enable_options", "_disable_options")


class Frontend:
    """``nvfuser_direct``: a fresh FusionDefinition is a compiled cache of its own; no hooks needed."""

    __slots__ = ("module",)

    def __init__(self, module: str) -> None:
        self.module = module  # the Python module's name

    def __repr__(self) -> str:
        return f"<nvscope frontend {self.module}>"

    def own_definitions(self, options: OptionSet) -> AbstractContextManager[None]:
        """Definitions built on this thread inside get a compiled cache of their own for ``options``."""
        return nullcontext()

    def quiet(self) -> AbstractContextManager[None]:
        """Executions on this thread inside are partitioned (the legacy frontend drops its reset warning)."""
        return nullcontext()

    def acquire(self, module: ModuleType | None, user: str) -> None:
        """``user`` (an adapter) starts driving this frontend (``module``, if imported): install what it needs."""

    def release(self, user: str) -> None:
        """``user`` stopped: the last release removes what `acquire` installed."""

    def execute(self, call: Any, fd: Any, args: tuple[Any, ...], kwargs: dict[str, Any], enable: list[str],
                disable: list[str]) -> Any:
        """``call(fd, *args, **kwargs)`` (an nvFuser ``execute``) with these option lists in place of passed ones."""
        rest = {k: v for k, v in kwargs.items() if k not in _OPTION_KWARGS}
        with self.quiet():
            return call(fd, *args, _enable_options=enable, _disable_options=disable, **rest)

    def rebuild(self, fd: Any, module: ModuleType, options: OptionSet, definition: str | None = None) -> Any:
        """A fresh FusionDefinition with ``fd``'s definition, a compiled cache of its own for ``options``.

        Built from the Python that nvFuser prints for it: both frontends print an exact definition (``repr(fd)``, the
        body of their own repro scripts). ``definition`` is ``repr(fd)`` if the caller has it.
        """
        namespace: dict[str, Any] = {}
        if definition is None:
            definition = repr(fd)
        prelude = "import torch\n" if "torch." in definition else ""  # as in nvFuser's repro scripts, when it is used
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
