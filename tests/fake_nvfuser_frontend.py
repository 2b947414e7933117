"""A recording double of an nvFuser Python frontend, loaded fresh per test as ``nvfuser_direct`` or ``nvfuser``.

`thunder_double.load_frontend` executes this file as a module of either name, so ``FusionDefinition.__module__`` is
that name (what ``nvscope._exec._frontends.frontend_of`` looks at). Loaded as ``nvfuser`` it behaves like the legacy
frontend where nvscope depends on it: ``execute`` warns "Reset the FusionCache manually..." through this module's
global name ``warnings`` whenever options are passed. It mimics the interface only, and needs no torch: it computes
``2 * input`` for each input (a `Tensor` stand-in, a number, or a torch tensor when a test has one).

Where nvscope relies on nvFuser's shapes, the double has them: ``execute`` makes the definition's ``fec`` (its compiled
cache) on first use, ``repro_script_for(inputs)`` prints the definition and the inputs and ends with
``fd.execute(inputs)``, and `execute_with_dtensors` executes the local tensors without options, as nvFuser's does.
A definition with ``define_scalar("breaks-with:<option>")`` fails in ``execute`` when that option is enabled, with
nvFuser's message: a fusion an option breaks, and its repro script (run as a script) fails the same way.
A definition with ``define_scalar("fails:<how>:<causes>:<cures>")`` goes wrong under its defaults (`FAILS`), the way
the options nvFuser gets (per call and from ``NVFUSER_ENABLE``/``NVFUSER_DISABLE``, as nvFuser adds them) say.

Compiles are counted as nvFuser does them: a definition compiles at its first execution, and again at the next one if
that compile failed; ``COMPILES`` gets one `Compile` (the printed definition body, the options, execute's ``device``)
per attempt; ``DEFINITIONS`` holds every FusionDefinition still alive (weakly). The ``nvfuser_direct`` double keeps
the compiled cache in the definition (``fec``); the legacy double keeps one process-wide cache entry per printed
definition body (``FUSION_CACHE``, nvFuser's FusionCache), so identical definitions share one compile whichever
FusionDefinition object runs.

Each ``execute`` appends an `Execution` to ``EXECUTIONS``: which FusionDefinition ran, the option lists it was given
(the very objects), the thread. ``COMPILE_DELAY`` makes each compile attempt last a while, ``DELAY`` each execution,
and ``OVERLAPS`` counts executions that started while another one was running.
"""

from __future__ import annotations

import enum
import itertools
import os
import signal
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

LEGACY = __name__ == "nvfuser"
BREAKS_WITH = "breaks-with:"
# "fails:<how>:<causes>:<cures>": the fusion goes wrong when every option of <causes> is in effect ("" : always, i.e.
# under its defaults) and no cure is: <cures> is "|"-separated sets of "&"-joined options, each all in effect to cure
# ("-name": a disable option; "": no cure). <how>: "raise" (nvFuser's assert, in execute), "wrong" (outputs 3 * input),
# "abort" (the process aborts, as a CUDA error does), "segv" (SIGSEGV), "oob" (a write out of bounds: only a sanitizer
# sees it; under the fake compute-sanitizer, FAKE_SANITIZER set, it is printed as memcheck does).
FAILS = "fails:"
DEFAULTS_ASSERT = ("INTERNAL ASSERT FAILED at /opt/pytorch/nvfuser/csrc/device_lower/analysis/sync_information.cpp:"
                   "504, please report a bug with repro script to NVFuser at https://github.com/NVIDIA/Fuser/issues.")
ASSERT = "INTERNAL ASSERT FAILED at csrc/scheduler/runtime_info.h:69, please report a bug with repro script"


class DataType(enum.Enum):
    Float = "Float"
    Int = "Int"

    def __repr__(self) -> str:
        return f"DataType.{self.name}"


@dataclass(frozen=True)
class Tensor:
    """A torch-free input: values, a shape and a dtype (what Thunder's descriptors and nvFuser's repro read)."""

    values: tuple[float, ...]
    dtype: str = "float32"

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.values),)

    def __mul__(self, factor: float) -> Tensor:
        return Tensor(tuple(v * factor for v in self.values), self.dtype)

    __rmul__ = __mul__


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


@dataclass(frozen=True)
class Compile:
    definition: str  # the printed definition's body (without the function's name line)
    enable: tuple[str, ...]
    disable: tuple[str, ...]
    device: Any = None  # execute's device argument: the GPU it compiled for


