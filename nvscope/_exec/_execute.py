"""Execute one fusion under the active scope: the one path every adapter uses.

    effective options (`nvscope._core._policy`) -> partition (`nvscope._exec._fusion_table`) -> audit -> run ->
    annotate / fall back

An adapter (`Adapter`: Thunder's wrapper shape, or a direct nvFuser frontend) says only what differs between them:
where a fusion's table lives, how a fusion is identified, how a partition is built, and how the fusion runs with its
defaults or with a partition. Everything that decides (which options, which partition, what is recorded, what a
failure becomes) is here, once.

A fusion's table (a `FusionTable`) is made the first time nvscope sees the fusion scoped or audited, and keeps the
fusion's identity (`FusionInfo`), its own options and a memo: the last (policy, own options) it ran under and the
partition that resolved to, so the steady state of a training loop is one identity test; other pairs resolve
through a small dict, never through the selectors again.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from nvscope._core import _policy
from nvscope._core._errors import FallbackWarning, NvscopeError, UnsupportedError
from nvscope._core._fusion import FusionInfo
from nvscope._core._optionset import OptionSet
from nvscope._core._scope import CHANGED, NO_EFFECT, NOTHING, Frame
from nvscope._exec import _events, _frontends, _repro, _shared
from nvscope._exec._fusion_table import NO_STEADY, FusionTable

__all__ = ["Adapter", "execute", "failed", "private_failures", "table"]

NO_KWARGS: dict[str, Any] = {}
_SINKS = _events.SINKS  # the list itself (audit appends to it in place): one global load on the hot path
_MISSING = object()
_MAX_RESOLVED = 256  # (policy, own options) pairs remembered per fusion beyond the hot one (above the LRU bound)
# The open `private_failures` blocks, innermost last: the failures recorded in each, to forget when it ends.
_PRIVATE: list[list[tuple[FusionTable[_frontends.Partition], OptionSet, _shared.Entry | None]]] = []


class Adapter:
    """What one adapter supplies to `execute`. Subclasses override every method that raises here."""

    given_as = "compile-time"  # where a fusion's own options come from, for failure notes
    frontend: _frontends.Frontend = _frontends.DIRECT
    version_error: UnsupportedError | None = None  # set at install: raised when a scope reaches a fusion

    def lookup(self, fusion: Any) -> FusionTable[_frontends.Partition] | None:
        raise NotImplementedError

    def attach(self, fusion: Any, table: FusionTable[_frontends.Partition]) -> None:
        raise NotImplementedError

    def identify(self, fusion: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> FusionInfo:
        raise NotImplementedError

    def static(self, fusion: Any, kwargs: dict[str, Any]) -> OptionSet:
        raise NotImplementedError

    def build(self, fusion: Any, info: FusionInfo, options: OptionSet) -> _frontends.Partition:
        """A partition of ``fusion`` for ``options``, with its ``run(args, kwargs)`` bound to the fusion."""
        raise NotImplementedError

    def default(self, fusion: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def script(self, fusion: Any, partition: _frontends.Partition, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> str:
        raise NotImplementedError

    def definition(self, partition: _frontends.Partition, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The FusionDefinition ``partition`` runs for these inputs (audit and failures only, never per call)."""
        return partition.runner

    describe = "fusion"  # what kind of fusion, for failure notes: "Thunder fusion forward/nvFusion0 failed ..."


