"""The scope: one ContextVar holding the nvFuser policy active here, and the verbs that set it.

Why a ContextVar: it is what threads (each starts empty), asyncio tasks (each runs in a copy of its creator's
context) and generators need, and reading it costs about 20 ns, which matters because the executor adapters read it
at every fusion execution. The variable holds a `Frame` (or None when no scope is active): the frame's ``policy``
is already merged with the enclosing scopes (`nvscope._core._policy`), so the hot path does one ``get()`` and one
attribute load, never a merge.

Why no token on the `nv_options` instance: a ContextDecorator that keeps ``self._token`` breaks as soon as the same
object is entered twice, nested or from two threads (numpy#24013 hit exactly this in ``errstate``). Each entry
instead pushes a frame that remembers its parent, and exit restores the parent of the frame it finds, after
checking that the frame is its own. The instance holds only its validated options, so one object can be shared by
any number of threads, tasks and nested entries.

Only this module writes the ContextVar: `nv_options` entry and exit, `push`/`pop` (a backward pass under its
forward's scope), `unwind` (a runner or test harness dropping scopes a program left open) and `enter_frame` (the
decorators of `nvscope._core._decorators`, which rebuild a generator body's scopes at every step).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextvars import ContextVar, Token
from types import TracebackType

from nvscope._core import _devmode, _patches, _policy
from nvscope._core._fusion import FusionInfo, Selector, selector
from nvscope._core._optionset import EMPTY, OptionSet
from nvscope._core._validate import names as _names

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: `import nvscope` must stay light (nvscope/_core/_record.py)
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["ACTIVE", "Frame", "current_options", "enter_frame", "nv_options", "pop", "push", "switch_frame", "unwind"]

# Frame.ran: what happened under a frame. Ordered, so that merging two is max().
NOTHING, NO_EFFECT, CHANGED = 0, 1, 2
_ON_ERROR = (None, "raise", "fallback")


class Frame:
    """One entered scope. ``policy`` is the merged, effective policy (None when empty: the hot path tests ``is``)."""

    __slots__ = ("fallback", "owner", "parent", "policy", "ran", "ran_earlier")

    def __init__(self, policy: OptionSet | _policy.Policy | None, parent: Frame | None, owner: object,
                 fallback: bool | None) -> None:
        self.policy = policy
        self.parent = parent
        self.owner = owner
        # on_error in force here: True "fallback", False "raise", None no scope chose (so "raise"; a backward pass
        # under its forward's scope then takes the choice of the thread running it, `push`).
        self.fallback = fallback
        # NOTHING, NO_EFFECT (fusions ran, none changed by the scope) or CHANGED; set by the execution path.
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


# The one piece of state. Adapters read ACTIVE.get() on their hot path; everything else goes through the verbs.
ACTIVE: ContextVar[Frame | None] = ContextVar("nvscope.active", default=None)

# Called (without arguments) before each non-empty scope is entered; nvscope.__init__ registers the lazy
# installation of the executor adapters here, so that entering a scope is all a user has to do.
ENTER_HOOKS: list[Callable[[], None]] = []


def current_options(fusion: FusionInfo | None = None) -> OptionSet:
    """The options active in this context (thread, task, generator step): an immutable, hashable `OptionSet`.

    Without ``fusion``, those that reach every fusion (scopes with ``fusions=`` selectors are left out); with a
    `FusionInfo`, the scopes' options for that fusion (its own compile-time options and the catalog's gates aside).
    """
    if fusion is not None and not isinstance(fusion, FusionInfo):
        raise TypeError(f"current_options takes a FusionInfo (e.g. FusionInfo('nvFusion0', 'forward', ['linear'])) "
                        f"or nothing, not {type(fusion).__name__}: {fusion!r}")
    frame = ACTIVE.get()
    if frame is None:
        return EMPTY
    return _policy.resolve(frame.policy, fusion)


class nv_options:
    """Run the nvFuser fusions executed inside with these options: ``with nv_options(enable=[...], disable=[...])``.

    Names are validated here, at construction, before anything is entered. Nested scopes merge (inner laid over
    outer, per list; a name the inner scope requests the other way is the inner scope's) unless ``inherit=False``,
    which starts from no options; neither can remove options that come from ``NVFUSER_ENABLE``/``NVFUSER_DISABLE``.
    ``enable`` may also be an `OptionSet` (e.g. a search's ``recommended``).

    ``fusions=`` limits this scope's options to the fusions it selects: a glob over fusion ids (``"backward/*"``), a
    list of globs, a callable taking a `FusionInfo`, or ``nvscope.phase(...)``/``nvscope.holding(...)``.
    ``on_error="fallback"``: a fusion that fails under its options runs again with its defaults (`FallbackWarning`,
    the audit record, the failure's note and repro script); ``"raise"`` re-raises (the default, when no enclosing
    scope chose fallback). ``__enter__`` returns the options that reach every fusion.

    The object is also a decorator (``@nv_options(...)``, same as ``@with_nv_options(...)``), and it is safe to
    share: it keeps no per-entry state, so it can be entered nested in itself and from many threads at once.
    """

    __slots__ = ("_inherit", "_on_error", "_options", "_selector")

    def __init__(self, enable: Iterable[str] | str | OptionSet = (), disable: Iterable[str] | str = (), *,
                 inherit: bool = True, fusions: object = None, on_error: str | None = None) -> None:
        if not isinstance(inherit, bool):
            raise TypeError(f"inherit= takes True or False, not {inherit!r}")
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error= takes 'raise' or 'fallback', not {on_error!r}")
        if isinstance(enable, OptionSet):
            if disable:
                raise TypeError("nv_options(an OptionSet) takes no disable=: the OptionSet holds both lists")
            enabled, disabled = _names("enable", enable.enable), _names("disable", enable.disable)
        else:
            enabled, disabled = _names("enable", enable), _names("disable", disable)
        both = enabled & disabled
        if both:  # a few names are valid in both lists (id_model, ...); nvFuser would get both requests at once
            raise ValueError(f"{', '.join(map(repr, sorted(both)))} in both enable= and disable= of one scope: "
                             "keep each name in one of the lists")
        self._selector: Selector | None = None if fusions is None else selector(fusions)
        self._options = OptionSet(enabled, disabled)
        self._inherit = inherit
        self._on_error = on_error

    @property
    def options(self) -> OptionSet:
        """This scope's own options (before merging with enclosing scopes)."""
        return self._options

    @property
    def inherit(self) -> bool:
        return self._inherit

    @property
    def fusions(self) -> Selector | None:
        """The selector of the fusions this scope's options reach (None: every fusion)."""
        return self._selector

    @property
    def on_error(self) -> str | None:
        return self._on_error

    def __repr__(self) -> str:
        extra = "" if self._inherit else ", inherit=False"
        if self._selector is not None:
            extra += f", fusions={self._selector!r}"
        if self._on_error is not None:
            extra += f", on_error={self._on_error!r}"
        return (f"nv_options(enable={sorted(self._options.enable)!r}, "
                f"disable={sorted(self._options.disable)!r}{extra})")

    def __enter__(self) -> OptionSet:
        frame = self._frame(ACTIVE.get(), check=True)
        ACTIVE.set(frame)
        policy = frame.policy
        if policy is None:
            return EMPTY
        return policy if isinstance(policy, OptionSet) else _policy.resolve(policy, None)

    def _frame(self, parent: Frame | None, check: bool) -> Frame:
        """This scope's frame over ``parent``, after the policy check and the enter hooks (which may raise)."""
        own = self._options
        if own:
            if check:
                _devmode.check_scope(own)  # may raise (strict mode): nothing has been entered yet
            for hook in ENTER_HOOKS:
                hook()
        return self._make(parent)

    def _make(self, parent: Frame | None) -> Frame:
        own = self._options
        below = None if parent is None else parent.policy
        merged: OptionSet | _policy.Policy | None
        if self._selector is None and not isinstance(below, _policy.Policy):  # _policy.over, inlined: it is hot
            policy = below.override(own) if self._inherit and below is not None else own
            merged = policy if policy else None
        else:
            merged = _policy.over(below, own, self._selector, self._inherit)
        on_error = self._on_error
        fallback = (None if parent is None else parent.fallback) if on_error is None else on_error == "fallback"
        return Frame(merged, parent, self, fallback)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        frame = ACTIVE.get()
        if frame is None or frame.owner is not self:
            raise RuntimeError(
                f"{self!r} exited, but the innermost active scope is not one it entered here: scopes must exit in "
                "the reverse order of entry, in the same thread/task (use nvscope.bind to carry a scope elsewhere)"
            )
        ACTIVE.set(frame.parent)
        ran = frame.ran
        if ran and frame.parent is not None and ran > frame.parent.ran:
            frame.parent.ran = ran  # the enclosing scope saw this fusion too
        if exc_type is None:
            self._report(max(ran, frame.ran_earlier))

    def _report(self, ran: int) -> None:
        """At a clean exit: say so if no fusion ran, or if the options changed none of those that did."""
        if ran == CHANGED or not self._options:
            return
        if ran == NOTHING:
            _devmode.warn_no_fusion(self)
        else:
            _devmode.warn_no_effect(self, self._options, self._selector)

    def __call__(self, func: F) -> F:
        # The wrapper lives in `nvscope._core._decorators`, which builds on this module (as torch's `_contextlib`
        # builds on nothing of grad mode's state); it hands its `decorate` in when imported (`nvscope/__init__.py`
        # imports it), so this module does not import it back.
        decorated: F = DECORATE[0](self, func)
        return decorated


# `nvscope._core._decorators.decorate`, set when that module is imported (see `nv_options.__call__`).
DECORATE: list[Callable[[nv_options, Any], Any]] = []


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


def push(policy: OptionSet | _policy.Policy | None, fallback: bool | None) -> Token[Frame | None]:
    """Activate ``policy`` laid over the current scope, unvalidated and without policy checks; for adapters.

    Used where nvscope itself carries a scope somewhere (a backward pass under its forward's scope). ``fallback`` is
    the carried scope's on_error choice (a `Frame`'s); None takes the current scope's. Undo with `pop`.
    """
    parent = ACTIVE.get()
    below = None if parent is None else parent.policy
    if fallback is None and parent is not None:
        fallback = parent.fallback
    return ACTIVE.set(Frame(_policy.compose(below, policy), parent, push, fallback))


def pop(token: Token[Frame | None]) -> None:
    """Undo a `push`; a fusion that ran under the pushed frame counts for the scope it was pushed over."""
    frame = ACTIVE.get()
    ACTIVE.reset(token)
    if frame is not None and frame.ran and frame.parent is not None and frame.ran > frame.parent.ran:
        frame.parent.ran = frame.ran


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
