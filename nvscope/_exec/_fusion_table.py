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

from nvscope._core import CHANGED, NO_EFFECT, NOTHING, OptionSet, _env, _policy
from nvscope._exec import _shared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nvscope._core import FusionInfo

__all__ = ["NO_STEADY", "TABLE_ATTRIBUTE", "EscapeRefused", "FusionTable", "Partition"]

# Where an adapter keeps a fusion's table: on Thunder's get_fd (an lru_cache wrapper, which has a __dict__), in a
# FusionDefinition's __dict__. One name, so that either adapter's uninstall finds what the other left.
TABLE_ATTRIBUTE = "_nvscope_partitions"

T = TypeVar("T")
_NEVER = object()  # no policy is this: the first call resolves
NO_STEADY: tuple[Any, None, int] = (_NEVER, None, NOTHING)  # no steady state: no policy is _NEVER
_MAX_RESOLVED = 256  # (policy, own options) pairs remembered per fusion beyond the hot one (above the LRU bound)


class Partition:
    """One option set's compiled cache for one fusion, with the option lists nvFuser takes (built once).

    ``run(args, kwargs)`` executes the fusion in this partition (bound to the fusion by its adapter: the one call of
    the lane in the steady state, `nvscope._exec._execute.lane`). ``runner`` is the object it runs: a copy of a Thunder
    fusion's ``FusionDefinitionWrapper`` (`nvscope._exec._thunder_adapter`), the fusion itself (its own call), or its
    PyTorch region (``run="torch"``); None for a direct FusionDefinition, whose ``definitions(device, own)`` gives the
    definition rebuilt for ``execute``'s device argument and the call that runs it (`nvscope._exec._nvfuser`).
    ``error``: the text of its failure under ``on_error="fallback"``; later such calls run the defaults directly.
    """

    __slots__ = ("definitions", "disable", "enable", "error", "options", "run", "runner")

    def __init__(self, runner: Any, options: OptionSet, run: Callable[[tuple[Any, ...], dict[str, Any]], Any],
                 definitions: Callable[[Any, bool], tuple[Any, Any]] | None = None) -> None:
        self.runner = runner
        self.options = options
        self.enable = options.enable_list()
        self.disable = options.disable_list()
        self.error: str | None = None
        self.run = run
        self.definitions = definitions


class EscapeRefused(Exception):
    """Why a fusion cannot run in PyTorch (``on_error="torch"``, ``run="torch"``): its message, one short clause."""


def _region(table: FusionTable[Any]) -> Callable[..., Any]:
    from nvscope._core import NvscopeError

    fusion = "this fusion" if table.info is None else table.info.id
    if table.build_region is None:
        raise NvscopeError(f"nv_options(run='torch') cannot run {fusion} in PyTorch: its adapter has no PyTorch form")
    try:
        return table.build_region()
    except EscapeRefused as why:
        raise NvscopeError(f"nv_options(run='torch') cannot run {fusion} in PyTorch: {why}") from None
    except Exception as error:  # Thunder's PyTorch executor cannot run the region
        raise NvscopeError(f"nv_options(run='torch') cannot run {fusion} in PyTorch: Thunder's PyTorch executor "
                           f"cannot run its region ({type(error).__name__}: {str(error)[:200]})") from None


