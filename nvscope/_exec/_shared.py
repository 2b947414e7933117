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
* Failures: a definition that failed under options (``on_error="fallback"``) is remembered by key, beyond eviction
  (text only, `_MAX_FAILURES` keys), so every fusion sharing it falls back without compiling it again, with one
  warning for all of them (`nvscope._exec._execute`).
* Thread-safe: one lock around lookups and inserts (partition builds only: never on the per-call path).
* Dropped by ``nvscope.uninstall()`` (`clear`), with the partitions that use it.
* The legacy ``nvfuser`` frontend needs none of this: its process-wide FusionCache already gives identical
  definitions one entry, and nvscope's salt depends on the option set only (`nvscope._exec._legacy`), so nvFuser itself
  shares them. ``NVSCOPE_SHARE=0`` turns sharing off (every partition compiles its own, as before).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from nvscope._core import _env
from nvscope._core._optionset import OptionSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Entry", "SharedFailure", "adopt", "clear", "enabled", "entry_of", "fail", "stats"]

Key = tuple[str, object, OptionSet, object]  # (definition text, input descriptors, options, device)
_ENTRY = "_nvscope_shared"  # in the __dict__ of each definition registered here: its Entry
_MAX_FAILURES = 4096


class Entry:
    """One shared definition: its key, the fusion that registered it, every fusion that adopted it, its failure."""

    __slots__ = ("error", "failed_in", "fd", "key", "owner", "users")

    def __init__(self, key: Key, fd: Any, owner: str) -> None:
        self.key = key
        self.fd = fd
        self.owner = owner  # the fusion id whose partition built (and compiles) the definition
        self.users: list[str] = [owner]  # fusion ids whose partitions run it, in the order they adopted it
        self.error: str | None = None  # the failure under its options (on_error="fallback"), once known
        self.failed_in: str | None = None  # the fusion whose execution failed


class SharedFailure(RuntimeError):
    """A definition that already failed under these options, for another fusion: it is not compiled again."""

    def __init__(self, entry: Entry) -> None:
        super().__init__(f"{entry.error}\n(nvscope: this definition failed under these options in fusion "
                         f"{entry.failed_in}; shared by {', '.join(entry.users)}; not compiled again)")
        self.entry = entry


_lock = threading.Lock()
_entries: OrderedDict[Key, Entry] = OrderedDict()
_failures: OrderedDict[Key, Entry] = OrderedDict()
_counts = {"registered": 0, "adopted": 0, "evicted": 0}
# Seconds in, and number of, first executions of new partitions (their compiles): `compiling`.
_first_runs: list[float] = [0.0, 0.0]


def enabled() -> bool:
    """Whether new partitions share definitions (``NVSCOPE_SHARE``, on by default); read per partition build."""
    return _env.flag("NVSCOPE_SHARE")


def adopt(fd: Any, options: OptionSet, owner: str, text: str | None = None,
          inputs: object = None) -> tuple[Any, Entry]:
    """The definition to run for ``fd`` (just built for ``options`` by fusion ``owner``) and its entry.

    The registered definition with the same key if there is one (``owner`` joins its users), else ``fd`` itself,
    registered. ``text`` is ``repr(fd)`` if the caller has it. ``inputs``: the input descriptors the definition was
    built for (Thunder's ``get_fd`` key: contiguity, stride order, dtype per input), part of the key so that two
    definitions never share on the strength of nvFuser's printer alone: were it ever to leave out an input property,
    a definition would otherwise run on inputs laid out differently from the ones it declares. Raises
    `SharedFailure` for a key known to fail.
    """
    key = (repr(fd) if text is None else text, inputs, options, getattr(fd, "_selected_device", None))
    with _lock:
        failed = _failures.get(key)
        if failed is not None:
            if owner not in failed.users:
                failed.users.append(owner)
            raise SharedFailure(failed)
        entry = _entries.get(key)
        if entry is not None:
            _entries.move_to_end(key)
            if owner not in entry.users:
                entry.users.append(owner)
            _counts["adopted"] += 1
            return entry.fd, entry
        entry = _entries[key] = Entry(key, fd, owner)
        _counts["registered"] += 1
        if len(_entries) > _env.integer("NVSCOPE_MAX_SHARED"):
            _entries.popitem(last=False)
            _counts["evicted"] += 1
    try:
        fd.__dict__[_ENTRY] = entry
    except AttributeError:  # a definition without a __dict__: its failures are known to its own partition only
        pass
    return fd, entry


def entry_of(fd: Any) -> Entry | None:
    """The entry of a definition registered here, or None."""
    return getattr(fd, "__dict__", {}).get(_ENTRY)


def fail(entry: Entry, error: str, fusion: str) -> list[str]:
    """Remember that ``entry``'s definition fails under its options (it failed in ``fusion``); returns the fusions
    known to share it."""
    with _lock:
        entry.error = error
        entry.failed_in = fusion
        _entries.pop(entry.key, None)  # nothing compiled to keep: later adopters learn the failure instead
        _failures[entry.key] = entry
        if len(_failures) > _MAX_FAILURES:
            _failures.popitem(last=False)
        return list(entry.users)


def stats() -> dict[str, int]:
    """Counts since the last `clear`: ``registered`` (definitions compiled for a partition), ``adopted`` (partition
    definitions that ran a registered one instead of compiling), ``evicted``, ``entries`` and ``failed`` now."""
    with _lock:
        return {**_counts, "entries": len(_entries), "failed": len(_failures)}


def compiling() -> tuple[float, int]:
    """(seconds, count) of the first executions of new partitions in this process so far: where nvFuser compiles a
    partition's definition (a partition that runs a shared definition compiles nothing, and adds little). Never
    reset; tools report the difference over their run. A Thunder partition's first run for new input shapes compiles
    too and is not counted."""
    return _first_runs[0], int(_first_runs[1])


def first_run(seconds: float) -> None:
    _first_runs[0] += seconds
    _first_runs[1] += 1


def clear() -> None:
    """Forget every shared definition and failure (``nvscope.uninstall()``)."""
    with _lock:
        _entries.clear()
        _failures.clear()
        for name in _counts:
            _counts[name] = 0
