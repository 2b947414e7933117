"""GPU benchmark: a host-bound Thunder training step, unpatched vs nvscope (no scope / in a scope) vs Thunder's
compile-time options with the same option set; and the first step of each way to get those options.

    source .gpu/activate.sh && python benchmarks/thunder_steps.py [--rounds 40] [--steps 60] [--no-fresh]
    (``.gpu/activate.sh``: the team's device machine's set-up, which installs the GPU stack from a folder of
    wheels; on your own machine, set the stack up as in docs/install-gpu.md and leave the ``source`` out.)

A small MLP (6 residual blocks, hidden 256, batch 8, fp32) forward + backward: a dozen small fusions per step, so
host dispatch dominates and any per-fusion cost of the hook shows.

Method (nvscope._measure._stats, the same as `nvscope.search`): ROUNDS rounds; in each, every variant runs STEPS steps
back to
back, the variants in a random order. The per-round throughput ratio of two variants cancels what the machine does to
the whole round; the median ratio is reported with its 95% interval (the sign test's, nvscope._measure._stats), and
whether that interval is narrow enough to resolve a 1 % difference.

First steps, each from a fresh process (the compile is what they measure, so nothing may be cached): the first
scoped step on a jitted model already warm without options, the first step of a fresh ``thunder.jit`` without
options, and the first step of a fresh ``thunder.jit`` given the same options as compile-time options.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import thunder
import torch

import nvscope
import nvscope.thunder
from nvscope import nv_options
from nvscope._measure._stats import RatioSummary, median, summarize

BLOCKS, HIDDEN, BATCH = 6, 256, 8
OPTIONS = {"enable": ["static_fusion_count"]}


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(HIDDEN, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + torch.nn.functional.gelu(self.linear(x)))


def make_mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    """The benchmark's model (on CUDA, seeded) and its input batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block() for _ in range(BLOCKS)]).cuda()
    return model, torch.randn(BATCH, HIDDEN, device="cuda")


def make_step(model: Any, x: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model(x).square().mean().backward()

    return step


def steps_per_second(step: Callable[[], None], scope: nv_options | None, steps: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with scope if scope is not None else nullcontext():
        for _ in range(steps):
            step()
    torch.cuda.synchronize()
    return steps / (time.perf_counter() - t0)


def first_step(mode: str) -> float:
    """In a fresh process: the wall time of the first step that needs a compile with the options (``mode``)."""
    nvscope.set_development_mode(True)
    base, x = make_mlp()
    scope = None
    if mode == "scoped-on-warm":
        step = make_step(thunder.jit(base), x)
        for _ in range(3):
            step()  # compiled and warm without options
        scope = nv_options(**OPTIONS)
    elif mode == "fresh-jit":
        step = make_step(thunder.jit(base), x)
    elif mode == "fresh-jit-options":
        step = make_step(thunder.jit(base, nv_enable_options=OPTIONS["enable"]), x)
    else:
        raise SystemExit(f"unknown --child mode {mode!r}")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with scope if scope is not None else nullcontext():
        step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def fresh_first_steps(timeout: float) -> dict[str, float | str]:
    results: dict[str, float | str] = {}
    for mode in ("scoped-on-warm", "fresh-jit", "fresh-jit-options"):
        try:
            done = subprocess.run([sys.executable, __file__, "--child", mode], capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            results[mode] = f"timed out after {timeout:.0f} s"
            continue
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            results[mode] = f"failed (exit {done.returncode}): {(done.stderr.strip().splitlines() or [''])[-1]}"
        else:
            results[mode] = float(json.loads(lines[-1])["seconds"])
    return results


def _interval(r: RatioSummary) -> str:
    half = (r.high - r.low) / 2
    resolves = "resolves" if half < 0.01 else "does NOT resolve"
    return (f"median {r.median:.4f}  95% interval {r.low:.4f}-{r.high:.4f}  (half-width {half * 100:.2f} %: "
            f"{resolves} a 1 % difference; {r.rounds} paired rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--steps", type=int, default=60, help="steps per variant per round")
    parser.add_argument("--no-fresh", action="store_true", help="skip the first-step measurements (3 processes)")
    parser.add_argument("--fresh-timeout", type=float, default=150.0, help="seconds per fresh process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps({"seconds": first_step(args.child)}))
        return

    began = time.perf_counter()
    nvscope.set_development_mode(True)
    base, x = make_mlp()
    plain = make_step(thunder.jit(base), x)
    compile_time = make_step(thunder.jit(base, nv_enable_options=OPTIONS["enable"]), x)
    scope = nv_options(**OPTIONS)
    # variant -> (step, scope, patched). Every variant is warm (compiled) before the rounds.
    variants: dict[str, tuple[Callable[[], None], nv_options | None, bool]] = {
        "unpatched": (plain, None, False),
        "patched, no scope": (plain, None, True),
        "patched, in scope": (plain, scope, True),
        "compile-time options": (compile_time, None, True),
    }
    nvscope.thunder.install()
    for step, sc, _ in variants.values():
        steps_per_second(step, sc, 3)  # the first compiles (Thunder's trace, or a partition for the scope)
    with nvscope.audit() as log:
        plain()
    fusions_per_step = len(log.records)

    rng = random.Random(args.seed)
    results: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        order = list(variants)
        rng.shuffle(order)
        gc.collect()
        gc.disable()  # a collection inside one variant's block would be charged to it alone
        try:
            for name in order:
                step, sc, patched = variants[name]
                if patched and not nvscope.thunder.installed():  # outside the timed block
                    nvscope.thunder.install()
                elif not patched and nvscope.thunder.installed():
                    nvscope.thunder.uninstall()
                results[name].append(steps_per_second(step, sc, args.steps))
        finally:
            gc.enable()
    nvscope.thunder.install()

    print(f"torch {torch.__version__} | thunder {thunder.__version__} | {torch.cuda.get_device_name(0)} | "
          f"python {sys.version.split()[0]}")
    print(f"MLP {BLOCKS} blocks x {HIDDEN}, batch {BATCH}: {fusions_per_step} nvFuser fusion executions per "
          f"step (forward + backward); {args.rounds} randomized rounds x {args.steps} steps per variant")
    for name, values in results.items():
        q = sorted(values)
        print(f"  {name:<22}{median(values):9.1f} steps/s  (IQR {q[len(q) // 4]:.1f}-{q[3 * len(q) // 4]:.1f})")
    no_scope = summarize(results["patched, no scope"], results["unpatched"])
    in_scope = summarize(results["patched, in scope"], results["compile-time options"])
    print(f"patched-no-scope / unpatched throughput:      {_interval(no_scope)}")
    print(f"in-scope / compile-time-options throughput:   {_interval(in_scope)}")
    if not args.no_fresh:
        first = fresh_first_steps(args.fresh_timeout)
        names = {"scoped-on-warm": "first scoped step, jitted model already warm without options",
                 "fresh-jit": "first step of a fresh thunder.jit, no options",
                 "fresh-jit-options": "first step of a fresh thunder.jit with the options at compile time"}
        print(f"first steps, each in a fresh process (options {OPTIONS}):")
        for mode, label in names.items():
            value = first[mode]
            print(f"  {label:<68}" + (f"{value:7.2f} s" if isinstance(value, float) else value))
        scoped = first["scoped-on-warm"]
        for mode in ("fresh-jit", "fresh-jit-options"):
            other = first[mode]
            if isinstance(scoped, float) and isinstance(other, float):
                print(f"  first scoped step / {mode:<18} = {scoped / other:.3f}")
    print(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
