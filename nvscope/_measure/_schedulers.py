"""Which schedulers nvFuser chose for one fusion execution: `recorder()` (None where nothing can tell);
``with rec.record() as segments`` around the execution fills the `Segment` list, from kernel names (torch.profiler,
the default) or nvFuser's ``PythonProfiler`` on request. A profiler that fails leaves the list empty."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from nvscope._measure import _kernels

__all__ = ["Segment", "SegmentRecorder", "recorder", "scheduler_of_kernel"]

_NAMED = re.compile(r"nvfuser_(?P<scheduler>[a-z][a-z_]*?)_f\d+_c\d+")
_NUMBERED = re.compile(r"nvfuser_\d+\b")


@dataclass(frozen=True)
class Segment:
    """One segment of a fusion execution: scheduler, kernel name, compile and kernel ms (None: not measured)."""

    segment_id: int
    scheduler: str
    kernel: str = ""
    compile_ms: float | None = None
    time_ms: float | None = None


def scheduler_of_kernel(name: str) -> str:
    """The scheduler a kernel name says; "unknown" for a numbered one, "expr_eval" for not nvFuser's."""
    named = _NAMED.search(name)
    if named:
        return named.group("scheduler")
    return "unknown" if _NUMBERED.search(name) or "nvfuser" in name else "expr_eval"


class SegmentRecorder:
    """Records the segments of the fusion executed inside `record`."""

    def __init__(self, source: str, profiler: Any = None) -> None:
        self.source = source
        self._profiler = profiler
        self._last_id: object = None  # nvFuser's fusion_id of the last profile read

    def record(self) -> AbstractContextManager[list[Segment]]:
        """A context manager whose list holds the execution's segments once it exits."""
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
                return  # the last profile again: not this execution's
            self._last_id = fusion_id
            kernels = list(profile.kernel_profiles)
            segments += [Segment(int(k.segment_id), str(k.scheduler), str(k.name), float(k.compile_time_ms),
                                 float(k.time_ms)) for k in kernels]
        except Exception:  # nothing profiled
            segments.clear()

    @contextmanager
    def _kernel_names(self) -> Iterator[list[Segment]]:
        torch = sys.modules["torch"]
        segments: list[Segment] = []
        torch.cuda.synchronize()
        with _kernels.Cupti.profile() as prof:
            yield segments
            torch.cuda.synchronize()
        try:
            events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                            key=lambda e: e.time_range.start)
            for i, event in enumerate(events):
                name = _kernels.kernel_name(event.name)
                segments.append(Segment(i, scheduler_of_kernel(name), name, None, event.device_time / 1e3))
        except Exception:
            segments.clear()


def recorder(source: str = "kernels") -> SegmentRecorder | None:
    """What can tell nvFuser's schedulers here, or None (no torch, CUDA or frontend imported). ``"nvfuser"``
    asks nvFuser's PythonProfiler where it exists and CUPTI is free; opt-in, as that profiler is fragile."""
    if source not in ("kernels", "nvfuser"):
        raise ValueError(f"schedulers= takes 'kernels' or 'nvfuser', not {source!r}")
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    direct = sys.modules.get("nvfuser_direct")
    if direct is None and sys.modules.get("nvfuser") is None:
        return None
    profiler = getattr(direct, "PythonProfiler", None) if direct is not None else None
    if source == "nvfuser" and profiler is not None and not _kernels.Cupti.held:
        return SegmentRecorder("nvFuser's PythonProfiler", profiler)
    return SegmentRecorder("kernel names (torch.profiler)")
