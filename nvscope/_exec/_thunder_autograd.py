"""Thunder's backward fusions under their forward's scope: the patch of ``ThunderFunction.forward``/``backward``
(``thunder/executors/torch_autograd.py``).

Thunder's backward fusions run wherever PyTorch's autograd engine runs them: on the thread that called
``.backward()`` with ``thunder.jit``, on the autograd device thread with ``thunderfx``, where the caller's context is
invisible. So the forward records the policy active when it ran (and the jitted function, for fusion identity: also
when only an audit listens, so that a backward fusion's ``function`` is its forward's whether or not the first step
was scoped), and the backward runs under it laid over whatever scope is active on the thread executing it
(`nvscope._core._policy.compose`), as ``torch.amp.custom_bwd`` does for autocast state.
"""

from __future__ import annotations

from typing import Any

from nvscope._core._scope import ACTIVE, pop, push
from nvscope._exec import _events
from nvscope._exec._thunder_adapter import jitted_function

__all__ = ["make_backward", "make_forward", "refusal"]

AUTOGRAD_MODULE = "thunder.executors.torch_autograd"
# On the autograd ctx: (the forward's frame or None, the jitted function), or None. The frame itself, not only its
# policy: while the ctx lives, the frame keeps the per-fusion patches in place (nvscope._core._patches.demand) for a
# backward that runs after its scope exited (``with nv_options(...): loss = f(x)`` then ``loss.backward()``).
_CAPTURED = "_nvscope_scope"


def refusal(autograd: Any) -> list[str]:
    """What the patch needs and ``autograd`` (Thunder's module) lacks (empty: it fits)."""
    function = getattr(autograd, "ThunderFunction", None)
    if not isinstance(function, type):
        return [f"{AUTOGRAD_MODULE}.ThunderFunction"]
    return [f"ThunderFunction.{name} (a staticmethod)" for name in ("forward", "backward")
            if not isinstance(vars(function).get(name), staticmethod)]


def make_forward(original: Any) -> Any:
    sinks = _events.SINKS  # the list itself: audit() appends to it in place

    def forward(ctx: Any, *args: Any) -> Any:
        frame = ACTIVE.get()
        if frame is None or (frame.policy is None and frame.fallback is None):
            # Unscoped: only an audit (nvscope.fusions) makes backward fusions' tables, which need the function.
            setattr(ctx, _CAPTURED, (None, jitted_function()) if sinks else None)
        else:  # once per scoped or audited step, not per fusion: the stack walk costs a few microseconds
            setattr(ctx, _CAPTURED, (frame, jitted_function()))
        return original(ctx, *args)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def make_backward(original: Any) -> Any:
    def backward(ctx: Any, *grads: Any) -> Any:
        captured = getattr(ctx, _CAPTURED, None)
        phase = _events.PHASE.set("backward")
        try:
            if captured is None:
                return original(ctx, *grads)
            frame, function = captured
            named = _events.FUNCTION.set(function)
            try:
                if frame is None:  # audited only: the thread's own scope, if any
                    return original(ctx, *grads)
                token = push(frame.policy, frame.fallback)
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
