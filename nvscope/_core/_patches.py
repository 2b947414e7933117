"""Every monkey-patch nvscope makes, recorded (`apply`) and undone exactly (`restore`).

Patches on the per-fusion path (``on_demand=True``) are in place only while a scope frame lives (a copied context may
outlive its scope) or an audit listens (`demand`); otherwise Thunder's and nvFuser's own functions run untouched."""

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
        self.displaced = original  # what placing the replacement took away: put back when it goes out
        self.pinned = False  # another tool patched over the replacement: it stays (their patch calls it)

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

    def _place(self, on: bool) -> None:
        """An on-demand patch in (``on``) or out, idempotent; only nvscope's own value is ever taken away."""
        if self.pinned:
            return
        current = vars(self.target).get(self.attribute, _MISSING)
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
    """Set ``target.attribute = replacement`` for adapter ``owner``, recording what to put back (``on_demand``: only
    while something needs it)."""
    for patch in _PATCHES:
        if patch.target is target and patch.attribute == attribute:
            raise RuntimeError(f"{patch!r} is patched already; nvscope patches each attribute once")
    original = vars(target).get(attribute, _MISSING)
    patch = Patch(owner, target, attribute, original, replacement, on_demand)
    with _LOCK:
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
                patch._place(False)
            else:
                patch._put(patch.original)
            _PATCHES.remove(patch)
    return bool(mine)


# The ids of what needs the on-demand patches now. A set, not a counter: a finalizer's `release` may run between the
# steps of ``n += 1``, never inside `set.add`.
_DEMAND: set[int] = set()
_LOCK = threading.RLock()  # reentrant: a frame collected while the lock is held releases from inside it
_placed = False
_state.keep(__name__, "_placed", "follows _DEMAND, which each frame and audit releases itself")


def demand(token: int) -> None:
    """``token`` (an id) needs the on-demand patches in place until `release`."""
    _DEMAND.add(token)
    with _LOCK:  # reading `_placed` outside it races with a last `release`
        if not _placed:
            _match_demand()


def release(token: int) -> None:
    """``token`` no longer needs them; the last one out puts the originals back."""
    _DEMAND.discard(token)
    if not _DEMAND:
        with _LOCK:
            if _placed:
                _match_demand()


def _match_demand() -> None:
    """Under `_LOCK`: every on-demand patch in if anything demands them, else out; again if a finalizer changed the
    demand meanwhile."""
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


# Adapters the user uninstalled: automatic installation leaves them out until installed explicitly again.
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
    """The ledger as at import: patches an adapter left go back; declined adapters may install themselves again."""
    global _declined
    for owner in owners():
        restore(owner)
    _declined = frozenset()


_state.register(__name__, "_PATCHES _declined", _clear, step="patches")
_state.keep(__name__, "_DEMAND", "the live frames and audits that need the on-demand patches: each releases its own")
_state.keep(__name__, "_LOCK", "a lock")
