"""A/B of nvFuser options in one process with nvscope.compare: time, output difference, kernels.

    python examples/ab_compare.py

With CUDA, nvFuser and Thunder: a jitted bf16 (a @ b) * 2, ATen (cuBLAS) against nvFuser matmul codegen. Without
them there is nothing to compare (no fusion runs, so both variants would run the same code): it says so and stops.
"""

from __future__ import annotations

from _env import gpu_stack

import nvscope

nvscope.set_development_mode(True)
VARIANTS = {"aten": {}, "codegen": {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}}

missing = gpu_stack()
if missing is not None:
    print(f"Skipped: {missing}. Nothing to compare here: the options act on nvFuser fusions, and none can run, so")
    print("both variants would run the same code and any time ratio would be noise. With CUDA, nvFuser and Thunder")
    print("this compares a jitted bf16 (a @ b) * 2 under ATen (cuBLAS) and nvFuser matmul codegen: time, output")
    print("difference and kernels of each.")
    raise SystemExit(0)

import thunder  # noqa: E402
import torch  # noqa: E402

a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
mm = thunder.jit(lambda a, b: (a @ b) * 2, nv_enable_matmul=True)
result = nvscope.compare(mm, a, b, variants=VARIANTS, warmup=3, repeat=30)
print(f"\ncodegen / aten median time: {result['codegen'].median_ms / result['aten'].median_ms:.3f}")
