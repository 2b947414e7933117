"""Which schedulers nvFuser chose for one fusion execution: one small entry point, `recorder()`, None where nothing can.

    rec = recorder()                     # None on CPU, without torch, or without an nvFuser frontend
    if rec is not None:
        with rec.record() as segments:   # around one fusion execution
            fd.execute(inputs)
        segments                          # [Segment(segment_id=0, scheduler="pointwise", ...), ...]

Two sources (`recorder`'s ``source``): kernel names by default, nvFuser's profiler on request:

* nvFuser's Python profiler, ``nvfuser_direct.PythonProfiler`` (nvFuser >= 0.2.34, the direct frontend): while it is
  entered, nvFuser's FusionExecutorCache profiles every segment it runs; ``profile.kernel_profiles[i]`` then has the
  ``scheduler`` (nvFuser's name of its SchedulerType: "pointwise", "inner_persistent", "matmul", "expr_eval", ...),
  the ``segment_id``, the kernel ``name``, its ``compile_time_ms`` (0 when the kernel was already compiled) and its
  ``time_ms`` (CUPTI). Read from nvFuser's source (python/python_direct/profile.cpp and csrc/fusion_profiler.cpp at
  the 0.2.35 version commit), not run by nvscope's CPU suite; tests/gpu/test_tools_gpu.py runs it on the GPU.
* otherwise the CUDA kernels the execution launched (torch.profiler, `nvscope._measure._kernels`): nvFuser names a
  kernel after its scheduler (``nvfuser_pointwise_f0_c1_r0_g1``), so the scheduler is read off the name; a kernel that
  is not nvFuser's (cuBLAS, ATen) can only come from a segment nvFuser evaluated with ATen, reported as "expr_eval"; a
  numbered name (``nvfuser_12``, under ``static_fusion_count``) says no scheduler, reported as "unknown". No compile
  time in this case.

Nothing here may break the fusion: a profiler that fails leaves the list empty and the execution's result or error
stands as it is.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from nvscope._measure import _kernels

__all__ = ["SOURCES", "Segment", "SegmentRecorder", "recorder", "scheduler_of_kernel"]

_NAMED = re.compile(r"nvfuser_(?P<scheduler>[a-z][a-z_]*?)_f\d+_c\d+")
_NUMBERED = re.compile(r"nvfuser_\d+\b")


@dataclass(frozen=True)
class Segment:
    """One segment of a fusion execution: its scheduler, kernel name, compile time (ms, None when not measured) and
    kernel time (ms, None when not measured)."""

    segment_id: int
    scheduler: str
    kernel: str = ""
    compile_ms: float | None = None
    time_ms: float | None = None


def scheduler_of_kernel(name: str) -> str:
    """The scheduler that an nvFuser kernel name says ("pointwise" for ``nvfuser_pointwise_f0_c1_r0_g1``), "unknown"
    for a numbered nvFuser kernel, "expr_eval" for a kernel that is not nvFuser's."""
    named = _NAMED.search(name)
    if named:
        return named.group("scheduler")
    return "unknown" if _NUMBERED.search(name) or "nvfuser" in name else "expr_eval"


class SegmentRecorder:
    """Records the segments of the nvFuser fusion executed inside `record` (see the module docstring)."""

    def __init__(self, source: str, profiler: Any = None) -> None:
        self.source = source  # what the segments come from, for reports
        self._profiler = profiler
        self._last_id: object = None  # nvFuser's fusion_id of the last profile read

    def record(self) -> AbstractContextManager[list[Segment]]:
        """A context manager whose list holds the execution's segments once it exits (empty if nothing was seen)."""
        return self._python_profiler() if self._profiler is not None else self._kernel_names()

    @contextmanager
    def _python_profiler(self) -> Iterator[list[Segment]]:
        segments: list[Segment] = []
        profiler = self._profiler()
        profiler.__enter__()
        try:
            yield segments
        finally:
            profiler.__exit__(None, None, None)
        try:
            profile = profiler.profile
            fusion_id = getattr(profile, "fusion_id", None)
            if fusion_id is not None and fusion_id == self._last_id:
                return  # nvFuser's last profile again: this execution was not profiled (nothing is better than wrong)
            self._last_id = fusion_id
            kernels = list(profile.kernel_profiles)
            segments += [Segment(int(k.segment_id), str(k.scheduler), str(k.name), float(k.compile_time_ms),
                                 float(k.time_ms)) for k in kernels]
        except Exception:  # no segment profiled (nvFuser raises then), or another nvFuser: nothing to say
            segments.clear()

    @contextmanager
    def _kernel_names(self) -> Iterator[list[Segment]]:
        torch = sys.modules["torch"]
        from nvscope._measure._kernels import Cupti, kernel_name

        segments: list[Segment] = []
        torch.cuda.synchronize()
        with Cupti.profile() as prof:
            yield segments
            torch.cuda.synchronize()
        try:
            events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                            key=lambda e: e.time_range.start)
            for i, event in enumerate(events):
                name = kernel_name(event.name)
                segments.append(Segment(i, scheduler_of_kernel(name), name, None, event.device_time / 1e3))
        except Exception:  # a torch.profiler of another shape: nothing to say
            segments.clear()


SOURCES = ("kernels", "nvfuser")


def recorder(source: str = "kernels") -> SegmentRecorder | None:
    """What can tell nvFuser's schedulers here, or None: no torch, no CUDA device, or no nvFuser frontend imported.

    ``source="kernels"`` (the default) reads them off kernel names (torch.profiler). ``"nvfuser"`` asks nvFuser's
    PythonProfiler where the installed nvFuser has it and torch.profiler has not run in this process. Opt-in, because
    nvFuser 0.2.35's profiler was not robust on the H200: it aborts the process when torch.profiler already holds
    CUPTI, stays "already started" after a fusion fails inside it (the next fusion then fails too), and hit an illegal
    memory access while profiling Thunder's nanoGPT. Only frontends already imported count; this imports nothing.
    """
    if source not in SOURCES:
        raise ValueError(f"schedulers= takes {' or '.join(map(repr, SOURCES))}, not {source!r}")
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    direct = sys.modules.get("nvfuser_direct")
    if direct is None and sys.modules.get("nvfuser") is None:
        return None
    profiler = getattr(direct, "PythonProfiler", None) if direct is not None else None
    # CUPTI takes one subscriber: after torch.profiler ran in this process (nvscope's kernel names included), nvFuser's
    # profiler would abort the process (measured on the H200), so kernel names it is.
    if source == "nvfuser" and profiler is not None and not _kernels.Cupti.held:
        return SegmentRecorder("nvFuser's PythonProfiler", profiler)
    return SegmentRecorder("kernel names (torch.profiler)")
