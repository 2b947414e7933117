"""Scope frames: the one ContextVar holding the frame of the scope active here, and the verbs that write it.

Why a ContextVar: it is what threads (each starts empty), asyncio tasks (each runs in a copy of its creator's
context) and generators need, and reading it costs about 20 ns, which matters because the executor adapters read it
at every fusion execution. The variable holds a `Frame` (or None when no scope is active): the frame's ``policy``
is already merged with the enclosing scopes (`nvscope._core._policy`), so the hot path does one ``get()`` and one
attribute load, never a merge.

Only this module and `nvscope._core._scope.nv_options` (entry and exit) write the variable: `push`/`pop` (a backward
pass under its forward's scope), `unwind` (a runner or test harness dropping scopes a program left open),
`enter_frame`/`switch_frame` (the decorators of `nvscope._core._decorators`, which rebuild a generator body's scopes
at every step). Below both the scope and its decorators, as torch keeps its decorator machinery (``_contextlib``)
below grad mode: `nv_options` is a decorator by inheritance, not by a callback registered at import.
"""

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
    "switch_frame",
    "unwind",
]

# Frame.ran: what happened under a frame. Ordered, so that merging two is max().
NOTHING, NO_EFFECT, CHANGED = 0, 1, 2


class Frame:
    """One entered scope. ``policy`` is the merged, effective policy (None when empty: the hot path tests ``is``)."""

    __slots__ = ("on_error", "owner", "parent", "policy", "ran", "ran_earlier")

    def __init__(self, policy: OptionSet | _policy.Policy | None, parent: Frame | None, owner: object,
                 on_error: str | None) -> None:
        # on_error="torch" needs every fusion in the execution path, its defaults too: an escaping policy.
        self.policy = _policy.escaping(policy) if on_error == "torch" else policy
        self.parent = parent
        self.owner = owner
        # on_error in force here: "raise", "fallback", "torch", or None when no scope chose (so "raise"; a backward
        # pass under its forward's scope then takes the choice of the thread running it, `push`).
        self.on_error = on_error
        # NOTHING, NO_EFFECT (fusions ran, none changed by the scope) or CHANGED; written by `note_run` only.
        self.ran = NOTHING
        # Set on a generator body's scope rebuilt for a later step (`nvscope._core._decorators`) when a fusion ran
        # under it in an earlier step: that fusion has already been counted below, so it only keeps the scope's exit
        # quiet.
        self.ran_earlier = NOTHING
        # While any frame exists, the adapters' per-fusion patches are in place (`nvscope._core._patches.demand`):
        # from here to `__del__`, wherever the frame is visible (an entered scope, a copied context, a backward).
        _demand(id(self))

    def __del__(self, _release: Callable[[int], None] = _patches.release) -> None:
        try:
            _release(id(self))
        except Exception:  # pragma: no cover - at interpreter exit the module's state may be gone already
            pass


_demand = _patches.demand


def note_run(frame: Frame | None, ran: int, *, outward: bool = False) -> None:
    """What ran under ``frame`` is at least ``ran`` (`NO_EFFECT`: fusions ran, its options changed none; `CHANGED`);
    with ``outward``, under every scope around it too. Nothing for None (no scope).

    The one writer of `Frame.ran`: the execution path when a fusion runs, a scope's exit and `pop` for the scope
    around them, the decorators for the consumer of a generator's step and for the scopes `bind` captured. What a
    frame ran only rises, so an update is a max."""
    while frame is not None:
        if ran > frame.ran:
            frame.ran = ran
        if not outward:
            return
        frame = frame.parent


PROGRAM = "NVSCOPE_SHARE=all"  # the owner of the program-wide frame (`ROOT`)


def _root() -> Frame | None:
    """``NVSCOPE_SHARE=all``: a frame that shares the defaults (``nv_options(share=True)``), in force wherever no scope
    is: the variable's default, so every thread, task and autograd thread starts under it, which no entered scope
    could give (a new thread starts with an empty context). Read once, at import: a program-wide setting, set before
    the program starts (as ``nvscope run --share-defaults`` and the pytest plugin do)."""
    if not _env.share_all(warn=False):
        return None
    return Frame(_policy.over(None, EMPTY, None, True, True), None, PROGRAM, None)


ROOT = _root()
_ROOT_POLICY = None if ROOT is None else ROOT.policy
_state.keep(__name__, "ROOT", "the program-wide frame of NVSCOPE_SHARE=all, for the life of the process")

class _Suspension:
    """The open `program_sharing_suspended` blocks: while any is open, `ROOT` shares nothing."""

    __slots__ = ("lock", "open")

    def __init__(self) -> None:
        self.open = 0
        self.lock = threading.Lock()


