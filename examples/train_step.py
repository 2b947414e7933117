"""A small bf16 MLP training loop with a decorated step: forward and backward fusions run under the options.

    python examples/train_step.py

The step is decorated with @with_nv_options(enable=["static_fusion_count"]), an option with a visible effect on
every nvFuser kernel: they are named nvfuser_<n> instead of after their scheduler. The audit shows every forward
and backward fusion ran under it, and an unscoped step afterwards runs the default kernels again.
(Matmul codegen in a linear+gelu backward hits an nvFuser 0.2.35 internal assert, so it is not used here.)
"""

from __future__ import annotations

import re

from _env import gpu_stack, kernel_names

import nvscope
from nvscope import with_nv_options

missing = gpu_stack()
if missing is not None:
    print(f"Skipped: {missing}.")
    print("With CUDA, nvFuser and Thunder this trains a bf16 MLP with thunder.jit for 20 steps, each step decorated")
    print("with @with_nv_options(enable=['static_fusion_count']), and prints the audit of forward/backward fusions.")
    raise SystemExit(0)

import thunder  # noqa: E402
import torch  # noqa: E402

nvscope.set_development_mode(True)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024), torch.nn.Linear(1024, 512)
).to("cuda", torch.bfloat16)
jmodel = thunder.jit(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
target = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)


@with_nv_options(enable=["static_fusion_count"])
def train_step() -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(jmodel(x), target)
    loss.backward()
    optimizer.step()
    return loss.item()


with nvscope.audit() as log:
    losses = [train_step() for _ in range(20)]
print(f"loss: step 1 {losses[0]:.4f} -> step 20 {losses[-1]:.4f}")
print(log.summary())
numbered = re.compile(r"nvfuser_\d+$")
scoped = kernel_names(train_step)
plain = kernel_names(lambda: torch.nn.functional.mse_loss(jmodel(x), target).backward())
print("nvFuser kernels in a decorated step:", [n for n in scoped if "nvfuser" in n])
print("nvFuser kernels in an unscoped step:", [n for n in plain if "nvfuser" in n])
assert all(numbered.search(n) for n in scoped if "nvfuser" in n), "a fusion ran without the step's options"
assert not any(numbered.search(n) for n in plain), "the step's options leaked outside it"
