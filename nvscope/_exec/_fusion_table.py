"""A fusion's table: its identity, and its compiled caches (partitions), one per effective option set, LRU-bounded.

nvFuser does not key its compiled kernels on options, so a scope is only real if every option set gets a compiled
cache of its own. Lookups take no lock; building a missing entry holds the table's lock, so it compiles once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from nvscope._core import CHANGED, NO_EFFECT, NOTHING, OptionSet, _env, _policy
from nvscope._exec import _shared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nvscope._core import FusionInfo

__all__ = ["NOT_CACHED", "EscapeRefused", "FusionTable", "Partition"]

T = TypeVar("T")
_NEVER = object()
NOT_CACHED: tuple[Any, None, int] = (_NEVER, None, NOTHING)
_MAX_RESOLVED = 256


class Partition:
    """One option set's compiled cache for one fusion.

    ``run(args, kwargs)`` executes the fusion in it; ``runner`` is what it runs (a Thunder wrapper copy, the fusion
    itself, or its PyTorch region; None for a direct definition, whose ``definitions(device, own)`` builds it).
    ``error``: its failure under ``on_error="fallback"``, after which calls run the defaults.
    """

    __slots__ = ("definitions", "error", "options", "run", "runner")

    def __init__(self, runner: Any, options: OptionSet, run: Callable[[tuple[Any, ...], dict[str, Any]], Any],
                 definitions: Callable[[Any, bool], tuple[Any, Any]] | None = None) -> None:
        self.runner = runner
        self.options = options
        self.error: str | None = None
        self.run = run
        self.definitions = definitions


class EscapeRefused(Exception):
    """Why a fusion cannot run in PyTorch: its message, one short clause."""


def _region(table: FusionTable[Any]) -> Callable[..., Any]:
    from nvscope._core import NvscopeError

    fusion = table.info.id
    try:
        return table.build_region()
    except EscapeRefused as why:
        raise NvscopeError(f"nv_options(run='torch') cannot run {fusion} in PyTorch: {why}") from None
    except Exception as error:
        raise NvscopeError(f"nv_options(run='torch') cannot run {fusion} in PyTorch: Thunder's PyTorch executor "
                           f"cannot run its region ({type(error).__name__}: {str(error)[:200]})") from None


class FusionTable(Generic[T]):
    """``options -> cache`` for one fusion; ``build(options)`` makes a missing entry. It also decides which partition
    a call runs (`resolve`) and records which failed; its memos are written here only."""

    __slots__ = ("_entries", "_own", "_torch", "build", "build_own", "build_region", "builds", "cached",
                 "evictions", "failed", "info", "last", "lock", "maxsize", "own_options", "region", "region_failed",
                 "region_ran", "resolved", "routes")

    def __init__(self, own_options: OptionSet, build: Callable[[OptionSet], T], maxsize: int | None = None, *,
                 info: FusionInfo, build_own: Callable[[], T], build_region: Callable[[], Callable[..., Any]]):
        if maxsize is None:
            maxsize = _env.integer("NVSCOPE_MAX_PARTITIONS")
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.own_options = own_options
        self.info = info
        self.build = build
        self.maxsize = maxsize
        self.builds = 0
        self.evictions = 0
        self._entries: OrderedDict[OptionSet, T] = OrderedDict()
        self.lock = threading.RLock()  # a build runs Thunder's code
        # One-entry memo (policy, own options, entry or None, innermost changed it): a loop re-enters the same scope,
        # so one identity test replaces the resolution. It may keep an evicted entry alive until the scope changes.
        self.last: tuple[Any, OptionSet | None, T | None, bool] = (_NEVER, None, None, True)
        # The memo the call wrapper reads: (policy, entry, CHANGED or NO_EFFECT), else `NOT_CACHED`. One tuple, so
        # that a thread never reads part of another thread's update.
        self.cached: tuple[Any, T | None, int] = NOT_CACHED
        self.resolved: dict[tuple[Any, OptionSet], tuple[OptionSet | None, bool, bool]] = {}
        # Kept beyond eviction: a partition built again for a failed option set starts failed, not compiled again.
        self.failed: dict[OptionSet, str] = {}
        # on_error="torch": the fusion's own call as a partition, the region's PyTorch callable, and the routes to it
        # of the calls nvFuser failed, by (options, inputs' key).
        self.build_own = build_own
        self._own: T | None = None
        self.build_region = build_region
        self._torch: Partition | None = None
        self.region: Callable[..., Any] | None = None
        self.region_ran = False  # later failures of it are the region's own
        self.region_failed: str | None = None
        self.routes: dict[tuple[OptionSet, Any], Callable[..., Any]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, options: object) -> bool:
        return options in self._entries

    def keys(self) -> list[OptionSet]:
        """The option sets that have a cache now, least recently used first."""
        return list(self._entries)

    def resolve(self: FusionTable[Partition], policy: Any, own_options: OptionSet,
                refusal: Exception | None = None) -> tuple[Partition | None, bool, bool]:
        """The partition a (policy, own options) pair runs in (None: the fusion's own cache), whether the innermost
        scope changed it, and whether the partition was built now. ``refusal`` is raised if a partition is needed."""
        resolved = self.resolved
        key = (policy, own_options)
        memo = resolved.get(key)
        if memo is None:
            options, innermost = _policy.effective_split(own_options, policy, self.info)
            # Under sharing, the fusion's own options run in a partition too, so that its definition is shared.
            alone = options == own_options and not (_policy.sharing(policy) and _shared.enabled())
            memo = (None if alone else options, innermost, _policy.routed(policy, self.info))
            if len(resolved) >= _MAX_RESOLVED:
                resolved.clear()
            resolved[key] = memo
        effective, innermost, torch = memo
        partition: Partition | None = None
        new = False
        if torch:
            partition = self.torch_partition()
            effective = None
        elif effective is not None:
            if refusal is not None:
                raise refusal
            partition, new = self.get(effective)
            if new and partition.error is None:
                partition.error = self.failed.get(effective)
        elif own_options is self.own_options and _policy.escapes(policy):
            partition = self.own_partition()
        self.last = (policy, own_options, partition, innermost)
        cached = (innermost and own_options is self.own_options and partition is not None and partition.error is None
                  and not self.routes)
        if cached and partition is not None:
            self.cached = (policy, partition, NO_EFFECT if effective == own_options and not torch else CHANGED)
        else:
            self.cached = NOT_CACHED
        if cached and partition is not None and partition.error is not None:
            # Another thread's `mark_failed` may have reset it before this store: never run a failure.
            self.cached = NOT_CACHED
        return partition, innermost, new

    def torch_partition(self: FusionTable[Partition]) -> Partition:
        """The fusion's region in PyTorch as a partition, built once; `NvscopeError` if it cannot be."""
        torch = self._torch
        if torch is None:
            with self.lock:
                torch = self._torch
                if torch is None:
                    region = self.region
                    if region is None:
                        region = self.region = _region(self)

                    def routed(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                        return region(*args)

                    torch = self._torch = Partition(region, self.own_options, routed)
        return torch

    def own_partition(self) -> T:
        """The fusion's own call as a partition (`build_own`), built once."""
        own = self._own
        if own is None:
            with self.lock:
                own = self._own
                if own is None:
                    own = self._own = self.build_own()
        return own

    def add_route(self, options: OptionSet, key: Any, region: Callable[..., Any]) -> bool:
        """Calls with inputs ``key`` under ``options`` run ``region`` from now on; True for the first route."""
        with self.lock:
            first = not self.routes
            self.routes[(options, key)] = region
            self.cached = NOT_CACHED
        return first

    def mark_failed(self: FusionTable[Partition], partition: Partition, error: str) -> None:
        """``partition`` failed with ``error`` under ``on_error="fallback"``: later calls run the defaults instead."""
        partition.error = error
        self.cached = NOT_CACHED
        recorded = self.failed
        if len(recorded) >= _MAX_RESOLVED:
            recorded.clear()
        recorded[partition.options] = error

    def forget_failure(self, options: OptionSet) -> None:
        """Forget that the fusion failed under ``options``: its partition and the memos that could run it go."""
        with self.lock:
            self.failed.pop(options, None)
            self._entries.pop(options, None)
            self.last = (_NEVER, None, None, True)
            self.cached = NOT_CACHED

    def get(self, options: OptionSet) -> tuple[T, bool]:
        """The cache for ``options`` and whether it was just built (False: reused)."""
        entries = self._entries
        entry = entries.get(options)
        if entry is not None:
            try:
                entries.move_to_end(options)
            except KeyError:
                pass
            return entry, False
        with self.lock:
            entry = entries.get(options)
            if entry is not None:
                return entry, False
            entry = self.build(options)
            self.builds += 1
            entries[options] = entry
            if len(entries) > self.maxsize:
                entries.popitem(last=False)
                self.evictions += 1
            return entry, True
