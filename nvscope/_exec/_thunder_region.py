"""A Thunder fusion's region as a PyTorch callable, for ``on_error="torch"``: read from the closure of the wrapper's
``get_fd``, and built as Thunder's ``torch_compile.make_compiled`` does, without ``torch.compile``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["REGION", "compile", "escape_refusal", "region_of"]

REGION = ("bsyms", "sorted_unique_inputs", "sorted_unique_outputs")  # get_fd's free variables


def region_of(get_fd: Any) -> tuple[Sequence[Any], Sequence[Any], Sequence[Any]] | None:
    """``(bound symbols, inputs, outputs)`` behind a wrapper's ``get_fd``, or None."""
    function = getattr(get_fd, "__wrapped__", get_fd)
    code, cells = getattr(function, "__code__", None), getattr(function, "__closure__", None)
    if code is None or not cells:
        return None
    free = dict(zip(code.co_freevars, cells, strict=False))
    try:
        bsyms, inputs, outputs = (free[name].cell_contents for name in REGION)
    except (KeyError, ValueError):
        return None
    return bsyms, inputs, outputs


def escape_refusal(impl: Any) -> str | None:
    """Why this Thunder's fusions cannot run in PyTorch, or None; read once, at install."""
    import importlib

    make = getattr(impl, "create_fusion_definition_wrapper", None)
    code = getattr(make, "__code__", None)
    inner = [c for c in getattr(code, "co_consts", ()) if getattr(c, "co_name", None) == "get_fd"]
    if not inner or not set(REGION) <= set(inner[0].co_freevars):
        return ("its create_fusion_definition_wrapper builds no get_fd over the region (bound symbols, inputs, "
                "outputs) that nvscope knows")
    for module in ("thunder.core.prims", "thunder.core.trace", "thunder.core.codeutils", "thunder.executors.passes",
                   "thunder.executors.torchex"):
        try:
            importlib.import_module(module)
        except Exception as error:
            return f"{module} does not import ({type(error).__name__}: {error})"
    return None


def compile(bsyms: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any]) -> Callable[..., Any]:
    """The region as a PyTorch callable returning a list of outputs, as nvFuser's execute does."""
    import importlib  # Thunder is optional: nothing for a type checker to resolve

    import torch

    prims = importlib.import_module("thunder.core.prims")
    traces = importlib.import_module("thunder.core.trace")
    SigInfo = importlib.import_module("thunder.core.codeutils").SigInfo
    transform_for_execution = importlib.import_module("thunder.executors.passes").transform_for_execution
    torchex = importlib.import_module("thunder.executors.torchex")
    TraceCtx, tracectx = traces.TraceCtx, traces.tracectx

    trace = TraceCtx(None)
    trace.args = list(inputs)
    trace.kwargs = {}
    trace.names = {proxy.name for proxy in inputs}
    with tracectx(trace):
        for proxy in inputs:
            prims.unpack_trivial(proxy, name=proxy.name)
    trace.bound_symbols += list(bsyms)
    trace.bound_symbols.append(prims.python_return.bind(list(outputs), output=None))
    for bsym in trace.bound_symbols:  # so the trace names nothing twice
        if bsym.sym == prims.unpack_trivial:
            continue
        for inner in (bsym, *bsym.subsymbols):
            for out in inner.flat_outs:
                if out is not None and out.name not in trace.names:
                    trace.add_name(out.name)
    trace._siginfo = SigInfo("nvscope_region")
    trace._siginfo.args = [(proxy.name, None) for proxy in inputs]
    executable = transform_for_execution(trace, executors_list=(torchex.ex,))
    run = executable.python_callable(include_decorators=False)
    return torch.no_grad()(torchex.no_autocast(run))  # type: ignore[no-any-return]
