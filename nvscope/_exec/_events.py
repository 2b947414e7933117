"""What the execution path reports about each fusion execution, for whoever listens (``nvscope.audit``, profiling).
With no listener an adapter pays one truth test per call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

from nvscope._core import FusionInfo, OptionSet, Record, _patches, _state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

    from nvscope._core import Phase

    # docs/audit-and-compare.md says what each route means.
    Route = Literal["default", "new", "reused", "fallback", "torch"]

__all__ = ["FUNCTION", "PHASE", "SINKS", "TIMERS", "FusionRecord", "emit", "listening"]

# Set by the Thunder adapter around a backward pass.
PHASE: ContextVar[Phase] = ContextVar("nvscope.phase", default="forward")
# Around a backward pass: the (qualname, site) of its forward's jitted function, where known.
FUNCTION: ContextVar[tuple[str, str] | None] = ContextVar("nvscope.function", default=None)
_state.keep(__name__, "PHASE FUNCTION", "per context: the adapter resets them around each backward pass")


class FusionRecord(Record):
    """One nvFuser fusion execution: ``fusion`` (its id), ``info``, ``options``, ``route`` (which cache ran it),
    ``thread``, ``frontend``, ``error`` (what made a ``"fallback"`` run the defaults) and ``shared_from`` (the fusion
    whose compiled definition it ran). docs/audit-and-compare.md."""

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

    @property
    def fusion(self) -> str:
        return self.info.id

    @property
    def phase(self) -> Phase:
        return self.info.phase

    @property
    def own(self) -> bool:
        """Whether this execution ran a partition of its own (``"new"`` or ``"reused"``)."""
        return self.route in ("new", "reused")


SINKS: list[Callable[[FusionRecord], None]] = []

# While SINKS listen, each execution runs inside ``timer(record)``; what ``__enter__`` returns gets the outputs.
TIMERS: list[Callable[[FusionRecord], AbstractContextManager[Any]]] = []
_state.keep(__name__, "SINKS TIMERS", "the audits and profiles listening now: each removes its own at its block's end")


def emit(record: FusionRecord) -> None:
    for sink in tuple(SINKS):
        sink(record)


@contextmanager
def listening(sink: Callable[[FusionRecord], None],
              timer: Callable[[FusionRecord], AbstractContextManager[Any]] | None = None) -> Iterator[None]:
    """``sink`` (and ``timer``) get every execution while the block runs, scope or not."""
    token = object()
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