class ExecutorCache:
    """A definition's compiled cache (nvFuser's FusionExecutorCache); execute_with_dtensors reads shardings off it."""

    def __init__(self) -> None:
        self.outputs = 0
        self.compiled = False

    def get_output_shardings(self) -> list[None]:
        return [None] * self.outputs


EXECUTIONS: list[Execution] = []
COMPILES: list[Compile] = []
DEFINITIONS: weakref.WeakSet[FusionDefinition] = weakref.WeakSet()  # every FusionDefinition alive
FUSION_CACHE: dict[str, ExecutorCache] = {}  # legacy only: nvFuser's process-wide FusionCache, by definition
DELAY = 0.0
COMPILE_DELAY = 0.0  # seconds each compile attempt takes
FAIL_NEXT: list[BaseException] = []  # the next execute raises this (a failure at run time, e.g. out of memory)
OVERLAPS: list[str] = []
_running = [0]
_running_lock = threading.Lock()
_serial = itertools.count()


class _Ops:
    """``fd.ops``: each ``fd.ops.<name>(...)`` call is recorded and printed back as such (nvFuser's printed form)."""

    def __init__(self, fd: FusionDefinition) -> None:
        self._fd = fd

    def __getattr__(self, name: str) -> Any:
        def op(*args: Any, **kwargs: Any) -> int:
            self._fd.calls.append((f"ops.{name}", args, kwargs))
            return len(self._fd.calls) - 1
        return op


