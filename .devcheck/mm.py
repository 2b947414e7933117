import sys

import thunder
import torch
from torch.profiler import ProfilerActivity, profile


def f(a, b):
    return (a @ b) * 2

jf = thunder.jit(f, nv_enable_matmul=True)
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
jf(a, b)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    jf(a, b)
    torch.cuda.synchronize()
print("kernels:", sorted({e.name.split("(")[0][:40] for e in prof.events() if e.device_type.name == "CUDA"}))
print("argv:", sys.argv)
