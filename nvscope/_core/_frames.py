"""Scope frames: the one ContextVar holding the active scope's frame, and the verbs that write it.

A ContextVar, as threads, asyncio tasks and generators each need their own. A `Frame`'s ``policy`` is already merged
with the enclosing scopes: an adapter does one ``get()`` and one attribute load per fusion, never a merge."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

from nvscope._core import _env, _patches, _policy, _state
from nvscope._core._optionset import EMPTY, OptionSet

__all__ = [
    "ACTIVE",
    "CHANGED",
    "NOTHING",
    "NO_EFFECT",
    "PROGRAM",
    "ROOT",
    "Frame",
    "carried",
    "enter_frame",
    "note_run",
    "pop",
    "program_sharing_suspended",
    "push",
    "reset",
    "unwind",
]

# Frame.ran, ordered so that merging two is max().
NOTHING, NO_EFFECT, CHANGED = 0, 1, 2


class Frame:
    """One entered scope. ``policy`` is the merged, effective policy (None when empty: the hot path tests ``is``)."""

    __slots__ = ("on_error", "owner", "parent", "policy", "ran", "ran_earlier")

    def __init__(self, policy: OptionSet | _policy.Policy | None, parent: Frame | None, owner: object,
                 on_error: str | None) -> None:
        # on_error="torch" must reach every fusion, the defaults too.
        self.policy = _policy.escaping(policy) if on_error == "torch" else policy
        self.parent = parent
        self.owner = owner
        # None when no scope chose: "raise", and a backward takes its thread's choice (`push`).
        self.on_error = on_error
        self.ran = NOTHING
        # A generator body's scope rebuilt for a later step: what ran in earlier steps, already counted.
        self.ran_earlier = NOTHING
        # The adapters' patches stay in place while any frame lives, wherever it is visible.
        _demand(id(self))

    def __del__(self, _release: Callable[[int], None] = _patches.release) -> None:
        try:
            _release(id(self))
        except Exception:  # pragma: no cover - interpreter exit
            pass


_demand = _patches.demand


def note_run(frame: Frame | None, ran: int, *, outward: bool = False) -> None:
    """What ran under ``frame`` (with ``outward``, every scope around it) is at least ``ran``; the one writer of
    `Frame.ran`."""
    while frame is not None:
        if ran > frame.ran:
            frame.ran = ran
        if not outward:
            return
        frame = frame.parent


PROGRAM = "NVSCOPE_SHARE=all"  # the owner of the program-wide frame (`ROOT`)


# ``NVSCOPE_SHARE=all``, read once at import: a frame sharing the defaults, the default of `ACTIVE`, so that every
# thread starts under it.
ROOT = Frame(_policy.over(None, EMPTY, None, True, True), None, PROGRAM, None) if _env.share_all(warn=False) else None
_ROOT_POLICY = None if ROOT is None else ROOT.policy
_state.keep(__name__, "ROOT", "the program-wide frame of NVSCOPE_SHARE=all, for the life of the process")


# The open `program_sharing_suspended` blocks: while any is open, `ROOT` shares nothing.
_suspended = 0
_suspended_lock = threading.Lock()
_state.keep(__name__, "_suspended _suspended_lock", "the open blocks that suspend ROOT's sharing: each undoes its own")


@contextmanager
def program_sharing_suspended() -> Iterator[None]:
    """Inside, `ROOT` shares nothing, in every thread: for a tool that must see Thunder's own path."""
    global _suspended
    if ROOT is None:
        yield
        return
    with _suspended_lock:
        _suspended += 1
        ROOT.policy = None
    try:
        yield
    finally:
        with _suspended_lock:
            _suspended -= 1
            if not _suspended:
                ROOT.policy = _ROOT_POLICY


ACTIVE: ContextVar[Frame | None] = ContextVar("nvscope.active", default=ROOT)
_state.keep(__name__, "ACTIVE", "per context: each scope resets its own (uninstall inside a scope leaves it active)")


def enter_frame(frame: Frame | None) -> Token[Frame | None]:
    """Make ``frame`` the active one; undo with ``reset``. The entry demands the patches itself: a generator in a
    reference cycle may be closed after its frame was finalized, and its cleanup runs under that frame."""
    token = ACTIVE.set(frame)
    if frame is not None:
        _demand(id(token))
    return token


def reset(token: Token[Frame | None]) -> None:
    ACTIVE.reset(token)
    _patches.release(id(token))


def push(policy: OptionSet | _policy.Policy | None, on_error: str | None,
         share: bool | None = None) -> Token[Frame | None]:
    """Activate ``policy`` over the current scope, unchecked: a backward under its forward's scope. Undo with `pop`.

    ``on_error``/``share``: the carried scope's, where they must win; None takes the current scope's."""
    parent = ACTIVE.get()
    below = None if parent is None else parent.policy
    if on_error is None and parent is not None:
        on_error = parent.on_error
    return ACTIVE.set(Frame(_policy.compose(below, policy, share), parent, push, on_error))


def carried(frame: Frame | None) -> tuple[Frame | None, bool | None]:
    """What a forward carries to its backward: its frame (None: the backward takes its thread's scope) and its
    sharing where the backward must keep it. A frame that stopped sharing on purpose keeps its backward unshared."""
    if frame is None or frame is ROOT:
        return None, None
    if not _policy.sharing(frame.policy):
        parent = frame.parent
        while parent is not None and not _policy.sharing(parent.policy):
            parent = parent.parent
        if parent is not None:  # a scope around it shares
            return frame, False
    if frame.policy is None and frame.on_error is None:
        return None, None
    return frame, None


def pop(token: Token[Frame | None]) -> None:
    """Undo a `push`; a fusion that ran under the pushed frame counts for the scope it was pushed over."""
    frame = ACTIVE.get()
    ACTIVE.reset(token)
    if frame is not None:
        note_run(frame.parent, frame.ran)


def unwind(to: Frame | None) -> list[object]:
    """Drop every frame above ``to`` (scopes left open); return their owners, innermost first."""
    owners = []
    frame = ACTIVE.get()
    while frame is not None and frame is not to:
        owners.append(frame.owner)
        frame = frame.parent
    if owners:
        ACTIVE.set(to)
    return owners
