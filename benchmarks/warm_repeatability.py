"""Do warm fwd+bwd steps repeat their bits? Thunder's nanoGPT (2 x 384), three ways of passing nvFuser options (GPU).

* ``own``: ``thunder.jit(model)``, no options, nvscope not installed;
* ``compile-time``: ``thunder.jit(model, nv_enable_options=OPTIONS)``, Thunder's own way, nvscope not installed;
* ``scope``: ``thunder.jit(model)`` run inside ``nv_options(enable=OPTIONS)`` (nvscope's partitions, shared);
* ``scope-private``: the same with ``NVSCOPE_SHARE=0`` (each fusion's partition compiles its own definition).

Thunder's compile-time options reach nvFuser as nvscope's do (Thunder's wrapper passes them to ``fd.execute`` per
call): ``compile-time`` against ``scope`` separates nvFuser under options from nvscope's path. Each way runs in a
process of its own (a CUDA fault in one, as seen on the H200, would end the others). For each: ``--steps`` warm
steps after two compile steps; how many differ from the first warm step in the loss or any gradient (bit for bit),
which tensors, and the loss values seen (benchmarks/results/repeatability-2026-12-04/).

    python benchmarks/warm_repeatability.py [--steps 20] [--options static_fusion_count]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "gpu"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--options", nargs="*", default=["static_fusion_count"])
    parser.add_argument("--ways", nargs="*", default=["own", "compile-time", "scope", "scope-private"],
                        choices=["own", "compile-time", "scope", "scope-private"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # run the ways here, in this process
    args = parser.parse_args()
    if not args.child:
        for way in args.ways:
            env = dict(os.environ, NVSCOPE_SHARE="0" if way == "scope-private" else "1")
            done = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps), "--options",
                                   *args.options, "--ways", way], check=False, env=env)
            if done.returncode:
                print(f"{way}: the process failed (exit status {done.returncode}; its error is above)", flush=True)
        return

    import thunder
    import torch
    from workloads import fwd_bwd, nanogpt_model

    import nvscope
    import nvscope.thunder
    from nvscope import nv_options

    nvscope.set_development_mode(True)
    for way in args.ways:
        nvscope.uninstall()
        model, idx, targets = nanogpt_model(4, 128, 2, 384)
        names = ["loss"] + [name for name, _ in model.named_parameters()]
        if way == "compile-time":
            jitted = thunder.jit(model, nv_enable_options=list(args.options))
        else:
            jitted = thunder.jit(model)

        def step(jitted: Any = jitted, model: Any = model, idx: Any = idx, targets: Any = targets) -> list[Any]:
            loss, grads = fwd_bwd(jitted, model, idx, targets)
            return [loss, *grads]

        def run() -> list[list[Any]]:
            step()
            step()
            return [step() for _ in range(args.steps)]

        if way.startswith("scope"):
            assert nvscope.thunder.install()
            with nv_options(enable=list(args.options)):
                steps = run()
        else:
            steps = run()
        first = steps[0]
        differ = []
        for k, s in enumerate(steps[1:], 1):
            d = [names[i] for i, (x, y) in enumerate(zip(first, s, strict=True)) if not torch.equal(x, y)]
            if d:
                differ.append((k, d[:4]))
        losses = sorted({float(s[0]) for s in steps})
        print(f"{way}: {len(differ)} of {len(steps) - 1} warm steps differ from the first; "
              f"losses seen {losses[:6]}{' ...' if len(losses) > 6 else ''}; first differences {differ[:4]}",
              flush=True)
    nvscope.uninstall()


if __name__ == "__main__":
    main()