class FusionTable(Generic[T]):
    """``options -> cache`` for one fusion; ``build(options)`` makes a missing entry.

    In the execution path the caches are partitions (`nvscope._exec._frontends.Partition`), and the table also
    decides which one a call runs (`resolve`) and remembers which failed (`mark_failed`): the memos it keeps for that
    (``hot``, ``steady``, ``resolved``, ``failed``) are written here only."""

    __slots__ = ("_entries", "_lock", "_own", "_torch", "build", "build_own", "build_region", "builds", "evictions",
                 "failed", "hot", "info", "maxsize", "own_options", "region", "region_failed", "region_ran",
                 "resolved", "routes", "steady")

    def __init__(self, own_options: OptionSet, build: Callable[[OptionSet], T], maxsize: int | None = None, *,
                 info: FusionInfo | None = None, build_own: Callable[[], T] | None = None,
                 build_region: Callable[[], Callable[..., Any]] | None = None):
        if maxsize is None:
            # Distinct option sets kept per fusion. A developer A/B-testing a handful of flag combinations stays well
            # below the default (8); each partition holds compiled kernels, so the bound keeps memory finite.
            maxsize = _env.integer("NVSCOPE_MAX_PARTITIONS")  # read per table, so a change affects new tables
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        # The fusion's own options for a call that passes none (Thunder's compile-time ones; none for a direct
        # FusionDefinition): its default cache serves them.
        self.own_options = own_options
        self.info = info  # the fusion's identity, computed once when the table is made (nvscope._exec._execute)
        self.build = build
        self.maxsize = maxsize
        self.builds = 0
        self.evictions = 0
        self._entries: OrderedDict[OptionSet, T] = OrderedDict()
        self._lock = threading.RLock()  # reentrant: a build runs user (Thunder) code
        # A one-entry memo for the hot path (`resolve`): (the scope's policy object, the fusion's own options, the
        # entry they resolved to or None for "the fusion's own cache", whether the innermost scope is what changed
        # it). A training loop re-enters the same scope object, so one identity test replaces the resolution and the
        # LRU update. It may keep an evicted entry alive until the scope changes. `resolved` remembers what other
        # pairs resolved to (an option set, or None; and the innermost scope's part in it).
        self.hot: tuple[Any, OptionSet | None, T | None, bool] = (_NEVER, None, None, True)
        # The same memo reduced to what the execution path's lane needs (a call with no per-call options): (policy,
        # the entry, what the scope did to the fusion: CHANGED, or NO_EFFECT for its own options run shared), set
        # only while the innermost scope decided the fusion's options and the entry has not failed; else `NO_STEADY`.
        # One tuple, so that a thread never reads one part of another thread's update.
        self.steady: tuple[Any, T | None, int] = NO_STEADY
        self.resolved: dict[tuple[Any, OptionSet], tuple[OptionSet | None, bool, bool]] = {}
        # Option sets this fusion failed under (on_error="fallback") -> the failure's text. Kept beyond eviction: a
        # partition built again for one of them starts failed, so it is not compiled again (nor warned about).
        self.failed: dict[OptionSet, str] = {}
        # on_error="torch": the fusion's own call as a partition (`build_own`: no compile of its own), so that the
        # lane runs its defaults and catches their failure; the region's PyTorch callable once built; and the routes
        # to it, (options in force, the inputs' descriptors) -> that callable, for the calls nvFuser failed.
        self.build_own = build_own
        self._own: T | None = None
        # run="torch": the region's PyTorch callable (`build_region`, shared with on_error="torch") as a partition.
        self.build_region = build_region
        self._torch: Partition | None = None
        self.region: Callable[..., Any] | None = None
        self.region_ran = False  # it ran in PyTorch once (on_error="torch"): later failures of it are its own
        self.region_failed: str | None = None  # why its first PyTorch run failed: no later escape tries it
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
        scope is what changed it (`nvscope._core._policy.effective_split`), and whether the partition was built now.

        Remembered: the pair is the one-entry memo (``hot``) and, while it can run as it is, the lane's (``steady``);
        other pairs resolve through ``resolved``, never through the selectors again. ``refusal`` is raised when the
        pair needs a partition (a frontend that takes no per-call options)."""
        resolved = self.resolved
        key = (policy, own_options)
        memo = resolved.get(key)
        if memo is None:
            info = self.info
            assert info is not None, "a table in the execution path knows its fusion"
            options, innermost = _policy.effective_split(own_options, policy, info)
            # Under sharing (`nvscope._core._policy.sharing`), the fusion's own options run in a partition too: its
            # definition is then shared (nvscope._exec._shared), unless NVSCOPE_SHARE=0 turned sharing off.
            alone = options == own_options and not (_policy.sharing(policy) and _shared.enabled())
            memo = (None if alone else options, innermost, _policy.routed(policy, info))
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
                # It failed under these options before and was evicted since: no second compile attempt, no warning.
                partition.error = self.failed.get(effective)
        elif own_options is self.own_options and _policy.escapes(policy) and self.build_own is not None:
            partition = self.own_partition()
        self.hot = (policy, own_options, partition, innermost)
        steady = (innermost and own_options is self.own_options and partition is not None and partition.error is None
                  and not self.routes)
        if steady and partition is not None:
            self.steady = (policy, partition, NO_EFFECT if effective == own_options and not torch else CHANGED)
        else:
            self.steady = NO_STEADY
        if steady and partition is not None and partition.error is not None:
            # Another thread's run of it failed since the test above (`mark_failed` sets the error, then NO_STEADY):
            # that reset may have come before this store, so undo it here; the lane must not run a failed partition.
            self.steady = NO_STEADY
        return partition, innermost, new

    def torch_partition(self: FusionTable[Partition]) -> Partition:
        """The fusion's region in PyTorch as a partition (``run="torch"``), built once: an `NvscopeError` says in one
        line why it cannot be."""
        torch = self._torch
        if torch is None:
            with self._lock:
                torch = self._torch
                if torch is None:
                    region = self.region
                    if region is None:
                        region = self.region = _region(self)
                    run = region

                    def routed(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                        return run(*args)

                    torch = self._torch = Partition(region, self.own_options, routed)
        return torch

    def own_partition(self) -> T:
        """The fusion's own call as a partition (`build_own`), built once."""
        own = self._own
        if own is None:
            assert self.build_own is not None
            with self._lock:
                own = self._own
                if own is None:
                    own = self._own = self.build_own()
        return own

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    def add_route(self, options: OptionSet, key: Any, region: Callable[..., Any]) -> bool:
        """Calls with inputs ``key`` under ``options`` run ``region`` (PyTorch) from now on; True for the fusion's
        first route. The lane leaves a fusion with routes to the execution path, which looks them up."""
        with self._lock:
            first = not self.routes
            self.routes[(options, key)] = region
            self.steady = NO_STEADY
        return first

    def mark_failed(self: FusionTable[Partition], partition: Partition, error: str) -> None:
        """``partition`` failed with ``error`` (its text) under ``on_error="fallback"``: later calls run the fusion's
        defaults instead, also after the partition is evicted and built again (`resolve`)."""
        partition.error = error
        self.steady = NO_STEADY  # the lane must not run it again
        remembered = self.failed
        if len(remembered) >= _MAX_RESOLVED:
            remembered.clear()
        remembered[partition.options] = error

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