class FusionDefinition:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.ops = _Ops(self)
        self.serial = next(_serial)
        self.finished = False
        self._selected_device = 0
        self.fake_inputs: list[Any] | None = None
        DEFINITIONS.add(self)

    def __enter__(self) -> FusionDefinition:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.finished = True

    def define_tensor(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append(("define_tensor", args, kwargs))
        return len(self.calls) - 1

    def define_scalar(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append(("define_scalar", args, kwargs))
        return len(self.calls) - 1

    def scalars(self) -> list[Any]:
        """The values given to define_scalar, in order."""
        return [args[0] for name, args, _ in self.calls if name == "define_scalar"]

    def _marks(self) -> tuple[set[str], list[str]]:
        """The options it breaks with (`BREAKS_WITH` scalars) and how it fails (`FAILS` scalars), read off its calls
        once per length of them: every execute asks, and a definition's calls stop growing once it is finished."""
        key = (id(self.calls), len(self.calls))
        if getattr(self, "_marks_of", (None,))[0] != key:
            scalars = [str(s) for s in self.scalars()]
            self._marks_of = (key, {s[len(BREAKS_WITH):] for s in scalars if s.startswith(BREAKS_WITH)},
                              [s[len(FAILS):] for s in scalars if s.startswith(FAILS)])
        return self._marks_of[1], self._marks_of[2]

    def _function_name(self) -> str:
        return f"nvfuser_fusion_id{self.serial}" if LEGACY else "nvfuser_fusion"

    def body(self) -> str:
        """The printed definition without its function's name line (what nvFuser's FusionCache keys on)."""
        lines = []
        for name, args, kwargs in self.calls:
            parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
            lines.append(f"    fd.{name}({', '.join(parts)})")
        return "\n".join(lines) or "    pass"

    def __repr__(self) -> str:
        return f"def {self._function_name()}(fd : FusionDefinition) -> None :\n{self.body()}\n"

    def execute(self, inputs: Any, *, device: Any = None, save_repro_inputs: bool = False,
                _enable_options: Any = (), _disable_options: Any = ()) -> list[Any]:
        assert self.finished, "executed a FusionDefinition whose definition was never finished"
        if LEGACY and (len(_enable_options) or len(_disable_options)):
            warnings.warn(  # noqa: B028 (as nvFuser does)
                "Reset the FusionCache manually to avoid reusing kernels when re-executing the fusion definition "
                "with different options."
            )
        if FAIL_NEXT:
            raise FAIL_NEXT.pop()
        if save_repro_inputs:
            self.fake_inputs = list(inputs)
        if not hasattr(self, "fec"):
            self.fec = FUSION_CACHE.setdefault(self.body(), ExecutorCache()) if LEGACY else ExecutorCache()
        broken = self._marks()[0]
        if not self.fec.compiled:  # the options of the first (successful) execution are compiled in
            COMPILES.append(Compile(self.body(), tuple(_enable_options or ()), tuple(_disable_options or ()), device))
            if COMPILE_DELAY:
                time.sleep(COMPILE_DELAY)
            if broken & set(_enable_options or ()):
                raise RuntimeError(ASSERT)
            self.fec.compiled = True
        elif broken & set(_enable_options or ()):
            raise RuntimeError(ASSERT)
        how = self._fails(_enable_options, _disable_options)
        if how == "raise":
            raise RuntimeError(DEFAULTS_ASSERT)
        if how == "abort":
            sys.stderr.write("CUDA error: an illegal memory access was encountered\n")
            sys.stderr.flush()
            os.abort()
        if how == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if how == "oob" and os.environ.get("FAKE_SANITIZER"):
            print("========= Invalid __global__ write of size 8 bytes\n=========     at "
                  "nvfuser_inner_persistent_f0_c1_r0_g0+0x1a0", flush=True)
        with _running_lock:
            _running[0] += 1
            if _running[0] > 1:
                OVERLAPS.append(threading.current_thread().name)
        try:
            if DELAY:
                time.sleep(DELAY)
            EXECUTIONS.append(Execution(self, _enable_options, _disable_options, threading.current_thread().name,
                                        device, tuple(inputs)))
            outputs = [a * (3 if how == "wrong" else 2) for a in inputs]
            self.fec.outputs = len(outputs)
            return outputs
        finally:
            with _running_lock:
                _running[0] -= 1

    def _fails(self, enable: Any, disable: Any) -> str | None:
        """How this definition goes wrong under these per-call options and the environment's (`FAILS`), or None."""
        marks = self._marks()[1]
        if not marks:
            return None
        on = {*(enable or ()), *(f"-{n}" for n in disable or ())}
        for kind, prefix in (("ENABLE", ""), ("DISABLE", "-")):
            on |= {prefix + n.strip() for n in os.environ.get(f"NVFUSER_{kind}", "").split(",") if n.strip()}
        for mark in marks:
            how, causes, cures = mark.split(":")
            if set(filter(None, causes.split("&"))) <= on and not any(
                    set(cure.split("&")) <= on for cure in cures.split("|") if cure):
                return how
        return None

    def validate(self, inputs: Any, reference_outputs: Any = None, device: Any = None, **kwargs: Any) -> list[Any]:
        """nvFuser's (nvfuser_direct): execute with ``kwargs``, then compare with ATen's outputs (here 2 * input)."""
        outputs = self.execute(inputs, device=device, **kwargs)
        expected = [a * 2 for a in inputs] if reference_outputs is None else list(reference_outputs)
        if outputs != expected:
            raise AssertionError(f"Validation failed: outputs {outputs!r} differ from the reference {expected!r}")
        return outputs

    def repro_script_for(self, inputs: list[Any] | None = None) -> str:
        """A script that defines this fusion again and, given inputs, executes it on inputs like them (nvFuser's)."""
        uses_torch = any(type(i).__module__.startswith("torch") for i in inputs or ())
        script = ("# fake nvFuser repro script\n" + ("import torch\n" if uses_torch else "")
                  + f"from {__name__} import FusionDefinition, DataType, Tensor\n{self!r}"
                  f"with FusionDefinition() as fd:\n    {self._function_name()}(fd)\n")
        if inputs is not None:
            script += "\ninputs = [\n"
            for i in inputs:
                if type(i).__module__.startswith("torch"):
                    script += f"    torch.testing.make_tensor({tuple(i.shape)}, dtype={i.dtype}, device='cpu'),\n"
                else:
                    script += f"    {i!r},\n"
            script += "]\nfd.execute(inputs)\n"
        return script

    def last_repro_script(self) -> str:
        assert self.fake_inputs is not None, "execute(inputs, save_repro_inputs=True) was not executed"
        return self.repro_script_for(self.fake_inputs)


def execute_with_dtensors(fd: Any, in_dtensors: Any) -> list[Any]:
    """nvFuser's, in shape: execute the local tensors (without options), wrap the outputs as DTensors."""
    in_dtensors = list(in_dtensors)
    local = [d.to_local() for d in in_dtensors]
    outputs = fd.execute(local)
    shardings = fd.fec.get_output_shardings()
    assert len(outputs) == len(shardings)
    first = in_dtensors[0]
    return [type(first).from_local(out, first.device_mesh, first.placements) for out in outputs]
