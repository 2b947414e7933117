"""Policy: development mode. Developer flags are for developers; they must not percolate into reference models.

Thunder's reviewers worried that nvFuser developer flags "percolate into reference models and benchmarks". So a
non-empty scope entered outside development mode warns (`DevelopmentModeWarning`, attributed to the user's line,
once per call site under Python's default warning filter), and ``NVSCOPE_STRICT=1`` turns that warning into a
`DevelopmentModeError` for code that must never run with developer flags.

Development mode is on with ``NVSCOPE_DEV=1``, ``set_development_mode(True)`` (the process-wide default) or inside
``with dev_mode(True):`` (this context only: as numpy's ``errstate``, a `ContextVar`, so threads running meanwhile and
threads started inside keep the process-wide default). The innermost ``dev_mode`` block wins, then the process-wide
switch, then the environment, which is read at each scope entry (not at import), so a launcher or test can change it
at any time.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from contextvars import ContextVar

from nvscope._core import _env, _state
from nvscope._core._errors import (
    DevelopmentModeError,
    DevelopmentModeWarning,
    NoEffectWarning,
    NoFusionWarning,
    once,
    user_stacklevel,
)
from nvscope._core._optionset import OptionSet

__all__ = [
    "DevelopmentModeError",
    "DevelopmentModeWarning",
    "NoFusionWarning",
    "dev_mode",
    "is_development_mode",
    "set_development_mode",
    "strict_mode",
]

_default: bool | None = None  # set_development_mode's process-wide setting; None: follow NVSCOPE_DEV
_state.keep(__name__, "_default", "the user's set_development_mode: uninstall undoes nvscope's changes, not theirs")
_FOLLOW_DEFAULT = object()  # no dev_mode block in this context: the process-wide setting applies
# A dev_mode block's setting (True, False, or None to follow the environment) for the current context only.
_LOCAL: ContextVar[object] = ContextVar("nvscope_dev_mode", default=_FOLLOW_DEFAULT)
_state.keep(__name__, "_LOCAL", "per context: each dev_mode block resets its own")


def is_development_mode() -> bool:
    """Whether development mode is on: the innermost ``dev_mode`` block's setting in this context, else
    ``set_development_mode``'s, else ``NVSCOPE_DEV``."""
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
    """Turn development mode on (True) or off (False), or back to following ``NVSCOPE_DEV`` (None), process-wide.

    Returns the previous setting, so ``previous = set_development_mode(True); ...; set_development_mode(previous)``
    restores it. This is the default of every thread and context; a ``dev_mode`` block overrides it in its own
    context only.
    """
    global _default
    previous, _default = _default, _checked(enabled, "set_development_mode")
    return previous


@contextlib.contextmanager
def dev_mode(enabled: bool | None = True) -> Iterator[None]:
    """``with nvscope.dev_mode(): ...`` runs the block with development mode on (or off, or following the
    environment for ``None``) in the current context only, and then restores the previous setting, also when the
    block raises. Other threads, and threads started inside the block, keep the process-wide setting
    (`set_development_mode`), as they keep their own scopes."""
    token = _LOCAL.set(_checked(enabled, "dev_mode"))
    try:
        yield
    finally:
        _LOCAL.reset(token)


def check_scope(options: OptionSet) -> None:
    """Called before a non-empty scope is entered: warn, or raise under strict mode, outside development mode."""
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
    """Called at the exit of a non-empty scope under which no fusion executed (development mode only)."""
    if not is_development_mode():
        return
    from nvscope._core import _patches

    if not _patches.owners():
        # Nothing could have reached a fusion: say it once per process, not at every scope of a program without
        # Thunder (its scopes are then harmless no-ops).
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
    """Called at the clean exit of a non-empty scope under which fusions ran but none was changed by it.

    Each of them ran its default compiled kernels (nothing recompiled): its selector matched none of them, or the
    catalog says none of its options can affect them (nvscope does not record which: the message names both when
    both could be why). Python's warning filters make it once per scope text and line (the default action), as for
    every warning here.
    """
    from nvscope._core._catalog_cache import catalog

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
