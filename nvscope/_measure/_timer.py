"""The one timer of `nvscope.search` and `nvscope.compare`: blocks of calls, each block one timed sample.

CUDA events when the process uses CUDA (one event pair around the block, after a synchronisation, so host overhead
counts, as it does for a user), ``time.perf_counter`` otherwise. The number of calls in a block is calibrated as
``timeit.Timer.autorange`` does (1, 2, 5, 10, 20, 50, ... calls until a block lasts `MIN_SAMPLE_S`): a sample of
one sub-microsecond call would measure the timer's resolution and the harness (entering the scope, reading the
clock, a cold cache after the switch), not the call, and bias the comparison of variants whose harness differs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["MIN_SAMPLE_S", "Timer", "clock", "now"]

# The host clock of every timed block (seconds), looked up at each reading: a test replaces it with one that also
# advances by the time a double's executions say they took, to run thousands of searches with known noise in seconds.
clock: Callable[[], float] = time.perf_counter


def now() -> float:
    """`clock`'s reading: the host time of the tools' timed blocks and per-fusion timers."""
    return clock()


# A timed sample lasts at least this long: 500 times perf_counter's and CUDA events' resolution (about a
# microsecond) and more than the harness's own cost around a block (under a microsecond on CPU), so neither weighs
# more than 0.2 % in a time ratio; short enough that a busy machine rarely preempts a sample. Measured on no-op
# candidates (tests/tools/search/test_search_timing.py):
# verdicts then say "faster" or "slower" as often as the 95% interval
# allows, where samples of 5 sub-microsecond calls said "slower" most of the time.
MIN_SAMPLE_S = 0.0005

# The most calls in one sample: a call that takes no measurable time cannot make calibration loop forever.
_MAX_CALLS = 10**7


class Timer:
    """Times ``n`` back-to-back calls of a function; `calibrate` finds the ``n`` that makes a sample long enough."""

    def __init__(self) -> None:
        self.cuda = False
        self._events: tuple[Any, Any] | None = None

    @property
    def name(self) -> str:
        return "CUDA events" if self.cuda else "time.perf_counter"

    def detect(self) -> bool:
        """Use CUDA events from now on if the process has initialised CUDA (call it after a first call)."""
        torch = sys.modules.get("torch")
        self.cuda = torch is not None and bool(torch.cuda.is_initialized())
        return self.cuda

    def sync(self) -> None:
        if self.cuda:
            sys.modules["torch"].cuda.synchronize()

    def time(self, call: Callable[[], object], n: int) -> float:
        """Milliseconds per call of ``n`` calls of ``call``, back to back (the device synchronised first)."""
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
        """The start of one interval (a fusion's execution, say): a recorded CUDA event when timing with CUDA events,
        else `clock`'s reading."""
        if self.cuda:
            start = sys.modules["torch"].cuda.Event(enable_timing=True)
            start.record()
            return start
        return now()

    def since(self, mark: Any) -> Any:
        """The interval from ``mark`` to now, pending: milliseconds, or the pair of CUDA events that `ms` reads once
        the device has been synchronised (reading it earlier would synchronise inside the measured code)."""
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
        """``(n, ms per call)``: the calls per sample, at least ``least``, that make a sample last `MIN_SAMPLE_S`.

        Each tried ``n`` is timed twice and the shorter kept: a block stretched by a preemption on a busy machine
        would otherwise stop the calibration at too few calls.
        """
        n, step = 1, 0
        while True:
            per_call = min(self.time(call, n), self.time(call, n))
            if per_call * n >= MIN_SAMPLE_S * 1e3 or n >= _MAX_CALLS:
                return max(least, n), per_call
            n = (1, 2, 5)[(step + 1) % 3] * 10 ** ((step + 1) // 3)
            step += 1
