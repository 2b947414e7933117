"""What the execution path reports about each fusion execution, for whoever listens (``nvscope.audit``, profiling).

Kept in the execution layer, beside the execution path that reports, so that the adapters can report without
importing the tools, which listen from above. When nobody listens, ``SINKS`` is empty and an adapter pays one truth
test per fusion call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

from nvscope._core import FusionInfo, OptionSet, Record, _patches, _state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

    from nvscope._core import Phase

    # "default" (the fusion's own cache: no scope, or nothing the scope adds that can affect it), "new" (a cache for
    # this option set was built by this call: it compiles), "reused" (an existing cache for this option set),
    # "fallback" (it failed under these options, under on_error="fallback": this execution ran the defaults).
    # "torch" (nvFuser failed it under on_error="torch", or did before for these inputs: its region ran in PyTorch).
    Route = Literal["default", "new", "reused", "fallback", "torch"]

__all__ = ["FUNCTION", "PHASE", "SINKS", "TIMERS", "FusionRecord", "emit", "listening"]

# Set by the Thunder adapter around a backward pass; everything else is forward (direct nvFuser calls: "call").
PHASE: ContextVar[Phase] = ContextVar("nvscope.phase", default="forward")
# Set by the Thunder adapter around a backward pass whose forward ran while its patch was in place: the jitted
# function its forward belonged to, (qualname, site) (`nvscope._exec._thunder_autograd.jitted_function`).
FUNCTION: ContextVar[tuple[str, str] | None] = ContextVar("nvscope.function", default=None)
_state.keep(__name__, "PHASE FUNCTION", "per context: the adapter resets them around each backward pass")


class FusionRecord(Record):
    """One nvFuser fusion execution: which fusion, with which options, in which partition, on which thread.

    ``fusion`` is the fusion's id (``"forward/nvFusion0"``), ``info`` its `FusionInfo`; ``error`` the failure
    (with nvscope's note) that made a ``"fallback"`` execution run the defaults, else None. ``shared_from``: the
    fusion whose compiled definition this execution ran, when its partition shares one (the same definition and
    options, `nvscope._exec._shared`), else None (compiled for this fusion, or its defaults). ``route``: which
    cache ran it (`Route`: ``"default"``, ``"new"``, ``"reused"``, ``"fallback"``).
    """

    __slots__ = ("error", "frontend", "info", "options", "route", "shared_from", "thread")

    info: FusionInfo
    options: OptionSet
    route: Route
    thread: str
    frontend: str
    error: str | None
    shared_from: str | None

    def __init__(self, info: FusionInfo, options: OptionSet, route: Route, thread: str, frontend: str,
                 error: str | None = None, shared_from: str | None = None) -> None:
        self._init(info=info, options=options, route=route, thread=thread, frontend=frontend, error=error,
                   shared_from=shared_from)

    def __reduce__(self) -> tuple[type[FusionRecord], tuple[object, ...]]:
        return (FusionRecord, (self.info, self.options, self.route, self.thread, self.frontend, self.error,
                               self.shared_from))

    @property
    def fusion(self) -> str:
        return self.info.id

    @property
    def phase(self) -> Phase:
        return self.info.phase

    @property
    def own(self) -> bool:
        """Whether this execution ran a partition of its own (``"new"`` or ``"reused"``), not the fusion's defaults."""
        return self.route in ("new", "reused")


SINKS: list[Callable[[FusionRecord], None]] = []

# While something listens (SINKS), each execution also runs inside ``timer(record)`` for every timer here; the value
# the context's ``__enter__`` returns, if not None, is called with the fusion's outputs (profiling: per-fusion time
# and outputs).
TIMERS: list[Callable[[FusionRecord], AbstractContextManager[Any]]] = []
_state.keep(__name__, "SINKS TIMERS", "the audits and profiles listening now: each removes its own at its block's end")


def emit(record: FusionRecord) -> None:
    for sink in tuple(SINKS):
        sink(record)


@contextmanager
def listening(sink: Callable[[FusionRecord], None],
              timer: Callable[[FusionRecord], AbstractContextManager[Any]] | None = None) -> Iterator[None]:
    """``sink`` (and ``timer``) get every execution while the block runs; the adapters' per-fusion patches are in
    place meanwhile (`nvscope._core._patches.demand`), scope or not."""
    token = object()  # unique while demanded, even when one sink listens twice (nested)
    _patches.demand(id(token))
    SINKS.append(sink)
    if timer is not None:
        TIMERS.append(timer)
    try:
        yield
    finally:
        if timer is not None:
            TIMERS.remove(timer)
        SINKS.remove(sink)
        _patches.release(id(token))
