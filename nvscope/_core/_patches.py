"""Every monkey-patch nvscope makes, recorded in one place and undone exactly.

An adapter never assigns to someone else's class or module directly: it calls `apply`, which records the owner,
the target, the attribute and what was there before (including "nothing of its own": an attribute inherited from a
base class is deleted on restore, not shadowed by a copy). `restore` undoes one owner's patches in reverse order.
So the whole list of what nvscope changes in Thunder and nvFuser is `active()`, ``nvscope doctor`` prints it, and
tests (or users) return to a pristine process with `nvscope.uninstall()`.
"""

from __future__ import annotations

__all__ = ["Patch", "accept", "active", "apply", "decline", "declined", "describe", "owners", "restore"]

_MISSING = object()


class Patch:
    """One replaced attribute: ``target.attribute`` was ``original`` (or absent from ``target.__dict__``)."""

    __slots__ = ("attribute", "original", "owner", "replacement", "target")

    def __init__(self, owner: str, target: object, attribute: str, original: object, replacement: object) -> None:
        self.owner = owner
        self.target = target
        self.attribute = attribute
        self.original = original
        self.replacement = replacement

    def __repr__(self) -> str:
        name = getattr(self.target, "__qualname__", None) or getattr(self.target, "__name__", repr(self.target))
        module = getattr(self.target, "__module__", None)
        where = f"{module}.{name}" if module and isinstance(self.target, type) else str(name)
        return f"{where}.{self.attribute} (by nvscope {self.owner})"


_PATCHES: list[Patch] = []


def apply(owner: str, target: object, attribute: str, replacement: object) -> Patch:
    """Set ``target.attribute = replacement``, remembering what to put back. ``owner`` names the adapter."""
    for patch in _PATCHES:
        if patch.target is target and patch.attribute == attribute:
            raise RuntimeError(f"{patch!r} is patched already; nvscope patches each attribute once")
    original = vars(target).get(attribute, _MISSING)
    setattr(target, attribute, replacement)
    patch = Patch(owner, target, attribute, original, replacement)
    _PATCHES.append(patch)
    return patch


def restore(owner: str) -> bool:
    """Undo every patch of ``owner``, newest first. Returns whether there was any."""
    mine = [patch for patch in _PATCHES if patch.owner == owner]
    for patch in reversed(mine):
        if patch.original is _MISSING:
            delattr(patch.target, patch.attribute)
        else:
            setattr(patch.target, patch.attribute, patch.original)
        _PATCHES.remove(patch)
    return bool(mine)


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
# (nvscope._exec._autoinstall)
# must not undo until the adapter is installed explicitly again. Kept here, with the patches, so that an adapter
# records it without importing the automatic installation (which imports the adapters).
_declined: set[str] = set()


def decline(owner: str) -> None:
    _declined.add(owner)


def accept(owner: str) -> None:
    _declined.discard(owner)


def declined(owner: str) -> bool:
    return owner in _declined


def forget_declined() -> None:
    _declined.clear()
