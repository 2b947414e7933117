"""GPU benchmark: steps/s of a host-bound Thunder training step, unpatched vs nvscope (no scope / in a scope) vs
Thunder's compile-time options with the same option set.

    source .gpu/activate.sh && python benchmarks/thunder_steps.py

A small MLP (6 residual blocks, hidden 256, batch 8, fp32) forward + backward: dozens of small fusions per step, so
host dispatch dominates and any per-fusion cost of the hook shows. Variants are interleaved, each measured as
REPS repetitions of STEPS steps; the median steps/s of each is reported with the ratios the targets are about.
Also reports the one-time cost of a new partition (first scoped step vs a steady-state step).
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

import thunder
import torch

import nvscope
import nvscope.thunder
from nvscope import nv_options

STEPS, REPS, BLOCKS, HIDDEN, BATCH = 400, 9, 6, 256, 8
OPTIONS = {"enable": ["static_fusion_count"]}


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(HIDDEN, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + torch.nn.functional.gelu(self.linear(x)))


def make_step(model: torch.nn.Module) -> tuple[object, torch.Tensor]:
    x = torch.randn(BATCH, HIDDEN, device="cuda")

    def step() -> None:
        model(x).square().mean().backward()

    return step, x


def steps_per_second(step: object, scope: nv_options | None) -> float:
    gc.collect()
    gc.disable()  # a collection inside one variant's window would be charged to it
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if scope is None:
        for _ in range(STEPS):
            step()  # type: ignore[operator]
    else:
        with scope:
            for _ in range(STEPS):
                step()  # type: ignore[operator]
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    gc.enable()
    return STEPS / elapsed


def main() -> None:
    nvscope.set_development_mode(True)
    torch.manual_seed(0)
    base = torch.nn.Sequential(*[Block() for _ in range(BLOCKS)]).cuda()
    plain, _ = make_step(thunder.jit(base))
    compile_time, _ = make_step(thunder.jit(base, nv_enable_options=OPTIONS["enable"]))
    scope = nv_options(**OPTIONS)

    # Warm every variant, and measure the one-time cost of a new partition on the way.
    nvscope.thunder.install()
    for _ in range(3):
        plain()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with nvscope.audit() as log, scope:
        plain()
    torch.cuda.synchronize()
    first_scoped = time.perf_counter() - t0
    fusions_per_step = len(log.records)
    new_partitions = sum(r.partition == "new" for r in log.records)
    with scope:
        for _ in range(3):
            plain()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with scope:
        plain()
    torch.cuda.synchronize()
    steady_scoped = time.perf_counter() - t0
    for _ in range(3):
        compile_time()

    results: dict[str, list[float]] = {k: [] for k in ("unpatched", "patched, no scope", "patched, in scope",
                                                       "compile-time options")}
    for _ in range(REPS):
        nvscope.thunder.uninstall()
        results["unpatched"].append(steps_per_second(plain, None))
        nvscope.thunder.install()
        results["patched, no scope"].append(steps_per_second(plain, None))
        results["patched, in scope"].append(steps_per_second(plain, scope))
        results["compile-time options"].append(steps_per_second(compile_time, None))

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"torch {torch.__version__} | thunder {thunder.__version__} | {torch.cuda.get_device_name(0)} | "
          f"python {sys.version.split()[0]}")
    print(f"MLP {BLOCKS} blocks x {HIDDEN}, batch {BATCH}: {fusions_per_step} nvFuser fusion executions per step "
          f"(forward + backward); median of {REPS} x {STEPS} steps")
    for k, v in med.items():
        spread = f"{min(results[k]):8.1f}..{max(results[k]):.1f}"
        print(f"  {k:<24}{v:9.1f} steps/s   (range {spread})")
    print(f"patched-no-scope / unpatched        = {med['patched, no scope'] / med['unpatched']:.4f}  (target >= 0.99)")
    print(f"in-scope / compile-time options     = {med['patched, in scope'] / med['compile-time options']:.4f}  "
          "(target >= 0.98)")
    print(f"new partitions: first scoped step {first_scoped * 1e3:.1f} ms ({new_partitions} partitions compiled) vs "
          f"steady scoped step {steady_scoped * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
