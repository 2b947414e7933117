"""One compiled FusionDefinition per (definition, options, device), shared by every fusion that prints it.

nvFuser compiles a definition at its first execution and keeps the kernels in it, so without sharing a model whose
layers repeat compiles the same definition once per layer per option set. A partition's freshly built definition is
looked up by the text nvFuser prints for it, the input descriptors it was built for, its `OptionSet` and its device:
the first fusion to reach a key registers its definition, later ones run that one instead.

Looked up from the partition builders only, never per call. Bounded by ``NVSCOPE_MAX_SHARED`` (least recently adopted
evicted). A compile failure (the failure of a definition's first execution) is remembered by key beyond eviction, so
every fusion that shares it falls back without compiling it again and with one warning; a later failure is that
execution's. First executions of one entry run one at a time (`SharedDefinitions.run_uncompiled`). The legacy
frontend shares its cache entry itself: its partitions join entries here for the compile failure only
(``share=False``). ``NVSCOPE_SHARE=0`` turns sharing off.
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

__all__ = ["SHARED", "Entry", "SharedDefinitions", "SharedFailure", "compiling", "enabled", "entry_of", "stats"]

Key = tuple[str, object, OptionSet, object]  # (definition text, input descriptors, options, device)
_ENTRY = "_nvscope_shared"  # in the __dict__ of each definition registered here: its Entry
_MAX_FAILURES = 4096
# How long a first execution waits for the decision on another thread's failure: that thread decides within its
# error handling unless the error left nvscope's path some other way; then the waiting one compiles.
_DECISION_WAIT_S = 10.0
_SELECTED = object()  # adopt's device: the definition's own


class Entry:
    """One shared definition: its key, the fusion that registered it, every fusion that adopted it, its failure."""

    __slots__ = ("compiled", "error", "failed_in", "fd", "key", "owner", "running", "turn", "undecided", "users")

    def __init__(self, key: Key, fd: Any, owner: str) -> None:
        self.key = key
        self.fd = fd  # what adopters run; None once its compile failed, or where each runs its own (legacy)
        self.owner = owner  # the fusion id whose partition built (and compiles) it
        self.users: list[str] = [owner]  # fusion ids whose partitions run it, in adoption order
        self.compiled = False  # an execution of it completed
        self.error: str | None = None  # its compile failure under its options
        self.failed_in: str | None = None  # the fusion whose execution failed
        # The thread running its first execution (or whose failure awaits a decision), and the others' condition.
        self.running: int | None = None
        self.undecided = False
        self.turn = threading.Condition(threading.Lock())


class SharedFailure(RuntimeError):
    """A definition whose compile already failed under these options, for another fusion: not compiled again.
    ``fd`` is the caller's equal definition, which its repro script prints."""

    def __init__(self, entry: Entry, fd: Any = None) -> None:
        super().__init__(f"{entry.error}\n(nvscope: this definition failed under these options in fusion "
                         f"{entry.failed_in}; shared by {', '.join(entry.users)}; not compiled again)")
        self.entry = entry
        self.fd = fd


def enabled() -> bool:
    """Whether new partitions share definitions (``NVSCOPE_SHARE``, on by default); read per partition build."""
    return _env.flag("NVSCOPE_SHARE")


def entry_of(fd: Any) -> Entry | None:
    """The entry of a definition registered here, or None."""
    return getattr(fd, "__dict__", {}).get(_ENTRY)


def _body(text: str) -> str:
    """A printed definition without its ``def nvfuser_fusion...`` line, which the legacy frontend numbers per cache
    entry: the rest is what nvFuser's cache keys on."""
    return text.partition("\n")[2] if text.startswith("def ") else text


