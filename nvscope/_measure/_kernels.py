"""Which GPU kernels a call launched, by name: the oracle that does not depend on nvscope's own bookkeeping.

nvFuser names its kernels after the scheduler that made them (``nvf::nvfuser_pointwise_f0_c1_r0_g1``,
``nvf::nvfuser_matmul_...``), or ``nvf::nvfuser_<n>`` under ``static_fusion_count``; cuBLAS matmuls show up as
``nvjet_*``. So the kernel names of one call tell which options its fusions really ran with. One helper for the
library, the examples and the GPU tests, so they cannot disagree on how a name is cut.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nvscope._core import _state

__all__ = ["kernel_name", "kernel_names", "torch_profiler_used"]

# Whether nvscope ran torch.profiler in this process. Once torch.profiler (kineto) has subscribed to CUPTI it keeps the
# subscription, and nvFuser's own profiler then aborts the process (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
# measured on the H200): nvscope._measure._schedulers asks this before choosing nvFuser's profiler.
_used = [False]
_state.keep(__name__, "_used", "torch.profiler keeps its CUPTI subscription for the process: uninstall cannot undo it")


def torch_profiler_used() -> bool:
    return _used[0]


def kernel_name(raw: str) -> str:
    """A profiler event name without its return type, template arguments and parameter list.

    ``void at::native::elementwise_kernel<4, ...>(int, ...)`` -> ``at::native::elementwise_kernel``.
    """
    name = raw.removeprefix("void ")
    for stop in ("(", "<"):
        name = name.partition(stop)[0]
    return name.strip()


def kernel_names(fn: Callable[[], Any]) -> tuple[list[str], Any]:
    """Run ``fn()`` under ``torch.profiler`` and return (the CUDA kernels it launched, in launch order, and its result).

    Names are cut by `kernel_name`. The device is synchronised before and after, so only ``fn``'s kernels count.
    Needs torch with CUDA.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():  # torch's own error here is an AssertionError about how torch was built
        raise RuntimeError("kernel_names needs a CUDA device: torch.cuda.is_available() is False here")
    torch.cuda.synchronize()
    _used[0] = True
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    return [kernel_name(e.name) for e in events], result
