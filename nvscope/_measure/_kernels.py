"""Which GPU kernels a call launched, by name: nvFuser names a kernel after its scheduler, so the names tell which
options the fusions ran with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Cupti", "kernel_name", "kernel_names"]


class Cupti:
    """torch.profiler's hold on CUPTI, which it keeps for the process; nvFuser's profiler then aborts it."""

    held = False

    @classmethod
    def profile(cls) -> Any:
        """``torch.profiler.profile`` of CUDA activity, noted as holding CUPTI from now on."""
        from torch.profiler import ProfilerActivity, profile

        cls.held = True
        return profile(activities=[ProfilerActivity.CUDA])


def kernel_name(raw: str) -> str:
    """A profiler event name without return type, template arguments and parameters."""
    name = raw.removeprefix("void ")
    for stop in ("(", "<"):
        name = name.partition(stop)[0]
    return name.strip()


def kernel_names(fn: Callable[[], Any]) -> tuple[list[str], Any]:
    """``(the CUDA kernels fn() launched, in order, its result)``, under torch.profiler (needs CUDA)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("kernel_names needs a CUDA device: torch.cuda.is_available() is False here")
    torch.cuda.synchronize()
    with Cupti.profile() as prof:
        result = fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    return [kernel_name(e.name) for e in events], result
