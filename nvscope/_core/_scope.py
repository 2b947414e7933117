"""The scope: `nv_options` (and `with_nv_options`) and `current_options`; a scope entry calls the hooks registered in
`nvscope._core._lazy`.

Each entry pushes a frame that knows its parent and exit restores it: with no per-entry token, one object can be
entered nested and from many threads at once."""

from __future__ import annotations

import sys
import warnings

from nvscope._core import _devmode, _env, _policy, _state
from nvscope._core._decorators import ScopeDecorator
from nvscope._core._errors import ConfigWarning, user_stacklevel
from nvscope._core._frames import ACTIVE, CHANGED, NOTHING, Frame, note_run
from nvscope._core._fusion import FusionInfo, Selector, selector
from nvscope._core._lazy import ENTER_HOOKS, load
from nvscope._core._optionset import OptionSet
from nvscope._core._text import cut
from nvscope._core._validate import names as _names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["current_options", "nv_options", "with_nv_options"]

_ON_ERROR = (None, "raise", "fallback", "torch")
_RUN = (None, "torch", "nvfuser")


_state.keep("nvscope._core._lazy", "ENTER_HOOKS", "wiring, made once at import")  # kept here: _lazy loads no _state
_SHARE_OFF_WARNED: list[bool] = []  # nv_options(share=True) under NVSCOPE_SHARE=0 says so once (until uninstall)
_state.register(__name__, "_SHARE_OFF_WARNED", _SHARE_OFF_WARNED.clear, step="caches")


def current_options(fusion: FusionInfo | None = None) -> OptionSet:
    """The options active in this context (thread, task, generator step) as an `OptionSet`: those that reach every
    fusion, or with a `FusionInfo`, those the scopes give that fusion."""
    if fusion is not None and not isinstance(fusion, FusionInfo):
        raise TypeError(f"current_options takes a FusionInfo (e.g. FusionInfo('nvFusion0', 'forward', ['linear'])) "
                        f"or nothing, not {type(fusion).__name__}: {fusion!r}")
    frame = ACTIVE.get()
    return _policy.resolve(None if frame is None else frame.policy, fusion)


class nv_options(ScopeDecorator):
    """Run the nvFuser fusions executed inside with these options: ``with nv_options(enable=[...], disable=[...])``.

    Names are validated here. Nested scopes merge, inner over outer, unless ``inherit=False``; ``fusions=`` limits the
    options to the fusions selected; ``on_error="fallback"`` reruns a failing fusion with its defaults, "torch" runs
    its region in PyTorch; ``run="torch"`` sends selected fusions to PyTorch; ``share=True`` makes the fusions left at
    their defaults share compiled definitions (docs/semantics.md, docs/escape.md). Also a decorator; one object may
    be entered nested and from many threads at once."""

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
            disable = enable.disable
            enable = enable.enable
        enabled, disabled = _names("enable", enable), _names("disable", disable)
        both = enabled & disabled
        if both:  # a few names are valid in both lists (id_model, ...)
            raise ValueError(f"{', '.join(map(repr, sorted(both)))} in both enable= and disable= of one scope: "
                             "keep each name in one of the lists")
        self._selector: Selector | None = None if fusions is None else selector(fusions)
        self._options = OptionSet(enabled, disabled)
        self._inherit = inherit
        self._on_error = on_error
        self._share = share
        self._run = run
        if share and not _env.flag("NVSCOPE_SHARE") and not _SHARE_OFF_WARNED:
            _SHARE_OFF_WARNED.append(True)
            warnings.warn("nv_options(share=True) shares nothing while NVSCOPE_SHARE=0 turns sharing off: unset it (or "
                          "set NVSCOPE_SHARE=1) for the defaults to compile once per distinct definition",
                          ConfigWarning, stacklevel=user_stacklevel())

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
        for name, value in (("fusions", self._selector), ("on_error", self._on_error), ("share", self._share),
                            ("run", self._run)):
            if value is not None:
                extra += f", {name}={value!r}"
        return (f"nv_options(enable={sorted(self._options.enable)!r}, "
                f"disable={sorted(self._options.disable)!r}{extra})")

    def __enter__(self) -> OptionSet:
        frame = self._frame(ACTIVE.get(), check=True)
        ACTIVE.set(frame)
        policy = frame.policy
        return policy if isinstance(policy, OptionSet) else _policy.resolve(policy, None)  # EMPTY for None

    def _frame(self, parent: Frame | None, check: bool) -> Frame:
        """This scope's frame over ``parent``, after the policy check and the enter hooks (either may raise)."""
        own = self._options
        if own or self._share or self._on_error == "torch" or self._run is not None:
            if check and own:  # sharing changes no option: nothing to warn about
                _devmode.check_scope(own)  # may raise (strict mode): nothing has been entered yet
            for hook in ENTER_HOOKS:
                if isinstance(hook, str):  # "module:function", registered so that `import nvscope` loads neither
                    if sys.meta_path is None:  # at interpreter exit (a generator closed then) nothing can load
                        continue
                    hook = load(hook)
                hook()
        return self._make(parent)

    def _make(self, parent: Frame | None) -> Frame:
        own = self._options
        below = None if parent is None else parent.policy
        merged: OptionSet | _policy.Policy | None
        if self._selector is None and self._share is None and self._run is None and \
                not isinstance(below, _policy.Policy):
            # _policy.over, inlined: every scope entry takes this path
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
        note_run(frame.parent, ran)
        if exc_type is None:
            self._report(max(ran, frame.ran_earlier))

    def _report(self, ran: int) -> None:
        """At a clean exit: warn if no fusion ran, or if the options changed none of those that did."""
        if ran == CHANGED or not self._options:
            return
        if ran == NOTHING:
            _devmode.warn_no_fusion(self)
        else:
            _devmode.warn_no_effect(self, self._options, self._selector)


def with_nv_options(enable: Iterable[str] | str | OptionSet = (), disable: Iterable[str] | str = (), *,
                    inherit: bool = True, fusions: object = None, on_error: str | None = None,
                    share: bool | None = None, run: str | None = None) -> Callable[[F], F]:
    """Decorator: run the function (or coroutine, generator, async generator) under these options (`nv_options`).
    A generator sees at each step its resumer's options merged with these; a class cannot be decorated."""
    if callable(enable) and not isinstance(enable, (str, OptionSet)):
        raise TypeError(f"with_nv_options needs its arguments: write @with_nv_options(enable=[...]) (with "
                        f"parentheses) above {getattr(enable, '__qualname__', 'the function')}, not @with_nv_options")
    return nv_options(enable, disable, inherit=inherit, fusions=fusions, on_error=on_error, share=share, run=run)
