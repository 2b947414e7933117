"""``nv_options(on_error="torch")`` on the real path: Thunder's Llama-2 in bf16 fails under nvFuser's defaults (the
RoPE fusions, forward and backward, on both builds); inside the scope the step completes, each failing fusion runs
its region in PyTorch, and the loss and gradients match eager bf16. A healthy step routes nothing."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest

import nvscope
from nvscope import EscapeWarning, nv_options

torch = pytest.importorskip("torch")
thunder = pytest.importorskip("thunder")


def _llama(dtype: Any) -> tuple[Any, Any, Any]:
    from workloads import llama2_model

    model, tokens, targets = llama2_model(2, 256, 2, 256)
    return model.to(dtype), tokens, targets


def _step(net: Any, run: Any, tokens: Any, targets: Any) -> list[Any]:
    from workloads import llama2_grads

    return llama2_grads(net, run, tokens, targets)


def test_llama2_bf16_completes_with_the_failing_fusions_in_pytorch() -> None:
    model, tokens, targets = _llama(torch.bfloat16)
    eager = copy.deepcopy(model)
    jitted = thunder.jit(model)
    with warnings.catch_warnings(record=True) as caught, nvscope.audit() as log:
        warnings.simplefilter("always", EscapeWarning)
        with nv_options(on_error="torch"):
            got = _step(model, jitted, tokens, targets)
    escaped = {str(w.message).split()[2] for w in caught if issubclass(w.category, EscapeWarning)}
    routed = {r.fusion for r in log.records if r.route == "torch"}
    assert escaped and escaped == routed, (escaped, routed)
    assert {f.partition("/")[0] for f in escaped} == {"forward", "backward"}
    want = _step(eager, eager, tokens, targets)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=5e-2, atol=5e-2)
    # The next step goes straight to PyTorch for those fusions: no warning, no new failure.
    with warnings.catch_warnings():
        warnings.simplefilter("error", EscapeWarning)
        with nv_options(on_error="torch"):
            _step(model, jitted, tokens, targets)
    # Outside the scope nvFuser's error is raised, as ever: nothing leaked.
    with pytest.raises(RuntimeError, match="INTERNAL ASSERT"):
        _step(model, jitted, tokens, targets)


def test_a_healthy_step_routes_nothing() -> None:
    model, tokens, targets = _llama(torch.float32)
    jitted = thunder.jit(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EscapeWarning)
        with nvscope.audit() as log, nv_options(on_error="torch"):
            _step(model, jitted, tokens, targets)
    assert log.records and not [r for r in log.records if r.route == "torch"]
