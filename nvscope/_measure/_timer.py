"""The tools' one timer: blocks of calls, each one timed sample, by CUDA events once the process uses CUDA, else
``time.perf_counter``; calls per block calibrated as ``timeit.Timer.autorange`` does."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["MIN_SAMPLE_S", "Timer", "clock", "now"]

# Looked up at each reading: a test replaces it with a clock its doubles advance.
clock: Callable[[], float] = time.perf_counter


def now() -> float:
    """`clock`'s reading."""
    return clock()


# A sample's least length: far above the clocks' resolution and the harness's cost around a block, short enough
# that a preemption is rare.
MIN_SAMPLE_S = 0.0005

# The most calls in one sample: calibration ends even for a call that takes no measurable time.
_MAX_CALLS = 10**7


class Timer:
    """Times ``n`` back-to-back calls; `calibrate` finds the ``n`` that makes a sample long enough."""

    def __init__(self) -> None:
        self.cuda = False
        self._events: tuple[Any, Any] | None = None

    @property
    def name(self) -> str:
        return "CUDA events" if self.cuda else "time.perf_counter"

    def detect(self) -> bool:
        """Use CUDA events from now on if the process has initialised CUDA."""
        torch = sys.modules.get("torch")
        self.cuda = torch is not None and bool(torch.cuda.is_initialized())
        return self.cuda

    def sync(self) -> None:
        if self.cuda:
            sys.modules["torch"].cuda.synchronize()

    def time(self, call: Callable[[], object], n: int) -> float:
        """Milliseconds per call of ``n`` back-to-back calls."""
        if self.cuda:
            if self._events is None:
                torch = sys.modules["torch"]
                self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            start, end = self._events
            self.sync()
            start.record()
            for _ in range(n):
                call()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / n
        begin = now()
        for _ in range(n):
            call()
        return (now() - begin) * 1e3 / n

    def mark(self) -> Any:
        """The start of one interval: a recorded CUDA event under CUDA events, else `clock`'s reading."""
        if self.cuda:
            start = sys.modules["torch"].cuda.Event(enable_timing=True)
            start.record()
            return start
        return now()

    def since(self, mark: Any) -> Any:
        """The pending interval from ``mark`` to now, which `ms` reads."""
        if self.cuda:
            end = sys.modules["torch"].cuda.Event(enable_timing=True)
            end.record()
            return mark, end
        return (now() - mark) * 1e3

    @staticmethod
    def ms(interval: Any) -> float:
        """A pending interval of `since`, in milliseconds."""
        return float(interval[0].elapsed_time(interval[1])) if isinstance(interval, tuple) else float(interval)

    def calibrate(self, call: Callable[[], object], least: int = 1) -> tuple[int, float]:
        """``(n, ms per call)``: the calls per sample, at least ``least``, that last `MIN_SAMPLE_S` (the
        shorter of two timings of each ``n``)."""
        n, step = 1, 0
        while True:
            per_call = min(self.time(call, n), self.time(call, n))
            if per_call * n >= MIN_SAMPLE_S * 1e3 or n >= _MAX_CALLS:
                return max(least, n), per_call
            n = (1, 2, 5)[(step + 1) % 3] * 10 ** ((step + 1) // 3)
            step += 1
