"""Execute one fusion under the active scope: the one path every adapter uses.

An adapter patches its framework's per-fusion call with `call_wrapper` (`direct_call_wrapper`: nvFuser's execute) and
says only what differs between frameworks; options, partition, records and failures are decided here, once.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from nvscope._core import (
    ACTIVE,
    CHANGED,
    NO_EFFECT,
    FallbackWarning,
    Frame,
    FusionInfo,
    NvscopeError,
    OptionSet,
    _policy,
    _state,
    note_run,
)
from nvscope._exec import _escapes, _events, _repro, _shared
from nvscope._exec._adapter import Adapter, F, FusionCall
from nvscope._exec._frontends import TABLE_LOCK, THUNDER_CALLERS
from nvscope._exec._fusion_table import FusionTable, Partition

__all__ = ["NO_KWARGS", "Adapter", "call_wrapper", "direct_call_wrapper", "execute", "failed", "fusion_table",
           "private_failures"]

NO_KWARGS: dict[str, Any] = {}  # no keyword arguments (Thunder's calls): the fusion's own options
_SINKS = _events.SINKS  # the list itself, appended in place: one global load on the hot path
_PRIVATE: list[list[tuple[FusionTable[Partition], OptionSet, _shared.Entry | None]]] = []
_state.keep(__name__, "NO_KWARGS", "a sentinel compared by identity, never written")
_state.keep(__name__, "_PRIVATE", "the private_failures blocks open now: each pops its own at its end")

def call_wrapper(adapter: Adapter[F], original: Callable[..., Any]) -> Callable[..., Any]:
    """The call wrapper of ``adapter``'s fusion calls ``original(fusion, *args)``: unscoped, one ContextVar read and
    two tests; a repeated scoped call runs its cached partition here; the rest goes to `execute`. No lock: nvFuser's
    execute binding holds the GIL for the whole call."""
    table_of = adapter.table_of
    sinks = _SINKS
    get_active = ACTIVE.get

    def call(fusion: F, *args: Any) -> Any:  # no **kwargs: an empty dict per call costs here
        frame = get_active()
        if frame is None or frame.policy is None:
            if not sinks:
                return original(fusion, *args)
            return execute(adapter, fusion, frame, args)
        try:
            table = table_of(fusion)
        except AttributeError:  # `execute` makes its table
            return execute(adapter, fusion, frame, args)
        policy, partition, level = table.cached
        if policy is not frame.policy or sinks or partition is None:
            return execute(adapter, fusion, frame, args, NO_KWARGS, table)
        if frame.ran < level:
            note_run(frame, level)
        try:
            return partition.run(args, NO_KWARGS)
        except NvscopeError:
            raise
        except Exception as error:
            own = table.own_options
            return failed(error, FusionCall(adapter, table, fusion, frame, partition, own, args, NO_KWARGS), 3)

    return _wraps(call, original)


def direct_call_wrapper(adapter: Adapter[F], original: Callable[..., Any], elsewhere: str) -> Callable[..., Any]:
    """`call_wrapper` for nvFuser's ``FusionDefinition.execute``. Definitions marked ``elsewhere`` (Thunder's adapter
    scoped them) and Thunder's own executions run as they are."""
    table_of = adapter.table_of
    sinks = _SINKS
    get_active = ACTIVE.get
    callers = THUNDER_CALLERS
    caller = sys._getframe
    no_dict: dict[str, Any] = {}

    def call(fusion: F, *args: Any, **kwargs: Any) -> Any:
        frame = get_active()
        if (frame is None or frame.policy is None) and not sinks:
            return original(fusion, *args, **kwargs)
        if elsewhere in getattr(fusion, "__dict__", no_dict) or (callers and caller(1).f_code in callers):
            return original(fusion, *args, **kwargs)
        if kwargs or frame is None or frame.policy is None:
            return execute(adapter, fusion, frame, args, kwargs or NO_KWARGS)
        try:
            table = table_of(fusion)
        except AttributeError:
            return execute(adapter, fusion, frame, args)
        policy, partition, level = table.cached
        if policy is not frame.policy or sinks or partition is None:
            return execute(adapter, fusion, frame, args, NO_KWARGS, table)
        if frame.ran < level:
            note_run(frame, level)
        try:
            return partition.run(args, NO_KWARGS)
        except NvscopeError:
            raise
        except Exception as error:
            own = table.own_options
            return failed(error, FusionCall(adapter, table, fusion, frame, partition, own, args, NO_KWARGS), 3)

    return _wraps(call, original)


