"""A plain Thunder program that knows nothing about nvscope: run it under options from the outside.

    python examples/plain_model.py                                                   # cuBLAS matmul
    nvscope run --enable fuse_matmul --disable matmul_expr_eval examples/plain_model.py  # nvFuser matmul codegen

Prints the CUDA kernels of one call (or what it would do, on a machine without CUDA, nvFuser and Thunder).
"""

from __future__ import annotations

from _env import gpu_stack, kernel_names

missing = gpu_stack()
if missing is not None:
    print(f"Skipped: {missing}. With them, this runs (a @ b) * 2 in bf16 through thunder.jit and prints its kernels.")
    raise SystemExit(0)

import thunder  # noqa: E402
import torch  # noqa: E402

a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
mm = thunder.jit(lambda a, b: (a @ b) * 2, nv_enable_matmul=True)
mm(a, b)
print("kernels:", ", ".join(kernel_names(lambda: mm(a, b))))
