"""Every monkey-patch nvscope makes, recorded in one place and undone exactly.

An adapter never assigns to someone else's class or module directly: it calls `apply`, which records the owner,
the target, the attribute and what was there before (including "nothing of its own": an attribute inherited from a
base class is deleted on restore, not shadowed by a copy). `restore` undoes one owner's patches in reverse order.
So the whole list of what nvscope changes in Thunder and nvFuser is `active()`, ``nvscope doctor`` prints it, and
tests (or users) return to a pristine process with `nvscope.uninstall()`.

Patches on the per-fusion path (``apply(..., on_demand=True)``: Thunder's ``__call__``, nvFuser's ``execute``, the
autograd hooks) are in place only while something may need them: a scope's `Frame` exists, or an audit or profile
listens (`demand`/`release`). With neither, Thunder's and nvFuser's own functions run untouched, so a fusion outside
every scope costs what it costs without nvscope (issue 26, item 4: the hook's wrapper alone, a Python frame that
re-spreads ``*args``, was ~150 ns). A frame counts from its creation to its deallocation, not from its scope's entry
to its exit, because a context copied inside a scope (an asyncio task, `nvscope.bind`, a backward captured by its
forward) still sees the frame after the scope exits, and its fusions must still meet the hook.
"""

from __future__ import annotations

import threading

from nvscope._core import _state

__all__ = ["Patch", "accept", "active", "apply", "decline", "declined", "demand", "describe", "owners", "release",
           "restore"]

_MISSING = object()


class Patch:
    """One replaced attribute: ``target.attribute`` was ``original`` (or absent from ``target.__dict__``)."""

    __slots__ = ("attribute", "displaced", "on_demand", "original", "owner", "pinned", "replacement", "target")

    def __init__(self, owner: str, target: object, attribute: str, original: object, replacement: object,
                 on_demand: bool = False) -> None:
        self.owner = owner
        self.target = target
        self.attribute = attribute
        self.original = original
        self.replacement = replacement
        self.on_demand = on_demand
        self.displaced = original  # what placing the replacement took away (another tool's patch, maybe): put back
        self.pinned = False  # someone patched over the placed replacement: it stays (their patch calls it)

    def __repr__(self) -> str:
        name = getattr(self.target, "__qualname__", None) or getattr(self.target, "__name__", repr(self.target))
        module = getattr(self.target, "__module__", None)
        where = f"{module}.{name}" if module and isinstance(self.target, type) else str(name)
        when = ", in place while a scope exists or an audit listens" if self.on_demand else ""
        return f"{where}.{self.attribute} (by nvscope {self.owner}{when})"

    def _put(self, value: object) -> None:
        if value is _MISSING:
            if self.attribute in vars(self.target):
                delattr(self.target, self.attribute)
        else:
            setattr(self.target, self.attribute, value)

    def _current(self) -> object:
        return vars(self.target).get(self.attribute, _MISSING)

    def _place(self, on: bool) -> None:
        """An on-demand patch in (``on``) or out, idempotent. Only nvscope's own value is ever taken away: a patch
        another tool made while the replacement was out is put back when it goes out again; one made over the
        replacement pins it (the other tool's patch calls it)."""
        if self.pinned:
            return
        current = self._current()
        if on:
            if current is not self.replacement:
                self.displaced = current
                setattr(self.target, self.attribute, self.replacement)
        elif current is self.replacement:
            self._put(self.displaced)
        elif current is not self.displaced:
            self.pinned = True


_PATCHES: list[Patch] = []


def apply(owner: str, target: object, attribute: str, replacement: object, *, on_demand: bool = False) -> Patch:
    """Set ``target.attribute = replacement``, remembering what to put back. ``owner`` names the adapter.

    ``on_demand``: the replacement is in place only while something needs it (`demand`), the original otherwise.
    """
    for patch in _PATCHES:
        if patch.target is target and patch.attribute == attribute:
            raise RuntimeError(f"{patch!r} is patched already; nvscope patches each attribute once")
    original = vars(target).get(attribute, _MISSING)
    patch = Patch(owner, target, attribute, original, replacement, on_demand)
    with _LOCK:  # against a concurrent `_settle`, which would miss a patch half added
        if not on_demand or _placed:
            setattr(target, attribute, replacement)
        _PATCHES.append(patch)
    return patch