def _wraps(patch: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """``patch``, named as ``original`` and unwrapping to it."""
    return functools.update_wrapper(patch, original, assigned=("__name__",), updated=())


def fusion_table(adapter: Adapter[F], fusion: F, args: tuple[Any, ...]) -> FusionTable[Partition]:
    """The fusion's table, made the first time nvscope sees it."""
    table = adapter.lookup(fusion)
    if table is not None:
        return table
    with TABLE_LOCK:  # two threads' first calls must not each compile
        table = adapter.lookup(fusion)
        if table is None:
            info = adapter.identify(fusion, args)
            own_options = adapter.own_options(fusion, NO_KWARGS)
            table = FusionTable(own_options, functools.partial(adapter.build, fusion, info), info=info,
                                build_own=functools.partial(adapter.own_partition, fusion, own_options),
                                build_region=functools.partial(adapter.region, fusion))
            adapter.attach(fusion, table)
        return table


def execute(adapter: Adapter[F], fusion: F, frame: Frame | None, args: tuple[Any, ...],
            kwargs: dict[str, Any] = NO_KWARGS, table: FusionTable[Partition] | None = None) -> Any:
    """Run ``fusion`` under ``frame``'s policy: every scoped or audited call the call wrapper does not run itself."""
    if table is None:
        table = fusion_table(adapter, fusion, args)
    policy = None if frame is None else frame.policy
    own_options = table.own_options if kwargs is NO_KWARGS else adapter.own_options(fusion, kwargs)
    last_policy, last_own, partition, innermost = table.last
    new = False
    if last_policy is not policy or last_own is not own_options:
        try:
            partition, innermost, new = table.resolve(policy, own_options, adapter.version_error)
        except NvscopeError:  # the scope met a fusion all the same
            note_run(frame, CHANGED)
            raise
    if partition is not None and frame is not None:
        if partition.options == own_options:  # its own options, run shared
            note_run(frame, NO_EFFECT)
        elif innermost:
            note_run(frame, CHANGED)
        else:  # changed by the scopes around ``frame`` only
            note_run(frame.parent or frame, CHANGED)
            note_run(frame, NO_EFFECT)
    elif policy is not None:
        note_run(frame, NO_EFFECT)
    info = table.info
    if partition is None:
        if _SINKS:
            return _timed(adapter.default, _record(info, own_options, "default", adapter), fusion, args, kwargs)
        return adapter.default(fusion, args, kwargs)
    # A FusionCall only where one is needed: one per call adds a quarter to a call that switches option set.
    parts = (adapter, table, fusion, frame, partition, own_options, args, kwargs)
    if partition.error is not None and frame is not None and frame.on_error == "fallback":
        return _fall_back(FusionCall(*parts))
    if table.routes and _policy.escapes(policy):
        call = FusionCall(*parts)
        region = _escapes.route(call)
        if region is not None:
            return _run_region(region, call)
    started = time.perf_counter() if new else 0.0
    try:
        if _SINKS:
            runner = partition.runner
            route: _events.Route = ("default" if runner is fusion else "torch" if runner is not None
                                    and runner is table.region else "new" if new else "reused")
            record = _record(info, partition.options, route, adapter, shared_from=_shared_from(FusionCall(*parts), new))
            return _timed(partition.run, record, args, kwargs)
        return partition.run(args, kwargs)
    except NvscopeError:
        raise
    except Exception as error:
        return failed(error, FusionCall(*parts))
    finally:
        if new:  # where the partition's definition compiles
            _shared.SHARED.note_compile(time.perf_counter() - started)


def failed(error: Exception, call: FusionCall, stacklevel: int = 4) -> Any:
    """A partition raised: note the options and the repro on the error, then re-raise it, fall back to the
    defaults, or run the region in PyTorch."""
    info, partition, frame, table = call.info, call.partition, call.frame, call.table
    own = partition.options == call.own_options
    try:
        if own and isinstance(error, _shared.SharedFailure):
            try:
                with _shared.SHARED.ignoring_failures():
                    return partition.run(call.args, call.kwargs)
            except NvscopeError:
                raise
            except Exception as again:
                error = again
        scope = _policy.resolve(None if frame is None else frame.policy, info)
        _repro.annotate(error, call.adapter.describe, info, call.own_options, scope, partition.options,
                        functools.partial(_script, call), given_as=call.adapter.given_as)
        if frame is not None and frame.on_error == "torch":
            return _escape(error, call, stacklevel)
        if frame is None or frame.on_error != "fallback" or own:
            # At its own options there are no defaults to fall back to; not recorded, so a transient failure is
            # tried again next call, as on Thunder's own path.
            raise error
        text = _failure_text(error)
        table.mark_failed(partition, text)
        private = _PRIVATE[-1] if _PRIVATE else None
        if private is not None:
            private.append((table, partition.options, None))
        if isinstance(error, _shared.SharedFailure):  # warned for the other fusion
            return _fall_back(call)
        try:
            entry = _shared.entry_of(call.definition())
        except Exception:  # the execution will say why
            entry = None
        # [] where a racing thread recorded it already, and warned.
        users = None if entry is None else _shared.SHARED.fail(entry, text, info.id)
        if users == []:
            return _fall_back(call)
        if private is not None and users is not None:
            private.append((table, partition.options, entry))
        others = [f for f in users or () if f != info.id]
        shared = ("" if users is None else
                  f" Fusions with the same nvFuser definition ({', '.join(others) + ' and ' if others else ''}any "
                  "that reaches it later) share this failure: they use their defaults under these options too, "
                  "without compiling it again.")
        warnings.warn(f"nvscope: fusion {info.id} failed with nvFuser options {partition.options.label()} and ran "
                      f"again with its defaults (on_error='fallback'); later executions of it under these options use "
                      f"its defaults directly.{shared}\n{text}", FallbackWarning, stacklevel=stacklevel)
        return _fall_back(call)
    finally:
        _shared.SHARED.release_failed()  # a failure not recorded above is not shared


def _escape(error: Exception, call: FusionCall, stacklevel: int) -> Any:
    region, first = _escapes.region_for(error, call)
    table = call.table
    try:  # a first run fails on a symbol only nvFuser runs
        outputs = _run_region(region, call)
    except Exception as problem:
        if table.region_ran:
            raise
        raise _escapes.unusable(error, table, problem) from problem
    table.region_ran = True
    if first:
        _escapes.warn(error, table, call.partition, stacklevel + 1)
    return outputs


def _run_region(region: Callable[..., Any], call: FusionCall) -> Any:
    if _SINKS:
        return _timed(region, _record(call.info, call.partition.options, "torch", call.adapter), *call.args)
    return region(*call.args)


def _script(call: FusionCall) -> str:
    """nvFuser's repro script of the call's definition and inputs, passing the partition's options."""
    try:
        fd = call.definition()
    except _shared.SharedFailure as known:  # failed for another fusion: an equal definition
        fd = known.fd
    inputs = call.adapter.repro_inputs(call.args, call.kwargs)
    return _repro.with_options(type(fd).repro_script_for(fd, inputs), call.partition.options)


def _shared_from(call: FusionCall, new: bool) -> str | None:
    """The fusion whose compiled definition the call runs, if not its own fresh one (for the audit)."""
    try:
        fd = call.definition()
    except _shared.SharedFailure as failure:
        return failure.entry.failed_in or failure.entry.owner
    except Exception:
        return None
    entry = _shared.entry_of(fd)
    if entry is None or (entry.owner == call.info.id and not (new and entry.compiled)):
        return None
    return entry.owner


@contextmanager
def private_failures() -> Iterator[None]:
    """Fallback failures recorded while the block runs are forgotten at its end, so that a tool's own fallbacks do
    not make the user's later scopes fall back silently. Process-wide."""
    undo: list[tuple[FusionTable[Partition], OptionSet, _shared.Entry | None]] = []
    _PRIVATE.append(undo)
    try:
        yield
    finally:
        _PRIVATE[:] = [block for block in _PRIVATE if block is not undo]  # threads' blocks interleave
        for table, options, entry in undo:
            table.forget_failure(options)
            if entry is not None:
                _shared.SHARED.forget(entry)


def _fall_back(call: FusionCall) -> Any:
    """Run the fusion with its defaults after its partition failed: the framework's own call, or the shared
    partition at its own options where the scope shares defaults."""
    adapter, args, kwargs, frame = call.adapter, call.args, call.kwargs, call.frame
    run: Any = adapter.default
    call_args: tuple[Any, ...] = (call.fusion, args, kwargs)
    new = False  # an own-options partition built now compiles
    if frame is not None and _policy.sharing(frame.policy) and _shared.enabled():
        own, new = call.table.get(call.own_options)
        if own.error is None:
            run, call_args = _run_own, (own.run, args, kwargs)
        else:
            new = False
    started = time.perf_counter() if new else 0.0
    try:
        if _SINKS:
            record = _record(call.info, call.partition.options, "fallback", adapter, call.partition.error)
            return _timed(run, record, *call_args)
        return run(*call_args)
    except BaseException:
        _shared.SHARED.release_failed()  # raised, not recorded
        raise
    finally:
        if new:
            _shared.SHARED.note_compile(time.perf_counter() - started)


def _run_own(run: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``run(args, kwargs)`` at the fusion's own options, which no other fusion's failure refuses."""
    try:
        return run(args, kwargs)
    except _shared.SharedFailure:
        with _shared.SHARED.ignoring_failures():
            return run(args, kwargs)


def _failure_text(error: BaseException) -> str:
    notes = [n for n in getattr(error, "__notes__", None) or () if isinstance(n, str)]
    return "\n".join([f"{type(error).__name__}: {error}", *notes])


def _record(info: FusionInfo, options: OptionSet, route: _events.Route, adapter: Adapter[Any],
            error: str | None = None, shared_from: str | None = None) -> _events.FusionRecord:
    return _events.FusionRecord(info, options, route, threading.current_thread().name, adapter.frontend.module,
                                error, shared_from)


def _timed(call: Any, record: _events.FusionRecord, *args: Any) -> Any:
    """``call(*args)``, reported to the audit first, inside every timer's context."""
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
