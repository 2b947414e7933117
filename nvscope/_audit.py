"""Audit trail: which nvFuser fusion ran with which options, in a fresh or a reused partition, on which thread.

    with nvscope.audit() as log:
        train_step(batch)
    print(log.summary())

Records are plain data (`nvscope._events.FusionRecord`). Auditing is process-wide while the block is open (fusions
on other threads, such as PyTorch's autograd device thread, are recorded too). When no audit is open, the adapters
pay one truth test per fusion call.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from nvscope import _events, _table
from nvscope._events import FusionRecord

__all__ = ["AuditLog", "FusionRecord", "audit"]


class AuditLog:
    """The records of one `audit` block, in execution order."""

    __slots__ = ("_lock", "records")

    def __init__(self) -> None:
        self.records: list[FusionRecord] = []
        self._lock = threading.Lock()

    def _append(self, record: FusionRecord) -> None:
        with self._lock:
            self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    def summary(self) -> str:
        """A table: one row per (fusion, options, phase, partition, thread) with its execution count."""
        if not self.records:
            return "nvscope audit: no nvFuser fusion executed"
        counts = Counter(
            (r.fusion, r.options.as_shell() or "(none)", r.phase, r.partition, r.thread) for r in self.records
        )
        header = ("fusion", "options", "phase", "partition", "thread", "calls")
        lines = [_table.render(header, [(*key, str(n)) for key, n in counts.items()])]
        total = len(self.records)
        compiled = sum(r.partition == "new" for r in self.records)
        lines.append(f"{total} fusion executions, {compiled} new partitions compiled")
        return "\n".join(lines)


@contextmanager
def audit() -> Iterator[AuditLog]:
    """Record every nvFuser fusion execution that goes through nvscope's adapters while the block runs."""
    log = AuditLog()
    sink = log._append
    _events.SINKS.append(sink)
    try:
        yield log
    finally:
        _events.SINKS.remove(sink)