def table(adapter: Adapter, fusion: Any, args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> FusionTable[_frontends.Partition]:
    """The fusion's table, made (and its identity computed) the first time nvscope sees it."""
    found = adapter.lookup(fusion)
    if found is not None:
        return found
    with _frontends.TABLE_LOCK:  # two threads' first calls must not each build a table (and compile)
        found = adapter.lookup(fusion)
        if found is None:
            info = adapter.identify(fusion, args, kwargs)

            def build(options: OptionSet) -> _frontends.Partition:
                return adapter.build(fusion, info, options)

            found = FusionTable(adapter.static(fusion, kwargs), build, info=info)
            adapter.attach(fusion, found)
        return found


def _resolve(adapter: Adapter, found: FusionTable[_frontends.Partition], policy: Any,
             static: OptionSet) -> tuple[_frontends.Partition | None, bool, bool]:
    """The partition a (policy, own options) pair runs in (None: the fusion's own cache), whether the innermost scope
    is what changed it (`nvscope._core._policy.effective_split`), and whether the partition was built."""
    resolved = found.resolved
    key = (policy, static)
    memo = resolved.get(key)
    if memo is None:
        info: FusionInfo = found.info  # type: ignore[assignment]  # `table` sets it
        options, own = _policy.effective_split(static, policy, info)
        effective = None if options == static else options
        memo = (effective, own)
        if len(resolved) >= _MAX_RESOLVED:
            resolved.clear()
        resolved[key] = memo
    effective, own = memo
    if effective is None:
        partition, new = None, False
    else:
        if adapter.version_error is not None:
            raise adapter.version_error
        partition, new = found.get(effective)
        if new and partition.error is None:
            # It failed under these options before and was evicted since: no second compile attempt, no warning.
            partition.error = found.failed.get(effective)
    found.hot = (policy, static, partition, own)
    steady = own and static is found.static and partition is not None and partition.error is None
    found.steady = (policy, partition.steady, partition) if steady else NO_STEADY  # type: ignore[union-attr]
    if steady and partition.error is not None:  # type: ignore[union-attr]
        # Another thread's run of it failed since the test above (`failed` sets the error, then NO_STEADY): that
        # reset may have come before this store, so undo it here; the inlined path must not run a failed partition.
        found.steady = NO_STEADY
    return partition, own, new


def _changed_below(frame: Frame) -> None:
    """A fusion changed by the scopes around ``frame`` only: they count it as changed, ``frame`` as run."""
    parent = frame.parent
    if parent is None:
        frame.ran = CHANGED
        return
    parent.ran = CHANGED
    if frame.ran == NOTHING:
        frame.ran = NO_EFFECT


def execute(adapter: Adapter, fusion: Any, frame: Frame | None, args: tuple[Any, ...],
            kwargs: dict[str, Any] = NO_KWARGS, found: FusionTable[_frontends.Partition] | None = None) -> Any:
    """Run ``fusion`` (called with ``args``/``kwargs``) under ``frame``'s policy. Adapters call this for every
    execution inside a non-empty scope, and for every execution while an audit listens; ``found`` is the fusion's
    table if the adapter looked it up already (it saves a call on the hot path)."""
    if found is None:
        found = adapter.lookup(fusion)
        if found is None:
            found = table(adapter, fusion, args, kwargs)
    policy = None if frame is None else frame.policy
    static = found.static if kwargs is NO_KWARGS else adapter.static(fusion, kwargs)
    hot_policy, hot_static, partition, own = found.hot
    new = False
    if hot_policy is not policy or hot_static is not static:
        try:
            partition, own, new = _resolve(adapter, found, policy, static)
        except NvscopeError:  # a selector that raised, a refusal: the scope met a fusion; its error says the rest
            if frame is not None:
                frame.ran = CHANGED
            raise
    if partition is not None:
        if own:
            frame.ran = CHANGED  # type: ignore[union-attr]  # a partition means a scope: a frame
        else:
            _changed_below(frame)  # type: ignore[arg-type]
        if partition.error is None and not _SINKS and not new:  # the steady state of a scoped loop
            try:
                return partition.run(args, kwargs)
            except NvscopeError:
                raise
            except Exception as error:
                return failed(error, adapter, found, fusion, frame, partition, static, args, kwargs)
    elif policy is not None and frame.ran == NOTHING:  # type: ignore[union-attr]
        frame.ran = NO_EFFECT  # type: ignore[union-attr]
    info: FusionInfo = found.info  # type: ignore[assignment]  # `table` always sets it
    if partition is None:
        if _SINKS:
            return _timed(adapter.default, _record(info, static, "default", adapter), fusion, args, kwargs)
        return adapter.default(fusion, args, kwargs)
    if partition.error is not None and frame.fallback:  # type: ignore[union-attr]
        return _fall_back(adapter, info, fusion, partition, static, args, kwargs)
    started = time.perf_counter() if new else 0.0
    try:
        if _SINKS:
            record = _record(info, partition.options, "new" if new else "reused", adapter,
                             shared_from=_shared_from(adapter, info, partition, args, kwargs, new))
            return _timed(partition.run, record, args, kwargs)
        return partition.run(args, kwargs)
    except NvscopeError:
        raise
    except Exception as error:
        return failed(error, adapter, found, fusion, frame, partition, static, args, kwargs)
    finally:
        if new:  # where the partition's definition compiles (tools report it: nvscope._exec._shared.compiling)
            _shared.first_run(time.perf_counter() - started)


def failed(error: Exception, adapter: Adapter, found: FusionTable[_frontends.Partition], fusion: Any,
           frame: Frame | None, partition: _frontends.Partition, static: OptionSet, args: tuple[Any, ...],
           kwargs: dict[str, Any], stacklevel: int = 4) -> Any:
    """A partition raised: note the options and the repro on the error; re-raise it, or fall back to the defaults.

    ``stacklevel``: the warning's, for a call from `execute` inside an adapter's patch (3: from the patch itself)."""
    info: FusionInfo = found.info  # type: ignore[assignment]

    def script() -> str:
        return adapter.script(fusion, partition, args, kwargs)

    scope = _policy.resolve(None if frame is None else frame.policy, info)
    _repro.annotate(error, adapter.describe, info, static, scope, partition.options, script,
                    given_as=adapter.given_as)
    if frame is None or not frame.fallback:
        raise error
    partition.error = _failure_text(error)
    found.steady = NO_STEADY  # the adapter's inlined steady path must not run it again
    remembered = found.failed  # beyond the partition's eviction (`_resolve`)
    if len(remembered) >= _MAX_RESOLVED:
        remembered.clear()
    remembered[partition.options] = partition.error
    private = _PRIVATE[-1] if _PRIVATE else None
    if private is not None:
        private.append((found, partition.options, None))
    if isinstance(error, _shared.SharedFailure):  # another fusion's failure with this definition: warned then
        return _fall_back(adapter, info, fusion, partition, static, args, kwargs)
    entry = _shared.entry_of(_definition(adapter, partition, args, kwargs))
    # Shared only where the definition's compile failed (its first execution); a later failure is this execution's.
    users = None if entry is None else _shared.fail(entry, partition.error, info.id)
    if private is not None and users is not None:
        private.append((found, partition.options, entry))
    others = [f for f in users or () if f != info.id]
    shared = ("" if users is None else
              f" Fusions with the same nvFuser definition ({', '.join(others) + ' and ' if others else ''}any that "
              "reaches it later) share this failure: they use their defaults under these options too, without "
              "compiling it again.")
    warnings.warn(f"nvscope: fusion {info.id} failed with nvFuser options {partition.options.label()} and ran "
                  f"again with its defaults (on_error='fallback'); later executions of it under these options use its "
                  f"defaults directly.{shared}\n{partition.error}", FallbackWarning, stacklevel=stacklevel)
    return _fall_back(adapter, info, fusion, partition, static, args, kwargs)


def _definition(adapter: Adapter, partition: _frontends.Partition, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
    try:
        return adapter.definition(partition, args, kwargs)
    except Exception:  # a definition that cannot be built for these inputs: the execution will say why
        return None


def _shared_from(adapter: Adapter, info: FusionInfo, partition: _frontends.Partition, args: tuple[Any, ...],
                 kwargs: dict[str, Any], new: bool) -> str | None:
    """The fusion whose compiled definition ``partition`` runs for these inputs, if another one's; for a ``new``
    partition (rebuilt after eviction) that runs its own fusion's definition compiled before, that fusion: it compiles
    nothing (audit only)."""
    entry = _shared.entry_of(_definition(adapter, partition, args, kwargs))
    if entry is None or (entry.owner == info.id and not (new and entry.compiled)):
        return None
    return entry.owner


@contextmanager
def private_failures() -> Iterator[None]:
    """Failures recorded under ``on_error="fallback"`` while the block runs are forgotten when it ends: the fusions'
    failed partitions (rebuilt at their next use, so the next scope tries the options again, and warns) and the
    shared definitions' failures. For a tool that tries options on the user's fusions (`nvscope.profile`): its own
    fallbacks must not make the user's later scopes fall back silently. Process-wide while it runs, as an audit is.
    """
    undo: list[tuple[FusionTable[_frontends.Partition], OptionSet, _shared.Entry | None]] = []
    _PRIVATE.append(undo)
    try:
        yield
    finally:
        _PRIVATE[:] = [block for block in _PRIVATE if block is not undo]  # by identity: blocks of threads interleave
        for found, options, entry in undo:
            found.forget_failure(options)
            if entry is not None:
                _shared.forget(entry)


def _fall_back(adapter: Adapter, info: FusionInfo, fusion: Any, partition: _frontends.Partition, static: OptionSet,
               args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if _events.SINKS:
        record = _record(info, partition.options, "fallback", adapter, partition.error)
        return _timed(adapter.default, record, fusion, args, kwargs)
    return adapter.default(fusion, args, kwargs)


def _failure_text(error: BaseException) -> str:
    notes = [n for n in getattr(error, "__notes__", None) or () if isinstance(n, str)]
    return "\n".join([f"{type(error).__name__}: {error}", *notes])


def _record(info: FusionInfo, options: OptionSet, partition: _events.Route, adapter: Adapter,
            error: str | None = None, shared_from: str | None = None) -> _events.FusionRecord:
    return _events.FusionRecord(info, options, partition, threading.current_thread().name, adapter.frontend.module,
                                error, shared_from)


def _timed(call: Any, record: _events.FusionRecord, *args: Any) -> Any:
    """``call(*args)``, reported to the audit first, inside every timer's context (`nvscope._exec._events.TIMERS`)."""
    _events.emit(record)
    timers = _events.TIMERS
    if not timers:
        return call(*args)
    with ExitStack() as stack:
        done = [stack.enter_context(timer(record)) for timer in tuple(timers)]
        outputs = call(*args)
        for callback in done:
            if callback is not None:
                callback(outputs)
        return outputs