_SUSPENSION = _Suspension()
_state.keep(__name__, "_SUSPENSION", "the open blocks that suspend ROOT's sharing: each undoes its own")


@contextmanager
def program_sharing_suspended() -> Iterator[None]:
    """Inside, `ROOT` shares nothing, in every thread: for a tool that must see Thunder's own path (`nvscope rescue`'s
    diagnosis in process). Process-wide while it runs; nothing without ``NVSCOPE_SHARE=all``."""
    if ROOT is None:
        yield
        return
    suspension = _SUSPENSION
    with suspension.lock:
        suspension.open += 1
        ROOT.policy = None
    try:
        yield
    finally:
        with suspension.lock:
            suspension.open -= 1
            if not suspension.open:
                ROOT.policy = _ROOT_POLICY


# The one piece of state. Adapters read ACTIVE.get() on their hot path; everything else goes through the verbs.
ACTIVE: ContextVar[Frame | None] = ContextVar("nvscope.active", default=ROOT)
_state.keep(__name__, "ACTIVE", "per context: each scope resets its own (uninstall inside a scope leaves it active)")


def enter_frame(frame: Frame | None) -> Token[Frame | None]:
    """Make ``frame`` the active one (decorators and `nvscope.bind` rebuild or carry frames); undo with ``reset``.

    The entry demands the patches itself (`nvscope._core._patches.demand`), not only through the frame's life: a
    generator left in a reference cycle can be closed by the collector after its captured frame was finalized, and
    its cleanup runs under that frame."""
    token = ACTIVE.set(frame)
    if frame is not None:
        _demand(id(token))
    return token


def switch_frame(frame: Frame | None) -> None:
    """Make ``frame`` the active one with no token, for a caller that demands the patches around it itself (a
    generator body's step: `nvscope._core._decorators`)."""
    ACTIVE.set(frame)


def reset(token: Token[Frame | None]) -> None:
    ACTIVE.reset(token)
    _patches.release(id(token))  # nothing if `enter_frame` demanded nothing for it


def push(policy: OptionSet | _policy.Policy | None, on_error: str | None,
         share: bool | None = None) -> Token[Frame | None]:
    """Activate ``policy`` laid over the current scope, unvalidated and without policy checks; for adapters.

    Used where nvscope itself carries a scope somewhere (a backward pass under its forward's scope). ``fallback`` is
    the carried scope's on_error choice (a `Frame`'s); None takes the current scope's. ``share``: the carried scope's
    sharing where it must win over the current one's (`carried`); None: ``policy``'s, else the current scope's.
    Undo with `pop`.
    """
    parent = ACTIVE.get()
    below = None if parent is None else parent.policy
    if on_error is None and parent is not None:
        on_error = parent.on_error
    return ACTIVE.set(Frame(_policy.compose(below, policy, share), parent, push, on_error))


def carried(frame: Frame | None) -> tuple[Frame | None, bool | None]:
    """What a forward carries to its backward: its frame (None: nothing, the backward takes its thread's scope) and
    its sharing where the backward must keep it (`push`'s ``share``).

    The program-wide frame (`ROOT`) is no scope of the user's: a forward under it carries nothing, so a backward run
    inside ``share=False`` does not share. A frame that does not share under one that does (`ROOT` included) ended
    sharing on purpose (``share=False``: sharing is inherited, ``inherit=False`` included, so nothing else makes
    one): its backward must not share either, wherever it runs."""
    if frame is None or frame is ROOT:
        return None, None
    if not _policy.sharing(frame.policy) and _shares_around(frame):
        return frame, False
    if frame.policy is None and frame.on_error is None:
        return None, None  # an empty frame: nothing to carry to the backward
    return frame, None


def _shares_around(frame: Frame) -> bool:
    """Whether a scope around ``frame`` shares (a forward's frame, once per backward it carries to)."""
    parent = frame.parent
    while parent is not None:
        if _policy.sharing(parent.policy):
            return True
        parent = parent.parent
    return False


def pop(token: Token[Frame | None]) -> None:
    """Undo a `push`; a fusion that ran under the pushed frame counts for the scope it was pushed over."""
    frame = ACTIVE.get()
    ACTIVE.reset(token)
    if frame is not None:
        note_run(frame.parent, frame.ran)


def unwind(to: Frame | None) -> list[object]:
    """Drop every frame above ``to`` (scopes a program or test entered and left open); return their owners,
    innermost first. The runner and the pytest plugin use it so that their own scopes then exit cleanly."""
    owners = []
    frame = ACTIVE.get()
    while frame is not None and frame is not to:
        owners.append(frame.owner)
        frame = frame.parent
    if owners:
        ACTIVE.set(to)
    return owners
