"""Audit trail: which nvFuser fusion ran with which options, in a fresh or a reused partition, on which thread.

    with nvscope.audit() as log:
        train_step(batch)
    print(log.summary())

Records are plain data (`nvscope.events.FusionRecord`). Auditing is process-wide while the block is open (fusions
on other threads, such as PyTorch's autograd device thread, are recorded too). When no audit is open, the adapters
pay one truth test per fusion call.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from nvscope import events
from nvscope.events import FusionRecord

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
        rows = [(*key, str(n)) for key, n in counts.items()]
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in (header, *rows)
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        total = len(self.records)
        compiled = sum(r.partition == "new" for r in self.records)
        lines.append(f"{total} fusion executions, {compiled} new partitions compiled")
        return "\n".join(lines)


@contextmanager
def audit() -> Iterator[AuditLog]:
    """Record every nvFuser fusion execution that goes through nvscope's adapters while the block runs."""
    log = AuditLog()
    sink = log._append
    events.SINKS.append(sink)
    try:
        yield log
    finally:
        events.SINKS.remove(sink)
