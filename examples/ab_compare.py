"""A/B of nvFuser options in one process with nvscope.compare: time, output difference, kernels.

    python examples/ab_compare.py

With CUDA, nvFuser and Thunder: a jitted bf16 (a @ b) * 2, ATen (cuBLAS) against nvFuser matmul codegen. Without
them it compares two variants of a plain Python function, to show the output format (no fusion runs, so both
variants run the same code).
"""

from __future__ import annotations

from _env import gpu_stack

import nvscope

nvscope.set_development_mode(True)
VARIANTS = {"aten": {}, "codegen": {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}}

missing = gpu_stack()
if missing is None:
    import thunder
    import torch

    a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    mm = thunder.jit(lambda a, b: (a @ b) * 2, nv_enable_matmul=True)
    result = nvscope.compare(mm, a, b, variants=VARIANTS, warmup=3, repeat=30)
else:
    print(f"({missing}: comparing a plain function, where the options have nothing to act on)\n")
    result = nvscope.compare(lambda n: sum(i * i for i in range(n)), 10_000, variants=VARIANTS, repeat=30)
print(f"\ncodegen / aten median time: {result['codegen'].median_ms / result['aten'].median_ms:.3f}")
