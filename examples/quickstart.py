"""nvscope in 30 seconds: scoped nvFuser developer options.

    python examples/quickstart.py

Runs anywhere: it shows what each scope makes active. Where CUDA, nvFuser and Thunder exist it also runs a real
fusion under each scope and prints which kernels ran (cuBLAS vs nvFuser matmul codegen).
"""

from __future__ import annotations

import threading

from _env import gpu_stack

import nvscope
from nvscope import current_options, nv_options, with_nv_options

nvscope.set_development_mode(True)  # developer flags are for development runs: say so, or nvscope warns


def show(where: str) -> None:
    print(f"  {where:<34} -> {current_options().as_shell() or '(no options)'}")


print("Scopes: what a fusion executed at each point would run with")
show("outside any scope")
with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
    show("with nv_options(fuse_matmul, ...)")
    with nv_options(enable="static_fusion_count"):
        show("  nested: merged with the outer")
    with nv_options(inherit=False):
        show("  nested, inherit=False")
    worker = threading.Thread(target=show, args=("  new thread: starts empty",))
    worker.start()
    worker.join()
    worker = threading.Thread(target=nvscope.bind(show), args=("  thread via nvscope.bind",))
    worker.start()
    worker.join()
show("after the scope")


@with_nv_options(enable=["static_fusion_count"])
def steps():
    for i in range(2):
        show(f"generator step {i} (inside)")
        yield i


for _ in steps():
    show("consumer between steps")

print("\nBad names fail early, with the fix:")
for bad in ({"enable": ["fuse_matmull"]}, {"enable": ["matmul_expr_eval"]}, {"enable": ["p2p_protocol"]}):
    try:
        nv_options(**bad)
    except nvscope.UnknownOptionError as error:
        print(f"  nv_options(**{bad}): {error}")

print("\nReal fusions:")
missing = gpu_stack()
if missing is not None:
    print(f"  skipped: {missing}. On a machine with CUDA, nvFuser and Thunder this runs a bf16 matmul*2 through")
    print("  thunder.jit three times (default, in a codegen scope, default again) and prints the kernels of each.")
    raise SystemExit(0)

import thunder  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
jfn = thunder.jit(lambda a, b: (a @ b) * 2, nv_enable_matmul=True)


def run(label: str) -> None:
    jfn(a, b)  # compile outside the profiler
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = jfn(a, b)
        torch.cuda.synchronize()
    names = sorted({e.name.split("(")[0] for e in prof.events() if e.device_type.name == "CUDA"})
    error = (out.float() - (a.float() @ b.float()) * 2).abs().max().item()
    print(f"  {label:<28} kernels: {', '.join(names)}  (max abs err {error:.3g})")


with nvscope.audit() as log:
    run("default")
    with nv_options(enable=["fuse_matmul"], disable=["matmul_expr_eval"]):
        run("nv_options(codegen)")
    run("default again")
print()
print(log.summary())
