"""A recording double of an nvFuser Python frontend, loaded fresh per test as ``nvfuser_direct`` or ``nvfuser``.

`thunder_double.load_frontend` executes this file as a module of either name, so ``FusionDefinition.__module__`` is
that name (what ``nvscope.nvfuser.frontend_of`` looks at). Loaded as ``nvfuser`` it behaves like the legacy frontend
where nvscope depends on it: ``execute`` warns "Reset the FusionCache manually..." through this module's global name
``warnings`` whenever options are passed. It mimics the interface only; it computes ``2 * input`` for each input.

Each ``execute`` appends an `Execution` to ``EXECUTIONS``: which FusionDefinition ran, the option lists it was given
(the very objects), the thread. ``DELAY`` makes an execution last a while and ``OVERLAPS`` counts executions that
started while another one was running.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

LEGACY = __name__ == "nvfuser"


class DataType(enum.Enum):
    Float = "Float"
    Int = "Int"

    def __repr__(self) -> str:
        return f"DataType.{self.name}"


@dataclass(frozen=True)
class Execution:
    fd: Any
    enable: Any
    disable: Any
    thread: str
    device: Any
    inputs: tuple[Any, ...] = ()

    def __repr__(self) -> str:
        return (f"Execution(fd=<FusionDefinition #{self.fd.serial}>, enable={self.enable!r}, "
                f"disable={self.disable!r}, thread={self.thread!r})")


EXECUTIONS: list[Execution] = []
DELAY = 0.0
OVERLAPS: list[str] = []
_running = [0]
_running_lock = threading.Lock()
_serial = itertools.count()


class FusionDefinition:
    def __init__(self) -> None:
        self.ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.serial = next(_serial)
        self.finished = False
        self._selected_device = 0

    def __enter__(self) -> FusionDefinition:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.finished = True

    def define_tensor(self, *args: Any, **kwargs: Any) -> int:
        self.ops.append(("define_tensor", args, kwargs))
        return len(self.ops) - 1

    def define_scalar(self, *args: Any, **kwargs: Any) -> int:
        self.ops.append(("define_scalar", args, kwargs))
        return len(self.ops) - 1

    def scalars(self) -> list[Any]:
        """The values given to define_scalar, in order."""
        return [args[0] for name, args, _ in self.ops if name == "define_scalar"]

    def __repr__(self) -> str:
        lines = []
        for name, args, kwargs in self.ops:
            parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
            lines.append(f"    fd.{name}({', '.join(parts)})")
        header = f"def nvfuser_fusion_id{self.serial}" if LEGACY else "def nvfuser_fusion"
        return f"{header}(fd : FusionDefinition) -> None :\n" + ("\n".join(lines) or "    pass") + "\n"

    def execute(self, inputs: Any, *, device: Any = None, save_repro_inputs: bool = False,
                _enable_options: Any = (), _disable_options: Any = ()) -> list[Any]:
        assert self.finished, "executed a FusionDefinition whose definition was never finished"
        if LEGACY and (len(_enable_options) or len(_disable_options)):
            warnings.warn(  # noqa: B028 (as nvFuser does)
                "Reset the FusionCache manually to avoid reusing kernels when re-executing the fusion definition "
                "with different options."
            )
        with _running_lock:
            _running[0] += 1
            if _running[0] > 1:
                OVERLAPS.append(threading.current_thread().name)
        try:
            if DELAY:
                time.sleep(DELAY)
            EXECUTIONS.append(Execution(self, _enable_options, _disable_options, threading.current_thread().name,
                                        device, tuple(inputs)))
            return [a * 2 for a in inputs]
        finally:
            with _running_lock:
                _running[0] -= 1
