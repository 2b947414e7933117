"""One compiled FusionDefinition per (definition, options, device), shared by every fusion that prints it.

nvFuser compiles a FusionDefinition at its first execution and keeps the kernels in that definition (the
``nvfuser_direct`` frontend: each definition owns its FusionExecutorCache). A scope gives each fusion a partition of
its own per option set, so without this module a model whose layers repeat compiles the same definition once per
layer (measured on the H200: half of a 2-layer Llama's 24 fusions, 70 % of nanoGPT's, are another fusion's
definition). Here a partition's freshly built definition (cheap: built, not compiled) is looked up by the text nvFuser
prints for it (``repr(fd)``, inputs included), the input descriptors it was built for (Thunder's), its effective
`OptionSet` and its device; the first fusion to reach a key registers its definition, later ones run that one
(already compiled) instead of theirs.

* Computed once per (fusion, input descriptors, options): the adapters call `adopt` from the builder that their
  partition memoizes (Thunder's per-partition ``lru_cache`` of definitions; the direct adapter's partition build),
  never per execution.
* Bounded: at most ``NVSCOPE_MAX_SHARED`` entries (default 256), least recently adopted evicted. An entry keeps one
  definition, with its compiled kernels, alive; partitions that run it keep it alive as well, so eviction only stops
  later fusions from finding it.
* Failures: a definition whose compile failed under options (``on_error="fallback"``; the compile is its first
  execution for those inputs) is remembered by key, beyond eviction (its text, not the definition: `_MAX_FAILURES`
  keys), so every fusion sharing it falls back without compiling it again, with one warning for all of them
  (`nvscope._exec._execute`). A failure after the definition ran once (out of memory, say) is that execution's: the
  compiled definition stays shared. `Entry.compiled` says which: the first execution that completes sets it
  (`_watch`, or the adapter through `ran`). A fusion running its own options (its defaults, shared) is never refused
  on the strength of a remembered failure (``adopt(own=True)``): that failure was another fusion's, under a scope,
  and may have been transient; its compile is tried, and a compile that completes forgets the failure (`ran`).
* First executions (`first`): a partition that took a definition before its failure was remembered (built under
  ``on_error="raise"``, or by a thread racing to it) refuses it when it runs, as `adopt` refuses a new one; and the
  first executions of one entry run one at a time, each waiting until the one before has completed, or failed and
  its failure is decided (`fail`: remembered; `settle`: raised, not remembered), so that a failing compile is one
  attempt and one warning also for threads racing to it. After the first completed execution the definition's
  ``execute`` is nvFuser's own again: the per-call path takes no lock.
* Thread-safe: one lock around lookups and inserts (partition builds only: never on the per-call path).
* Dropped by ``nvscope.uninstall()`` (`clear`), with the partitions that use it.
* The legacy ``nvfuser`` frontend shares definitions by itself: its process-wide FusionCache gives identical
  definitions one entry, and nvscope's salt depends on the option set only (`nvscope._exec._legacy`). Its partitions
  join entries here all the same (``share=False``: each keeps running its own definition), for what nvFuser's cache
  entry has in common: its compile, and so its compile failure. ``NVSCOPE_SHARE=0`` turns all of it off (every
  partition compiles its own, as before; on the legacy frontend, nvFuser still shares its cache entry).
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from nvscope._core import OptionSet, _env, _state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Entry", "SharedFailure", "adopt", "clear", "enabled", "entry_of", "fail", "first", "forget", "ran",
           "settle", "stats", "unrefused"]

Key = tuple[str, object, OptionSet, object]  # (definition text, input descriptors, options, device)
_ENTRY = "_nvscope_shared"  # in the __dict__ of each definition registered here: its Entry
_MAX_FAILURES = 4096
# How long a first execution waits for the decision on the failure of another thread's (`first`): made within that
# thread's handling of its error (microseconds), unless the error left nvscope's execution path some other way (the
# definition run by hand, say). Then the waiting execution compiles, as it did before the wait existed.
_DECISION_WAIT_S = 10.0


class Entry:
    """One shared definition: its key, the fusion that registered it, every fusion that adopted it, its failure."""

    __slots__ = ("compiled", "error", "failed_in", "fd", "key", "owner", "running", "turn", "undecided", "users")

    def __init__(self, key: Key, fd: Any, owner: str) -> None:
        self.key = key
        self.fd = fd  # the definition adopters run; None once its compile failed, or where each runs its own (legacy)
        self.owner = owner  # the fusion id whose partition built (and compiles) the definition
        self.users: list[str] = [owner]  # fusion ids whose partitions run it, in the order they adopted it
        self.compiled = False  # an execution of it completed: nvFuser compiled it for its key
        self.error: str | None = None  # the failure of its compile under its options (on_error="fallback")
        self.failed_in: str | None = None  # the fusion whose execution failed
        # First executions, one at a time (`first`): the thread running one now, or whose failed one awaits its
        # decision (``undecided``), and the condition the others wait on.
        self.running: int | None = None
        self.undecided = False
        self.turn = threading.Condition(threading.Lock())


class SharedFailure(RuntimeError):
    """A definition whose compile already failed under these options, for another fusion: not compiled again.

    ``fd`` is the definition the fusion at hand built (equal to the one that failed): what its repro script prints.
    """

    def __init__(self, entry: Entry, fd: Any = None) -> None:
        super().__init__(f"{entry.error}\n(nvscope: this definition failed under these options in fusion "
                         f"{entry.failed_in}; shared by {', '.join(entry.users)}; not compiled again)")
        self.entry = entry
        self.fd = fd


_SELECTED = object()  # adopt's device: the definition's own
_lock = threading.Lock()
# Per thread: ``pending``, the entries whose first execution failed on it, undecided (`settle`); ``own``, set while a
# fusion's own options run past a refusal (`unrefused`).
_local = threading.local()
_entries: OrderedDict[Key, Entry] = OrderedDict()
_failures: OrderedDict[Key, Entry] = OrderedDict()
_counts: Counter[str] = Counter()  # "registered", "adopted", "evicted": `stats`
# Seconds in, and number of, first executions of new partitions (their compiles): `compiling`.
_first_runs: list[float] = [0.0, 0.0]
_state.keep(__name__, "_first_runs", "never reset: the tools report the difference over their run (`compiling`)")
_state.keep(__name__, "_lock", "a lock")
_state.keep(__name__, "_local", "per thread: settled by the execution that set it")


def enabled() -> bool:
    """Whether new partitions share definitions (``NVSCOPE_SHARE``, on by default); read per partition build."""
    return _env.flag("NVSCOPE_SHARE")


def adopt(fd: Any, options: OptionSet, owner: str, text: str | None = None, inputs: object = None, *,
          device: object = _SELECTED, share: bool = True, watch: bool = True, own: bool = False) -> tuple[Any, Entry]:
    """The definition to run for ``fd`` (just built for ``options`` by fusion ``owner``) and its entry.

    The registered definition with the same key if there is one (``owner`` joins its users), else ``fd`` itself,
    registered. ``text`` is ``repr(fd)`` if the caller has it. ``inputs``: the input descriptors the definition was
    built for (Thunder's ``get_fd`` key: contiguity, stride order, dtype per input), part of the key so that two
    definitions never share on the strength of nvFuser's printer alone: were it ever to leave out an input property,
    a definition would otherwise run on inputs laid out differently from the ones it declares. ``device``: the GPU it
    runs on (default: the definition's ``_selected_device``, which Thunder executes it with). ``share=False``: ``fd``
    is returned in any case (the legacy frontend, whose cache shares the compile itself); the entry is shared.
    ``watch``: the definition's own first completed ``execute`` marks the entry compiled (`_watch`); an adapter that
    calls its class's ``execute`` says so itself (`ran`). Raises `SharedFailure` for a key whose compile failed,
    unless ``own``: the partition runs the fusion's own options (its defaults, shared), which no fusion's failure under
    a scope refuses (a failure there may be transient, and the defaults have nothing to fall back to): it compiles,
    and a failure of it is raised and not remembered (`nvscope._exec._execute.failed`).
    """
    key = (_body(repr(fd) if text is None else text), inputs, options,
           getattr(fd, "_selected_device", None) if device is _SELECTED else device)
    with _lock:
        failed = None if own else _failures.get(key)
        if failed is not None:
            if owner not in failed.users:
                failed.users.append(owner)
            raise SharedFailure(failed, fd)
        entry = _entries.get(key)
        if entry is not None:
            _entries.move_to_end(key)
            if owner not in entry.users:
                entry.users.append(owner)
            _counts["adopted"] += 1
            if share and entry.fd is not None:
                return entry.fd, entry
        else:
            entry = Entry(key, fd if share else None, owner)
            _counts["registered"] += 1
        # Marked and watched before another thread can adopt it (below): its first execution is then `first`'s.
        try:
            fd.__dict__[_ENTRY] = entry
        except AttributeError:  # a definition without a __dict__: its failures are known to its own partition only
            pass
        else:
            if watch and not entry.compiled:
                _watch(fd, entry)
        if _entries.get(key) is not entry:
            _entries[key] = entry
            if len(_entries) > _env.integer("NVSCOPE_MAX_SHARED"):
                _entries.popitem(last=False)
                _counts["evicted"] += 1
    return fd, entry


def _body(text: str) -> str:
    """A printed definition without its ``def nvfuser_fusion...`` line: the legacy frontend numbers that function by
    its FusionCache entry (the double, per definition), so the rest is what nvFuser's cache keys on."""
    return text.partition("\n")[2] if text.startswith("def ") else text


def _watch(fd: Any, entry: Entry) -> None:
    """Until ``fd.execute`` first completes, run it through `first`, which then marks ``entry`` compiled (`ran`),
    and remove the wrapper: after it, ``fd.execute`` is nvFuser's again, nothing added per call. Thunder calls the
    definition's ``execute`` itself. The wrapper holds ``fd`` weakly (as `nvscope._exec._repro.attach` does)."""
    try:
        ref = weakref.ref(fd)
    except TypeError:  # no weak references: never marked, so its failures count as compile failures (shared)
        return

    def execute(*args: Any, **kwargs: Any) -> Any:
        target = ref()
        if target is None:  # pragma: no cover - the wrapper lives in the definition's own __dict__
            raise ReferenceError("the FusionDefinition is gone")
        outputs = first(entry, type(target).execute, target, args, kwargs)
        if vars(target).get("execute") is execute:
            # pop, not del: another thread that ran it meanwhile (after this compile: `first`) removes it too
            vars(target).pop("execute", None)
        return outputs

    fd.__dict__["execute"] = execute


def first(entry: Entry, call: Any, fd: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``call(fd, *args, **kwargs)``: an execution of ``entry``'s definition before one has completed (its compile).

    Refused (`SharedFailure`, nothing compiled) where the entry's compile failure is remembered: a partition that took
    the definition before then (under ``on_error="raise"``, or racing another thread to it) holds it still, and
    `adopt` refuses only new ones. Not refused for a fusion's own options (`unrefused`). One at a time per entry:
    while another thread's execution runs, or has failed and its failure is undecided (`fail` remembers it, `settle`
    withdraws it), this one waits, then runs, or is refused. The first to complete marks the entry compiled (`ran`).
    """
    me = threading.get_ident()
    turn = entry.turn
    with turn:
        while entry.running not in (None, me) and not entry.compiled:
            if not turn.wait(_DECISION_WAIT_S if entry.undecided else None) and entry.undecided:
                break  # never decided (see _DECISION_WAIT_S): compile
        if entry.compiled:  # another thread's completed meanwhile: nvFuser's execute, as after the wrapper
            mine = False
        elif _failures.get(entry.key) is entry and not getattr(_local, "own", False):
            raise SharedFailure(entry, fd)
        else:
            mine = True
            entry.running, entry.undecided = me, False
    if not mine:
        return call(fd, *args, **kwargs)
    try:
        outputs = call(fd, *args, **kwargs)
    except Exception:
        with turn:
            entry.undecided = True  # the caller's handling of the error decides: `fail` or `settle`
            turn.notify_all()  # the waiting ones wait for that decision no longer than _DECISION_WAIT_S
        pending = getattr(_local, "pending", None)
        if pending is None:
            pending = _local.pending = []
        pending.append(entry)
        raise
    except BaseException:  # interrupted: nothing to decide
        _release(entry)
        raise
    ran(entry)
    _release(entry)
    return outputs


def _release(entry: Entry) -> None:
    """The first execution of ``entry`` on this thread is over (completed, or its failure decided): the next may
    run."""
    with entry.turn:
        if entry.running == threading.get_ident():
            entry.running, entry.undecided = None, False
            entry.turn.notify_all()


def settle() -> None:
    """The failed first executions of this thread whose failure was not remembered (raised: ``on_error="raise"``, a
    fusion's own options, or the shared defaults) are decided: the executions waiting for them compile."""
    pending = getattr(_local, "pending", None)
    while pending:
        _release(pending.pop())


@contextmanager
def unrefused() -> Iterator[None]:
    """Executions on this thread inside are never refused for a remembered failure (`first`): a fusion's own options,
    which no fusion's failure under a scope refuses (`adopt`'s ``own``)."""
    previous = getattr(_local, "own", False)
    _local.own = True
    try:
        yield
    finally:
        _local.own = previous


def ran(entry: Entry) -> None:
    """An execution of ``entry``'s definition completed: it is compiled, and its later failures are not shared.

    A failure remembered for its key (a fusion's own-options run compiles despite it: `adopt`) was then not the
    definition's compile: it is forgotten, so that scoped fusions run the compiled definition rather than fall back."""
    entry.compiled = True
    if entry.key in _failures:  # once per entry (its first completed execution): never on the per-call path
        with _lock:
            _failures.pop(entry.key, None)


def entry_of(fd: Any) -> Entry | None:
    """The entry of a definition registered here, or None."""
    return getattr(fd, "__dict__", {}).get(_ENTRY)


def fail(entry: Entry, error: str, fusion: str) -> list[str] | None:
    """An execution of ``entry``'s definition failed under its options, in ``fusion``: the fusions known to share the
    failure, or None where it is that execution's alone (the definition ran before: its compile did not fail), or an
    empty list where it is remembered already (another execution's, warned then).

    A compile failure is remembered by key, as text: the entry lets go of the definition (nothing compiled to keep,
    and later adopters learn the failure instead). The executions waiting for this one (`first`) are then refused."""
    try:
        with _lock:
            if entry.compiled:
                return None
            if _failures.get(entry.key) is entry:
                return []
            entry.error = error
            entry.failed_in = fusion
            entry.fd = None
            if _entries.get(entry.key) is entry:
                del _entries[entry.key]
            _failures[entry.key] = entry
            if len(_failures) > _MAX_FAILURES:
                _failures.popitem(last=False)
            return list(entry.users)
    finally:
        pending = getattr(_local, "pending", None)
        if pending and entry in pending:
            pending.remove(entry)
            _release(entry)


def forget(entry: Entry) -> None:
    """Forget ``entry``'s failure (a tool's own run recorded it: `nvscope._exec._execute.private_failures`)."""
    with _lock:
        if _failures.get(entry.key) is entry:
            del _failures[entry.key]


def stats() -> dict[str, int]:
    """Counts since the last `clear`: ``registered`` (definitions compiled for a partition), ``adopted`` (partition
    definitions that ran a registered one instead of compiling), ``evicted``, ``entries`` and ``failed`` now."""
    with _lock:
        return {"registered": _counts["registered"], "adopted": _counts["adopted"], "evicted": _counts["evicted"],
                "entries": len(_entries), "failed": len(_failures)}


def compiling() -> tuple[float, int]:
    """(seconds, count) of the first executions of new partitions in this process so far: where nvFuser compiles a
    partition's definition (a partition that runs a shared definition compiles nothing, and adds little). Never
    reset; tools report the difference over their run. A Thunder partition's first run for new input shapes compiles
    too and is not counted."""
    return _first_runs[0], int(_first_runs[1])


def first_run(seconds: float) -> None:
    with _lock:  # threads compiling at once (nvFuser releases nothing, but the Python around it interleaves)
        _first_runs[0] += seconds
        _first_runs[1] += 1


def clear() -> None:
    """Forget every shared definition and failure (``nvscope.uninstall()``)."""
    with _lock:
        _entries.clear()
        _failures.clear()
        _counts.clear()


_state.register(__name__, "_entries _failures _counts", clear, step="shared")
