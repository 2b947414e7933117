"""What the executor adapters report about each fusion execution, for whoever listens (``nvscope.audit``).

Kept in the core so that adapters (which import the core) can report without importing the tools. When nobody
listens, ``SINKS`` is empty and an adapter pays one truth test per fusion call.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from nvscope._optionset import OptionSet
from nvscope._record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Phase = Literal["forward", "backward"]
    # "default" (the fusion's own cache: no scope, or nothing the scope adds), "new" (a cache for this option set
    # was built by this call: it compiles), "reused" (an existing cache for this option set).
    Partition = Literal["default", "new", "reused"]

__all__ = ["ADAPTERS", "PHASE", "SINKS", "FusionRecord", "emit"]

# Set by the Thunder adapter around a backward pass; everything else is forward.
PHASE: ContextVar[Phase] = ContextVar("nvscope.phase", default="forward")


class FusionRecord(Record):
    """One nvFuser fusion execution: which fusion, with which options, in which partition, on which thread."""

    __slots__ = ("frontend", "fusion", "options", "partition", "phase", "thread")

    fusion: str
    options: OptionSet
    partition: Partition
    thread: str
    phase: Phase
    frontend: str

    def __init__(self, fusion: str, options: OptionSet, partition: Partition, thread: str, phase: Phase,
                 frontend: str) -> None:
        self._init(fusion=fusion, options=options, partition=partition, thread=thread, phase=phase,
                   frontend=frontend)


SINKS: list[Callable[[FusionRecord], None]] = []

# Names of the executor adapters installed now ("thunder", "nvfuser_direct", ...). While it is empty no fusion can
# be observed, so a scope that saw none says nothing about the user's code.
ADAPTERS: set[str] = set()


def emit(record: FusionRecord) -> None:
    for sink in tuple(SINKS):
        sink(record)
