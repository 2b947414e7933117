"""Development mode: developer flags must not leak into reference models and benchmarks.

A non-empty scope entered outside it warns (`DevelopmentModeWarning`; an error under ``NVSCOPE_STRICT=1``).
"""

from __future__ import annotations

import contextlib
import warnings
from contextvars import ContextVar

from nvscope._core import _env, _patches, _state
from nvscope._core._catalog_cache import catalog
from nvscope._core._errors import (
    DevelopmentModeError,
    DevelopmentModeWarning,
    NoEffectWarning,
    NoFusionWarning,
    once,
    user_stacklevel,
)
from nvscope._core._optionset import OptionSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "dev_mode",
    "is_development_mode",
    "set_development_mode",
    "strict_mode",
]

_default: bool | None = None  # None: follow NVSCOPE_DEV
_state.keep(__name__, "_default", "the user's set_development_mode: uninstall undoes nvscope's changes, not theirs")
_FOLLOW_DEFAULT = object()  # no dev_mode block in this context
_LOCAL: ContextVar[object] = ContextVar("nvscope_dev_mode", default=_FOLLOW_DEFAULT)
_state.keep(__name__, "_LOCAL", "per context: each dev_mode block resets its own")


def is_development_mode() -> bool:
    """Whether development mode is on: the innermost ``dev_mode`` block's setting, else ``set_development_mode``'s,
    else ``NVSCOPE_DEV``."""
    local = _LOCAL.get()
    setting = _default if local is _FOLLOW_DEFAULT else local
    return setting if isinstance(setting, bool) else _env.flag("NVSCOPE_DEV")


def strict_mode() -> bool:
    """Whether ``NVSCOPE_STRICT`` asks for an error instead of a warning outside development mode."""
    return _env.flag("NVSCOPE_STRICT")


def _checked(enabled: object, who: str) -> bool | None:
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"{who} takes True, False or None, not {enabled!r}")
    return enabled


def set_development_mode(enabled: bool | None) -> bool | None:
    """Turn development mode on (True), off (False) or back to following ``NVSCOPE_DEV`` (None), process-wide;
    returns the previous setting, to restore it."""
    global _default
    previous, _default = _default, _checked(enabled, "set_development_mode")
    return previous


@contextlib.contextmanager
def dev_mode(enabled: bool | None = True) -> Iterator[None]:
    """``with nvscope.dev_mode(): ...`` runs the block with development mode on (or off, or following the
    environment for ``None``) in this context only; other threads keep the process-wide setting."""
    token = _LOCAL.set(_checked(enabled, "dev_mode"))
    try:
        yield
    finally:
        _LOCAL.reset(token)


def check_scope(options: OptionSet) -> None:
    """Before a non-empty scope is entered: warn, or raise under strict mode, outside development mode."""
    if is_development_mode():
        return
    message = (
        f"nvFuser developer options {options.as_shell()} activated outside development mode. "
        "Set NVSCOPE_DEV=1 or call nvscope.set_development_mode(True) if this is a development run; "
        "reference models and benchmarks should run without developer options."
    )
    if strict_mode():
        raise DevelopmentModeError(message + " (NVSCOPE_STRICT=1 makes this an error.)")
    warnings.warn(message, DevelopmentModeWarning, stacklevel=user_stacklevel())


def warn_no_fusion(scope: object) -> None:
    """At the exit of a non-empty scope under which no fusion executed (development mode only)."""
    if not is_development_mode():
        return
    if not _patches.owners():
        # Without adapters every scope is a no-op: said once per process, not at every scope.
        if once("no adapter"):
            warnings.warn(
                f"{scope!r} exited, and no nvscope adapter is installed, so no scope can reach an nvFuser fusion: "
                "import thunder before entering scopes (its adapter installs itself), call nvscope.install(), or "
                "nvscope.nvfuser.install() for direct nvFuser use (NVSCOPE_AUTOINSTALL=0 turns automatic "
                "installation off). Said once per process.",
                NoFusionWarning,
                stacklevel=user_stacklevel(),
            )
        return
    warnings.warn(
        f"{scope!r} exited without executing any nvFuser fusion: is the call jitted (thunder.jit/thunderfx), does "
        "its path reach nvFuser, and did it run on this thread? (With thunderfx, a scope around .backward() alone "
        "does not reach backward fusions: they run on PyTorch's autograd thread under their forward's options.)",
        NoFusionWarning,
        stacklevel=user_stacklevel(),
    )


def warn_no_effect(scope: object, options: OptionSet, chosen: object) -> None:
    """At the clean exit of a non-empty scope under which fusions ran but none was changed: its selector matched
    none, or the catalog says its options cannot affect them (the message names both when both could be why)."""
    gated = []
    for kind, names in (("enable", options.enable_list()), ("disable", options.disable_list())):
        for name in names:
            info = catalog().get("enable" if kind == "enable" else "disable", name)
            if info is not None and info.ops:
                gated.append(f"{'+' if kind == 'enable' else '-'}{name} only fusions holding {', '.join(info.ops)}")
    reasons = []
    if chosen is not None:
        reasons.append(f"fusions={chosen!r} matched none of them")
    if gated:
        reasons.append(f"its options can affect only some fusions ({'; '.join(gated)})")
    hint = ""
    if any("matmul" in text or "linear" in text for text in gated):
        hint = (" Thunder puts matmuls and linears into nvFuser fusions only when jitted with "
                "thunder.jit(..., nv_enable_matmul=True) / nv_enable_linear=True; otherwise they run in cuBLAS.")
    warnings.warn(
        f"{scope!r} changed no fusion: fusions ran under it, but {' or '.join(reasons) or 'none was affected'}, so "
        f"each ran its default kernels (nothing was recompiled). `nvscope fusions` lists each fusion's id and ops."
        f"{hint}",
        NoEffectWarning,
        stacklevel=user_stacklevel(),
    )
