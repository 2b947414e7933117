"""Audit trail: which nvFuser fusion ran with which options, in which partition, on which thread."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from nvscope._core import FusionInfo
from nvscope._core import _text as _texttable
from nvscope._exec import _autoinstall, _events
from nvscope._exec._events import FusionRecord

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["AuditLog", "FusionRecord", "audit", "fusions"]


class AuditLog:
    """One `audit` block's records, in execution order."""

    __slots__ = ("_lock", "records")

    def __init__(self) -> None:
        self.records: list[FusionRecord] = []
        self._lock = threading.Lock()

    def _append(self, record: FusionRecord) -> None:
        with self._lock:
            self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    def fusions(self) -> list[FusionInfo]:
        """The fusions that ran, each once, in the order they first ran."""
        return list(dict.fromkeys(record.info for record in self.records))

    def failures(self) -> list[FusionRecord]:
        """The executions that failed and fell back to their defaults."""
        return [record for record in self.records if record.route == "fallback"]

    def summary(self) -> str:
        """A table of execution counts per fusion, options, phase, partition and thread."""
        if not self.records:
            return "nvscope audit: no nvFuser fusion executed"
        counts = Counter(
            (r.fusion, r.options.as_shell() or "(none)", r.phase, r.route, r.thread) for r in self.records
        )
        header = ("fusion", "options", "phase", "partition", "thread", "calls")
        lines = [_texttable.render(header, [(*key, str(n)) for key, n in counts.items()])]
        total = len(self.records)
        new = [r for r in self.records if r.route == "new"]
        compiled = sum(r.shared_from is None for r in new)
        rebuilt = sum(r.shared_from == r.fusion for r in new)
        shared = len(new) - compiled - rebuilt
        fell_back = len({r.fusion for r in self.failures()})
        lines.append(f"{total} fusion executions, {compiled} new partitions compiled"
                     + (f", {shared} shared a definition compiled for another fusion" if shared else "")
                     + (f", {rebuilt} rebuilt partitions ran their definition compiled before" if rebuilt else "")
                     + (f", {fell_back} fusion(s) fell back to their defaults after failing" if fell_back else ""))
        return "\n".join(lines)


@contextmanager
def audit() -> Iterator[AuditLog]:
    """Record every fusion execution through nvscope's adapters while the block runs (installing them, as a scope
    does)."""
    _autoinstall.ensure_adapters(direct=True)
    log = AuditLog()
    with _events.listening(log._append):
        yield log


def fusions(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[FusionInfo]:
    """Call ``fn(*args, **kwargs)`` once and return the nvFuser fusions it ran, in the order they first ran (the
    list ``nvscope fusions`` prints); their ids are what ``nv_options(fusions=...)`` selects by."""
    with audit() as log:
        fn(*args, **kwargs)
    return log.fusions()
