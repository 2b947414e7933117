"""One compiled FusionDefinition per (definition, inputs, options, device), shared by the fusions that build it;
compile failures are recorded by key (docs/how-it-works.md)."""

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

Key = tuple[str, object, OptionSet, object]  # (text, inputs, options, device)
_ENTRY = "_nvscope_shared"
_MAX_FAILURES = 4096
# A failure another thread never decided stops blocking compiles after this.
_DECISION_WAIT_S = 10.0
_SELECTED = object()


class Entry:
    """One shared definition: its key, owner, users and compile failure."""

    __slots__ = ("compiled", "error", "failed_in", "fd", "key", "owner", "running", "turn", "undecided", "users")

    def __init__(self, key: Key, fd: Any, owner: str) -> None:
        self.key = key
        self.fd = fd  # None once failed, or where each runs its own (legacy)
        self.owner = owner
        self.users: list[str] = [owner]
        self.compiled = False
        self.error: str | None = None
        self.failed_in: str | None = None
        self.running: int | None = None
        self.undecided = False
        self.turn = threading.Condition(threading.Lock())


class SharedFailure(RuntimeError):
    """A definition whose compile already failed under these options."""

    def __init__(self, entry: Entry, fd: Any = None) -> None:
        super().__init__(f"{entry.error}\n(nvscope: this definition failed under these options in fusion "
                         f"{entry.failed_in}; shared by {', '.join(entry.users)}; not compiled again)")
        self.entry = entry
        self.fd = fd


def enabled() -> bool:
    """Whether new partitions share definitions (``NVSCOPE_SHARE``)."""
    return _env.flag("NVSCOPE_SHARE")


def entry_of(fd: Any) -> Entry | None:
    return getattr(fd, "__dict__", {}).get(_ENTRY)


def _body(text: str) -> str:
    """A printed definition without its ``def`` line, which the legacy frontend numbers per cache entry."""
    return text.partition("\n")[2] if text.startswith("def ") else text


class SharedDefinitions:
    """The shared definitions and recorded compile failures of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._failures: OrderedDict[Key, Entry] = OrderedDict()
        self._counts: Counter[str] = Counter()
        self._compile_s = 0.0  # never cleared: tools take differences
        self._compiles = 0

    def adopt(self, fd: Any, options: OptionSet, owner: str, text: str | None = None, inputs: object = None, *,
              device: object = _SELECTED, share: bool = True, watch: bool = True,
              own: bool = False) -> tuple[Any, Entry]:
        """The definition to run for ``fd`` (the registered one with the same key, else ``fd``) and its entry.
        ``inputs`` are in the key so that sharing never rests on nvFuser's printer alone; ``share=False`` (legacy)
        always returns ``fd``; a failed key raises `SharedFailure` unless ``own`` (a fusion's own options)."""
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
            try:
                fd.__dict__[_ENTRY] = entry
            except AttributeError:
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
        """Run ``fd.execute`` through `run_uncompiled` until it first completes, then unwrap it."""
        try:
            ref = weakref.ref(fd)
        except TypeError:
            return
        run_uncompiled = self.run_uncompiled

        def execute(*args: Any, **kwargs: Any) -> Any:
            target = ref()
            if target is None:  # pragma: no cover
                raise ReferenceError("the FusionDefinition is gone")
            outputs = run_uncompiled(entry, type(target).execute, target, args, kwargs)
            if vars(target).get("execute") is execute:
                vars(target).pop("execute", None)  # another thread may have removed it
            return outputs

        fd.__dict__["execute"] = execute

    def run_uncompiled(self, entry: Entry, call: Any, fd: Any, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> Any:
        """``call(fd, *args, **kwargs)`` before ``entry`` compiled: one at a time; refused once its failure is
        recorded, except under `ignoring_failures`. A failure waits for `fail` or `release_failed`."""
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
        except BaseException:
            _release(entry)
            raise
        self.mark_compiled(entry)
        _release(entry)
        return outputs

    def release_failed(self) -> None:
        """This thread's undecided failed first executions were not compile failures: waiting ones compile."""
        pending = getattr(self._local, "pending", None)
        while pending:
            _release(pending.pop())

    @contextmanager
    def ignoring_failures(self) -> Iterator[None]:
        """Executions on this thread inside are never refused for a recorded failure (own options)."""
        previous = getattr(self._local, "own", False)
        self._local.own = True
        try:
            yield
        finally:
            self._local.own = previous

    def mark_compiled(self, entry: Entry) -> None:
        """An execution of ``entry`` completed: forget any failure recorded for its key."""
        entry.compiled = True
        if entry.key in self._failures:
            with self._lock:
                self._failures.pop(entry.key, None)

    def fail(self, entry: Entry, error: str, fusion: str) -> list[str] | None:
        """``entry`` failed in ``fusion``: the fusions sharing the failure, None if it had compiled (that execution's
        alone), [] if already recorded. A compile failure is recorded by key."""
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
        """Forget ``entry``'s failure (a tool's own run recorded it)."""
        with self._lock:
            if self._failures.get(entry.key) is entry:
                del self._failures[entry.key]

    def stats(self) -> dict[str, int]:
        with self._lock:
            counts = self._counts
            return {"registered": counts["registered"], "adopted": counts["adopted"], "evicted": counts["evicted"],
                    "entries": len(self._entries), "failed": len(self._failures)}

    def compiling(self) -> tuple[float, int]:
        """(seconds, count) of first executions so far, where nvFuser compiles; never reset."""
        return self._compile_s, self._compiles

    def note_compile(self, seconds: float) -> None:
        with self._lock:
            self._compile_s += seconds
            self._compiles += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._failures.clear()
            self._counts.clear()


def _release(entry: Entry) -> None:
    """This thread's first execution of ``entry`` is over: the next may run."""
    with entry.turn:
        if entry.running == threading.get_ident():
            entry.running, entry.undecided = None, False
            entry.turn.notify_all()


SHARED = SharedDefinitions()
_state.register(__name__, "SHARED._entries SHARED._failures SHARED._counts", SHARED.clear, step="shared")
_state.keep(__name__, "SHARED._lock SHARED._local", "a lock; per thread, decided by the execution that set it")
compiling = SHARED.compiling
stats = SHARED.stats