def restore(owner: str) -> bool:
    """Undo every patch of ``owner``, newest first. Returns whether there was any."""
    with _LOCK:
        mine = [patch for patch in _PATCHES if patch.owner == owner]
        for patch in reversed(mine):
            if patch.on_demand:
                patch._place(False)  # what it displaced goes back; a patch made over it stays (it is theirs now)
            else:
                patch._put(patch.original)
            _PATCHES.remove(patch)
    return bool(mine)


# --- on-demand patches ---------------------------------------------------------------------------------------------
# The ids of what needs them now (live frames, listening audits). A set, not a counter: `set.add`/`discard` are single
# steps under the GIL, where ``n += 1`` is several, between which a finalizer (`release`, from a frame collected by
# the garbage collector) could run and lose an update.
_DEMAND: set[int] = set()
_LOCK = threading.RLock()  # reentrant: a frame collected while the lock is held releases from inside it
_placed = False  # whether the on-demand patches' replacements are in place
_state.keep(__name__, "_placed", "follows _DEMAND, which each frame and audit releases itself")


def demand(token: int) -> None:
    """``token`` (an id, unique while it is demanded) needs the on-demand patches in place until `release`."""
    _DEMAND.add(token)
    with _LOCK:  # always: reading `_placed` outside it races with a last `release` putting the originals back
        if not _placed:
            _settle()


def release(token: int) -> None:
    """``token`` no longer needs them; the last one out puts the originals back."""
    _DEMAND.discard(token)
    if not _DEMAND:
        with _LOCK:
            if _placed:
                _settle()


def _settle() -> None:
    """Under `_LOCK`: every on-demand patch in place if anything demands them, out if nothing does. A pass may run
    finalizers (a frame freed by the collector: `release`; rarely one that makes a frame: `demand`), which settle
    from inside it; so each pass ends by checking that the demand it settled for is still the demand, else it runs
    again."""
    global _placed
    while True:
        want = bool(_DEMAND)
        for patch in _PATCHES:
            if patch.on_demand:
                patch._place(want)
        if bool(_DEMAND) == want:
            _placed = want
            return


def active(owner: str | None = None) -> list[Patch]:
    """The patches in place now (of one owner, or all), oldest first."""
    return [patch for patch in _PATCHES if owner is None or patch.owner == owner]


def owners() -> list[str]:
    """The owners with patches in place, in the order they first patched."""
    return list(dict.fromkeys(patch.owner for patch in _PATCHES))


def describe() -> list[str]:
    """One line per patch in place, for ``nvscope doctor``."""
    return [repr(patch) for patch in _PATCHES]


# Adapters explicitly uninstalled by the user: an explicit choice that automatic installation
# (nvscope._exec._autoinstall) must not undo until the adapter is installed explicitly again. Kept here, with the
# patches, so that an adapter records it without importing the automatic installation (which imports the adapters).
_declined: frozenset[str] = frozenset()


def decline(owner: str) -> None:
    global _declined
    _declined |= {owner}


def accept(owner: str) -> None:
    global _declined
    _declined -= {owner}


def declined(owner: str) -> bool:
    return owner in _declined


def _clear() -> None:
    """The ledger as at import: the adapters undid their patches first (`nvscope._core._state`, step "adapters"); a
    patch one left behind goes back too; the adapters the user declined may install themselves again."""
    global _declined
    for owner in owners():
        restore(owner)
    _declined = frozenset()


_state.register(__name__, "_PATCHES _declined", _clear, step="patches")
_state.keep(__name__, "_DEMAND", "the live frames and audits that need the on-demand patches: each releases its own")
_state.keep(__name__, "_LOCK", "a lock")
