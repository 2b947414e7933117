"""The scope: `nv_options` (and `with_nv_options`), `current_options`, and the hooks a scope entry calls.

The frame of the scope active here is in one ContextVar (`nvscope._core._frames`, re-exported here with the verbs
that write it: the names the layers above take from this module); `nv_options` enters and exits frames, and is a
decorator by its base class (`nvscope._core._decorators.ScopeDecorator`).

Why no token on the `nv_options` instance: a ContextDecorator that keeps ``self._token`` breaks as soon as the same
object is entered twice, nested or from two threads (numpy#24013 hit exactly this in ``errstate``). Each entry
instead pushes a frame that remembers its parent, and exit restores the parent of the frame it finds, after
checking that the frame is its own. The instance holds only its validated options, so one object can be shared by
any number of threads, tasks and nested entries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType

from nvscope._core import _devmode, _env, _policy, _state
from nvscope._core._decorators import ScopeDecorator
from nvscope._core._errors import ConfigWarning
from nvscope._core._frames import (
    ACTIVE,
    CHANGED,
    NO_EFFECT,
    NOTHING,
    Frame,
    enter_frame,
    note_run,
    pop,
    push,
    reset,
    switch_frame,
    unwind,
)
from nvscope._core._fusion import FusionInfo, Selector, selector
from nvscope._core._optionset import EMPTY, OptionSet
from nvscope._core._text import cut
from nvscope._core._validate import names as _names

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: `import nvscope` must stay light (nvscope/_core/_record.py)
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "ACTIVE",
    "CHANGED",
    "ENTER_HOOKS",
    "NOTHING",
    "NO_EFFECT",
    "Frame",
    "current_options",
    "enter_frame",
    "note_run",
    "nv_options",
    "on_enter",
    "pop",
    "push",
    "reset",
    "switch_frame",
    "unwind",
    "with_nv_options",
]

_ON_ERROR = (None, "raise", "fallback", "torch")
_RUN = (None, "torch", "nvfuser")


# Called (without arguments) before each non-empty scope is entered: the layers above register through `on_enter`
# (the execution layer's installation of the adapters, `nvscope._exec._autoinstall`), so that entering a scope is all
# a user has to do; the core cannot import them (tests/test_layers.py).
ENTER_HOOKS: list[Callable[[], None]] = []
_state.keep(__name__, "ENTER_HOOKS", "wiring, made once at import")


def on_enter(hook: Callable[[], None]) -> None:
    """Call ``hook()`` before each non-empty scope is entered, from now on (once however often it is registered).
    An exception it raises keeps the scope from being entered."""
    if hook not in ENTER_HOOKS:
        ENTER_HOOKS.append(hook)


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


class nv_options(ScopeDecorator):
    """Run the nvFuser fusions executed inside with these options: ``with nv_options(enable=[...], disable=[...])``.

    Names are validated here, at construction, before anything is entered. Nested scopes merge (inner laid over
    outer, per list; a name the inner scope requests the other way is the inner scope's) unless ``inherit=False``,
    which starts from no options; neither can remove options that come from ``NVFUSER_ENABLE``/``NVFUSER_DISABLE``.
    ``enable`` may also be an `OptionSet` (e.g. a search's ``recommended``).

    ``fusions=`` limits this scope's options to the fusions it selects: a glob over fusion ids (``"backward/*"``), a
    list of globs, a callable taking a `FusionInfo`, or ``nvscope.phase(...)``/``nvscope.holding(...)``.
    ``on_error="fallback"``: a fusion that fails under its options runs again with its defaults (`FallbackWarning`,
    the audit record, the failure's note and repro script); ``on_error="torch"``: a Thunder fusion that nvFuser fails
    to compile or run, under whatever options are in force (its defaults included), runs its region in PyTorch
    instead (`EscapeWarning`; docs/escape.md); ``"raise"`` re-raises (the default, when no enclosing scope chose).
    ``__enter__`` returns the options that reach every fusion.

    ``run="torch"``: the Thunder fusions this scope selects run their region in PyTorch from their first call,
    whatever nvFuser would do (the cure for faults, hangs and wrong numbers no exception reports; docs/escape.md);
    ``run="nvfuser"`` sends them back inside it.

    ``share=True``: the fusions this scope leaves at their own options (no options of its own, or not selected, or
    gated out) run through nvscope too, one compiled definition per (printed definition, inputs, options, device)
    shared by every fusion that prints it, as scoped fusions already do; so a deep model's defaults compile once per
    distinct definition instead of once per fusion. It changes no option (no development-mode warning); nested scopes
    inherit it; ``share=False`` ends it inside; None (the default) keeps what the enclosing scope chose.

    The object is also a decorator (``@nv_options(...)``, same as ``@with_nv_options(...)``), and it is safe to
    share: it keeps no per-entry state, so it can be entered nested in itself and from many threads at once.
    """

    __slots__ = ("_inherit", "_on_error", "_options", "_run", "_selector", "_share")

    def __init__(self, enable: Iterable[str] | str | OptionSet = (), disable: Iterable[str] | str = (), *,
                 inherit: bool = True, fusions: object = None, on_error: str | None = None,
                 share: bool | None = None, run: str | None = None) -> None:
        if not isinstance(inherit, bool):
            raise TypeError(f"inherit= takes True or False, not {inherit!r}")
        if share is not None and not isinstance(share, bool):
            raise TypeError(f"share= takes True, False or None, not {cut(repr(share), 40)}")
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error= takes 'raise', 'fallback' or 'torch', not {on_error!r}")
        if run not in _RUN:
            raise ValueError(f"run= takes 'torch' (the selected fusions run in PyTorch) or 'nvfuser', not {run!r}")
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
        self._share = share
        self._run = run
        if share and not _env.flag("NVSCOPE_SHARE"):  # as `nvscope run --share-defaults` refuses it, said once
            _warn_share_off()

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

    @property
    def run(self) -> str | None:
        """Where the fusions this scope selects run: "torch", "nvfuser", or None (as the enclosing scope)."""
        return self._run

    @property
    def share(self) -> bool | None:
        """Whether fusions this scope leaves alone share compiled definitions (None: as the enclosing scope)."""
        return self._share

    def __repr__(self) -> str:
        extra = "" if self._inherit else ", inherit=False"
        if self._selector is not None:
            extra += f", fusions={self._selector!r}"
        if self._on_error is not None:
            extra += f", on_error={self._on_error!r}"
        if self._share is not None:
            extra += f", share={self._share!r}"
        if self._run is not None:
            extra += f", run={self._run!r}"
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
        if own or self._share or self._on_error == "torch" or self._run is not None:
            if check and own:  # sharing changes no option: nothing to warn about
                _devmode.check_scope(own)  # may raise (strict mode): nothing has been entered yet
            for hook in ENTER_HOOKS:
                hook()
        return self._make(parent)

    def _make(self, parent: Frame | None) -> Frame:
        own = self._options
        below = None if parent is None else parent.policy
        merged: OptionSet | _policy.Policy | None
        if self._selector is None and self._share is None and self._run is None and \
                not isinstance(below, _policy.Policy):
            # _policy.over, inlined: it is hot
            policy = below.override(own) if self._inherit and below is not None else own
            merged = policy if policy else None
        else:
            merged = _policy.over(below, own, self._selector, self._inherit, self._share, self._run)
        on_error = self._on_error
        if on_error is None and parent is not None:
            on_error = parent.on_error
        return Frame(merged, parent, self, on_error)

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
        note_run(frame.parent, ran)  # the enclosing scope saw this fusion too
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



def _warn_share_off() -> None:
    import warnings

    if not _SHARE_OFF_WARNED:
        _SHARE_OFF_WARNED.append(True)
        warnings.warn("nv_options(share=True) shares nothing while NVSCOPE_SHARE=0 turns sharing off: unset it (or set "
                      "NVSCOPE_SHARE=1) for the defaults to compile once per distinct definition", ConfigWarning,
                      stacklevel=4)


_SHARE_OFF_WARNED: list[bool] = []
_state.register(__name__, "_SHARE_OFF_WARNED", _SHARE_OFF_WARNED.clear, step="caches")


def with_nv_options(enable: Iterable[str] | str | OptionSet = (), disable: Iterable[str] | str = (), *,
                    inherit: bool = True, fusions: object = None, on_error: str | None = None,
                    share: bool | None = None, run: str | None = None) -> Callable[[F], F]:
    """Decorator: run the function (or coroutine, generator, async generator) body under these options.

    Names are validated once, when the decorator is built. See `nv_options` for the merge rules. A generator's body
    sees, at each step, the options of the code that resumes it (``next``, ``send``, ...) merged with these and with
    the scopes it entered itself. Placed above ``@staticmethod`` or ``@classmethod`` it decorates the function inside.
    A class cannot be decorated (decorate its methods).
    """
    if callable(enable) and not isinstance(enable, (str, OptionSet)):
        # `@with_nv_options` without parentheses hands the function itself over as enable=.
        raise TypeError(f"with_nv_options needs its arguments: write @with_nv_options(enable=[...]) (with "
                        f"parentheses) above {getattr(enable, '__qualname__', 'the function')}, not @with_nv_options")
    return nv_options(enable, disable, inherit=inherit, fusions=fusions, on_error=on_error, share=share, run=run)
