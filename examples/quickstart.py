"""nvscope in 30 seconds: scoped nvFuser developer options.

    python examples/quickstart.py

Runs anywhere, without a warning: it shows what each scope makes active. Where CUDA, nvFuser and Thunder exist it
also runs a real fusion under each scope and prints which kernels ran (cuBLAS vs nvFuser matmul codegen); elsewhere
it says that part was skipped, and why.
"""

from __future__ import annotations

import threading
import warnings

from _env import gpu_stack, nv_options_call

import nvscope
from nvscope import current_options, nv_options, with_nv_options

nvscope.set_development_mode(True)  # developer flags are for development runs: say so, or nvscope warns
missing = gpu_stack()  # None where CUDA, nvFuser and Thunder are all usable
print("GPU stack (CUDA, nvFuser, Thunder): " + ("present: real fusions run at the end" if missing is None else
                                                f"not here ({missing}): the scopes are shown, no fusion runs"))
print()


def show(where: str) -> None:
    print(f"  {where:<34} -> {current_options().as_shell() or '(no options)'}")


# The scopes below run no fusion on purpose: they show what a fusion run inside would get. nvscope warns when a
# scope exits without reaching a fusion (usually a forgotten thunder.jit); here that is the point, so it is silenced.
demo = warnings.catch_warnings()
demo.__enter__()
warnings.simplefilter("ignore", nvscope.NoFusionWarning)

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
        print(f"  {nv_options_call(bad)}: {error}")

demo.__exit__(None, None, None)  # from here on, a scope that reaches no fusion warns again

print("\nReal fusions:")
if missing is not None:
    print(f"  skipped: {missing}. On a machine with CUDA, nvFuser and Thunder this runs a bf16 matmul*2 through")
    print("  thunder.jit three times (default, in a codegen scope, default again) and prints the kernels of each.")
    print("\nShown: each scope's options (nested scopes merge, inherit=False starts empty, threads and generator")
    print("steps keep their own), and bad names refused with the fix. Not shown here: options changing kernels;")
    print("docs/install-gpu.md sets up a GPU machine where this script shows that too.")
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