class SharedDefinitions:
    """The shared definitions and remembered compile failures of this process, and the compile time so far."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Per thread: ``pending``, entries whose first execution failed here, undecided (`release_failed`); ``own``,
        # set while a fusion's own options run past a remembered failure (`ignoring_failures`).
        self._local = threading.local()
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._failures: OrderedDict[Key, Entry] = OrderedDict()
        self._counts: Counter[str] = Counter()  # "registered", "adopted", "evicted": `stats`
        self._compile_s = 0.0  # never cleared: tools report the difference over their run (`compiling`)
        self._compiles = 0

    def __len__(self) -> int:
        """The definitions and failures held."""
        return len(self._entries) + len(self._failures)

    def adopt(self, fd: Any, options: OptionSet, owner: str, text: str | None = None, inputs: object = None, *,
              device: object = _SELECTED, share: bool = True, watch: bool = True,
              own: bool = False) -> tuple[Any, Entry]:
        """The definition to run for ``fd`` (just built for ``options`` by fusion ``owner``) and its entry: the
        registered one with the same key (``owner`` joins its users), else ``fd``, registered.

        ``text``: ``repr(fd)`` if known; ``inputs``: the input descriptors it was built for (part of the key, so that
        sharing never rests on nvFuser's printer alone); ``device``: default the definition's ``_selected_device``.
        ``share=False``: ``fd`` is returned in any case (legacy frontend). ``watch``: its first completed ``execute``
        marks the entry compiled (`_watch`). Raises `SharedFailure` for a key whose compile failed, unless ``own``
        (the fusion's own options, which another fusion's failure under a scope never refuses)."""
        key = (_body(repr(fd) if text is None else text), inputs, options,
               getattr(fd, "_selected_device", None) if device is _SELECTED else device)
        with self._lock:
            failed = None if own else self._failures.get(key)
            if failed is not None:
                if owner not in failed.users:
                    failed.users.append(owner)
                raise SharedFailure(failed, fd)
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                if owner not in entry.users:
                    entry.users.append(owner)
                self._counts["adopted"] += 1
                if share and entry.fd is not None:
                    return entry.fd, entry
            else:
                entry = Entry(key, fd if share else None, owner)
                self._counts["registered"] += 1
            # Marked and watched before another thread can adopt it: its first execution is `run_uncompiled`'s.
            try:
                fd.__dict__[_ENTRY] = entry
            except AttributeError:  # no __dict__: its failures are known to its own partition only
                pass
            else:
                if watch and not entry.compiled:
                    self._watch(fd, entry)
            if self._entries.get(key) is not entry:
                self._entries[key] = entry
                if len(self._entries) > _env.integer("NVSCOPE_MAX_SHARED"):
                    self._entries.popitem(last=False)
                    self._counts["evicted"] += 1
        return fd, entry

    def _watch(self, fd: Any, entry: Entry) -> None:
        """Run ``fd.execute`` through `run_uncompiled` until it first completes, then remove the wrapper, so that
        nothing is added per call after it (Thunder calls the definition's ``execute`` itself). Holds ``fd`` weakly."""
        try:
            ref = weakref.ref(fd)
        except TypeError:  # no weak references: never marked, so its failures count as compile failures
            return
        run_uncompiled = self.run_uncompiled

        def execute(*args: Any, **kwargs: Any) -> Any:
            target = ref()
            if target is None:  # pragma: no cover - the wrapper lives in the definition's own __dict__
                raise ReferenceError("the FusionDefinition is gone")
            outputs = run_uncompiled(entry, type(target).execute, target, args, kwargs)
            if vars(target).get("execute") is execute:
                vars(target).pop("execute", None)  # pop: another thread may have removed it meanwhile
            return outputs

        fd.__dict__["execute"] = execute

    def run_uncompiled(self, entry: Entry, call: Any, fd: Any, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> Any:
        """``call(fd, *args, **kwargs)`` while ``entry`` has not compiled yet: one such execution at a time; refused
        (`SharedFailure`) once its compile failure is remembered, except under `ignoring_failures`. A failed one
        waits for its thread's decision: `fail` remembers it, `release_failed` lets the next one compile."""
        me = threading.get_ident()
        turn = entry.turn
        with turn:
            while entry.running not in (None, me) and not entry.compiled:
                if not turn.wait(_DECISION_WAIT_S if entry.undecided else None) and entry.undecided:
                    break  # never decided: compile
            if entry.compiled:
                mine = False
            elif self._failures.get(entry.key) is entry and not getattr(self._local, "own", False):
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
                entry.undecided = True
                turn.notify_all()
            pending = getattr(self._local, "pending", None)
            if pending is None:
                pending = self._local.pending = []
            pending.append(entry)
            raise
        except BaseException:  # interrupted: nothing to decide
            _release(entry)
            raise
        self.mark_compiled(entry)
        _release(entry)
        return outputs

    def release_failed(self) -> None:
        """This thread's failed first executions that were raised, not remembered, are decided: waiting ones
        compile."""
        pending = getattr(self._local, "pending", None)
        while pending:
            _release(pending.pop())

    @contextmanager
    def ignoring_failures(self) -> Iterator[None]:
        """Executions on this thread inside are never refused for a remembered failure: a fusion's own options."""
        previous = getattr(self._local, "own", False)
        self._local.own = True
        try:
            yield
        finally:
            self._local.own = previous

    def mark_compiled(self, entry: Entry) -> None:
        """An execution of ``entry`` completed: it is compiled, and a failure remembered for its key was not its
        compile, so it is forgotten."""
        entry.compiled = True
        if entry.key in self._failures:  # once per entry: never on the per-call path
            with self._lock:
                self._failures.pop(entry.key, None)

    def fail(self, entry: Entry, error: str, fusion: str) -> list[str] | None:
        """``entry``'s definition failed in ``fusion``: the fusions that share the failure, None where it is that
        execution's alone (it compiled before), or [] where it is remembered already (warned then). A compile failure
        is remembered by key and the entry lets go of its definition; waiting first executions are refused."""
        try:
            with self._lock:
                if entry.compiled:
                    return None
                if self._failures.get(entry.key) is entry:
                    return []
                entry.error, entry.failed_in, entry.fd = error, fusion, None
                if self._entries.get(entry.key) is entry:
                    del self._entries[entry.key]
                self._failures[entry.key] = entry
                if len(self._failures) > _MAX_FAILURES:
                    self._failures.popitem(last=False)
                return list(entry.users)
        finally:
            pending = getattr(self._local, "pending", None)
            if pending and entry in pending:
                pending.remove(entry)
                _release(entry)

    def forget(self, entry: Entry) -> None:
        """Forget ``entry``'s failure (a tool's own run recorded it: `nvscope._exec._execute.private_failures`)."""
        with self._lock:
            if self._failures.get(entry.key) is entry:
                del self._failures[entry.key]

    def stats(self) -> dict[str, int]:
        """Counts since the last `clear`: ``registered``, ``adopted``, ``evicted``, and ``entries``, ``failed`` now."""
        with self._lock:
            counts = self._counts
            return {"registered": counts["registered"], "adopted": counts["adopted"], "evicted": counts["evicted"],
                    "entries": len(self._entries), "failed": len(self._failures)}

    def compiling(self) -> tuple[float, int]:
        """(seconds, count) of the first executions of new partitions so far, where nvFuser compiles; never reset."""
        return self._compile_s, self._compiles

    def note_compile(self, seconds: float) -> None:
        with self._lock:
            self._compile_s += seconds
            self._compiles += 1

    def clear(self) -> None:
        """Forget every shared definition and failure (``nvscope.uninstall()``)."""
        with self._lock:
            self._entries.clear()
            self._failures.clear()
            self._counts.clear()


def _release(entry: Entry) -> None:
    """This thread's first execution of ``entry`` is over (completed, or its failure decided): the next may run."""
    with entry.turn:
        if entry.running == threading.get_ident():
            entry.running, entry.undecided = None, False
            entry.turn.notify_all()


SHARED = SharedDefinitions()
_state.register(__name__, "SHARED._entries SHARED._failures SHARED._counts", SHARED.clear, step="shared")
_state.keep(__name__, "SHARED._lock SHARED._local", "a lock; per thread, decided by the execution that set it")
compiling = SHARED.compiling
stats = SHARED.stats
