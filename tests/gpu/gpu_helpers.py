"""Kernel names from torch.profiler (the oracle independent of nvscope's bookkeeping), their classes, subprocesses.

Kernel names come from `nvscope._measure._kernels.kernel_names`, the one helper the library, the examples and these
tests
share, so they cannot disagree on how a profiler name is cut (``void ns::kernel<...>(...)`` -> ``ns::kernel``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from nvscope._measure._kernels import kernel_names as kernels

__all__ = ["NVFUSER_NUMBERED", "cublas", "fresh_python", "kernels", "kernels_of_script", "named_by_scheduler",
           "numbered", "nvfuser_any", "nvfuser_matmul", "subprocess_env"]

NVFUSER_NUMBERED = re.compile(r"nvfuser_\d+\b")  # every fusion kernel under enable option static_fusion_count


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


def fresh_python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python *args`` in a new interpreter with no NVFUSER_* variable: options can only come from the script."""
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("NVFUSER_")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)


_KERNELS_OF = """\
import json, runpy, sys
from nvscope._measure._kernels import kernel_names
names, _ = kernel_names(lambda: runpy.run_path(sys.argv[1], run_name="__main__"))
print("KERNELS " + json.dumps(names))
"""


def kernels_of_script(path: Path) -> tuple[list[str] | None, subprocess.CompletedProcess[str]]:
    """Run the script unchanged (``runpy``, as ``python path``) in a fresh process under torch.profiler.

    Returns the CUDA kernels it launched (None if it failed) and the finished process.
    """
    done = fresh_python("-c", _KERNELS_OF, str(path))
    for line in done.stdout.splitlines():
        if line.startswith("KERNELS "):
            return list(json.loads(line[len("KERNELS "):])), done
    return None, done
