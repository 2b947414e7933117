"""Thunder's backward fusions under their forward's scope and jitted function, which the forward records
(docs/backward.md)."""

from __future__ import annotations

import sys
from typing import Any

from nvscope._core import ACTIVE, NoEffectWarning, OptionSet, carried, file_of, pop, push, site_of
from nvscope._exec import _events

__all__ = ["jitted_function", "make_backward", "make_forward", "refusal"]

AUTOGRAD_MODULE = "thunder.executors.torch_autograd"
# (frame, jitted function, sharing) on the ctx: the frame keeps the patches in place after its scope exited.
_CAPTURED = "_nvscope_scope"


def jitted_function(limit: int = 40) -> tuple[str, str] | None:
    """``(qualname, site)`` of the function ``thunder.jit`` compiled (in a backward, its forward's), or None."""
    captured = _events.FUNCTION.get()
    if captured is not None and _events.PHASE.get() == "backward":
        return captured
    frame = sys._getframe(1)
    for _ in range(limit):
        if frame is None:
            break
        code = frame.f_code
        if code.co_name == "fn_" and "thunder" in code.co_filename:
            names = frame.f_locals
            fn = names.get("fn")
            if fn is None:
                fn = getattr(names.get("cd"), "fn", None)
            if fn is not None:
                qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
                return qualname, site_of(getattr(fn, "__module__", None) or type(fn).__module__, qualname, file_of(fn))
        frame = frame.f_back  # type: ignore[assignment]
    return captured


def refusal(autograd: Any) -> list[str]:
    """What the patch needs and ``autograd`` lacks."""
    function = getattr(autograd, "ThunderFunction", None)
    if not isinstance(function, type):
        return [f"{AUTOGRAD_MODULE}.ThunderFunction"]
    return [f"ThunderFunction.{name} (a staticmethod)" for name in ("forward", "backward")
            if not isinstance(vars(function).get(name), staticmethod)]


def make_forward(original: Any) -> Any:
    def forward(ctx: Any, *args: Any) -> Any:
        frame, share = carried(ACTIVE.get())
        # Scoped or not: backward ids must not depend on the forward's scope.
        function = jitted_function()
        setattr(ctx, _CAPTURED, None if frame is None and function is None else (frame, function, share))
        return original(ctx, *args)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def make_backward(original: Any) -> Any:
    def backward(ctx: Any, *grads: Any) -> Any:
        captured: Any = getattr(ctx, _CAPTURED, _BEFORE)
        phase = _events.PHASE.set("backward")
        try:
            if captured is None or captured is _BEFORE:
                if captured is _BEFORE:
                    _unknown_function()
                return original(ctx, *grads)
            frame, function, share = captured
            named = _events.FUNCTION.set(function)
            try:
                if frame is None:  # an unscoped forward
                    return original(ctx, *grads)
                token = push(frame.policy, frame.on_error, share)
                try:
                    return original(ctx, *grads)
                finally:
                    pop(token)
            finally:
                _events.FUNCTION.reset(named)
        finally:
            _events.PHASE.reset(phase)

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    return backward


_BEFORE = object()  # a forward that ran before the patch was in place


def _unknown_function() -> None:
    """Warn where a selector would quietly miss the backward of a forward that ran before installing."""
    frame = ACTIVE.get()
    if frame is None or frame.policy is None or isinstance(frame.policy, OptionSet):
        return  # no selector
    import warnings

    warnings.warn("nvscope: a Thunder backward ran under a scope with fusions= whose forward ran before nvscope was "
                  "installed, so nvscope cannot tell its jitted function: its fusions' ids lack it (e.g. "
                  "'backward/nvFusion1'), and a selector naming the function does not reach them. Call "
                  "nvscope.install() before the first step, or run the forward inside a scope.", NoEffectWarning,
                  stacklevel=3)
