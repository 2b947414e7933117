"""The workflow nvscope exists for: one jitted model, ATen (cuBLAS) matmuls vs nvFuser matmul codegen, one process.

    python examples/matmul_codegen.py

Before nvscope this needed two processes (NVFUSER_ENABLE is read once) or two thunder.jit calls with different
compile options. Here the same jitted function runs under both, because nvscope gives each option set its own
compiled cache. Prints the kernels each variant ran and its median time (CUDA events, 30 runs after warm-up).
"""

from __future__ import annotations

from _env import cuda_median_ms, gpu_stack, kernel_names, nv_options_call

import nvscope
from nvscope import nv_options

CODEGEN = {"enable": ["fuse_matmul"], "disable": ["matmul_expr_eval"]}

missing = gpu_stack()
if missing is not None:
    print(f"Skipped: {missing}.")
    print("With CUDA, nvFuser and Thunder this jits (a @ b) * 2 in bf16 (2048x2048) with thunder.jit(...,")
    print(f"nv_enable_matmul=True), runs it by default (cuBLAS) and inside {nv_options_call(CODEGEN)}")
    print("(nvFuser matmul codegen), and prints the kernels and the median time of each.")
    raise SystemExit(0)

import thunder  # noqa: E402
import torch  # noqa: E402

nvscope.set_development_mode(True)
torch.manual_seed(0)
a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))


# A matmul with a pointwise epilogue. (A gelu between two matmuls, gelu(x @ w1) @ w2, hits an internal assert in
# nvFuser 0.2.35's matmul codegen, csrc/scheduler/runtime_info.h:69, the same bug as the linear+gelu backward.)
def model(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b) * 2


jmodel = thunder.jit(model, nv_enable_matmul=True)
reference = model(a.float(), b.float())
results = {}
with torch.no_grad():
    for label, options in (("aten (cuBLAS)", {}), ("nvFuser codegen", CODEGEN)):
        with nv_options(**options):
            out = jmodel(a, b)
            names = kernel_names(lambda: jmodel(a, b))
            ms = cuda_median_ms(lambda: jmodel(a, b))
        error = (out.float() - reference).abs().max().item()
        results[label] = ms
        print(f"{label:<16} {ms:8.3f} ms median   max abs err vs fp32 {error:.3g}")
        for name in names:
            print(f"    {name}")
base = results["aten (cuBLAS)"]
print(f"codegen / aten time ratio: {results['nvFuser codegen'] / base:.3f}")
