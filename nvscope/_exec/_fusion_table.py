"""A fusion's table: its identity, and its compiled caches (partitions), one per effective option set, LRU-bounded.

nvFuser does not key its compiled kernels on options (measured on the H200, both frontends): a fusion compiled
without options and run later with them reuses the old kernels. So a scope is only real if every option set gets a
compiled cache of its own. A `FusionTable` maps option set -> that cache (whatever the frontend builds: a
FusionDefinition builder, a FusionExecutorCache) and evicts the least recently used set beyond ``maxsize``.

Thread-safe: lookups take no lock (each dict operation is atomic under the GIL); building a missing entry holds
the table's lock, so two threads asking for a new option set at once build (and compile) it once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from nvscope._core import _env
from nvscope._core._optionset import OptionSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nvscope._core._fusion import FusionInfo

__all__ = ["NO_STEADY", "FusionTable"]

T = TypeVar("T")
_NEVER = object()  # no policy is this: the first call resolves
NO_STEADY: tuple[Any, None, None] = (_NEVER, None, None)  # no steady state: no policy is _NEVER


class FusionTable(Generic[T]):
    """``options -> cache`` for one fusion; ``build(options)`` makes a missing entry."""

    __slots__ = ("_entries", "_lock", "build", "builds", "evictions", "failed", "hot", "info", "maxsize", "resolved",
                 "static", "steady")

    def __init__(self, static: OptionSet, build: Callable[[OptionSet], T], maxsize: int | None = None, *,
                 info: FusionInfo | None = None):
        if maxsize is None:
            # Distinct option sets kept per fusion. A developer A/B-testing a handful of flag combinations stays well
            # below the default (8); each partition holds compiled kernels, so the bound keeps memory finite.
            maxsize = _env.integer("NVSCOPE_MAX_PARTITIONS")  # read per table, so a change affects new tables
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.static = static  # the fusion's own options (Thunder's compile-time ones); its default cache serves them
        self.info = info  # the fusion's identity, computed once when the table is made (nvscope._exec._execute)
        self.build = build
        self.maxsize = maxsize
        self.builds = 0
        self.evictions = 0
        self._entries: OrderedDict[OptionSet, T] = OrderedDict()
        self._lock = threading.RLock()  # reentrant: a build runs user (Thunder) code
        # A one-entry memo for the hot path: (the scope's policy object, the fusion's own options, the entry they
        # resolved to or None for "the fusion's own cache", whether the innermost scope is what changed it). A
        # training loop re-enters the same scope object, so one identity test replaces the resolution and the LRU
        # update. It may keep an evicted entry alive until the scope changes. `resolved` remembers what other pairs
        # resolved to (an option set, or None; and the innermost scope's part in it).
        self.hot: tuple[Any, OptionSet | None, T | None, bool] = (_NEVER, None, None, True)
        # The same memo reduced to what an adapter's inlined steady path needs (a call with no per-call options):
        # (policy, the entry's ``steady`` as its adapter laid it out, the entry), set only while the innermost scope
        # changed the fusion and the entry has not failed; else `NO_STEADY`. One tuple, so that a thread never reads
        # one half of another thread's update.
        self.steady: tuple[Any, Any, T | None] = NO_STEADY
        self.resolved: dict[tuple[Any, OptionSet], tuple[OptionSet | None, bool]] = {}
        # Option sets this fusion failed under (on_error="fallback") -> the failure's text. Kept beyond eviction: a
        # partition built again for one of them starts failed, so it is not compiled again (nor warned about).
        self.failed: dict[OptionSet, str] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, options: object) -> bool:
        return options in self._entries

    def keys(self) -> list[OptionSet]:
        """The option sets that have a cache now, least recently used first."""
        return list(self._entries)

    def forget_failure(self, options: OptionSet) -> None:
        """Forget that the fusion failed under ``options``: its partition for them goes (built again at its next use,
        which tries the options again) and the memos that could still run it."""
        with self._lock:
            self.failed.pop(options, None)
            self._entries.pop(options, None)
            self.hot = (_NEVER, None, None, True)
            self.steady = NO_STEADY

    def get(self, options: OptionSet) -> tuple[T, bool]:
        """The cache for ``options`` and whether it was just built (False: reused)."""
        entries = self._entries
        entry = entries.get(options)
        if entry is not None:
            try:
                entries.move_to_end(options)
            except KeyError:  # evicted by another thread since the get: the entry in hand still works
                pass
            return entry, False
        with self._lock:
            entry = entries.get(options)
            if entry is not None:  # another thread built it while this one waited
                return entry, False
            entry = self.build(options)
            self.builds += 1
            entries[options] = entry
            if len(entries) > self.maxsize:
                entries.popitem(last=False)
                self.evictions += 1
            return entry, True
