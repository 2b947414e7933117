"""Thunder's backward fusions under their forward's scope: the patch of ``ThunderFunction.forward``/``backward``
(``thunder/executors/torch_autograd.py``).

Thunder's backward fusions run wherever PyTorch's autograd engine runs them: on the thread that called
``.backward()`` with ``thunder.jit``, on the autograd device thread with ``thunderfx``, where the caller's context is
invisible. So the forward records the policy active when it ran (and the jitted function, for fusion identity,
scoped or not, so that a backward fusion's id names its forward's function whether or not the forward ran in a
scope), and the backward runs under it laid over whatever scope is active on the thread executing it
(`nvscope._core._policy.compose`), as ``torch.amp.custom_bwd`` does for autocast state.
"""

from __future__ import annotations

import sys
from typing import Any

from nvscope._core import ACTIVE, NoEffectWarning, OptionSet, carried, file_of, pop, push, site_of
from nvscope._exec import _events

__all__ = ["jitted_function", "make_backward", "make_forward", "refusal"]

AUTOGRAD_MODULE = "thunder.executors.torch_autograd"
# On the autograd ctx: (the forward's frame or None, the jitted function as `jitted_function` gives it, the sharing
# the backward must keep: `nvscope._core._frames.carried`), or None (the
# forward ran while the patch was out: no scope and no audit anywhere). The frame itself, not only its
# policy: while the ctx lives, the frame keeps the per-fusion patches in place (nvscope._core._patches.demand) for a
# backward that runs after its scope exited (``with nv_options(...): loss = f(x)`` then ``loss.backward()``).
_CAPTURED = "_nvscope_scope"


def jitted_function(limit: int = 40) -> tuple[str, str] | None:
    """The function ``thunder.jit`` compiled, from its ``fn_`` frame on this thread's stack: ``(qualname, site)``,
    the site ``"<module>:<qualname>"``; or None. Which of its traces runs is the fusion's key (its inputs, `identify`),
    not the trace's place in Thunder's cache, which follows the order the function met its inputs.

    In a backward, its forward's (captured by the autograd patch): the backward runs outside the jitted function.
    Called once per fusion (when its table is made) and once per forward while the autograd patch is in place, never
    per fusion call.
    """
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
    """What the patch needs and ``autograd`` (Thunder's module) lacks (empty: it fits)."""
    function = getattr(autograd, "ThunderFunction", None)
    if not isinstance(function, type):
        return [f"{AUTOGRAD_MODULE}.ThunderFunction"]
    return [f"ThunderFunction.{name} (a staticmethod)" for name in ("forward", "backward")
            if not isinstance(vars(function).get(name), staticmethod)]


def make_forward(original: Any) -> Any:
    def forward(ctx: Any, *args: Any) -> Any:
        frame, share = carried(ACTIVE.get())
        # The jitted function whether or not the forward ran in a scope: a backward fusion's id names it, and must be
        # the same in a run that scopes the backward alone. Once per step while the patch is in place (a scope exists
        # somewhere, or an audit listens), not per fusion: the stack walk costs a few microseconds.
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
                if frame is None:  # an unscoped forward: the thread's own scope, if any
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


# What the ctx of a forward that ran before the forward patch was in place (before nvscope was installed) holds.
_BEFORE = object()


def _unknown_function() -> None:
    """A backward whose forward ran before nvscope was installed, under a scope with a selector: nvscope cannot tell
    its jitted function (nothing Thunder gives the backward names it: its ``compiled_backward`` is the backward
    trace's own function), so its fusions' ids lack it and a glob naming the function matches none of them. Say so
    rather than let the selector quietly miss."""
    frame = ACTIVE.get()
    if frame is None or frame.policy is None or isinstance(frame.policy, OptionSet):
        return  # no selector (a policy without one is an OptionSet): every fusion gets the options anyway
    import warnings

    warnings.warn("nvscope: a Thunder backward ran under a scope with fusions= whose forward ran before nvscope was "
                  "installed, so nvscope cannot tell its jitted function: its fusions' ids lack it (e.g. "
                  "'backward/nvFusion1'), and a selector naming the function does not reach them. Call "
                  "nvscope.install() before the first step, or run the forward inside a scope.", NoEffectWarning,
                  stacklevel=3)
