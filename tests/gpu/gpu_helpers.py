"""Kernel names from torch.profiler: the oracle that is independent of nvscope's own code."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

NVFUSER_NUMBERED = re.compile(r"nvfuser_\d+\b")  # every fusion kernel under enable option static_fusion_count


def kernels(fn: Callable[[], Any]) -> tuple[list[str], Any]:
    """Run ``fn`` under torch.profiler; return the names of the CUDA kernels it launched (in order) and its result."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    return names, result


def cublas(names: list[str]) -> list[str]:
    return [n for n in names if "nvjet" in n or "gemm" in n.lower() or "cutlass" in n.lower()]


def nvfuser_matmul(names: list[str]) -> list[str]:
    return [n for n in names if "nvfuser_matmul" in n]


def nvfuser_any(names: list[str]) -> list[str]:
    return [n for n in names if "nvfuser" in n]


def numbered(names: list[str]) -> list[str]:
    return [n for n in names if NVFUSER_NUMBERED.search(n)]


def named_by_scheduler(names: list[str]) -> list[str]:
    """nvFuser kernels named by their scheduler (nvfuser_pointwise_..., nvfuser_reduction_...): no static count."""
    return [n for n in names if "nvfuser" in n and not NVFUSER_NUMBERED.search(n)]


def subprocess_env() -> dict[str, str]:
    """The environment for a child Python that must import this checkout of nvscope."""
    root = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
