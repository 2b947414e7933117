"""The per-fusion timing hook of `nvscope.profile`: what it measures around each fusion execution, switched per pass."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from nvscope._measure import Segment, SegmentRecorder, Timer, flatten_outputs, now

__all__: list[str] = []


class _Clock:
    """The per-fusion timing hook (an entry of ``_events.TIMERS``) and what it collects, switched per pass."""

    def __init__(self, timer: Timer, rec: SegmentRecorder | None) -> None:
        self.timer, self.recorder = timer, rec  # the runner's timer: CUDA events once the default used CUDA
        self.times: dict[str, list[Any]] | None = None  # per fusion: the timer's pending intervals, while timing
        self.segments: dict[str, tuple[Segment, ...]] | None = None  # first execution's segments, while first calls
        self.wall: dict[str, float] | None = None  # ms per fusion (synchronised), while first calls
        self.outputs: dict[str, list[list[tuple[str, Any]]]] | None = None  # output copies per execution
        self.capture: str | None = None  # capture only this fusion's outputs (None: every fusion's)

    def __call__(self, record: Any) -> Any:
        return self._measure(record.fusion)

    def _keep(self, fusion: str, pending: list[Any]) -> Callable[[Any], None] | None:
        if self.outputs is None or (self.capture is not None and fusion != self.capture):
            return None
        return pending.append  # copied once the fusion's segments and wall time are taken: the copies are not its own

    @contextmanager
    def _measure(self, fusion: str) -> Iterator[Callable[[Any], None] | None]:
        torch = sys.modules.get("torch")
        if torch is not None and not (self.timer.cuda or (self.wall is not None and torch.cuda.is_initialized())):
            torch = None  # CUDA events while timing a CUDA step; a synchronised wall clock in first calls that use it
        with ExitStack() as stack:
            segments = None
            if self.segments is not None and self.recorder is not None and fusion not in self.segments:
                segments = stack.enter_context(self.recorder.record())
            if self.wall is not None and torch is not None:
                torch.cuda.synchronize()
            mark = self.timer.mark() if self.times is not None else None
            began = now()
            pending: list[Any] = []
            yield self._keep(fusion, pending)
            if self.times is not None:
                self.times.setdefault(fusion, []).append(self.timer.since(mark))
            if self.wall is not None:
                if torch is not None:
                    torch.cuda.synchronize()
                self.wall[fusion] = self.wall.get(fusion, 0.0) + (now() - began) * 1e3
        if segments is not None and self.segments is not None:
            self.segments[fusion] = tuple(segments) if segments else None  # type: ignore[assignment]
        if pending and self.outputs is not None:
            calls = self.outputs.setdefault(fusion, [])
            calls.append(flatten_outputs(pending[0], f"execution{len(calls)}.out"))

    def per_call(self, steps: int) -> dict[str, float]:
        """ms per step of each fusion in the block just timed (the device has been synchronised)."""
        times, self.times = self.times or {}, {}
        return {fusion: sum(map(Timer.ms, values)) / steps for fusion, values in times.items()}
