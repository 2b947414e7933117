"""Which GPU kernels a call launched, by name: the oracle that does not depend on nvscope's own bookkeeping.

nvFuser names its kernels after the scheduler that made them (``nvf::nvfuser_pointwise_f0_c1_r0_g1``,
``nvf::nvfuser_matmul_...``), or ``nvf::nvfuser_<n>`` under ``static_fusion_count``; cuBLAS matmuls show up as
``nvjet_*``. So the kernel names of one call tell which options its fusions really ran with. One helper for the
library, the examples and the GPU tests, so they cannot disagree on how a name is cut.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Cupti", "kernel_name", "kernel_names"]


class Cupti:
    """torch.profiler's hold on CUPTI: once it subscribes it keeps the subscription for the process, and nvFuser's
    own profiler then aborts the process (`nvscope._measure._schedulers` asks `held` before choosing it)."""

    held = False

    @classmethod
    def profile(cls) -> Any:
        """``torch.profiler.profile`` of CUDA activity, noted as holding CUPTI from now on."""
        from torch.profiler import ProfilerActivity, profile

        cls.held = True
        return profile(activities=[ProfilerActivity.CUDA])


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

    if not torch.cuda.is_available():  # torch's own error here is an AssertionError about how torch was built
        raise RuntimeError("kernel_names needs a CUDA device: torch.cuda.is_available() is False here")
    torch.cuda.synchronize()
    with Cupti.profile() as prof:
        result = fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    return [kernel_name(e.name) for e in events], result
